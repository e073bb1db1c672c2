// SPDX-License-Identifier: Apache-2.0
// nfsemu: a FUSE passthrough over a local directory that adds the costs an
// NFS/pNFS client sees, so that kvfs (whose backing dir is NFS in production)
// and the plain-directory baselines can be benchmarked against network-like
// storage on one machine.
//
//   nfsemu SOURCE_DIR MOUNTPOINT [--preset NAME] [-o OPTIONS] [-f]
//
// Returns once mounted unless -f; `fusermount3 -u MOUNTPOINT` stops it.
//
// What it models. Every request is done on SOURCE_DIR, then the worker
// sleeps its modelled cost, then replies; concurrent requests overlap their
// waits like a client's outstanding RPCs (64 worker threads, all kept: a
// request never waits for a thread). A metadata request's cost adds to its
// local time (tiny, but for fsync: a server's COMMIT also waits for its
// disk); a data request's transfer starts when it arrives, so the local I/O
// hides in it unless the local disk is slower than the modelled link:
//   - one round trip (rtt_us) per metadata RPC: lookup, getattr, setattr,
//     create, mkdir, rename, unlink, rmdir, link, symlink, readlink, statfs,
//     fallocate (NFSv4.2 ALLOCATE), fsync (COMMIT), readdir (per 32 KiB of
//     entries), and open (close-to-open: the client revalidates attributes on
//     every open); layout_rtt more on open/create/fsync for pNFS's LAYOUTGET
//     and LAYOUTCOMMIT to the metadata server; close_rtt on close (FLUSH:
//     NFSv4 CLOSE; 0 by default, as delegations make it local);
//   - no cost for access (answered by the kernel: an NFS client's access
//     cache; existence is the lookup's), directory fsync (NFS
//     directory operations are stable when they reply), opendir, release,
//     forget;
//   - per READ/WRITE request (at most 1 MiB: max_write 1 MiB, reads of up to
//     1 MiB, readahead 1 MiB, like rsize=wsize=1M): data_us plus its transfer
//     time through a bandwidth cap of bw_mbps MB/s (10^6 bytes/s, not
//     megabits). The cap is a token bucket shared by all threads, one for
//     reads and one for writes by default (a full-duplex link), one for both
//     with bw_shared=1 (e.g. a server's disks as the bottleneck);
//   - jitter: every modelled delay times a uniform factor in [1-j, 1+j];
//   - the attribute cache: entry, negative-entry and attribute timeouts of
//     attr_timeout seconds (like actimeo=; NFS's own defaults are 3-60 s).
// Where FUSE costs more round trips than NFS: an O_CREAT open of a name not
// in the dentry cache is a LOOKUP then a CREATE, where an NFSv4 client sends
// one OPEN (so create+rename is 4 round trips here, 3 on NFSv4).
// Buffered writes are write-through (each 1 MiB request waits for its reply),
// where an NFS client writes back asynchronously: writeback=1 turns on FUSE's
// writeback cache for that, at the price of FUSE's own semantics of it.
// Stable storage: an NFS client's O_DIRECT write returns only once its bytes
// are on the server's stable storage (FILE_SYNC writes, or UNSTABLE ones and
// a COMMIT; Linux fs/nfs/direct.c). FUSE does not show where a write call
// ends, so a handle opened O_DIRECT that wrote pays one COMMIT at close (the
// source fd's fdatasync plus a round trip, plus layout_rtt on pNFS), unless
// an fsync paid it; NFS pays one per write call, so a client that writes a
// file in several direct calls pays less here than on NFS (direct_commit=0:
// none, the model before 2026-12-05). Buffered writes commit nothing at
// close: an NFSv4 client holding a write delegation only starts their
// writeback there.
//
// Presets (overridable with -o rtt_us=,data_us=,bw_mbps=,jitter=,...). They
// are typical published ranges, not one measured system: RPC round trips as
// nfsiostat/mountstats report them for kernel NFS on a LAN, link rates less
// protocol overhead, vendors' and NFS/RDMA papers' single-client figures,
// cloud vendors' documented latencies. `nfsemu --help` prints the values:
//   none       no cost: the emulator's own overhead against the bare dir
//   lan-nfs    NFSv4.1/4.2 over 10/25 GbE: metadata 0.4 ms (0.3-0.5 ms),
//              0.5 ms per data request, 1.1 GB/s
//   pnfs-rdma  pNFS with RDMA data servers: metadata 0.2 ms to the MDS plus
//              one layout round trip, 75 us per data request (0.05-0.1 ms),
//              6 GB/s ("several GB/s" on 100 Gb/s)
//   cloud-nfs  a managed cloud NFS service: "low single-digit ms": 1.5 ms
//              metadata, 2 ms per data request, 0.5 GB/s
//
// O_DIRECT opens pass through; a source fs that refuses O_DIRECT gets the
// open without it, as NFS accepts O_DIRECT. flock and POSIX locks are left to
// the kernel's local emulation (kvfs's kvfs.lock works). Every syscall error
// goes back as its errno. No default_permissions: the source fs checks the
// daemon's credentials, as an NFS server checks the client's (with
// default_permissions, FUSE would revalidate a directory's attributes with a
// GETATTR after every change in it, which NFS's replies make unnecessary).
//
// Counters: ops by kind, bytes, round trips and modelled wait, as one JSON
// line written to -o stats=PATH on SIGUSR1 and at unmount (also printed to
// stderr at exit with -f). -o pidfile=PATH writes the daemon's pid before
// nfsemu returns. Other -o options go to FUSE (e.g. allow_other).
//
// FUSE_USE_VERSION is 312 (nfsemu.h) for the reason bench/nullfs.cc gives:
// below it libfuse 3.14 maps fuse_session_loop_mt() to the 3.2 call, which
// would start a thread per request.
#include "bench/nfsemu.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

