// SPDX-License-Identifier: Apache-2.0
// Clearing the dead mount a killed kvfs left (see dead_mount.h).
#include "fs/dead_mount.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/backing/backing_nodes.h"
#include "core/backing/mounts.h"
#include "core/config/config.h"

extern char** environ;

namespace kvfs {
namespace {

// Runs argv (looked up in PATH), its output going to ours; its exit status
// or -1.
int run_quietly(const std::vector<std::string>& argv) {
  std::vector<char*> av;
  for (const auto& a : argv) av.push_back(const_cast<char*>(a.c_str()));
  av.push_back(nullptr);
  pid_t pid;
  if (posix_spawnp(&pid, av[0], nullptr, nullptr, av.data(), environ) != 0) return -1;
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

bool conn_dead_errno(int e) {
  return e == ENOTCONN || e == ECONNABORTED;
}

// A FUSE mount whose daemon is gone answers ENOTCONN. stat may be served
// from the kernel's attribute cache for a while; opening always asks the
// daemon, so it is tried too, where a hung daemon cannot block us (`probe_open`
// only once no daemon holds the backing dir).
bool mount_dead(const std::string& mnt, bool probe_open) {
  struct stat st;
  if (::stat(mnt.c_str(), &st) != 0) return conn_dead_errno(errno);
  if (!probe_open) return false;
  const int fd = ::open(mnt.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::close(fd);
    return false;
  }
  return conn_dead_errno(errno);
}

// The process is on its way out: a zombie, or a SIGKILL pending (the
// moments right after `kill -9`, while the kernel tears it down).
bool dying(pid_t pid) {
  std::FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/status").c_str(), "r");
  if (!f) return true;
  char line[256];
  bool d = false;
  while (!d && std::fgets(line, sizeof(line), f)) {
    if (std::strncmp(line, "State:", 6) == 0) d = std::strpbrk(line + 6, "ZX") != nullptr;
    if (std::strncmp(line, "SigPnd:", 7) == 0 || std::strncmp(line, "ShdPnd:", 7) == 0)
      d = (std::strtoull(line + 7, nullptr, 16) & (1ull << (SIGKILL - 1))) != 0;
  }
  std::fclose(f);
  return d;
}

// Waits (pidfd, no polling loop) up to timeout_ms for pid to exit.
bool wait_gone(pid_t pid, int timeout_ms) {
  const int pfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pfd < 0) return errno == ESRCH;
  pollfd p{pfd, POLLIN, 0};
  const int r = ::poll(&p, 1, timeout_ms);
  ::close(pfd);
  return r == 1;
}

// The daemon that served `mnt` over `backing` per the lock files there
// (kvfs.lock, or a node's kvfs.<node>.lock): its pid ("" unknown) and
// whether it still lives and holds its lock.
struct LockOwner {
  std::string pid;
  bool alive = false;
};

LockOwner lock_owner(const std::string& backing, const std::string& mnt) {
  LockOwner o;
  const std::string host = host_name();
  for (const std::string& path : lock_files(backing)) {
    const LockProbe p = probe_lock_file(path);
    if (p.mount != mnt || (!p.host.empty() && p.host != host) || p.pid.empty()) continue;
    o.pid = p.pid;
    // Held and its pid there: alive (or stuck in the kernel, which is the same
    // as alive for us: it still owns the dir). A free lock or a gone pid:
    // the daemon died (a reused pid does not hold the lock).
    o.alive = p.held && ::kill(std::atoi(p.pid.c_str()), 0) == 0;
    if (o.alive) break;
  }
  return o;
}

}  // namespace

bool clear_dead_mount(const std::string& backing, const std::string& mnt, std::string* cleared) {
  auto refuse = [](const std::string& m) {
    std::fprintf(stderr, "kvfs: %s\n", m.c_str());
    return false;
  };
  const std::string clear_cmd = ::geteuid() == 0 ? "umount -l " + mnt : "fusermount3 -u -z " + mnt;
  for (int round = 0; round < 8; ++round) {  // dead mounts may be stacked
    const MountEntry* top = nullptr;
    const std::vector<MountEntry> mounts = read_mounts();
    for (const MountEntry& m : mounts)
      if (m.target == mnt) top = &m;  // the last one is the one on top
    if (!top) return true;
    const bool ours = top->fstype == "fuse.kvfs" && top->source == backing;
    if (!ours) {
      if (top->fstype.rfind("fuse", 0) == 0 && mount_dead(mnt, false))
        return refuse(mnt + " holds a dead mount (" + top->fstype + " " + top->source +
                      ": its daemon is gone), not one of " + backing + "; clear it with `" +
                      clear_cmd + "`, then mount again");
      return true;
    }
    LockOwner owner = lock_owner(backing, mnt);
    // `kill -9` and a mount right after it: give the kernel the moment it
    // needs to finish the daemon off.
    if (owner.alive && dying(std::atoi(owner.pid.c_str())) &&
        wait_gone(std::atoi(owner.pid.c_str()), 10000))
      owner = lock_owner(backing, mnt);
    if (owner.alive) {
      if (!mount_dead(mnt, false)) return true;  // live: check_paths says so
      return refuse("the kvfs at " + mnt + " over " + backing +
                    " does not answer, but its daemon " + "pid " + owner.pid +
                    " still holds the backing dir: wait for it to exit (or " + "`kill " +
                    owner.pid + "`), then mount again");
    }
    if (!mount_dead(mnt, true)) return true;
    *cleared = "the kvfs at " + mnt + " over " + backing + " died (its daemon pid " +
               (owner.pid.empty() ? std::string("?") : owner.pid) +
               " is gone); clearing its dead mount";
    std::fprintf(stderr, "kvfs: %s\n", cleared->c_str());
    if (::geteuid() == 0) {
      if (::umount2(mnt.c_str(), MNT_DETACH) != 0 && errno != EINVAL)
        return refuse("cannot unmount the dead mount at " + mnt + ": " + std::strerror(errno));
    } else if (run_quietly({"fusermount3", "-u", "-z", mnt}) != 0) {
      return refuse("cannot unmount the dead mount at " + mnt + " (fusermount3 -u -z " + mnt +
                    " failed)");
    }
  }
  return refuse(mnt + " still has mounts on it after clearing 8 dead ones; see `findmnt " + mnt +
                "`");
}

}  // namespace kvfs
