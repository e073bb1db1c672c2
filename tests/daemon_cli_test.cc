// SPDX-License-Identifier: Apache-2.0
// The `kvfs` command line: exit codes and messages for bad input, the
// backing-dir lock, fstab words, --help/--version, and SIGTERM.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/mount_fixture.h"

namespace kvfs::test {
namespace {

namespace fs = std::filesystem;

int lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  if (!s.empty() && s.back() != '\n') ++n;
  return n;
}

RunResult kvfs_run(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {kvfs_binary()};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv);
}

TEST(DaemonCli, UnknownOptionIsUsageErrorAndMountsNothing) {
  KvfsMount m;
  RunResult r = m.mount("bogus_opt=1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("bogus_opt"), std::string::npos) << r.output;
  EXPECT_EQ(lines(r.output), 1) << "want a one-line message: " << r.output;
  EXPECT_FALSE(is_mounted(m.mnt()));
  EXPECT_FALSE(m.mounted());

  r = kvfs_run({"--frobnicate", m.backing(), m.mnt()});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--frobnicate"), std::string::npos) << r.output;
  EXPECT_EQ(lines(r.output), 1) << r.output;
  EXPECT_FALSE(is_mounted(m.mnt()));

  r = kvfs_run({m.backing()});
  EXPECT_EQ(r.exit_code, 1) << "a missing mount point: " << r.output;
  EXPECT_FALSE(is_mounted(m.mnt()));
}

TEST(DaemonCli, InvalidSizeIsUsageError) {
  KvfsMount m;
  for (const char* bad : {"ram_size=abc", "ram_size=", "segment_size=12Q", "ram_size=-5M"}) {
    RunResult r = m.mount(bad);
    EXPECT_EQ(r.exit_code, 1) << bad << ": " << r.output;
    const std::string key = std::string(bad).substr(0, std::string(bad).find('='));
    EXPECT_NE(r.output.find(key), std::string::npos) << bad << ": " << r.output;
    EXPECT_EQ(lines(r.output), 1) << bad << ": " << r.output;
    EXPECT_FALSE(is_mounted(m.mnt())) << bad;
  }
  RunResult r = m.mount("threads=lots");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_FALSE(is_mounted(m.mnt()));
}

TEST(DaemonCli, LogFileMustBeAbsoluteAndWritable) {
  KvfsMount m;
  RunResult r = m.mount("log_file=relative.log");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("log_file"), std::string::npos) << r.output;
  EXPECT_EQ(lines(r.output), 1) << r.output;
  EXPECT_FALSE(is_mounted(m.mnt()));
  // Below a regular file: no directory can be made there.
  const std::string plain = m.root() + "/plain";
  ASSERT_TRUE(write_file(plain, "x"));
  const std::string unopenable = plain + "/kvfs.log";
  r = m.mount("log_file=" + unopenable);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(unopenable), std::string::npos) << r.output;
  EXPECT_FALSE(is_mounted(m.mnt()));
  if (r.exit_code == 0) m.unmount();
  // A good one receives the daemon's lines.
  const std::string log = m.root() + "/mine.log";
  ASSERT_TRUE(m.mount_ok("log_file=" + log));
  m.unmount();
  std::string text;
  ASSERT_TRUE(read_file(log, &text));
  EXPECT_NE(text.find("mounted"), std::string::npos) << text;
  EXPECT_NE(text.find("stopped"), std::string::npos) << text;
}

TEST(DaemonCli, MissingBackingDirFailsClearly) {
  KvfsMount m;
  const std::string missing = m.root() + "/no/such/backing";
  m.set_backing(missing);
  RunResult r = m.mount();
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(missing), std::string::npos) << "name the directory: " << r.output;
  EXPECT_TRUE(r.output.find("not exist") != std::string::npos ||
              r.output.find("No such") != std::string::npos)
      << r.output;
  EXPECT_FALSE(is_mounted(m.mnt()));
  EXPECT_FALSE(fs::exists(missing)) << "kvfs created the missing backing dir";
}

TEST(DaemonCli, BackingDirNotWritableFails) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to switch to the nobody user";
  // root ignores permission bits: run the daemon as nobody (65534).
  const std::vector<std::string> as_nobody = {"setpriv", "--reuid=65534", "--regid=65534",
                                              "--clear-groups"};
  auto run_as_nobody = [&](std::vector<std::string> cmd) {
    std::vector<std::string> argv = as_nobody;
    argv.insert(argv.end(), cmd.begin(), cmd.end());
    return run_command(argv);
  };
  if (run_as_nobody({"true"}).exit_code != 0)
    GTEST_SKIP() << "setpriv cannot switch to uid 65534 here";
  KvfsMount m;
  // The temp tree is 0700 (mkdtemp): let nobody reach it, but not write the backing dir.
  ASSERT_EQ(::chmod(m.root().c_str(), 0755), 0);
  ASSERT_EQ(::chmod(m.backing().c_str(), 0555), 0);
  ASSERT_EQ(::chmod(m.mnt().c_str(), 0777), 0);
  if (run_as_nobody({"test", "-x", kvfs_binary()}).exit_code != 0)
    GTEST_SKIP() << "the user nobody cannot execute " << kvfs_binary();
  ASSERT_EQ(run_as_nobody({"test", "-d", m.backing()}).exit_code, 0)
      << "nobody cannot see the backing dir; the test would not test writability";
  ASSERT_NE(run_as_nobody({"test", "-w", m.backing()}).exit_code, 0);

  RunResult r = run_as_nobody({kvfs_binary(), m.backing(), m.mnt(), "-o",
                               "index_dir=" + m.root() + "/nobody_index,ram_size=64M"});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(m.backing()), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("writable"), std::string::npos) << r.output;
  EXPECT_FALSE(is_mounted(m.mnt()));
  ::chmod(m.backing().c_str(), 0755);
}