int usage(FILE* out) {
  std::fprintf(out,
               "usage: nfsemu SOURCE_DIR MOUNTPOINT [--preset NAME] [-o OPTIONS] [-f]\n"
               "\n"
               "A FUSE passthrough of SOURCE_DIR on MOUNTPOINT with NFS-like costs.\n"
               "Presets (default none):\n%s\n"
               "Options (-o, comma-separated; they override the preset):\n"
               "  rtt_us=US       one metadata round trip (lookup, getattr, setattr, create,\n"
               "                  mkdir, rename, unlink, rmdir, link, symlink, readlink,\n"
               "                  statfs, fallocate, fsync, readdir per 32 KiB, open)\n"
               "  data_us=US      fixed latency of each READ/WRITE request (<= 1 MiB)\n"
               "  bw_mbps=MBPS    data bandwidth cap in MB/s (10^6 B/s); 0 = none\n"
               "  bw_shared=0|1   one bucket for reads and writes (default 0: one each)\n"
               "  jitter=F        uniform +-F on every modelled delay (0..1)\n"
               "  attr_timeout=S  entry/attribute cache timeout, like actimeo (default 1)\n"
               "  layout_rtt=N    extra round trips on open/create/fsync (pNFS layouts)\n"
               "  close_rtt=N     round trips on close (NFSv4 CLOSE; default 0)\n"
               "  direct_commit=0|1  1 (default): a handle opened O_DIRECT that wrote pays a\n"
               "                  COMMIT at close (fdatasync + 1 + layout_rtt round trips)\n"
               "  fallocate=0|1   0: fallocate fails EOPNOTSUPP (no NFSv4.2 ALLOCATE)\n"
               "  writeback=0|1   FUSE writeback cache: asynchronous buffered writes\n"
               "  threads=N       worker threads (default 64)\n"
               "  stats=PATH      counters as one JSON line, on SIGUSR1 and at unmount\n"
               "  pidfile=PATH    the daemon's pid\n"
               "  anything else goes to FUSE (e.g. allow_other)\n",
               nfsemu::presets_help().c_str());
  return out == stdout ? 0 : 1;
}

std::string absolute(const std::string& p) {
  if (p.empty() || p[0] == '/') return p;
  char cwd[PATH_MAX];
  return getcwd(cwd, sizeof(cwd)) ? std::string(cwd) + "/" + p : p;
}

bool write_pidfile(const std::string& path) {
  if (path.empty()) return true;
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return false;
  std::fprintf(f, "%d\n", static_cast<int>(getpid()));
  return std::fclose(f) == 0;
}

// fuse_daemonize() with the pid file written before the parent returns, so
// that a caller can wait for the daemon's exit after unmounting it.
bool daemonize(bool foreground, const std::string& pidfile) {
  if (foreground) return chdir("/") == 0 && write_pidfile(pidfile);
  int p[2];
  if (pipe(p) != 0) return false;
  const pid_t pid = fork();
  if (pid < 0) return false;
  if (pid > 0) {
    close(p[1]);
    char c = 0;
    _exit(read(p[0], &c, 1) == 1 && c == 1 ? 0 : 1);
  }
  close(p[0]);
  if (setsid() < 0 || chdir("/") != 0) return false;
  const int null = open("/dev/null", O_RDWR);
  if (null >= 0) {
    dup2(null, 0);
    dup2(null, 1);
    dup2(null, 2);
    if (null > 2) close(null);
  }
  const char ok = write_pidfile(pidfile) ? 1 : 0;
  (void)!write(p[1], &ok, 1);
  close(p[1]);
  return ok == 1;
}

