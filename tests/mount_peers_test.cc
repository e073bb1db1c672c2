// SPDX-License-Identifier: Apache-2.0
// Mount tests: kvfs daemons of two and three node_ids over one backing dir
// see each other's files (core/peers/peer_log.h) through real mounts with the
// default kernel caches: a file closed on one node is looked up, listed and
// read bit-exact on the others within seconds, also after they looked the
// name up and missed; an owner evicting under its cap while a peer reads its
// files gives that peer bit-exact bytes or a clean miss, never other bytes;
// a killed owner's flushed files stay readable by its peers.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/mount_fixture.h"

namespace kvfs::test {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
constexpr size_t kMiB = 1 << 20;

std::string content(const std::string& name, size_t n) {
  return random_bytes(n, std::hash<std::string>{}(name));
}

// Reads path until it holds want, for at most limit_s: the seconds it took,
// or -1 if it never did (the last result in *last).
double seconds_until_readable(const std::string& path, const std::string& want, double limit_s,
                              std::string* last) {
  const auto t0 = Clock::now();
  for (;;) {
    std::string got;
    if (read_file(path, &got) && got == want) {
      return std::chrono::duration<double>(Clock::now() - t0).count();
    }
    *last = got.empty() ? std::string("<") + std::strerror(errno) + ">"
                        : std::to_string(got.size()) + " bytes, not the ones written";
    if (std::chrono::duration<double>(Clock::now() - t0).count() > limit_s) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling, as vLLM does
  }
}

// Whether path stops being readable within limit_s.
bool gone_within(const std::string& path, double limit_s) {
  const auto t0 = Clock::now();
  std::string got;
  while (read_file(path, &got)) {
    if (std::chrono::duration<double>(Clock::now() - t0).count() > limit_s) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

bool listed(const std::string& dir, const std::string& name) {
  std::error_code ec;
  for (auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename() == name) return true;
  return false;
}

TEST(Peers, AFileClosedOnOneNodeIsSeenOnTheOtherWithinSecondsBothWays) {
  KvfsMount a, b;
  b.set_backing(a.backing());
  ASSERT_TRUE(a.mount_ok("node_id=a,segment_size=4M"));
  ASSERT_TRUE(b.mount_ok("node_id=b,segment_size=4M"));
  ASSERT_TRUE(fs::create_directories(a.path("m/l0")));
  for (int round = 0; round < 3; ++round) {
    for (KvfsMount* from : {&a, &b}) {
      KvfsMount* to = from == &a ? &b : &a;
      const std::string name = "m/l0/k" + std::to_string(round) + (from == &a ? "a" : "b");
      const std::string d = content(name, 2 * kMiB + 4096 * round + 1);
      // The reader polls for it first (vLLM's existence check every
      // step): the kernel's cache of that miss must not hide it long.
      struct stat st;
      EXPECT_NE(::stat(to->path(name).c_str(), &st), 0);
      ASSERT_TRUE(write_file(from->path(name), d));
      std::string last;
      const double s = seconds_until_readable(to->path(name), d, 10, &last);
      ASSERT_GE(s, 0) << name << " never became readable on the peer: " << last << "\n"
                      << to->log_tail(4096);
      RecordProperty(name, std::to_string(s));
      EXPECT_TRUE(listed(to->path("m/l0"), name.substr(5))) << name;
      ASSERT_EQ(::stat(to->path(name).c_str(), &st), 0);
      EXPECT_EQ(uint64_t(st.st_size), d.size());
    }
  }
  // Only its owner changes a file.
  const int fd = ::open(b.path("m/l0/k0a").c_str(), O_WRONLY);
  EXPECT_LT(fd, 0);
  EXPECT_EQ(errno, EROFS);
  if (fd >= 0) ::close(fd);
  // Unlinked on the peer: gone there at once, and on its owner soon.
  ASSERT_EQ(::unlink(b.path("m/l0/k0a").c_str()), 0) << std::strerror(errno);
  struct stat st0;
  EXPECT_NE(::stat(b.path("m/l0/k0a").c_str(), &st0), 0);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_FALSE(listed(b.path("m/l0"), "k0a"));
  EXPECT_TRUE(gone_within(a.path("m/l0/k0a"), 15)) << "still readable on its owner after 15 s\n"
                                                   << a.log_tail(4096);
  EXPECT_FALSE(listed(a.path("m/l0"), "k0a"));
  // Removed by its owner: gone on the peer too (a clean miss).
  ASSERT_EQ(::unlink(a.path("m/l0/k1a").c_str()), 0);
  RunResult flush = run_admin({"flush", a.mnt(), "--wait"});
  ASSERT_EQ(flush.exit_code, 0) << flush.output;
  EXPECT_TRUE(gone_within(b.path("m/l0/k1a"), 15)) << "still readable on b after 15 s";
  // Stored again on the peer: back on both.
  const std::string again = content("again", kMiB);
  ASSERT_TRUE(write_file(b.path("m/l0/k0a"), again));
  std::string last;
  EXPECT_GE(seconds_until_readable(a.path("m/l0/k0a"), again, 10, &last), 0) << last;
  // The stats say where hits came from.
  RunResult st = run_admin({"stats", b.mnt(), "--json"});
  ASSERT_EQ(st.exit_code, 0) << st.output;
  const auto j = nlohmann::json::parse(st.output, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << st.output;
  // b's lookups of a's three files (the kernel caches a name once found).
  EXPECT_GE(j["cache"]["peer_file_hits"].get<uint64_t>(), 3u) << st.output;
  EXPECT_GE(j["peers"]["imported_files"].get<uint64_t>(), 3u) << st.output;
  EXPECT_EQ(j["peers"]["unlinks_sent"].get<uint64_t>(), 1u) << st.output;
  ASSERT_EQ(j["peers"]["nodes"].size(), 1u) << st.output;
  EXPECT_EQ(j["peers"]["nodes"][0]["node"], "a") << st.output;
}

TEST(Peers, ThreeNodesEachSeeEveryNodesFiles) {
  KvfsMount n[3];
  const char* ids[3] = {"a", "b", "c"};
  for (int i = 1; i < 3; ++i) n[i].set_backing(n[0].backing());
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(n[i].mount_ok(std::string("node_id=") + ids[i] + ",segment_size=4M"));
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(write_file(n[i].path(std::string("f-") + ids[i]), content(ids[i], kMiB + 100 * i)));
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      std::string last;
      EXPECT_GE(seconds_until_readable(n[i].path(std::string("f-") + ids[j]),
                                       content(ids[j], kMiB + 100 * j), 10, &last),
                0)
          << "node " << ids[i] << " reading " << ids[j] << "'s file: " << last;
    }
}

TEST(Peers, AnOwnerEvictingUnderThreeTimesItsCapGivesAReadingPeerExactBytesOrAMiss) {
  KvfsMount a, b;
  b.set_backing(a.backing());
  // The kernel's caches off on the owner, so that its files are evictable
  // at once (the evictor spares what the kernel may still hold).
  ASSERT_TRUE(
      a.mount_ok("node_id=a,segment_size=4M,capacity=32M,evict_grace=0,ram_size=32M,"
                 "entry_timeout=0,attr_timeout=0,negative_timeout=0"));
  ASSERT_TRUE(b.mount_ok("node_id=b,segment_size=4M,ram_size=16M"));
  constexpr int kFiles = 96;  // 96 MiB through a 32 MiB cap
  std::atomic<bool> done{false};
  std::atomic<int> written{0};
  std::atomic<uint64_t> exact{0}, misses{0}, wrong{0};
  std::string wrong_what;
  std::thread reader([&] {
    while (!done.load()) {
      const int upto = written.load();
      for (int i = 0; i < upto; ++i) {
        const std::string name = "f" + std::to_string(i);
        std::string got;
        const int fd = ::open(b.path(name).c_str(), O_RDONLY);
        if (fd < 0) {
          if (errno == ENOENT || errno == EIO)
            ++misses;
          else
            ++wrong, wrong_what = name + ": open " + std::strerror(errno);
          continue;
        }
        char buf[1 << 16];
        ssize_t r;
        bool failed = false;
        while ((r = ::read(fd, buf, sizeof(buf))) != 0) {
          if (r < 0) {
            if (errno == EIO || errno == ENOENT)
              failed = true;
            else
              ++wrong, wrong_what = name + ": read " + std::strerror(errno);
            break;
          }
          got.append(buf, size_t(r));
        }
        ::close(fd);
        if (failed)
          ++misses;
        else if (got == content(name, kMiB + 7))
          ++exact;
        else if (r == 0)
          ++wrong, wrong_what = name + ": " + std::to_string(got.size()) + " bytes";
      }
    }
  });
  struct Join {
    std::atomic<bool>* done;
    std::thread* t;
    ~Join() {
      *done = true;
      if (t->joinable()) t->join();
    }
  } join{&done, &reader};
  for (int i = 0; i < kFiles; ++i) {
    const std::string name = "f" + std::to_string(i);
    ASSERT_TRUE(write_file(a.path(name), content(name, kMiB + 7))) << name << "\n"
                                                                   << a.log_tail(4096);
    written = i + 1;
    // Every 8 files, until b has read the newest: b reads all along, while
    // a evicts and reclaims under it.
    if (i % 8 == 7) {
      std::string last;
      EXPECT_GE(seconds_until_readable(b.path(name), content(name, kMiB + 7), 10, &last), 0)
          << name << ": " << last;
    }
  }
  RunResult flush = run_admin({"flush", a.mnt(), "--wait"});
  EXPECT_EQ(flush.exit_code, 0) << flush.output;
  // A few more rounds of the reader over every name.
  const uint64_t seen = exact + misses;
  const auto t0 = Clock::now();
  while (exact + misses < seen + 3 * kFiles &&
         std::chrono::duration<double>(Clock::now() - t0).count() < 60)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  done = true;
  reader.join();
  EXPECT_EQ(wrong.load(), 0u) << wrong_what;
  EXPECT_GT(exact.load(), 0u);
  RecordProperty("exact", std::to_string(exact.load()));
  RecordProperty("misses", std::to_string(misses.load()));
  // The owner stayed under its cap; the peer wrote nothing.
  uint64_t a_bytes = 0, b_bytes = 0;
  for (auto& e : fs::directory_iterator(a.backing() + "/segments")) {
    const std::string n = e.path().filename();
    std::error_code ec;  // a segment a's evictor deletes after the listing counts as gone
    const uintmax_t size = fs::file_size(e.path(), ec);
    if (!ec) (n.rfind("a-", 0) == 0 ? a_bytes : b_bytes) += size;
  }
  EXPECT_LE(a_bytes, 36 * kMiB);
  EXPECT_LE(b_bytes, 4 * kMiB) << "b only read";
}

TEST(Peers, AKilledOwnersFlushedFilesStayReadableAndItCatchesUpOnReturn) {
  KvfsMount a, b;
  b.set_backing(a.backing());
  ASSERT_TRUE(a.mount_ok("node_id=a,segment_size=4M"));
  ASSERT_TRUE(b.mount_ok("node_id=b,segment_size=4M"));
  std::map<std::string, std::string> on_a;
  for (int i = 0; i < 4; ++i) {
    const std::string n = "a" + std::to_string(i);
    on_a[n] = content(n, 2 * kMiB + i);
    ASSERT_TRUE(write_file(a.path(n), on_a[n]));
  }
  RunResult flush = run_admin({"flush", a.mnt(), "--wait"});
  ASSERT_EQ(flush.exit_code, 0) << flush.output;
  // Mid-flush of one more file: what was flushed stays; the rest may go.
  ASSERT_TRUE(write_file(a.path("late"), content("late", 8 * kMiB)));
  a.kill9();
  for (auto& [n, d] : on_a) {
    std::string last;
    EXPECT_GE(seconds_until_readable(b.path(n), d, 10, &last), 0) << n << ": " << last;
  }
  // B writes while A is down; A sees it once it is back, at mount.
  ASSERT_TRUE(write_file(b.path("while-a-was-down"), content("w", kMiB)));
  flush = run_admin({"flush", b.mnt(), "--wait"});
  ASSERT_EQ(flush.exit_code, 0) << flush.output;
  ASSERT_TRUE(a.mount_ok("node_id=a,segment_size=4M"));
  std::string got;
  ASSERT_TRUE(read_file(a.path("while-a-was-down"), &got));
  EXPECT_EQ(got, content("w", kMiB));
  EXPECT_EQ(check_all(a, on_a), "");
}

TEST(Peers, ANodeGoneForGoodIsRetiredIntoALiveOneWithKvfsAdmin) {
  KvfsMount a, b;
  b.set_backing(a.backing());
  ASSERT_TRUE(a.mount_ok("node_id=a,segment_size=4M"));
  ASSERT_TRUE(b.mount_ok("node_id=b,segment_size=4M"));
  std::map<std::string, std::string> on_a;
  ASSERT_TRUE(fs::create_directories(a.path("d")));
  for (int i = 0; i < 3; ++i) {
    const std::string n = "d/r" + std::to_string(i);
    on_a[n] = content(n, kMiB + 7 * i);
    ASSERT_TRUE(write_file(a.path(n), on_a[n]));
  }
  RunResult flush = run_admin({"flush", a.mnt(), "--wait"});
  ASSERT_EQ(flush.exit_code, 0) << flush.output;
  for (auto& [n, d] : on_a) {
    std::string last;
    ASSERT_GE(seconds_until_readable(b.path(n), d, 10, &last), 0) << n << ": " << last;
  }
  RunResult r = run_admin({"retire-node", b.mnt(), "a", "--idle", "0"});
  EXPECT_EQ(r.exit_code, 3) << "a is running: " << r.output;
  EXPECT_NE(r.output.find("running"), std::string::npos) << r.output;
  a.unmount();
  r = run_admin({"retire-node", b.mnt(), "a", "--idle", "0", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output << b.log_tail(4096);
  const auto j = nlohmann::json::parse(r.output, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.output;
  EXPECT_EQ(j["files_copied"].get<uint64_t>(), 3u) << r.output;
  EXPECT_GE(j["segments_deleted"].get<uint64_t>(), 1u) << r.output;
  EXPECT_EQ(check_all(b, on_a), "") << "b's own copies now";
  RunResult nodes = run_admin({"nodes", a.backing(), "--json"});
  ASSERT_EQ(nodes.exit_code, 0) << nodes.output;
  const auto nj = nlohmann::json::parse(nodes.output, nullptr, false);
  ASSERT_FALSE(nj.is_discarded()) << nodes.output;
  for (const auto& n : nj["nodes"])
    if (n["node"] == "a") {
      EXPECT_EQ(n["segments"].get<uint64_t>(), 0u) << nodes.output;
    }
  // They outlive b's restart: b's own files, in its index.
  b.unmount();
  ASSERT_TRUE(b.mount_ok("node_id=b,segment_size=4M"));
  EXPECT_EQ(check_all(b, on_a), "");
}

}  // namespace
}  // namespace kvfs::test
