// SPDX-License-Identifier: Apache-2.0
#include "tests/mount_fixture.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <random>
#include <set>

#include "core/backing/disk_layout.h"
#include "core/backing/mounts.h"

extern char** environ;

namespace kvfs::test {
namespace {

// Every live daemon and mount, for the watchdog in mount_main.cc.
std::mutex g_mu;
std::set<pid_t> g_pids;
std::set<std::string> g_mounts;

}  // namespace

void emergency_cleanup() {
  std::lock_guard l(g_mu);
  for (pid_t p : g_pids) ::kill(p, SIGKILL);
  for (const auto& m : g_mounts) {
    std::string cmd = "fusermount3 -u -z '" + m + "' >/dev/null 2>&1";
    if (std::system(cmd.c_str()) != 0) {
      cmd = "umount -l '" + m + "' >/dev/null 2>&1";
      // Best effort at exit: nothing is left to do if this fails too.
      [[maybe_unused]] const int rc = std::system(cmd.c_str());
    }
  }
}

const char* kvfs_binary() {
  if (const char* e = std::getenv("KVFS_BIN")) return e;
  return KVFS_BIN;
}

RunResult run_command(const std::vector<std::string>& argv) {
  RunResult r;
  char tmpl[] = "/tmp/kvfs-cmd-XXXXXX";
  int fd = ::mkstemp(tmpl);
  if (fd < 0) return r;
  ::unlink(tmpl);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fd, 1);
  posix_spawn_file_actions_adddup2(&fa, fd, 2);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  std::vector<char*> av;
  for (auto& a : argv) av.push_back(const_cast<char*>(a.c_str()));
  av.push_back(nullptr);
  pid_t pid;
  if (posix_spawnp(&pid, av[0], &fa, nullptr, av.data(), environ) == 0) {
    int st = 0;
    while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
  posix_spawn_file_actions_destroy(&fa);
  ::lseek(fd, 0, SEEK_SET);
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) r.output.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return r;
}

bool KvfsMount::wait_exit(pid_t pid, int timeout_ms) {
  int pfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pfd < 0) return errno == ESRCH;
  pollfd p{pfd, POLLIN, 0};
  int r = ::poll(&p, 1, timeout_ms);
  ::close(pfd);
  return r == 1;
}

KvfsMount::KvfsMount() {
  char tmpl[] = "/tmp/kvfs-test-XXXXXX";
  root_ = ::mkdtemp(tmpl);
  backing_ = root_ + "/backing";
  mnt_ = root_ + "/mnt";
  index_ = root_ + "/index";
  std::filesystem::create_directories(backing_);
  std::filesystem::create_directories(mnt_);
}

KvfsMount::~KvfsMount() {
  if (mounted()) unmount();
  // A dead mount left by kill9_keep_mount() and not cleared by the test.
  if (is_mounted(mnt_)) (void)run_command({"umount", "-l", mnt_});
  // A failed test shows what the daemon logged (all its mounts in this tree);
  // KVFS_TEST_SHOW_LOG=1 shows it for passing tests too.
  if (::testing::Test::HasFailure() || std::getenv("KVFS_TEST_SHOW_LOG")) {
    const std::string tail = log_tail(16384);
    if (!tail.empty())
      std::fprintf(stderr, "---- end of the kvfs log (%s) ----\n%s---- end ----\n",
                   log_file().c_str(), tail.c_str());
  }
  std::error_code ec;
  std::filesystem::remove_all(root_, ec);
  // Daemons started without log_file log under /var/log/kvfs (there is no
  // syslog socket here): their files are named after mount points in root_.
  std::string prefix = root_.substr(1);
  for (char& c : prefix)
    if (c == '/') c = '-';
  for (const auto& e : std::filesystem::directory_iterator("/var/log/kvfs", ec))
    if (e.path().filename().string().rfind(prefix + "-", 0) == 0)
      std::filesystem::remove(e.path(), ec);
}

std::string check_all(const KvfsMount& m, const std::map<std::string, std::string>& want) {
  for (auto& [name, data] : want) {
    std::string got;
    if (!read_file(m.path(name), &got)) return name + " is missing";
    if (got != data) return name + " has other bytes (" + std::to_string(got.size()) + " B)";
  }
  return "";
}

RunResult run_admin(std::vector<std::string> args) {
  args.insert(args.begin(), KVFS_ADMIN_BIN);
  return run_command(args);
}