// Every inode the kernel knows holds an O_PATH fd here until its FORGET,
// which comes only when the kernel drops the inode (memory pressure), and
// every open handle one more: a burst of tens of thousands of creates holds
// as many fds, where an NFS server would hold none. So the fd limit goes as
// high as the kernel allows (fs.nr_open, where the hard limit may be raised),
// else to the hard limit; past it the client's calls fail with EMFILE.
void raise_fd_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  rlim_t want = rl.rlim_max;
  if (FILE* f = std::fopen("/proc/sys/fs/nr_open", "r")) {
    unsigned long n = 0;
    if (std::fscanf(f, "%lu", &n) == 1 && n > want) want = n;
    std::fclose(f);
  }
  rlimit up{want, want};
  if (setrlimit(RLIMIT_NOFILE, &up) != 0) {
    up = {rl.rlim_max, rl.rlim_max};
    (void)setrlimit(RLIMIT_NOFILE, &up);
  }
}
}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> pos;
  std::string opts, preset = "none";
  bool foreground = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-f") {
      foreground = true;
    } else if (a == "-o" && i + 1 < argc) {
      opts += std::string(",") + argv[++i];
    } else if (a == "--preset" && i + 1 < argc) {
      preset = argv[++i];
    } else if (a == "-h" || a == "--help") {
      return usage(stdout);
    } else if (!a.empty() && a[0] == '-') {
      return usage(stderr);
    } else {
      pos.push_back(a);
    }
  }
  if (pos.size() != 2) return usage(stderr);
  raise_fd_limit();
  nfsemu::Config cfg;
  if (!nfsemu::apply_preset(preset, &cfg)) {
    std::fprintf(stderr, "nfsemu: unknown preset '%s'\n", preset.c_str());
    return usage(stderr);
  }
  std::string err;
  const std::string fuse_opts = nfsemu::take_options(opts, &cfg, &err);
  if (!err.empty()) {
    std::fprintf(stderr, "nfsemu: %s\n", err.c_str());
    return 1;
  }
  cfg.stats_path = absolute(cfg.stats_path);
  cfg.pidfile = absolute(cfg.pidfile);
  nfsemu::model_init(cfg);
  if (!nfsemu::ops_init(pos[0].c_str())) {
    std::fprintf(stderr, "nfsemu: %s: %s\n", pos[0].c_str(), std::strerror(errno));
    return 1;
  }

  // SIGUSR1 is taken by one thread with sigwait(): blocked before any other
  // thread exists, so that the FUSE workers inherit the mask.
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &usr1, nullptr);

  const fuse_lowlevel_ops ops = nfsemu::ops_table();
  std::string o = "fsname=nfsemu,subtype=nfsemu" + fuse_opts;
  std::vector<std::string> av_s = {"nfsemu", "-o", o};
  std::vector<char*> av;
  for (auto& s : av_s) av.push_back(s.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(av.size()), av.data());
  fuse_session* se = fuse_session_new(&args, &ops, sizeof(ops), nullptr);
  if (!se) return 1;
  if (fuse_set_signal_handlers(se) != 0) return 1;
  if (fuse_session_mount(se, pos[1].c_str()) != 0) {
    std::fprintf(stderr, "nfsemu: cannot mount on %s\n", pos[1].c_str());
    fuse_session_destroy(se);
    fuse_opt_free_args(&args);
    return 3;
  }
  if (!daemonize(foreground, cfg.pidfile)) {
    fuse_session_unmount(se);
    fuse_session_destroy(se);
    fuse_opt_free_args(&args);
    return 1;
  }

  static std::atomic<bool> stopping{false};
  std::thread stats([&usr1] {
    int sig = 0;
    while (sigwait(&usr1, &sig) == 0 && !stopping.load()) nfsemu::write_stats();
  });
  fuse_loop_config* lc = fuse_loop_cfg_create();
  fuse_loop_cfg_set_max_threads(lc, cfg.threads);
  fuse_loop_cfg_set_idle_threads(lc, cfg.threads);
  const int rc = fuse_session_loop_mt(se, lc);
  fuse_loop_cfg_destroy(lc);
  fuse_session_unmount(se);
  fuse_remove_signal_handlers(se);
  fuse_session_destroy(se);
  fuse_opt_free_args(&args);
  nfsemu::ops_shutdown();
  stopping = true;
  pthread_kill(stats.native_handle(), SIGUSR1);
  stats.join();
  nfsemu::write_stats();
  std::fprintf(stderr, "nfsemu: %s\n", nfsemu::stats_json().c_str());
  return rc == 0 ? 0 : 1;
}
