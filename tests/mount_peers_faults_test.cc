// SPDX-License-Identifier: Apache-2.0
// Mount tests: nodes sharing one backing dir (core/peers/peer_log.h) while the
// shared storage or the other nodes misbehave, through real mounts:
// - the same names stored on two nodes at once, as two vLLM instances do
//   with one prefix: every read is one node's whole version;
// - a peer's segments damaged, cut short or deleted by hand: a clean miss
//   (EIO/ENOENT/ESTALE), never other bytes, on the peer and the owner;
// - one node's view of the shared dir stalling (a FUSE passthrough stopped
//   with SIGSTOP, as a hung NFS mount blocks): that node keeps answering,
//   within io_timeout, and catches up once the dir answers again.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/mount_fixture.h"
#include "tests/reliability_util.h"

namespace kvfs::test {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
constexpr size_t kMiB = 1 << 20;

bool clean_miss(int err) {
  return err == ENOENT || err == EIO || err == ESTALE;
}

// Stores data at rel the way vLLM does: a tmp file written whole, then
// renamed over the final name.
bool store(const std::string& mnt, const std::string& rel, const std::string& tmp_tag,
           const std::string& data) {
  const std::string tmp = mnt + "/" + rel + "_" + tmp_tag + ".tmp";
  return write_file(tmp, data) && ::rename(tmp.c_str(), (mnt + "/" + rel).c_str()) == 0;
}

std::string version(const std::string& node, int name, int round) {
  const std::string tag = node + "/" + std::to_string(name) + "/" + std::to_string(round);
  return random_bytes(512 * 1024 + 4096 * name + 7 * round, std::hash<std::string>{}(tag));
}

TEST(PeersFaults, TheSameNamesStoredOnTwoNodesAtOnceReadAsOneWholeVersion) {
  KvfsMount a, b;
  b.set_backing(a.backing());
  ASSERT_TRUE(a.mount_ok("node_id=a,segment_size=8M"));
  ASSERT_TRUE(b.mount_ok("node_id=b,segment_size=8M"));
  ASSERT_TRUE(fs::create_directories(a.path("p")));
  ASSERT_TRUE(eventually([&] { return fs::is_directory(b.path("p")); }, 10));
  constexpr int kNames = 12, kRounds = 3;
  // Every version any node stores of each name.
  std::map<std::string, std::set<std::string>> versions;
  for (int i = 0; i < kNames; ++i)
    for (const char* n : {"a", "b"})
      for (int r = 0; r < kRounds; ++r)
        versions["p/k" + std::to_string(i)].insert(version(n, i, r));

  std::atomic<bool> done{false};
  std::atomic<uint64_t> exact{0}, misses{0}, wrong{0};
  std::mutex what_mu;
  std::string wrong_what;
  auto reader = [&](KvfsMount* m) {
    while (!done.load()) {
      for (int i = 0; i < kNames; ++i) {
        const std::string rel = "p/k" + std::to_string(i);
        int err;
        const std::string got = read_direct(m->path(rel), &err);
        if (err != 0) {
          if (clean_miss(err)) {
            ++misses;
          } else {
            ++wrong;
            std::lock_guard l(what_mu);
            wrong_what = rel + ": " + std::strerror(err);
          }
        } else if (versions[rel].count(got)) {
          ++exact;
        } else {
          ++wrong;
          std::lock_guard l(what_mu);
          wrong_what = rel + ": " + std::to_string(got.size()) + " bytes of no version";
        }
      }
    }
  };
  // Round 0 on both nodes, until each sees every name: from then on a
  // miss is a name being replaced under the reader, nothing else.
  std::atomic<int> failed_stores{0};
  for (KvfsMount* m : {&a, &b})
    for (int i = 0; i < kNames; ++i)
      if (!store(m->mnt(), "p/k" + std::to_string(i), (m == &a ? "a" : "b") + std::string("0"),
                 version(m == &a ? "a" : "b", i, 0)))
        ++failed_stores;
  for (KvfsMount* m : {&a, &b})
    for (int i = 0; i < kNames; ++i) {
      struct stat st;
      ASSERT_TRUE(eventually(
          [&] { return ::stat(m->path("p/k" + std::to_string(i)).c_str(), &st) == 0; }, 10));
    }
  std::vector<std::thread> threads;
  threads.emplace_back(reader, &a);
  threads.emplace_back(reader, &b);
  for (KvfsMount* m : {&a, &b}) {
    threads.emplace_back([&, m] {
      const std::string node = m == &a ? "a" : "b";
      for (int r = 1; r < kRounds; ++r)
        for (int i = 0; i < kNames; ++i)
          if (!store(m->mnt(), "p/k" + std::to_string(i), node + std::to_string(r),
                     version(node, i, r)))
            ++failed_stores;
    });
  }
  threads[2].join();
  threads[3].join();
  for (KvfsMount* m : {&a, &b}) {
    RunResult f = run_admin({"flush", m->mnt(), "--wait"});
    EXPECT_EQ(f.exit_code, 0) << f.output;
  }
  // Each node ends with its own last version (a node's own wins on it).
  for (KvfsMount* m : {&a, &b}) {
    const std::string node = m == &a ? "a" : "b";
    for (int i = 0; i < kNames; ++i) {
      int err;
      EXPECT_TRUE(read_direct(m->path("p/k" + std::to_string(i)), &err) ==
                  version(node, i, kRounds - 1))
          << node << " k" << i << ": " << std::strerror(err);
    }
  }
  done = true;
  threads[0].join();
  threads[1].join();
  EXPECT_EQ(failed_stores.load(), 0);
  EXPECT_EQ(wrong.load(), 0u) << wrong_what;
  EXPECT_GT(exact.load(), 0u);
  // A miss is a read that met a replacement (the old version's import gone
  // on the peer: ESTALE); most reads find a whole version.
  EXPECT_LE(misses.load(), exact.load()) << "exact " << exact << ", misses " << misses;
  RecordProperty("exact", std::to_string(exact.load()));
  RecordProperty("misses", std::to_string(misses.load()));
  // A third node sees, for each name, one of the two last versions, the
  // same one at every look.
  KvfsMount c;
  c.set_backing(a.backing());
  ASSERT_TRUE(c.mount_ok("node_id=c,segment_size=8M"));
  for (int i = 0; i < kNames; ++i) {
    const std::string rel = "p/k" + std::to_string(i);
    int err;
    const std::string first = read_direct(c.path(rel), &err);
    EXPECT_EQ(err, 0) << rel << ": " << std::strerror(err);
    EXPECT_TRUE(first == version("a", i, kRounds - 1) || first == version("b", i, kRounds - 1))
        << rel << ": " << first.size() << " bytes, not a last version";
    EXPECT_TRUE(read_direct(c.path(rel), &err) == first) << rel;
  }
}

// The owner's segment file that holds these bytes, or "".
std::string segment_holding(const std::string& backing, const std::string& node,
                            const std::string& bytes) {
  for (auto& e : fs::directory_iterator(backing + "/segments")) {
    const std::string n = e.path().filename();
    if (n.rfind(node + "-", 0) != 0 || n.size() < 4 || n.substr(n.size() - 4) != ".seg") continue;
    std::string seg;
    if (read_file(e.path(), &seg) && seg.find(bytes) != std::string::npos) return e.path();
  }
  return "";
}

TEST(PeersFaults, APeersSegmentsDamagedCutShortOrDeletedByHandAreCleanMisses) {
  KvfsMount a, b;
  b.set_backing(a.backing());
  ASSERT_TRUE(a.mount_ok("node_id=a,segment_size=4M"));
  // No read-ahead: b reads a's files only when asked to, after the damage.
  ASSERT_TRUE(b.mount_ok("node_id=b,segment_size=4M,prefetch=0"));
  // Each file fills a segment (4 MiB and a byte), so each is in its own.
  const std::vector<std::string> names{"damaged", "cut", "deleted"};
  std::map<std::string, std::string> data;
  for (const std::string& n : names) {
    data[n] = random_bytes(4 * kMiB + 1, std::hash<std::string>{}(n));
    ASSERT_TRUE(write_file(a.path(n), data[n]));
    RunResult f = run_admin({"flush", a.mnt(), "--wait"});
    ASSERT_EQ(f.exit_code, 0) << f.output;
  }
  std::vector<std::string> segs;
  for (const std::string& n : names) {
    segs.push_back(segment_holding(a.backing(), "a", data[n].substr(0, 4096)));
    ASSERT_FALSE(segs.back().empty()) << n;
  }
  ASSERT_EQ(std::set<std::string>(segs.begin(), segs.end()).size(), 3u)
      << "one segment per file expected";
  for (const std::string& n : names) {
    struct stat st;
    ASSERT_TRUE(eventually([&] { return ::stat(b.path(n).c_str(), &st) == 0; }, 10)) << n;
  }
  // Damage each file's segment its own way.
  {
    const int fd = ::open(segs[0].c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    char ch;
    ASSERT_EQ(::pread(fd, &ch, 1, 3 * kMiB), 1);
    ch ^= 0x5a;
    ASSERT_EQ(::pwrite(fd, &ch, 1, 3 * kMiB), 1);
    ::close(fd);
  }
  ASSERT_EQ(::truncate(segs[1].c_str(), kMiB), 0);
  ASSERT_EQ(::unlink(segs[2].c_str()), 0);
  // b never read them: each read meets the damage. The owner may still
  // hold a file in its RAM tier: its bytes or a clean miss.
  for (KvfsMount* m : {&b, &a}) {
    for (const std::string& n : names) {
      int err;
      const std::string got = read_direct(m->path(n), &err);
      EXPECT_TRUE(clean_miss(err) || (m == &a && err == 0 && got == data[n]))
          << (m == &a ? "owner" : "peer") << " " << n << ": "
          << (err ? std::strerror(err) : "read whole")
          << (got == data[n] ? " (its bytes)" : " (other bytes)");
    }
  }
  // The deleted one leaves the peer's view at its next pass.
  EXPECT_TRUE(eventually(
      [&] {
        struct stat st;
        return ::stat(b.path("deleted").c_str(), &st) != 0 && errno == ENOENT;
      },
      10));
  RunResult st = run_admin({"stats", b.mnt(), "--json"});
  ASSERT_EQ(st.exit_code, 0) << st.output;
  const auto j = nlohmann::json::parse(st.output, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << st.output;
  EXPECT_GE(j["errors"]["checksum"].get<uint64_t>(), 1u) << st.output;
  // Both go on: a new file of a's is read bit-exact on b.
  const std::string after = random_bytes(kMiB + 3, 99);
  ASSERT_TRUE(write_file(a.path("after"), after));
  EXPECT_TRUE(eventually(
      [&] {
        int err;
        return read_direct(b.path("after"), &err) == after;
      },
      10));
}

// Two nodes over one backing dir, b through a bindfs passthrough of it
// that can be stopped: b's view of the shared storage stalls, a's does not.
class PeerStallTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have("bindfs")) GTEST_SKIP() << "bindfs is not installed (tools/install-deps.sh)";
    view_ = b_.root() + "/view";
    fs::create_directories(view_);
    fs::create_directories(a_.backing());
    const std::string why = bindfs_.start(a_.backing(), view_);
    ASSERT_EQ(why, "");
    b_.set_backing(view_);
  }
  void TearDown() override {
    if (!bindfs_.running()) return;
    resume();
    if (b_.mounted()) b_.unmount();
    if (a_.mounted()) a_.unmount();
    bindfs_.close();
  }
  void stall() { ASSERT_TRUE(bindfs_.stop()); }
  void resume() { bindfs_.resume(); }

