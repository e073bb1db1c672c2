// SPDX-License-Identifier: Apache-2.0
// Mount test: what the two-node tests check, at sixteen nodes over one
// backing dir. Every node reads every other node's files bit-exact; a node
// killed with SIGKILL leaves its flushed files readable everywhere and
// catches up with what the others wrote while it was down; a node whose view
// of the shared dir stalls keeps answering within io_timeout and catches up
// once the dir answers; a node gone for good is retired into a live one with
// kvfs-admin and its files stay readable on every other node.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/mount_fixture.h"
#include "tests/reliability_util.h"

namespace kvfs::test {
namespace {

namespace fs = std::filesystem;
constexpr int kNodes = 16;
constexpr size_t kKiB = 1024;
// Small RAM tiers: sixteen daemons share this machine.
const std::string kOpts = ",segment_size=4M,ram_size=32M,ram_prefault=0";

std::string node_name(int i) {
  char b[8];
  std::snprintf(b, sizeof b, "n%02d", i);
  return b;
}

std::string content(const std::string& name, size_t n) {
  return random_bytes(n, std::hash<std::string>{}(name));
}

class FleetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have("bindfs")) GTEST_SKIP() << "bindfs is not installed (tools/install-deps.sh)";
    for (int i = 1; i <= kNodes; ++i) nodes_.push_back(std::make_unique<KvfsMount>());
    backing_ = nodes_[0]->backing();
    fs::create_directories(backing_);
    // The last node sees the dir through a passthrough that can be stopped.
    view_path_ = nodes_.back()->root() + "/view";
    fs::create_directories(view_path_);
    const std::string why = view_.start(backing_, view_path_);
    ASSERT_EQ(why, "");
    for (int i = 2; i < kNodes; ++i) node(i).set_backing(backing_);
    node(kNodes).set_backing(view_path_);
    for (int i = 1; i <= kNodes; ++i) ASSERT_TRUE(mount(i)) << node_name(i);
  }
  void TearDown() override {
    view_.resume();
    for (auto it = nodes_.rbegin(); it != nodes_.rend(); ++it)
      if ((*it)->mounted()) (*it)->unmount();
    view_.close();
  }
  KvfsMount& node(int i) { return *nodes_[i - 1]; }
  bool mount(int i) {
    std::string o = "node_id=" + node_name(i) + kOpts;
    if (i == kNodes) o += ",io_timeout=2";
    return node(i).mount_ok(o);
  }
  // Writes a file on node i and remembers its bytes (flush(i) makes it durable).
  void put(int i, const std::string& name, size_t n) {
    want_[name] = content(name, n);
    ASSERT_TRUE(write_file(node(i).path(name), want_[name])) << name;
  }
  void flush(int i) {
    RunResult f = run_admin({"flush", node(i).mnt(), "--wait"});
    ASSERT_EQ(f.exit_code, 0) << node_name(i) << ": " << f.output;
  }
  // Every file of want_ read bit-exact on node i within limit_s: "" or what
  // is wrong.
  std::string sees(int i, double limit_s) {
    std::string bad;
    eventually([&] { return (bad = check_all(node(i), want_)).empty(); }, limit_s);
    return bad.empty() ? "" : node_name(i) + ": " + bad;
  }

  StoppableView view_;  // the last node's view of the dir; outlives the nodes
  std::vector<std::unique_ptr<KvfsMount>> nodes_;
  std::string backing_, view_path_;
  std::map<std::string, std::string> want_;  // name -> bytes, as written
};

TEST_F(FleetTest, SixteenNodesSeeEachOtherAndSurviveAKillAStallAndARetirement) {
  // 1. Each node writes two files; every node reads all 32.
  for (int i = 1; i <= kNodes; ++i) {
    for (int k = 0; k < 2; ++k) put(i, node_name(i) + "-" + std::to_string(k), 256 * kKiB + i);
    flush(i);
  }
  for (int i = 1; i <= kNodes; ++i) EXPECT_EQ(sees(i, 15), "");

  // 2. n03 is killed in the middle of another write: its flushed files stay
  // readable on the others; n07 writes while it is down; n03 comes back and
  // sees everything.
  ASSERT_TRUE(write_file(node(3).path("n03-late"), content("n03-late", 3 << 20)));
  node(3).kill9();
  for (int i = 1; i <= kNodes; ++i)
    if (i != 3) {
      EXPECT_EQ(sees(i, 15), "");
    }
  put(7, "n07-while-n03-down", 300 * kKiB);
  flush(7);
  ASSERT_TRUE(mount(3));
  EXPECT_EQ(sees(3, 15), "");

  // 3. n16's view of the dir stalls: it answers from what it has within
  // io_timeout, and catches up with what was written meanwhile once the
  // dir answers again.
  ASSERT_TRUE(view_.stop());
  put(1, "n01-during-stall", 200 * kKiB);
  flush(1);
  const auto t0 = std::chrono::steady_clock::now();
  int err = 0;
  const std::string old = "n02-0";
  EXPECT_EQ(read_direct(node(kNodes).path(old), &err), want_[old]) << std::strerror(err);
  EXPECT_LT(since(t0), 2 + 4);  // io_timeout plus slack
  const auto t1 = std::chrono::steady_clock::now();
  struct stat st;
  EXPECT_NE(::stat(node(kNodes).path("n01-during-stall").c_str(), &st), 0)
      << "n16 cannot have read n01's log through a stopped view";
  EXPECT_LT(since(t1), 2 + 4);
  view_.resume();
  EXPECT_EQ(sees(kNodes, 20), "") << node(kNodes).log_tail(4096);

  // 4. n15 is gone for good: retired into n01, its files stay readable on
  // every node left, and it holds no segment any more.
  node(15).unmount();
  RunResult r = run_admin({"retire-node", node(1).mnt(), "n15", "--idle", "0", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output << node(1).log_tail(4096);
  const auto j = nlohmann::json::parse(r.output, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.output;
  EXPECT_EQ(j["files_copied"].get<uint64_t>(), 2u) << r.output;
  for (int i = 1; i <= kNodes; ++i)
    if (i != 15) {
      EXPECT_EQ(sees(i, 15), "");
    }
  RunResult ns = run_admin({"nodes", backing_, "--json"});
  ASSERT_EQ(ns.exit_code, 0) << ns.output;
  const auto nj = nlohmann::json::parse(ns.output, nullptr, false);
  ASSERT_FALSE(nj.is_discarded()) << ns.output;
  int listed = 0;
  for (const auto& n : nj["nodes"]) {
    ++listed;
    if (n["node"] == "n15") {
      EXPECT_EQ(n["segments"].get<uint64_t>(), 0u) << ns.output;
    }
  }
  EXPECT_GE(listed, kNodes - 1) << ns.output;
}

}  // namespace
}  // namespace kvfs::test
