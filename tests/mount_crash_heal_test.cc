// SPDX-License-Identifier: Apache-2.0
// After a crash and around umount: kvfs clears the dead mount a killed
// daemon left over its own backing dir (and refuses, naming the command,
// one of anything else), and tools/umount.fuse.kvfs returns only once the
// daemon has flushed and exited.
#include <errno.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>

#include "tests/mount_fixture.h"

namespace kvfs::test {
namespace {

int stat_errno(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 ? 0 : errno;
}

std::string opts(const KvfsMount& m) {
  return "index_dir=" + m.index_dir() + ",ram_size=256M,log_file=" + m.log_file();
}

TEST(CrashHeal, DeadMountOfTheSameBackingDirIsClearedAndMounted) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  const std::string data = random_bytes(3 << 20, 7);
  ASSERT_TRUE(write_file(m.path("kept"), data));
  ASSERT_TRUE(fsync_dir(m.mnt()));
  const pid_t dead = m.daemon_pid();
  m.kill9_keep_mount();
  ASSERT_TRUE(is_mounted(m.mnt())) << "the crash should leave its dead mount";
  // stat may be answered from the attribute cache for a while; a listing
  // always asks the (dead) daemon.
  const int e = stat_errno(m.mnt());
  EXPECT_TRUE(e == 0 || e == ENOTCONN || e == ECONNABORTED) << std::strerror(e);
  std::error_code ec;
  std::filesystem::directory_iterator it(m.mnt(), ec);
  EXPECT_TRUE(ec) << "a dead mount should not list";

  // Run by hand, as a user would.
  RunResult r = run_command({kvfs_binary(), m.backing(), m.mnt(), "-o", opts(m)});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  m.adopt();
  EXPECT_NE(r.output.find("died (its daemon pid " + std::to_string(dead) + " is gone)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(m.log_tail(8192).find("clearing its dead mount"), std::string::npos);
  std::string got;
  ASSERT_TRUE(read_file(m.path("kept"), &got));
  EXPECT_TRUE(got == data) << "the fsync'ed file is not intact after the heal";
  ASSERT_TRUE(write_file(m.path("after"), "x"));
}

TEST(CrashHeal, DeadMountOfAnotherBackingDirExits3WithTheCommand) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  m.kill9_keep_mount();
  const std::string other = m.root() + "/other-backing";
  std::filesystem::create_directories(other);
  RunResult r =
      run_command({kvfs_binary(), other, m.mnt(), "-o",
                   "index_dir=" + m.root() + "/index2,ram_size=256M,log_file=" + m.log_file()});
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("umount -l " + m.mnt()), std::string::npos) << r.output;
  EXPECT_TRUE(is_mounted(m.mnt())) << "another backing dir's dead mount must be left alone";
}

TEST(CrashHeal, LiveMountIsNotTouched) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  RunResult r = run_command({kvfs_binary(), m.backing(), m.mnt(), "-o", opts(m)});
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("already a mount point"), std::string::npos) << r.output;
  ASSERT_TRUE(write_file(m.path("still"), "alive"));
}

TEST(UmountHelper, ReturnsOnceTheDaemonHasFlushedAndExited) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok("ram_size=512M"));
  std::map<std::string, std::string> want;
  for (int i = 0; i < 12; ++i)  // 192 MiB, dirty: no fsync
    want["f" + std::to_string(i)] = random_bytes(16 << 20, 100 + i);
  for (auto& [name, data] : want) ASSERT_TRUE(write_file(m.path(name), data));
  const pid_t pid = m.daemon_pid();
  const std::string admin_dir = std::filesystem::path(KVFS_ADMIN_BIN).parent_path().string();
  const std::string path_env = "PATH=" + admin_dir + ":" + std::getenv("PATH");
  RunResult r = run_command(
      {"env", path_env, std::string(KVFS_SOURCE_DIR) + "/tools/umount.fuse.kvfs", m.mnt(), "-v"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(KvfsMount::wait_exit(pid, 0)) << "the daemon was still running: " << r.output;
  EXPECT_NE(r.output.find("daemon pid " + std::to_string(pid) + " exited"), std::string::npos)
      << r.output;
  EXPECT_FALSE(is_mounted(m.mnt()));
  m.forget_unmounted();
  ASSERT_TRUE(m.mount_ok());
  EXPECT_EQ(check_all(m, want), "");
}

TEST(UmountHelper, OtherFuseTypesAndDeadMountsJustUnmount) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  m.kill9_keep_mount();
  RunResult r = run_command({std::string(KVFS_SOURCE_DIR) + "/tools/umount.fuse.kvfs", m.mnt()});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(is_mounted(m.mnt())) << r.output;
}

// vLLM's layout: <root>/<model>_<12 hex>_r<rank>/... A path that exists is
// that subtree (r1 never takes r10); one that does not is a name prefix in
// its directory; "DIR/" is that directory only.
TEST(EvictPrefix, NamePrefixAsUsersTypeIt) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  for (const char* d :
       {"model_0123456789ab_r0", "model_0123456789ab_r1", "model_0123456789ab_r10"}) {
    std::filesystem::create_directories(m.path(d));
    ASSERT_TRUE(write_file(m.path(std::string(d) + "/blk"), "data"));
  }
  ASSERT_TRUE(write_file(m.path("model_loose"), "x"));
  ASSERT_TRUE(fsync_dir(m.mnt()));
  RunResult r = run_admin({"evict", m.mnt(), "--prefix", "model_0123456789ab_r1", "--force"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("evicted 1 files"), std::string::npos) << r.output;
  EXPECT_TRUE(std::filesystem::exists(m.path("model_0123456789ab_r10/blk")));
  r = run_admin({"evict", m.mnt(), "--prefix", "model_0123456789ab_r0/", "--force"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("evicted 1 files"), std::string::npos) << r.output;
  EXPECT_TRUE(std::filesystem::exists(m.path("model_0123456789ab_r10/blk")));
  // What a user types for "this model": no such name, so a name prefix.
  r = run_admin({"evict", m.mnt(), "--prefix", "model_0123", "--force"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("evicted 1 files"), std::string::npos) << r.output;  // r10's
  // open, not stat: the kernel may answer a stat of a name it looked up
  // moments ago from its cache (invalidate=0); an open asks kvfs.
  std::string back;
  EXPECT_FALSE(read_file(m.path("model_0123456789ab_r10/blk"), &back));
  r = run_admin({"evict", m.mnt(), "--prefix", "nomatch", "--force"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("starts with 'nomatch'"), std::string::npos) << r.output;
  EXPECT_TRUE(std::filesystem::exists(m.path("model_loose")));
}

}  // namespace
}  // namespace kvfs::test