  StoppableView bindfs_;  // b's view of the dir; outlives the mounts
  KvfsMount a_, b_;
  std::string view_;
};

TEST_F(PeerStallTest, ANodeWhoseViewOfTheDirStallsKeepsAnsweringAndCatchesUp) {
  constexpr double kIoTimeout = 2, kSlack = 4;
  ASSERT_TRUE(a_.mount_ok("node_id=a,segment_size=4M"));
  ASSERT_TRUE(b_.mount_ok("node_id=b,segment_size=4M,io_timeout=2,ram_prefault=0"));
  const std::string before = random_bytes(2 * kMiB, 1), later = random_bytes(kMiB + 9, 2);
  ASSERT_TRUE(write_file(a_.path("before"), before));
  int err;
  ASSERT_TRUE(eventually([&] { return read_direct(b_.path("before"), &err) == before; }, 10));
  stall();
  ASSERT_TRUE(write_file(a_.path("later"), later));
  RunResult f = run_admin({"flush", a_.mnt(), "--wait"});
  ASSERT_EQ(f.exit_code, 0) << f.output;
  // b answers: its RAM copy of a's file, a name it does not know yet, its
  // stats, each within the deadline.
  auto t0 = Clock::now();
  EXPECT_EQ(read_direct(b_.path("before"), &err), before) << std::strerror(err);
  EXPECT_LT(since(t0), kIoTimeout + kSlack);
  t0 = Clock::now();
  struct stat st;
  EXPECT_NE(::stat(b_.path("later").c_str(), &st), 0) << "b cannot have read a's log";
  EXPECT_LT(since(t0), kIoTimeout + kSlack);
  // Its passes fail at the deadline instead of holding the thread.
  EXPECT_TRUE(eventually(
      [&] {
        RunResult s = run_admin({"stats", b_.mnt(), "--json"});
        const auto j = nlohmann::json::parse(s.output, nullptr, false);
        return !j.is_discarded() && j["peers"]["pass_errors"].get<uint64_t>() > 0;
      },
      3 * (kIoTimeout + kSlack)));
  resume();
  // Once the dir answers, b catches up with what a wrote meanwhile.
  EXPECT_TRUE(eventually([&] { return read_direct(b_.path("later"), &err) == later; }, 15))
      << std::strerror(err) << "\n"
      << b_.log_tail(4096);
}

}  // namespace
}  // namespace kvfs::test
