// SPDX-License-Identifier: Apache-2.0
// kvfs: the daemon. Parses options, opens the store, mounts, serves, and on
// umount or SIGTERM/SIGINT flushes every dirty file before it exits.
//
// Like other FUSE filesystems it returns once the mount is ready: the parent
// waits on a pipe for the child to report "mounted" or the one-line reason it
// could not, so a bad option or a busy backing dir fails the command itself.
//
// Exit status: 0 mounted (or clean exit in the foreground), 1 bad usage or
// options, 2 the backing dir or index cannot be used, 3 the mount failed.
#include <fcntl.h>
#include <malloc.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/sinks/syslog_sink.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/backing/disk_layout.h"
#include "core/backing/mounts.h"
#include "core/config/config.h"
#include "core/util/log.h"
#include "fs/dead_mount.h"
#include "fs/fuse_ops.h"
#include "fs/metrics_server.h"
#include "fs/notifier.h"
#include "fs/options.h"

using namespace kvfs;

#if defined(__SANITIZE_ADDRESS__)
#define KVFS_LEAK_CHECKS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KVFS_LEAK_CHECKS 1
#endif
#endif
#ifndef KVFS_LEAK_CHECKS
#define KVFS_LEAK_CHECKS 0
#endif

namespace {

constexpr int kExitUsage = 1;
constexpr int kExitStore = 2;
constexpr int kExitMount = 3;

int g_report_fd = -1;  // write end of the startup pipe (background only)
// What clear_dead_mount() did before logging was set up, for the log.
std::string g_cleared;

// Tells the waiting parent how startup ended; in the foreground, prints.
void report(int code, const std::string& msg) {
  if (g_report_fd >= 0) {
    std::string line = std::to_string(code) + " " + msg;
    ssize_t n = ::write(g_report_fd, line.data(), line.size());
    (void)n;
    ::close(g_report_fd);
    g_report_fd = -1;
  } else if (code != 0) {
    std::fprintf(stderr, "kvfs: %s\n", msg.c_str());
  }
}

// Parent side of daemonizing: returns the child's startup verdict.
int wait_for_child(int fd) {
  std::string buf;
  char tmp[512];
  ssize_t n;
  while ((n = ::read(fd, tmp, sizeof(tmp))) > 0 || (n < 0 && errno == EINTR))
    if (n > 0) buf.append(tmp, static_cast<size_t>(n));
  if (buf.empty()) {
    std::fprintf(stderr, "kvfs: the daemon exited during startup (see the system log)\n");
    return kExitMount;
  }
  int code = std::atoi(buf.c_str());
  auto sp = buf.find(' ');
  if (code != 0) std::fprintf(stderr, "kvfs: %s\n", buf.substr(sp + 1).c_str());
  return code;
}

// The log file of a mount with no syslog to log to: /var/log/kvfs/ plus the
// mount point with '/' as '-' (/mnt/kvcache -> mnt-kvcache.log), as
// systemd names mount units; a user without /var/log gets it under
// ~/.local/state/kvfs/log/.
std::string default_log_file(const std::string& mountpoint) {
  std::string n;
  for (char c : mountpoint.substr(mountpoint.find_first_not_of('/') == std::string::npos
                                      ? mountpoint.size()
                                      : mountpoint.find_first_not_of('/')))
    n += c == '/' ? '-'
                  : (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-'
                         ? c
                         : '_');
  if (n.empty()) n = "root";
  std::string dir = "/var/log/kvfs";
  if (::mkdir(dir.c_str(), 0750) != 0 && errno != EEXIST) dir.clear();
  if (!dir.empty() && ::access(dir.c_str(), W_OK) != 0) dir.clear();
  if (dir.empty()) {
    const char* home = std::getenv("HOME");
    dir = std::string(home && *home ? home : "/tmp") + "/.local/state/kvfs/log";
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
  }
  return dir + "/" + n + ".log";
}

bool have_syslog() {
  struct stat st;
  return ::stat("/dev/log", &st) == 0 && S_ISSOCK(st.st_mode);
}

// Returns an error message, or "" when logging is set up.
std::string setup_logging(const FsConfig& cfg, bool background) {
  std::shared_ptr<spdlog::logger> l;
  std::string file = cfg.log_file;
  // No syslog socket (a container, a minimal host): every line would be
  // dropped without a word, so a file it is.
  if (file.empty() && background && !have_syslog()) file = default_log_file(cfg.mountpoint);
  if (!file.empty()) {
    try {
      l = spdlog::basic_logger_mt("kvfs", file);
    } catch (const spdlog::spdlog_ex& e) {
      return "cannot open log_file " + file + ": " + e.what();
    }
    l->set_pattern("%Y-%m-%d %H:%M:%S.%e kvfs[%P] %l: %v");
  } else if (background) {
    l = spdlog::syslog_logger_mt("kvfs", "kvfs", LOG_PID, LOG_DAEMON);
  } else {
    l = spdlog::stderr_color_mt("kvfs");
  }
  spdlog::set_default_logger(l);
  spdlog::set_level(cfg.debug ? spdlog::level::debug : spdlog::level::from_str(cfg.log_level));
  spdlog::flush_on(spdlog::level::warn);
  // Info lines reach the file within a second, not at exit.
  spdlog::flush_every(std::chrono::seconds(1));
  if (file != cfg.log_file) spdlog::info("no syslog socket (/dev/log): logging to {}", file);
  if (!g_cleared.empty()) spdlog::warn("{}", g_cleared);
  return "";
}

std::string escape_commas(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == ',' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

int serve(ParsedArgs& pa, bool background) {
  if (std::string e = setup_logging(pa.fs, background); !e.empty()) {
    report(kExitUsage, e);
    return kExitUsage;
  }
  // Block buffers are 128 KiB..1 MiB: keep them mmap()ed so that freeing one
  // returns its memory (glibc would otherwise raise the threshold and keep
  // freed blocks in its heap, letting RSS drift above ram_size).
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  pa.store.kernel_cache_s = std::max(pa.fs.entry_timeout, pa.fs.attr_timeout);
  pa.store.mount_point = pa.fs.mountpoint;
  // Bound before anything is opened or mounted: a taken port is a bad
  // option (exit 1), not a mount that silently lacks its metrics.
  MetricsServer metrics;
  FsContext fctx;
  if (pa.fs.metrics_port != 0) {
    Status ms = metrics.bind(pa.fs.metrics_host, pa.fs.metrics_port, [&fctx] {
      return metrics_text(*fctx.store, fctx.lat, fctx.cfg.mountpoint);
    });
    if (!ms.ok()) {
      report(kExitUsage, ms.message());
      return kExitUsage;
    }
  }
  auto store = BlockStore::Open(pa.store);
  if (!store.ok()) {
    spdlog::error("cannot start: {}", store.status().ToString());
    report(kExitStore,
           store.status().message().empty() ? store.status().ToString() : store.status().message());
    return kExitStore;
  }
  if ((*store)->rebuilt_index()) spdlog::warn("the index was rebuilt from the segments");

  fctx.store = store->get();
  fctx.cfg = pa.fs;

  std::vector<std::string> opts = pa.fs.fuse_opts;
  bool has_fsname = false, has_subtype = false;
  for (auto& o : opts) {
    has_fsname |= o.rfind("fsname=", 0) == 0;
    has_subtype |= o.rfind("subtype=", 0) == 0;
  }
  if (!has_fsname) opts.push_back("fsname=" + escape_commas(pa.store.backing_dir));
  if (!has_subtype) opts.push_back("subtype=kvfs");
  if (pa.fs.default_permissions) opts.push_back("default_permissions");
  std::string joined;
  for (auto& o : opts) joined += (joined.empty() ? "" : ",") + o;
  std::vector<std::string> argv_s = {"kvfs", "-o", joined};
  if (pa.fs.debug) argv_s.push_back("-d");
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());

  const fuse_lowlevel_ops& ops = kvfs_ops();
  fuse_session* se = fuse_session_new(&args, &ops, sizeof(ops), &fctx);
  fuse_opt_free_args(&args);  // parsing may have copied them
  if (!se) {
    report(kExitMount, "cannot create the FUSE session (bad FUSE option?)");
    return kExitMount;
  }
  if (fuse_set_signal_handlers(se) != 0 || fuse_session_mount(se, pa.fs.mountpoint.c_str()) != 0) {
    fuse_session_destroy(se);
    report(kExitMount, "cannot mount on " + pa.fs.mountpoint);
    (void)(*store)->Close();
    return kExitMount;
  }
  {
    // Logged here, not in FUSE's init: an umount that comes before the
    // kernel's INIT request is served would leave no line at all.
    const StoreConfig& c = (*store)->config();
    spdlog::info(
        "mounted {} on {}: ram_size={} capacity={} segment_size={} index_dir={} node_id={} "
        "threads={} flush_threads={} evict_grace={}s io_timeout={}s",
        c.backing_dir, pa.fs.mountpoint, format_size((*store)->ram().capacity()),
        format_size((*store)->admin().capacity()), format_size(c.segment_size), c.index_dir,
        (*store)->node_id(), pa.fs.threads, c.flush_threads,
        (*store)->admin().live_config().evict_grace_s,
        (*store)->admin().live_config().io_timeout_s);
    // ram_size above the machine's memory is refused (StoreConfig::validate);
    // above what is free now it is allowed (the tier fills as files are
    // written, and other processes may leave), but said once, at mount:
    // dirty files held by a daemon the OOM killer picks are lost.
    if (const uint64_t avail = available_memory(); avail && c.ram_size > avail)
      spdlog::warn(
          "ram_size {} is more than the {} of memory available now (MemAvailable): "
          "if the RAM tier fills, the kernel may kill kvfs and its unflushed files "
          "are lost",
          format_size(c.ram_size), format_size(avail));
  }
  Notifier notifier(se);
  notifier.start();
  // Kernel invalidation of evicted names is opt-in: a notification blocks in
  // the kernel until the directory's lock is free, and if the daemon is
  // killed meanwhile (kill -9) that thread can never exit, so the dead mount
  // is never aborted. Without it an evicted file is still a clean miss: its
  // getattr and open answer ENOENT, and cached names expire after
  // entry_timeout.
  if (pa.fs.invalidate)
    (*store)->set_eviction_listener(
        [&notifier](uint64_t parent, const std::string& name, uint64_t ino) {
          notifier.removed(parent, name, ino);
        });
  report(0, "mounted");
  if (background) {
    int nul = ::open("/dev/null", O_RDWR);
    if (nul >= 0) {
      ::dup2(nul, 0);
      ::dup2(nul, 1);
      ::dup2(nul, 2);
      if (nul > 2) ::close(nul);
    }
    if (::chdir("/") != 0) spdlog::warn("chdir /: {}", std::strerror(errno));
  }
  metrics.start();  // only now: a scrape needs the store and the mount ready
  if (pa.fs.metrics_port != 0)
    spdlog::info("metrics at http://{}:{}/metrics", pa.fs.metrics_host, pa.fs.metrics_port);

  fuse_loop_config* lc = fuse_loop_cfg_create();
  fuse_loop_cfg_set_max_threads(lc, pa.fs.threads);
  fuse_loop_cfg_set_idle_threads(lc, pa.fs.threads);
  int rc = fuse_session_loop_mt(se, lc);
  fuse_loop_cfg_destroy(lc);

  metrics.stop();  // before the store closes under a scrape
  spdlog::info("unmounting {}: flushing dirty data", pa.fs.mountpoint);
  (*store)->set_eviction_listener(nullptr);
  notifier.stop();
  fuse_session_unmount(se);
  fuse_remove_signal_handlers(se);
  fuse_session_destroy(se);
  Status cs = (*store)->Close();
  if (cs.code() == Status::Code::kTimedOut) {
    // The backing dir is stalled: threads stuck in it can be neither joined
    // nor freed under, so leave now. Close() named every file not flushed;
    // what was committed is in the segments and the index.
    spdlog::error("stopped: the backing dir did not answer within io_timeout ({})", cs.ToString());
    spdlog::shutdown();
    std::fflush(nullptr);
    ::_exit(kExitStore);
  }
  // Freeing the namespace inode by inode takes seconds with millions of
  // files (3-4 s for 1.65M inodes here), and a remount waits for this exit;
  // the kernel frees the address space at once. Close() has written all
  // data and closed the index. Leak checkers still get the full teardown.
#if KVFS_LEAK_CHECKS
  store->reset();
#else
  (void)store->release();
#endif
  spdlog::info("stopped{}", cs.ok() ? "" : " with unflushed data: " + cs.ToString());
  spdlog::shutdown();
  // libfuse reports the signal that ended the loop as its result: SIGTERM,
  // SIGINT and SIGHUP are the normal way to stop.
  const bool clean = rc == 0 || rc == SIGTERM || rc == SIGINT || rc == SIGHUP;
  return clean && cs.ok() ? 0 : kExitStore;
}

// Paths kvfs must not use, refused before anything is touched: returns the
// exit status, or 0. Both paths are absolute and resolved.
int check_paths(const std::string& backing, const std::string& mnt) {
  auto refuse = [](int code, const std::string& m) {
    std::fprintf(stderr, "kvfs: %s\n", m.c_str());
    return code;
  };
  for (const MountEntry& m : read_mounts())
    if (m.target == mnt)
      return refuse(kExitMount, mnt + " is already a mount point (" + m.fstype + " " + m.source +
                                    "); unmount it first");
  if (path_within(backing, mnt))
    return refuse(kExitUsage, "the backing directory " + backing + " lies inside the mount point " +
                                  mnt + ": kvfs would write its segments into itself");
  if (path_within(mnt, backing))
    return refuse(kExitUsage,
                  "the mount point " + mnt + " lies inside the backing directory " + backing);
  for (const MountEntry& m : read_mounts())
    if (m.fstype == "fuse.kvfs" && path_within(backing, m.target))
      return refuse(kExitStore,
                    "the backing directory " + backing + " lies inside the kvfs mount " + m.target);
  // A directory inside another store (its segments/, say) would be formatted
  // as a new store of its own, next to the other store's files.
  for (std::string d = backing; d.size() > 1;) {
    d = d.substr(0, std::max<size_t>(1, d.rfind('/')));
    struct stat st;
    if (::stat(layout::super_path(d == "/" ? "" : d).c_str(), &st) == 0)
      return refuse(kExitStore, "the backing directory " + backing +
                                    " lies inside the kvfs backing directory " + d);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  auto pa = parse_args(argc, argv);
  if (!pa.ok()) {
    std::fprintf(stderr, "kvfs: %s\n", pa.status().message().c_str());
    return kExitUsage;
  }
  if (pa->help) {
    std::fputs(usage_text(), stdout);
    return 0;
  }
  if (pa->version) {
    std::printf("kvfs %s\n", KVFS_VERSION);
    return 0;
  }
  if (!clear_dead_mount(pa->store.backing_dir, pa->fs.mountpoint, &g_cleared)) return kExitMount;
  struct stat st;
  if (::stat(pa->fs.mountpoint.c_str(), &st) != 0) {
    const int e = errno;
    std::fprintf(stderr, "kvfs: mount point %s: %s\n", pa->fs.mountpoint.c_str(), std::strerror(e));
    return e == ENOTCONN || e == ECONNABORTED ? kExitMount : kExitUsage;  // another's dead mount
  }
  if (!S_ISDIR(st.st_mode)) {
    std::fprintf(stderr, "kvfs: mount point %s is not a directory\n", pa->fs.mountpoint.c_str());
    return kExitUsage;
  }
  if (::stat(pa->store.backing_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    std::fprintf(stderr, "kvfs: backing directory %s does not exist or is not a directory\n",
                 pa->store.backing_dir.c_str());
    return kExitStore;
  }
  if (!pa->store.read_only && ::access(pa->store.backing_dir.c_str(), W_OK | X_OK) != 0) {
    std::fprintf(stderr, "kvfs: backing directory %s is not writable\n",
                 pa->store.backing_dir.c_str());
    return kExitStore;
  }
  if (int rc = check_paths(pa->store.backing_dir, pa->fs.mountpoint); rc != 0) return rc;
  if (pa->fs.foreground) return serve(*pa, false);

  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    std::perror("kvfs: pipe");
    return kExitMount;
  }
  pid_t pid = ::fork();
  if (pid < 0) {
    std::perror("kvfs: fork");
    return kExitMount;
  }
  if (pid > 0) {
    ::close(p[1]);
    return wait_for_child(p[0]);
  }
  ::close(p[0]);
  g_report_fd = p[1];
  ::setsid();
  return serve(*pa, true);
}