TEST(DaemonCli, SecondDaemonOnSameBackingIsRefused) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  ASSERT_TRUE(write_file(m.path("before"), "first mount data"));
  const std::string mnt2 = m.root() + "/mnt2";
  fs::create_directories(mnt2);
  const pid_t pid = m.daemon_pid();

  // Its own index dir: only the backing dir's lock can stop it.
  RunResult r = kvfs_run({m.backing(), mnt2, "-o", "index_dir=" + m.root() + "/index2"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("already in use"), std::string::npos) << r.output;
  EXPECT_FALSE(is_mounted(mnt2));
  if (r.exit_code == 0) (void)run_command({"fusermount3", "-u", mnt2});

  // The same index dir as well.
  r = kvfs_run({m.backing(), mnt2, "-o", "index_dir=" + m.index_dir()});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("already in use"), std::string::npos) << r.output;
  EXPECT_FALSE(is_mounted(mnt2));
  if (r.exit_code == 0) (void)run_command({"fusermount3", "-u", mnt2});

  // The first mount is untouched.
  EXPECT_EQ(::kill(pid, 0), 0) << "the first daemon died";
  EXPECT_TRUE(is_mounted(m.mnt()));
  std::string back;
  ASSERT_TRUE(read_file(m.path("before"), &back));
  EXPECT_EQ(back, "first mount data");
  const std::string more = random_bytes(3 << 20, 9);
  ASSERT_TRUE(write_file(m.path("after"), more));
  m.unmount();
  ASSERT_TRUE(m.mount_ok());
  ASSERT_TRUE(read_file(m.path("after"), &back));
  EXPECT_TRUE(back == more);
  ASSERT_TRUE(read_file(m.path("before"), &back));
  EXPECT_EQ(back, "first mount data");
}

TEST(DaemonCli, FstabWordsAreAccepted) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok("noauto,nofail,_netdev,x-systemd.requires=foo,defaults"));
  EXPECT_TRUE(is_mounted(m.mnt()));
  const std::string data = random_bytes(100000, 3);
  ASSERT_TRUE(write_file(m.path("x"), data));
  std::string back;
  ASSERT_TRUE(read_file(m.path("x"), &back));
  EXPECT_TRUE(back == data);
}

TEST(DaemonCli, HelpAndVersion) {
  RunResult r = kvfs_run({"--help"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ram_size"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("usage"), std::string::npos) << r.output;
  r = kvfs_run({"--version"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("kvfs"), std::string::npos) << r.output;
  EXPECT_EQ(lines(r.output), 1) << r.output;
}

// SIGTERM: the daemon flushes everything dirty, unmounts and exits 0.
TEST(DaemonCli, SigtermFlushesAndExitsZero) {
  // Become the daemon's reaper (it double-forks away from us) so that its
  // exit status can be read.
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  const pid_t pid = m.daemon_pid();
  std::vector<std::string> data;
  for (int i = 0; i < 20; ++i) {
    data.push_back(random_bytes(i == 0 ? 40 << 20 : (i * 131071) % (2 << 20), 100 + i));
    ASSERT_TRUE(write_file(m.path("f" + std::to_string(i)), data.back()));
  }
  ASSERT_EQ(::mkdir(m.path("dir").c_str(), 0755), 0);
  ASSERT_EQ(::symlink("f1", m.path("dir/link").c_str()), 0);

  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  ASSERT_TRUE(KvfsMount::wait_exit(pid, 60000)) << "the daemon did not exit on SIGTERM";
  EXPECT_FALSE(is_mounted(m.mnt())) << "SIGTERM left the mount behind";
  m.kill9();  // the fixture's bookkeeping only: the process is already gone
  int st = 0;
  pid_t w = ::waitpid(pid, &st, 0);
  ::prctl(PR_SET_CHILD_SUBREAPER, 0);
  ASSERT_EQ(w, pid) << "could not reap the daemon: " << std::strerror(errno);
  EXPECT_TRUE(WIFEXITED(st)) << "killed by signal " << (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  EXPECT_EQ(WEXITSTATUS(st), 0) << "exit status after SIGTERM";

  ASSERT_TRUE(m.mount_ok());
  for (int i = 0; i < 20; ++i) {
    std::string back;
    ASSERT_TRUE(read_file(m.path("f" + std::to_string(i)), &back)) << i;
    EXPECT_TRUE(back == data[i]) << "f" << i << " after SIGTERM and remount";
  }
  char buf[64];
  ssize_t n = ::readlink(m.path("dir/link").c_str(), buf, sizeof(buf));
  EXPECT_EQ(std::string(buf, n > 0 ? static_cast<size_t>(n) : 0), "f1");
}

}  // namespace
}  // namespace kvfs::test
