// SPDX-License-Identifier: Apache-2.0
// kvfs with its backing dir on nfsemu (bench/nfsemu.cc), the emulated NFS
// backing of the benchmarks: files written through kvfs survive a remount
// bit-exact, and kvfs's segments make far fewer backing files than it stores;
// a network backing gets more flushers than a local one; and nfsemu itself
// charges the COMMIT that an NFS client's direct writes wait for.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "tests/mount_fixture.h"

namespace kvfs::test {
namespace {

// An nfsemu mount over a fresh source dir; unmounted (and the daemon waited
// for) on destruction, also when the test fails.
class EmuMount {
 public:
  EmuMount() {
    char tmpl[] = "/tmp/kvfs-emu-XXXXXX";
    root_ = ::mkdtemp(tmpl);
    std::filesystem::create_directories(root_ + "/src");
    std::filesystem::create_directories(mnt());
  }
  ~EmuMount() {
    stop();
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  EmuMount(const EmuMount&) = delete;
  EmuMount& operator=(const EmuMount&) = delete;

  RunResult start(const char* bin, const std::string& opts) {
    RunResult r = run_command({bin, root_ + "/src", mnt(), "-o",
                               opts + ",stats=" + stats_path() + ",pidfile=" + root_ + "/pid"});
    if (r.exit_code == 0) std::ifstream(root_ + "/pid") >> pid_;
    return r;
  }
  // Unmounts and waits for the daemon, which writes its stats as it exits.
  void stop() {
    if (pid_ <= 0) return;
    if (run_command({"fusermount3", "-u", mnt()}).exit_code != 0)
      (void)run_command({"fusermount3", "-u", "-z", mnt()});
    EXPECT_TRUE(KvfsMount::wait_exit(pid_, 30000)) << "nfsemu " << pid_ << " did not exit";
    pid_ = -1;
  }
  std::string mnt() const { return root_ + "/mnt"; }
  std::string stats_path() const { return root_ + "/stats.json"; }
  // The counters written at unmount (stop() first); null if unreadable.
  nlohmann::json stats() const {
    std::ifstream in(stats_path());
    return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  }

 private:
  std::string root_;
  pid_t pid_ = -1;
};

TEST(MountEmulatedBacking, SegmentsOnEmulatedNfs) {
#ifndef NFSEMU_BIN
  GTEST_SKIP() << "nfsemu is not built (KVFS_BENCH=OFF)";
#else
  if (::access("/dev/fuse", R_OK | W_OK) != 0) GTEST_SKIP() << "no /dev/fuse";
  EmuMount emu;  // declared first: goes away after kvfs, whose backing it holds
  // Small costs, so that the test stays fast but every request does wait.
  RunResult r = emu.start(NFSEMU_BIN, "rtt_us=200,data_us=20,attr_timeout=1");
  ASSERT_EQ(r.exit_code, 0) << "nfsemu failed to mount: " << r.output;
  KvfsMount m;
  m.set_backing(emu.mnt() + "/backing");
  ASSERT_TRUE(std::filesystem::create_directory(m.backing()));
  ASSERT_TRUE(m.mount_ok());
  // A network backing fs (nfsemu is a FUSE one) gets four flushers unless told.
  EXPECT_EQ(run_admin({"config", m.mnt(), "flush_threads"}).output, "4\n");

  constexpr int kFiles = 40;
  std::vector<std::string> data;
  for (int i = 0; i < kFiles; ++i) {
    // 2-4 MiB, most sizes not a multiple of a block.
    data.push_back(random_bytes((2u << 20) + static_cast<size_t>(i) * 104729, 1000 + i));
    ASSERT_TRUE(write_file(m.path("f" + std::to_string(i)), data.back())) << i;
  }
  ASSERT_TRUE(fsync_dir(m.mnt()));
  m.unmount();
  ASSERT_TRUE(m.mount_ok());
  for (int i = 0; i < kFiles; ++i) {
    std::string back;
    ASSERT_TRUE(read_file(m.path("f" + std::to_string(i)), &back)) << i;
    EXPECT_TRUE(back == data[i]) << "f" << i << " differs after the remount";
  }
  m.unmount();
  emu.stop();

  std::ifstream in(emu.stats_path());
  ASSERT_TRUE(in.good()) << "no stats from nfsemu";
  const nlohmann::json st = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(st.is_object()) << "bad stats JSON";
  const uint64_t creates = st["ops"]["create"].get<uint64_t>();
  uint64_t stored = 0;
  for (const auto& d : data) stored += d.size();
  // kvfs packs the files into segments: its creates are the lock, the
  // superblock and a segment or two, not one per file.
  EXPECT_LT(creates, static_cast<uint64_t>(kFiles / 2)) << st.dump();
  EXPECT_GE(st["bytes_written"].get<uint64_t>(), stored) << st.dump();
  EXPECT_GE(st["bytes_read"].get<uint64_t>(), stored) << st.dump();
  EXPECT_GT(st["round_trips"].get<uint64_t>(), 0u) << st.dump();
#endif
}

TEST(MountEmulatedBacking, LocalBackingGetsTwoFlushers) {
  if (::access("/dev/fuse", R_OK | W_OK) != 0) GTEST_SKIP() << "no /dev/fuse";
  KvfsMount m;
  if (on_network_fs(m.backing())) GTEST_SKIP() << "the test's backing dir is on a network fs";
  ASSERT_TRUE(m.mount_ok());
  EXPECT_EQ(run_admin({"config", m.mnt(), "flush_threads"}).output, "2\n");
  m.unmount();
  // An explicit count wins over the backing's kind.
  ASSERT_TRUE(m.mount_ok("flush_threads=3"));
  EXPECT_EQ(run_admin({"config", m.mnt(), "flush_threads"}).output, "3\n");
}

#ifdef NFSEMU_BIN
// Writes size bytes to path in one write(2), opened with extra flags; fsyncs
// before the close if asked.
bool write_one(const std::string& path, int flags, size_t size, bool fsync_first) {
  void* buf = nullptr;
  if (::posix_memalign(&buf, 4096, size) != 0) return false;
  std::memset(buf, 'x', size);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | flags, 0644);
  bool ok = fd >= 0 && ::write(fd, buf, size) == static_cast<ssize_t>(size);
  if (ok && fsync_first) ok = ::fsync(fd) == 0;
  if (fd >= 0) ok = ::close(fd) == 0 && ok;
  std::free(buf);
  return ok;
}

// The emulated server's COMMITs after these closes on an nfsemu mount with
// the given options; -1 if a step failed.
int64_t commits_after_closes(const std::string& opts) {
  EmuMount emu;
  RunResult r = emu.start(NFSEMU_BIN, "rtt_us=50" + opts);
  EXPECT_EQ(r.exit_code, 0) << "nfsemu failed to mount: " << r.output;
  if (r.exit_code != 0) return -1;
  const bool ok = write_one(emu.mnt() + "/direct", O_DIRECT, 1 << 20, false) &&
                  write_one(emu.mnt() + "/buffered", 0, 1 << 20, false) &&
                  write_one(emu.mnt() + "/synced", O_DIRECT, 1 << 20, true);
  EXPECT_TRUE(ok) << std::strerror(errno);
  // Opened O_DIRECT but never written: nothing to commit.
  const int fd = ::open((emu.mnt() + "/direct").c_str(), O_RDONLY | O_DIRECT);
  EXPECT_GE(fd, 0);
  if (fd >= 0) ::close(fd);
  emu.stop();
  const nlohmann::json st = emu.stats();
  EXPECT_TRUE(st.is_object()) << "no stats from nfsemu";
  if (!ok || !st.is_object() || !st.contains("commits")) return -1;
  return st["commits"].get<int64_t>();
}
#endif

TEST(MountEmulatedBacking, DirectWritesPayACommitAtClose) {
#ifndef NFSEMU_BIN
  GTEST_SKIP() << "nfsemu is not built (KVFS_BENCH=OFF)";
#else
  if (::access("/dev/fuse", R_OK | W_OK) != 0) GTEST_SKIP() << "no /dev/fuse";
  // Only the direct file closed without an fsync: the buffered one leaves
  // its writeback to the client (a delegation), the synced one paid at fsync.
  EXPECT_EQ(commits_after_closes(""), 1);
  EXPECT_EQ(commits_after_closes(",direct_commit=0"), 0);
#endif
}

}  // namespace
}  // namespace kvfs::test
