// SPDX-License-Identifier: Apache-2.0
// HeadPublisher (core/segments/head_publisher.h) over a real dir: the name
// it keeps in heads/ follows the state it is given, one rename per change,
// none without; a restart takes over what the last run left; a head removed
// by hand comes back; a rename that fails is made later; overlapping
// publishes end on the last state.
#include "core/segments/head_publisher.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <mutex>
#include <thread>
#include <vector>

#include "tests/fault_fs.h"

namespace kvfs {
namespace {

namespace fs = std::filesystem;

class HeadPublisherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char t[] = "/tmp/kvfs-heads-XXXXXX";
    root_ = ::mkdtemp(t);
  }
  void TearDown() override { fs::remove_all(root_); }

  std::unique_ptr<HeadPublisher> publisher(const std::string& node) {
    return std::make_unique<HeadPublisher>(
        root_, node, nullptr,
        [this] {
          std::lock_guard l(mu_);
          return state_;
        },
        &fs_);
  }
  void set(uint64_t last, std::vector<std::pair<uint64_t, uint64_t>> open) {
    std::lock_guard l(mu_);
    state_.last_id = last;
    state_.open = std::move(open);
  }
  std::vector<std::string> names() {
    std::vector<std::string> out;
    for (auto& e : fs::directory_iterator(root_ + "/heads")) out.push_back(e.path().filename());
    std::sort(out.begin(), out.end());
    return out;
  }

  std::string root_;
  FaultFs fs_;  // the head files' calls, failing on cue
  std::mutex mu_;
  layout::NodeHead state_;
};

TEST_F(HeadPublisherTest, TheNameFollowsTheStateOneRenameAChange) {
  auto p = publisher("n1");
  ASSERT_TRUE(p->init().ok());
  EXPECT_EQ(names(), std::vector<std::string>{"n1.1.0"});
  set(3, {{3, 0x1000}});
  p->publish();
  EXPECT_EQ(names(), std::vector<std::string>{"n1.2.3.3-1000"});
  p->publish();  // nothing changed: no rename
  p->publish();
  EXPECT_EQ(p->renames(), 1u);
  set(4, {{3, 0x3000}, {4, 0x2000}});
  p->publish();
  EXPECT_EQ(names(), std::vector<std::string>{"n1.3.4.3-3000.4-2000"});
  set(4, {{4, 0x2000}});  // 3 closed
  p->publish();
  EXPECT_EQ(names(), std::vector<std::string>{"n1.4.4.4-2000"});
  EXPECT_EQ(p->renames(), 3u);
}

TEST_F(HeadPublisherTest, ARestartTakesOverTheNewestHeadAndRemovesOlderOnes) {
  ASSERT_TRUE(fs::create_directory(root_ + "/heads"));
  // What a crash may leave: two of n1's names (a rename's halves on some
  // servers), and another node's head, which is not n1's to touch.
  for (const char* n : {"n1.3.5.5-100", "n1.9.7.7-200", "n2.4.1.1-10"})
    ::close(::open((root_ + "/heads/" + n).c_str(), O_CREAT | O_WRONLY, 0644));
  auto p = publisher("n1");
  ASSERT_TRUE(p->init().ok());
  EXPECT_EQ(names(), (std::vector<std::string>{"n1.a.0", "n2.4.1.1-10"}));
}

TEST_F(HeadPublisherTest, AHeadRemovedByHandComesBackAtTheNextChange) {
  auto p = publisher("n1");
  ASSERT_TRUE(p->init().ok());
  fs::remove(root_ + "/heads/n1.1.0");
  set(1, {{1, 0x10}});
  p->publish();
  EXPECT_EQ(names(), std::vector<std::string>{"n1.2.1.1-10"});
}

// A rename that fails (a stalled server) leaves the change pending: the
// timer's publish_pending() makes it, under a newer gen than the failed
// one (which may have happened all the same, its reply lost).
TEST_F(HeadPublisherTest, AFailedRenameIsMadeLaterUnderANewerGen) {
  auto p = publisher("n1");
  ASSERT_TRUE(p->init().ok());
  fs_.fail({.op = FaultFs::Op::kRename, .err = EIO, .path_has = "/heads/", .times = 1});
  set(2, {{2, 0x20}});
  p->publish();
  EXPECT_EQ(fs_.failed(FaultFs::Op::kRename), 1u);
  EXPECT_EQ(names(), std::vector<std::string>{"n1.1.0"});
  EXPECT_EQ(p->renames(), 0u);
  p->publish_pending();
  EXPECT_EQ(names(), std::vector<std::string>{"n1.3.2.2-20"});
  EXPECT_EQ(p->renames(), 1u);
}

TEST_F(HeadPublisherTest, OverlappingPublishesEndOnTheLastState) {
  auto p = publisher("n1");
  ASSERT_TRUE(p->init().ok());
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      for (uint64_t i = 1; i <= 200; ++i) {
        set(5, {{5, i * 4 + uint64_t(t)}});
        p->publish();
      }
    });
  for (auto& t : ts) t.join();
  // What the last publish() left pending (at most a few rounds each) goes
  // out at the next timer's call, without a new change: no change is lost.
  p->publish_pending();
  const auto n = names();
  ASSERT_EQ(n.size(), 1u);
  auto h = layout::parse_head_name(n[0]);
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->open, state_.open);
  EXPECT_EQ(h->gen, p->renames() + 1);  // gen 1 at init, one more per rename
}

}  // namespace
}  // namespace kvfs