RunResult KvfsMount::mount(const std::string& opts) {
  std::string o = "index_dir=" + index_;
  if (opts.find("ram_size=") == std::string::npos) o += ",ram_size=256M";
  if (opts.find("log_file=") == std::string::npos) o += ",log_file=" + log_file();
  if (!opts.empty()) o += "," + opts;
  RunResult r = run_command({kvfs_binary(), backing_, mnt_, "-o", o});
  if (r.exit_code == 0) {
    // The lock of the node the options name (node_id=), else the dir's.
    std::string lock_path = layout::shared_lock_path(backing_);
    if (const size_t at = o.rfind("node_id="); at != std::string::npos) {
      const size_t from = at + 8;
      lock_path = layout::lock_path(backing_, o.substr(from, o.find(',', from) - from));
    }
    std::ifstream lock(lock_path);
    lock >> pid_;
    std::lock_guard l(g_mu);
    g_pids.insert(pid_);
    g_mounts.insert(mnt_);
  }
  return r;
}

bool KvfsMount::mount_ok(const std::string& opts) {
  RunResult r = mount(opts);
  EXPECT_EQ(r.exit_code, 0) << "kvfs failed to mount: " << r.output;
  return r.exit_code == 0;
}

void KvfsMount::unmount() {
  if (!mounted()) return;
  RunResult r = run_command({"fusermount3", "-u", mnt_});
  EXPECT_EQ(r.exit_code, 0) << "fusermount3 -u: " << r.output;
  if (r.exit_code != 0) (void)run_command({"fusermount3", "-u", "-z", mnt_});
  EXPECT_TRUE(wait_exit(pid_, 60000)) << "kvfs daemon " << pid_ << " did not exit after umount";
  std::lock_guard l(g_mu);
  g_pids.erase(pid_);
  g_mounts.erase(mnt_);
  pid_ = -1;
}

std::string KvfsMount::log_tail(size_t max_bytes) const {
  std::ifstream in(log_file(), std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (all.size() <= max_bytes) return all;
  std::string t = all.substr(all.size() - max_bytes);
  const size_t nl = t.find('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

void KvfsMount::kill9() {
  if (!mounted()) return;
  ::kill(pid_, SIGKILL);
  EXPECT_TRUE(wait_exit(pid_, 30000));
  (void)run_command({"fusermount3", "-u", "-z", mnt_});
  std::lock_guard l(g_mu);
  g_pids.erase(pid_);
  g_mounts.erase(mnt_);
  pid_ = -1;
}

void KvfsMount::kill9_keep_mount() {
  if (!mounted()) return;
  ::kill(pid_, SIGKILL);
  EXPECT_TRUE(wait_exit(pid_, 30000));
  std::lock_guard l(g_mu);
  g_pids.erase(pid_);  // g_mounts keeps mnt_ for the watchdog
  pid_ = -1;
}

void KvfsMount::adopt() {
  std::ifstream lock(layout::shared_lock_path(backing_));
  lock >> pid_;
  std::lock_guard l(g_mu);
  g_pids.insert(pid_);
  g_mounts.insert(mnt_);
}

bool is_mounted(const std::string& path) {
  for (const MountEntry& m : read_mounts())
    if (m.target == path) return true;
  return false;
}

pid_t KvfsMount::forget_unmounted() {
  const pid_t p = pid_;
  std::lock_guard l(g_mu);
  g_mounts.erase(mnt_);  // the pid stays with the watchdog until it exits
  pid_ = -1;
  return p;
}

std::string random_bytes(size_t n, uint64_t seed) {
  std::string s(n, '\0');
  std::mt19937_64 rng(seed);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = rng();
    std::memcpy(&s[i], &v, 8);
  }
  for (; i < n; ++i) s[i] = static_cast<char>(rng());
  return s;
}

bool write_file(const std::string& path, const std::string& data, int extra_flags) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | extra_flags, 0644);
  if (fd < 0) return false;
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n <= 0) {
      ::close(fd);
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return ::close(fd) == 0;
}

bool read_file(const std::string& path, std::string* out, int extra_flags) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | extra_flags);
  if (fd < 0) return false;
  out->clear();
  char buf[1 << 16];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) out->append(buf, static_cast<size_t>(n));
  ::close(fd);
  return n == 0;
}

bool fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok;
}

AlignedBuf::AlignedBuf(size_t n) : data(nullptr), size(n) {
  if (posix_memalign(reinterpret_cast<void**>(&data), 4096, n ? n : 4096) != 0) data = nullptr;
}
AlignedBuf::~AlignedBuf() {
  std::free(data);
}

std::string read_direct(const std::string& path, int* err) {
  *err = 0;
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (fd < 0) {
    *err = errno;
    return "";
  }
  AlignedBuf buf(1 << 20);
  std::string out;
  for (;;) {
    const ssize_t n = ::read(fd, buf.data, buf.size);
    if (n < 0) {
      *err = errno;
      break;
    }
    if (n == 0) break;
    out.append(buf.data, size_t(n));
  }
  ::close(fd);
  return out;
}

}  // namespace kvfs::test
