// SPDX-License-Identifier: Apache-2.0
// The control protocol's client (core/control/control_client.h) without a daemon: a
// plain file stands in for the control file. A regular file hands back what
// was written at offset 0, so a request comes back as its own "reply", which
// exercises the whole exchange (one write, the read from offset 0 to end of
// file) and the reply's checks. The exchange with a real daemon is covered
// by the mount tests, which all use this client (mount_hostile_test,
// mount_eviction_test, reliability_util.h, kvfs-admin in mount_admin_test).
#include "core/control/control_client.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace kvfs::control {
namespace {

namespace fs = std::filesystem;

class ControlClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char t[] = "/tmp/kvfs-control-XXXXXX";
    ASSERT_NE(::mkdtemp(t), nullptr);
    root_ = t;
  }
  void TearDown() override { fs::remove_all(root_); }

  std::string put(const std::string& rel, const std::string& body) {
    const std::string p = root_ + "/" + rel;
    fs::create_directories(fs::path(p).parent_path());
    std::ofstream(p, std::ios::binary) << body;
    return p;
  }

  std::string root_;
};

TEST_F(ControlClientTest, ControlPathIsTheNameAtTheMountRoot) {
  EXPECT_EQ(control_path("/mnt/kv"), "/mnt/kv/.kvfs-control");
  EXPECT_EQ(control_path("/mnt/kv/"), "/mnt/kv/.kvfs-control");
  EXPECT_EQ(control_path("/"), "/.kvfs-control");
}

TEST_F(ControlClientTest, MissingControlFileIsNotFoundNamingThePath) {
  const std::string ctl = control_path(root_);
  auto r = request(ctl, R"({"cmd":"stats"})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kNotFound);
  EXPECT_NE(r.status().message().find(ctl), std::string::npos) << r.status().ToString();
  EXPECT_FALSE(fs::exists(ctl)) << "a client never creates the control file";
}

TEST_F(ControlClientTest, RequestIsWrittenOnceAndTheReplyReadFromOffsetZero) {
  const std::string ctl = put(kControlName, "");
  const std::string req = R"({"cmd":"ls","path":"a/b"})";
  auto text = request_text(ctl, req);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(*text, req);
  auto j = request(ctl, req);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(j->value("cmd", ""), "ls");
  EXPECT_EQ(j->value("path", ""), "a/b");
}

TEST_F(ControlClientTest, ReplyLongerThanOneReadIsReadToTheEnd) {
  // Longer than the client's read buffer: the rest follows the request's bytes.
  const std::string tail(200 * 1024, 'x');
  const std::string ctl = put(kControlName, std::string(2, ' ') + tail);
  auto text = request_text(ctl, "{}");
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(*text, "{}" + tail);
}

TEST_F(ControlClientTest, ReplyThatIsNotJsonIsCorruption) {
  const std::string ctl = put(kControlName, "");
  auto j = request(ctl, "not json");
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), Status::Code::kCorruption) << j.status().ToString();
}

TEST_F(ControlClientTest, ErrorRepliesAreRepliesNotFailures) {
  const std::string ctl = put(kControlName, "");
  auto j = request(ctl, R"({"error":"refused","errno":13})");
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(j->value("errno", 0), 13);
}

TEST_F(ControlClientTest, OverlongRequestIsRefusedBeforeItIsSent) {
  const std::string ctl = put(kControlName, "");
  auto r = request_text(ctl, std::string(kMaxRequestBytes + 1, ' '));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kInvalid);
  EXPECT_EQ(fs::file_size(ctl), 0u) << "nothing reached the file";
  EXPECT_TRUE(request_text(ctl, std::string(kMaxRequestBytes, ' ')).ok());
}

TEST_F(ControlClientTest, RunawayReplyIsCutOff) {
  // A sparse file longer than any reply: the client stops instead of reading on.
  const std::string ctl = put(kControlName, "");
  ASSERT_EQ(::truncate(ctl.c_str(), off_t(kMaxReplyBytes) + 1), 0);
  auto r = request_text(ctl, "{}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kCorruption) << r.status().ToString();
}

TEST_F(ControlClientTest, FindControlLooksUpwardsFromADirectory) {
  const std::string ctl = put(kControlName, "");
  fs::create_directories(root_ + "/a/b/c");
  auto found = find_control(root_ + "/a/b/c");
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(fs::path(*found), fs::canonical(ctl));
}

TEST_F(ControlClientTest, FindControlOfADirectoryNotOnKvfsIsNotFound) {
  fs::create_directories(root_ + "/plain");
  auto found = find_control(root_ + "/plain");
  // /tmp is not a kvfs mount; unless something above it is, nothing is found.
  if (found.ok()) GTEST_SKIP() << "a control file above " << root_ << ": " << *found;
  EXPECT_EQ(found.status().code(), Status::Code::kNotFound);
  EXPECT_EQ(find_control(root_ + "/missing").status().code(), Status::Code::kNotFound);
}

}  // namespace
}  // namespace kvfs::control
