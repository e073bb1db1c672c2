// kvfs with its backing dir on nfsemu (bench/nfsemu.cc), the emulated NFS
// backing of the benchmarks: files written through kvfs survive a remount
// bit-exact, and kvfs's segments make far fewer backing files than it stores.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

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

  constexpr int kFiles = 20;
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

}  // namespace
}  // namespace kvfs::test
