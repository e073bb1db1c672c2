// kvfs-admin: looks into and steers a mounted kvfs, and checks or repairs an
// unmounted backing directory.
//
// Online commands talk to the daemon through the hidden control file
// MOUNT/.kvfs-control (fs/control.h): open it O_RDWR, write one JSON request,
// read the JSON reply from offset 0. The daemon decides who may change what
// (root or the user who mounted); this tool only reports its answer.
// Offline commands (fsck, rebuild-index) use the core library directly; the
// backing dir's lock makes them refuse while a daemon owns the directory.
//
// Exit status: 0 ok, 1 usage, 2 not a kvfs mount / cannot reach the daemon /
// backing dir unusable, 3 the daemon refused the request (its errno is shown),
// 4 fsck found problems.
#include <fcntl.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/buffer.h"
#include "core/config.h"
#include "core/index.h"
#include "core/inode.h"
#include "core/record.h"
#include "core/recovery.h"
#include "core/segment_store.h"

#ifndef KVFS_VERSION
#define KVFS_VERSION "unknown"
#endif

namespace kvfs::admin {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr int kExitOk = 0;
constexpr int kExitUsage = 1;
constexpr int kExitUnreachable = 2;
constexpr int kExitRefused = 3;
constexpr int kExitProblems = 4;

constexpr long kFuseSuperMagic = 0x65735546;
constexpr const char* kControlName = ".kvfs-control";

// Every failure ends here: main() prints the message and exits with code.
struct Failure {
  int code;
  std::string msg;
};

[[noreturn]] void fail(int code, std::string msg) {
  throw Failure{code, std::move(msg)};
}

std::string errno_text(int e) {
  return std::strerror(e);
}

// ---------------------------------------------------------------------------
// Formatting helpers.

std::string human_bytes(double b) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (b >= 1024 && u < 5) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0)
    std::snprintf(buf, sizeof(buf), "%.0f B", b);
  else
    std::snprintf(buf, sizeof(buf), "%.1f %s", b, units[u]);
  return buf;
}

std::string local_time(int64_t ns) {
  if (ns <= 0) return "-";
  time_t t = static_cast<time_t>(ns / 1000000000);
  struct tm tm;
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

// Names may hold any byte but '/' and NUL: keep terminals sane.
std::string printable(const std::string& s) {
  std::string o;
  for (unsigned char c : s) o += (c < 0x20 || c == 0x7f) ? '?' : static_cast<char>(c);
  return o;
}

double num(const json& j, const char* ptr) {
  try {
    const json& v = j.at(json::json_pointer(ptr));
    return v.is_number() ? v.get<double>() : 0.0;
  } catch (const json::exception&) {
    return 0.0;
  }
}

uint64_t unum(const json& j, const char* ptr) {
  try {
    const json& v = j.at(json::json_pointer(ptr));
    if (v.is_number_unsigned() || v.is_number_integer()) return v.get<uint64_t>();
    if (v.is_number()) return static_cast<uint64_t>(v.get<double>());
  } catch (const json::exception&) {
  }
  return 0;
}

// "30s", "10m", "2h", "1d", "90" (seconds), "1.5h".
std::optional<double> parse_duration(const std::string& s) {
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || end == s.c_str() || !std::isfinite(v) || v < 0) return std::nullopt;
  std::string suf(end);
  double mult = 1;
  if (suf.empty() || suf == "s") {
    mult = 1;
  } else if (suf == "m") {
    mult = 60;
  } else if (suf == "h") {
    mult = 3600;
  } else if (suf == "d") {
    mult = 86400;
  } else {
    return std::nullopt;
  }
  return v * mult;
}

// Writes data to path atomically (a reader sees the old or the new file).
void write_atomically(const std::string& path, const std::string& data) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << data;
    out.flush();
    if (!out) fail(kExitUsage, "cannot write " + tmp + ": " + errno_text(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    std::remove(tmp.c_str());
    fail(kExitUsage, "cannot rename " + tmp + " to " + path + ": " + errno_text(e));
  }
}

// ---------------------------------------------------------------------------
// Progress: a bar on a terminal, a few plain lines otherwise.

class Progress {
 public:
  explicit Progress(std::string label) : label_(std::move(label)), tty_(::isatty(2) == 1) {}
  ~Progress() { done(); }

  void update(uint64_t done, uint64_t total) {
    if (total == 0) return;
    const int pct = static_cast<int>(std::min<uint64_t>(100, done * 100 / total));
    if (tty_) {
      if (pct == last_pct_) return;
      const int width = 30;
      const int fill = pct * width / 100;
      std::fprintf(stderr, "\r%-14s [%s%s] %3d%%", label_.c_str(), std::string(fill, '#').c_str(),
                   std::string(width - fill, '.').c_str(), pct);
      std::fflush(stderr);
      shown_ = true;
    } else {
      // One line per 10 %: enough for a log, not a flood.
      if (pct / 10 == last_pct_ / 10 && last_pct_ >= 0) return;
      std::fprintf(stderr, "%s: %d%% (%llu/%llu)\n", label_.c_str(), pct,
                   static_cast<unsigned long long>(done), static_cast<unsigned long long>(total));
    }
    last_pct_ = pct;
  }

  // Clears the bar so that a message can be printed on a clean line.
  void clear() {
    if (tty_ && shown_) {
      std::fprintf(stderr, "\r%*s\r", 60, "");
      std::fflush(stderr);
      last_pct_ = -1;
      shown_ = false;
    }
  }

  void done() {
    if (tty_ && shown_) {
      std::fputc('\n', stderr);
      shown_ = false;
    }
  }

 private:
  std::string label_;
  bool tty_;
  bool shown_ = false;
  int last_pct_ = -1;
};

// ---------------------------------------------------------------------------
// The control file.

class Mount {
 public:
  // Checks that `arg` is the root of a kvfs mount we can talk to.
  explicit Mount(const std::string& arg) : arg_(arg) {
    char buf[PATH_MAX];
    if (!::realpath(arg.c_str(), buf)) fail(kExitUnreachable, arg + ": " + errno_text(errno));
    root_ = buf;
    struct statfs sf;
    if (::statfs(root_.c_str(), &sf) != 0)
      fail(kExitUnreachable, "cannot reach " + arg + ": " + errno_text(errno));
    if (static_cast<long>(sf.f_type) != kFuseSuperMagic)
      fail(kExitUnreachable, arg + " is not a kvfs mount (not a FUSE filesystem)");
    ctl_ = root_ + "/" + kControlName;
    struct stat st;
    if (::stat(ctl_.c_str(), &st) != 0) {
      const int e = errno;
      if (e == ENOENT)
        fail(kExitUnreachable, arg + " is not a kvfs mount point (no " + kControlName +
                                   " at its root; give the mount point itself)");
      fail(kExitUnreachable,
           "cannot reach the kvfs daemon at " + arg + ": " + errno_text(e) +
               (e == EACCES ? " (mounted without allow_other by another user?)" : ""));
    }
    if (!S_ISREG(st.st_mode))
      fail(kExitUnreachable,
           arg + " is not a kvfs mount point (" + kControlName + " is not a control file)");
  }

  const std::string& root() const { return root_; }

  // Sends one request; returns the reply, or fails with the daemon's error.
  json request(const json& req) const {
    json r = request_raw(req);
    if (r.is_object() && r.contains("error")) {
      const int e = r.value("errno", 0);
      const json& err = r["error"];
      std::string text = err.is_string() ? err.get<std::string>() : err.dump();
      std::string msg = req.value("cmd", "request") + ": the daemon refused";
      // A bare status name ("NotFound") says less than strerror.
      if (e != 0 && text.find(' ') == std::string::npos) {
        msg += ": " + errno_text(e);
      } else {
        msg += ": " + text;
        if (e != 0) msg += " (" + errno_text(e) + ")";
      }
      if (req.contains("path")) msg += " [path '" + req["path"].get<std::string>() + "']";
      throw Failure{kExitRefused, msg};
    }
    return r;
  }

  // Sends one request and returns the reply, error replies included.
  json request_raw(const json& req) const {
    int fd = ::open(ctl_.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0)
      fail(kExitUnreachable,
           "cannot open " + ctl_ + ": " + errno_text(errno) +
               (errno == EACCES ? " (is the mount shared with allow_other?)" : ""));
    const std::string body = req.dump();
    ssize_t n = ::write(fd, body.data(), body.size());
    if (n != static_cast<ssize_t>(body.size())) {
      const int e = n < 0 ? errno : EIO;
      ::close(fd);
      fail(kExitUnreachable, "cannot send the request to " + ctl_ + ": " + errno_text(e));
    }
    std::string reply;
    char buf[65536];
    for (;;) {
      ssize_t r = ::pread(fd, buf, sizeof(buf), static_cast<off_t>(reply.size()));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        const int e = errno;
        ::close(fd);
        fail(kExitUnreachable, "cannot read the reply from " + ctl_ + ": " + errno_text(e));
      }
      if (r == 0) break;
      reply.append(buf, static_cast<size_t>(r));
    }
    ::close(fd);
    try {
      return json::parse(reply);
    } catch (const json::exception& e) {
      fail(kExitUnreachable, "the daemon sent a reply that is not JSON: " + std::string(e.what()));
    }
  }

  // A path given on the command line -> a path relative to the mount root.
  // Absolute paths must lie under the mount; relative ones are taken as
  // relative to the mount root.
  std::string relative(const std::string& p) const {
    fs::path in(p);
    std::string rel;
    if (in.is_absolute()) {
      const std::string norm = in.lexically_normal().string();
      std::optional<std::string> r;
      for (const std::string& base : {root_, fs::absolute(arg_).lexically_normal().string()}) {
        std::string b = base;
        while (b.size() > 1 && b.back() == '/') b.pop_back();
        std::string n = norm;
        while (n.size() > 1 && n.back() == '/') n.pop_back();
        if (n == b) {
          r = "";
          break;
        }
        if (n.size() > b.size() && n.compare(0, b.size(), b) == 0 &&
            (b == "/" || n[b.size()] == '/')) {
          r = n.substr(b == "/" ? 1 : b.size() + 1);
          break;
        }
      }
      if (!r) fail(kExitUsage, p + " is not under the mount point " + root_);
      rel = *r;
    } else {
      rel = in.lexically_normal().string();
    }
    while (!rel.empty() && rel.back() == '/') rel.pop_back();
    if (rel == ".") rel.clear();
    if (rel == ".." || rel.rfind("../", 0) == 0)
      fail(kExitUsage, p + " is not under the mount point " + root_);
    return rel;
  }

 private:
  std::string arg_, root_, ctl_;
};

// ---------------------------------------------------------------------------
// stats

std::string render_table(const Mount& m, const json& s, const json* prev, double dt) {
  std::string o;
  char line[512];
  auto add = [&](const char* label, const std::string& text) {
    std::snprintf(line, sizeof(line), "%-14s %s\n", label, text.c_str());
    o += line;
  };
  auto rate = [&](const char* ptr) -> std::string {
    if (!prev || dt <= 0) return "";
    const double d = num(s, ptr) - num(*prev, ptr);
    char b[64];
    std::snprintf(b, sizeof(b), " (%+.0f/s)", d / dt);
    return b;
  };
  auto pct = [](double a, double b) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.1f%%", b > 0 ? 100.0 * a / b : 0.0);
    return std::string(buf);
  };
  o += "kvfs at " + m.root() + "\n";
  add("files", std::to_string(unum(s, "/files")) + " in " +
                   std::to_string(unum(s, "/directories")) + " directories, " +
                   human_bytes(num(s, "/logical_bytes")) + " logical");
  add("RAM tier", human_bytes(num(s, "/ram/used_bytes")) + " of " +
                      human_bytes(num(s, "/ram/capacity_bytes")) + " used (" +
                      pct(num(s, "/ram/used_bytes"), num(s, "/ram/capacity_bytes")) + "), " +
                      human_bytes(num(s, "/ram/dirty_bytes")) + " dirty, " +
                      std::to_string(unum(s, "/ram/cached_blocks")) + " cached blocks");
  add("backing dir", human_bytes(num(s, "/backing/used_bytes")) + " of " +
                         human_bytes(num(s, "/backing/capacity_bytes")) + " used (" +
                         pct(num(s, "/backing/used_bytes"), num(s, "/backing/capacity_bytes")) +
                         "), " + std::to_string(unum(s, "/backing/segments")) + " segments, " +
                         pct(num(s, "/backing/live_ratio"), 1.0) + " live");
  const double hr = num(s, "/hits/ram"), hb = num(s, "/hits/backing");
  add("hits", "RAM " + std::to_string(unum(s, "/hits/ram")) + rate("/hits/ram") + ", backing " +
                  std::to_string(unum(s, "/hits/backing")) + rate("/hits/backing") +
                  " blocks; RAM hit ratio " + pct(hr, hr + hb));
  add("misses", std::to_string(unum(s, "/misses")) + rate("/misses") + " lookups of absent names");
  add("flush", std::to_string(unum(s, "/flush/queued")) + " queued, " +
                   std::to_string(unum(s, "/flush/files")) + " files / " +
                   human_bytes(num(s, "/flush/bytes")) + " written in " +
                   std::to_string(unum(s, "/flush/batches")) + " batches");
  add("evictions", std::to_string(unum(s, "/evictions/capacity")) + " capacity, " +
                       std::to_string(unum(s, "/evictions/admin")) + " admin, " +
                       std::to_string(unum(s, "/evictions/tmp")) + " tmp, " +
                       std::to_string(unum(s, "/evictions/reclaim")) + " reclaim files; " +
                       human_bytes(num(s, "/evictions/bytes")) + "; " +
                       std::to_string(unum(s, "/evictions/segments_deleted")) +
                       " segments deleted");
  add("errors", std::to_string(unum(s, "/errors/checksum")) + " checksum, " +
                    std::to_string(unum(s, "/errors/io")) + " I/O, " +
                    std::to_string(unum(s, "/errors/enospc")) + " ENOSPC; " +
                    std::to_string(unum(s, "/errors/dropped_files")) + " files dropped");
  std::string lat;
  for (const char* op : {"lookup", "read", "write", "create", "rename"}) {
    const std::string base = std::string("/latency/") + op;
    char b[128];
    std::snprintf(b, sizeof(b), "%s%s %.0f/%.0f", lat.empty() ? "" : ", ", op,
                  num(s, (base + "/p50_us").c_str()), num(s, (base + "/p99_us").c_str()));
    lat += b;
  }
  add("latency (us)", lat + "  (p50/p99)");
  return o;
}

struct PromMetric {
  const char* name;
  const char* type;
  const char* help;
  // label set (besides mountpoint) -> JSON pointer into the stats reply
  std::vector<std::pair<std::string, std::string>> series;
  double scale = 1.0;
};

std::string prom_escape(const std::string& v) {
  std::string o;
  for (char c : v) {
    if (c == '\\')
      o += "\\\\";
    else if (c == '"')
      o += "\\\"";
    else if (c == '\n')
      o += "\\n";
    else
      o += c;
  }
  return o;
}

std::string prom_number(double v) {
  if (std::floor(v) == v && std::fabs(v) < 1e15) {
    char b[32];
    std::snprintf(b, sizeof(b), "%.0f", v);
    return b;
  }
  char b[64];
  std::snprintf(b, sizeof(b), "%.9g", v);
  return b;
}

const std::vector<PromMetric>& prom_metrics() {
  static const std::vector<PromMetric> m = [] {
    std::vector<PromMetric> v = {
        {"kvfs_files", "gauge", "Regular files in the namespace.", {{"", "/files"}}},
        {"kvfs_directories", "gauge", "Directories in the namespace.", {{"", "/directories"}}},
        {"kvfs_logical_bytes", "gauge", "Sum of the sizes of all files.", {{"", "/logical_bytes"}}},
        {"kvfs_ram_used_bytes",
         "gauge",
         "File data held in the RAM tier (dirty and clean).",
         {{"", "/ram/used_bytes"}}},
        {"kvfs_ram_capacity_bytes",
         "gauge",
         "RAM tier capacity (ram_size).",
         {{"", "/ram/capacity_bytes"}}},
        {"kvfs_ram_dirty_bytes",
         "gauge",
         "RAM tier bytes not yet written to the backing dir.",
         {{"", "/ram/dirty_bytes"}}},
        {"kvfs_ram_clean_bytes",
         "gauge",
         "RAM tier bytes that are cached copies of segment data.",
         {{"", "/ram/clean_bytes"}}},
        {"kvfs_ram_cached_blocks",
         "gauge",
         "Clean blocks in the RAM tier's cache.",
         {{"", "/ram/cached_blocks"}}},
        {"kvfs_ram_evicted_blocks_total",
         "counter",
         "Clean blocks dropped from the RAM tier to make room.",
         {{"", "/ram/evicted_blocks"}}},
        {"kvfs_ram_backpressure_waits_total",
         "counter",
         "Writes that waited for the flushers because RAM was full of dirty data.",
         {{"", "/ram/backpressure_waits"}}},
        {"kvfs_backing_used_bytes",
         "gauge",
         "Bytes of all segment files in the backing dir.",
         {{"", "/backing/used_bytes"}}},
        {"kvfs_backing_capacity_bytes",
         "gauge",
         "Capacity kvfs may use in the backing dir.",
         {{"", "/backing/capacity_bytes"}}},
        {"kvfs_backing_live_bytes",
         "gauge",
         "Segment bytes that some file still points at.",
         {{"", "/backing/live_bytes"}}},
        {"kvfs_backing_segments",
         "gauge",
         "Segment files in the backing dir.",
         {{"", "/backing/segments"}}},
        {"kvfs_backing_live_ratio",
         "gauge",
         "Live fraction of the segment bytes.",
         {{"", "/backing/live_ratio"}}},
        {"kvfs_backing_read_bytes_total",
         "counter",
         "Bytes read from the backing dir.",
         {{"", "/backing/read_bytes"}}},
        {"kvfs_backing_reads_total",
         "counter",
         "Block reads from the backing dir.",
         {{"", "/backing/reads"}}},
        {"kvfs_backing_written_bytes_total",
         "counter",
         "Bytes written to the backing dir (flushes and reclamation copies).",
         {{"", "/backing/written_bytes"}}},
        {"kvfs_hits_total",
         "counter",
         "1 MiB blocks served, by the tier that held them.",
         {{"tier=\"ram\"", "/hits/ram"}, {"tier=\"backing\"", "/hits/backing"}}},
        {"kvfs_misses_total",
         "counter",
         "Lookups of names that do not exist (KV-cache misses).",
         {{"", "/misses"}}},
        {"kvfs_dirty_bytes",
         "gauge",
         "Bytes waiting to be flushed to the backing dir.",
         {{"", "/dirty_bytes"}}},
        {"kvfs_flush_queued", "gauge", "Files queued for the flushers.", {{"", "/flush/queued"}}},
        {"kvfs_flush_batches_total",
         "counter",
         "Flush batches (one fdatasync each).",
         {{"", "/flush/batches"}}},
        {"kvfs_flushed_files_total", "counter", "Files flushed.", {{"", "/flush/files"}}},
        {"kvfs_flushed_bytes_total", "counter", "Bytes flushed.", {{"", "/flush/bytes"}}},
        {"kvfs_evicted_files_total",
         "counter",
         "Files evicted, by reason.",
         {{"reason=\"capacity\"", "/evictions/capacity"},
          {"reason=\"admin\"", "/evictions/admin"},
          {"reason=\"tmp\"", "/evictions/tmp"},
          {"reason=\"reclaim\"", "/evictions/reclaim"}}},
        {"kvfs_evicted_bytes_total",
         "counter",
         "Bytes of the files evicted.",
         {{"", "/evictions/bytes"}}},
        {"kvfs_evicted_dirs_total",
         "counter",
         "Directories removed after eviction emptied them.",
         {{"", "/evictions/dirs_removed"}}},
        {"kvfs_segments_deleted_total",
         "counter",
         "Segment files deleted.",
         {{"", "/evictions/segments_deleted"}}},
        {"kvfs_reclaim_copied_bytes_total",
         "counter",
         "Bytes copied forward by segment reclamation.",
         {{"", "/evictions/reclaim_copied_bytes"}}},
        {"kvfs_errors_total",
         "counter",
         "Errors, by kind.",
         {{"kind=\"checksum\"", "/errors/checksum"},
          {"kind=\"io\"", "/errors/io"},
          {"kind=\"enospc\"", "/errors/enospc"}}},
        {"kvfs_dropped_files_total",
         "counter",
         "Files dropped because their data failed a checksum or could not be read.",
         {{"", "/errors/dropped_files"}}},
    };
    PromMetric lat{"kvfs_op_latency_seconds",
                   "gauge",
                   "FUSE operation latency quantiles since the mount.",
                   {},
                   1e-6};
    PromMetric cnt{"kvfs_ops_total", "counter", "FUSE operations timed, by operation.", {}};
    for (const char* op : {"lookup", "read", "write", "create", "rename"}) {
      const std::string base = std::string("/latency/") + op;
      lat.series.push_back({"op=\"" + std::string(op) + "\",quantile=\"0.5\"", base + "/p50_us"});
      lat.series.push_back({"op=\"" + std::string(op) + "\",quantile=\"0.99\"", base + "/p99_us"});
      cnt.series.push_back({"op=\"" + std::string(op) + "\"", base + "/count"});
    }
    v.push_back(lat);
    v.push_back(cnt);
    return v;
  }();
  return m;
}

std::string render_prometheus(const std::string& mnt, const json& s, const std::string& version) {
  std::string o;
  const std::string ml = "mountpoint=\"" + prom_escape(mnt) + "\"";
  o += "# HELP kvfs_up 1 if kvfs-admin reached the kvfs daemon.\n# TYPE kvfs_up gauge\n";
  o += "kvfs_up{" + ml + "} 1\n";
  o += "# HELP kvfs_info The kvfs daemon's version.\n# TYPE kvfs_info gauge\n";
  o += "kvfs_info{" + ml + ",version=\"" + prom_escape(version) + "\"} 1\n";
  for (const PromMetric& m : prom_metrics()) {
    std::string body;
    for (const auto& [labels, ptr] : m.series) {
      const json::json_pointer p(ptr);
      if (!s.contains(p) || !s.at(p).is_number()) continue;
      body += std::string(m.name) + "{" + ml + (labels.empty() ? "" : "," + labels) + "} " +
              prom_number(s.at(p).get<double>() * m.scale) + "\n";
    }
    if (body.empty()) continue;
    o += std::string("# HELP ") + m.name + " " + m.help + "\n# TYPE " + m.name + " " + m.type +
         "\n" + body;
  }
  return o;
}

std::string render_prometheus_down(const std::string& mnt) {
  return "# HELP kvfs_up 1 if kvfs-admin reached the kvfs daemon.\n# TYPE kvfs_up gauge\n"
         "kvfs_up{mountpoint=\"" +
         prom_escape(mnt) + "\"} 0\n";
}

struct StatsOpts {
  std::string mount;
  bool json_out = false, prometheus = false;
  double watch = 0;
  std::string output;
};

int cmd_stats(const StatsOpts& o) {
  std::unique_ptr<Mount> m;
  try {
    m = std::make_unique<Mount>(o.mount);
  } catch (const Failure&) {
    if (o.prometheus && !o.output.empty()) {
      char buf[PATH_MAX];
      write_atomically(o.output,
                       render_prometheus_down(::realpath(o.mount.c_str(), buf) ? buf : o.mount));
    }
    throw;
  }
  std::string version;
  if (o.prometheus) version = m->request({{"cmd", "version"}}).value("version", "unknown");
  json prev;
  auto prev_t = std::chrono::steady_clock::now();
  const bool clear =
      o.watch > 0 && !o.json_out && !o.prometheus && o.output.empty() && ::isatty(1) == 1;
  for (bool first = true;; first = false) {
    json s;
    try {
      s = m->request({{"cmd", "stats"}});
    } catch (const Failure&) {
      if (o.prometheus && !o.output.empty())
        write_atomically(o.output, render_prometheus_down(m->root()));
      throw;
    }
    const auto now = std::chrono::steady_clock::now();
    std::string text;
    if (o.json_out) {
      text = o.watch > 0 ? s.dump() + "\n" : s.dump(2) + "\n";
    } else if (o.prometheus) {
      text = render_prometheus(m->root(), s, version);
    } else {
      const double dt = std::chrono::duration<double>(now - prev_t).count();
      text = render_table(*m, s, first ? nullptr : &prev, dt);
      if (o.watch > 0 && !clear)
        text = "--- " + local_time(std::time(nullptr) * 1000000000ll) + "\n" + text;
    }
    if (!o.output.empty()) {
      write_atomically(o.output, text);
    } else {
      if (clear) std::fputs("\033[H\033[2J", stdout);
      std::fputs(text.c_str(), stdout);
      if (o.prometheus && o.watch > 0) std::fputc('\n', stdout);
      std::fflush(stdout);
    }
    if (o.watch <= 0) return kExitOk;
    prev = std::move(s);
    prev_t = now;
    std::this_thread::sleep_for(std::chrono::duration<double>(o.watch));
  }
}

// ---------------------------------------------------------------------------
// evict, flush, ls, config, version

struct EvictOpts {
  std::string mount, path, prefix, to_size, older_than;
  bool all = false, force = false, dry_run = false;
};

int cmd_evict(const EvictOpts& o) {
  Mount m(o.mount);
  json req{{"cmd", "evict"}, {"force", o.force}, {"dry_run", o.dry_run}};
  if (!o.path.empty()) {
    req["mode"] = "path";
    req["path"] = m.relative(o.path);
    if (req["path"].get<std::string>().empty())
      fail(kExitUsage, "--path needs a file; use --prefix or --all for the whole mount");
  } else if (!o.prefix.empty()) {
    req["mode"] = "prefix";
    req["path"] = m.relative(o.prefix);
  } else if (o.all) {
    req["mode"] = "all";
  } else if (!o.to_size.empty()) {
    auto b = parse_size(o.to_size);
    if (!b) fail(kExitUsage, "--to-size: '" + o.to_size + "' is not a size (e.g. 500G, 2T)");
    req["mode"] = "to_size";
    req["bytes"] = *b;
  } else {
    auto d = parse_duration(o.older_than);
    if (!d)
      fail(kExitUsage, "--older-than: '" + o.older_than + "' is not a duration (e.g. 30s, 2h, 1d)");
    req["mode"] = "older_than";
    req["seconds"] = *d;
  }
  json r = m.request(req);
  const uint64_t files = unum(r, "/files"), bytes = unum(r, "/bytes"),
                 skipped = unum(r, "/skipped");
  std::printf("%s %llu files (%llu bytes)", o.dry_run ? "would evict" : "evicted",
              static_cast<unsigned long long>(files), static_cast<unsigned long long>(bytes));
  if (skipped > 0)
    std::printf("; %llu skipped (open, dirty or used within evict_grace%s)",
                static_cast<unsigned long long>(skipped), o.force ? "" : "; --force takes them");
  std::printf("\n");
  return kExitOk;
}

int cmd_flush(const std::string& mount, bool wait) {
  Mount m(mount);
  m.request({{"cmd", "flush"}, {"wait", wait}});
  std::printf(wait ? "flushed: every dirty file is in the backing dir\n"
                   : "flush queued (use --wait to wait for it)\n");
  return kExitOk;
}

struct LsOpts {
  std::string mount, path;
  bool json_out = false, bytes = false;
};

int cmd_ls(const LsOpts& o) {
  Mount m(o.mount);
  const std::string rel = m.relative(o.path);
  json r = m.request_raw({{"cmd", "ls"}, {"path", rel}});
  std::string only;  // a file: list its parent and keep its entry
  if (r.contains("error") && r.value("errno", 0) == ENOTDIR && !rel.empty()) {
    const auto slash = rel.rfind('/');
    only = slash == std::string::npos ? rel : rel.substr(slash + 1);
    r = m.request(
        {{"cmd", "ls"}, {"path", slash == std::string::npos ? "" : rel.substr(0, slash)}});
  } else if (r.contains("error")) {
    r = m.request({{"cmd", "ls"}, {"path", rel}});  // fails with the daemon's message
  }
  json entries = r.value("entries", json::array());
  if (!only.empty()) {
    json keep = json::array();
    for (auto& e : entries)
      if (e.value("name", "") == only) keep.push_back(e);
    entries = keep;
  }
  std::sort(entries.begin(), entries.end(),
            [](const json& a, const json& b) { return a.value("name", "") < b.value("name", ""); });
  if (o.json_out) {
    std::printf("%s\n", json{{"entries", entries}}.dump(2).c_str());
    return kExitOk;
  }
  std::vector<std::array<std::string, 4>> rows;
  rows.push_back({"NAME", "TIER", "SIZE", "LAST ACCESS"});
  for (auto& e : entries) {
    const bool dir = e.value("type", "") == "dir";
    const uint64_t size = e.value("size", uint64_t(0));
    rows.push_back({printable(e.value("name", "")) + (dir ? "/" : ""), e.value("tier", "-"),
                    dir ? "-" : (o.bytes ? std::to_string(size) : human_bytes(double(size))),
                    local_time(e.value("last_access_ns", int64_t(0)))});
  }
  size_t w[3] = {0, 0, 0};
  for (auto& row : rows)
    for (int i = 0; i < 3; ++i) w[i] = std::max(w[i], row[i].size());
  for (auto& row : rows)
    std::printf("%-*s  %-*s  %*s  %s\n", int(w[0]), row[0].c_str(), int(w[1]), row[1].c_str(),
                int(w[2]), row[2].c_str(), row[3].c_str());
  return kExitOk;
}

bool is_size_key(const std::string& k) {
  return k == "ram_size" || k == "capacity" || k == "segment_size";
}

std::string config_value(const std::string& k, const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (is_size_key(k) && v.is_number_unsigned()) {
    const uint64_t b = v.get<uint64_t>();
    std::string f = format_size(b);
    if (!f.empty() && std::isdigit(static_cast<unsigned char>(f.back())))
      f = human_bytes(double(b));
    return f + " (" + std::to_string(b) + " bytes)";
  }
  if (v.is_number_float()) return prom_number(v.get<double>());
  return v.dump();
}

int cmd_config(const std::string& mount, const std::vector<std::string>& args) {
  Mount m(mount);
  json set = json::object();
  std::vector<std::string> get;
  for (const std::string& a : args) {
    const auto eq = a.find('=');
    if (eq == std::string::npos) {
      get.push_back(a);
    } else {
      if (eq == 0) fail(kExitUsage, "config: '" + a + "' has no key");
      set[a.substr(0, eq)] = a.substr(eq + 1);
    }
  }
  if (!set.empty() && !get.empty()) fail(kExitUsage, "config: either read keys or set KEY=VALUE");
  json r =
      set.empty() ? m.request({{"cmd", "config"}}) : m.request({{"cmd", "config"}, {"set", set}});
  if (!get.empty()) {
    for (const std::string& k : get) {
      if (!r.contains(k)) {
        std::string known;
        for (auto& [key, v] : r.items()) known += (known.empty() ? "" : ", ") + key;
        fail(kExitUsage, "config: unknown setting '" + k + "' (known: " + known + ")");
      }
      // One raw value per line: easy to use from scripts.
      const json& v = r[k];
      std::printf("%s\n", v.is_string() ? v.get<std::string>().c_str() : v.dump().c_str());
    }
    return kExitOk;
  }
  size_t w = 0;
  for (auto& [k, v] : r.items()) w = std::max(w, k.size());
  for (auto& [k, v] : r.items()) {
    if (!set.empty() && !set.contains(k)) continue;
    std::printf("%-*s = %s\n", int(w), k.c_str(), config_value(k, v).c_str());
  }
  return kExitOk;
}

int cmd_version(const std::string& mount) {
  std::printf("kvfs-admin %s\n", KVFS_VERSION);
  if (!mount.empty()) {
    Mount m(mount);
    json r = m.request({{"cmd", "version"}});
    std::printf("kvfs daemon %s at %s\n", r.value("version", "unknown").c_str(), m.root().c_str());
  }
  return kExitOk;
}

// ---------------------------------------------------------------------------
// Offline: fsck and rebuild-index.

void setup_logging() {
  auto l = spdlog::stderr_color_st("kvfs-admin");
  l->set_pattern("kvfs-admin: %^%l%$: %v");
  spdlog::set_default_logger(l);
  spdlog::set_level(spdlog::level::warn);
}

std::unique_ptr<SegmentStore> open_backing(const std::string& dir) {
  char buf[PATH_MAX];
  if (!::realpath(dir.c_str(), buf)) fail(kExitUnreachable, dir + ": " + errno_text(errno));
  struct stat st;
  if (::stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))
    fail(kExitUnreachable, dir + " is not a directory");
  // SegmentStore::Open formats an empty directory: never do that to a
  // directory that is not a kvfs backing dir.
  if (::access((std::string(buf) + "/kvfs.super").c_str(), F_OK) != 0)
    fail(kExitUnreachable, dir + " is not a kvfs backing directory (no kvfs.super)");
  StoreConfig cfg;
  cfg.backing_dir = buf;
  cfg.direct_io = false;
  auto s = SegmentStore::Open(cfg);
  if (!s.ok()) {
    const Status& e = s.status();
    std::string msg = e.message().empty() ? e.ToString() : e.message();
    if (e.code() == Status::Code::kBusy) msg += "; unmount it first";
    fail(kExitUnreachable, msg);
  }
  return std::move(*s);
}

bool looks_like_rocksdb_dir(const std::string& dir) {
  std::error_code ec;
  for (const auto& de : fs::directory_iterator(dir, ec)) {
    const std::string n = de.path().filename().string();
    auto ends = [&](const char* suf) {
      const size_t l = std::strlen(suf);
      return n.size() >= l && n.compare(n.size() - l, l, suf) == 0;
    };
    if (n == "CURRENT" || n == "IDENTITY" || n == "LOCK" || n.rfind("LOG", 0) == 0 ||
        n.rfind("MANIFEST-", 0) == 0 || n.rfind("OPTIONS-", 0) == 0 || ends(".sst") ||
        ends(".log") || ends(".blob") || ends(".dbtmp"))
      continue;
    return false;
  }
  return !ec;
}

struct OfflineOpts {
  std::string backing, index_dir;
  bool verbose = false;
};

class Fsck {
 public:
  explicit Fsck(const OfflineOpts& o) : o_(o) {}

  int run() {
    segs_ = open_backing(o_.backing);
    std::printf("kvfs fsck %s (backing id %s)\n", o_.backing.c_str(), segs_->backing_id().c_str());
    scan_segments();
    load_snapshots();
    check_namespace();
    verify_data();
    report();
    return problems_ == 0 ? kExitOk : kExitProblems;
  }

 private:
  struct Latest {
    uint64_t seq = 0;
    bool tomb = false;
    InodeSnapshot snap;
  };

  void problem(const std::string& m) {
    ++problems_;
    if (problems_ > 100) return;
    progress_clear();
    std::printf("problem: %s\n", m.c_str());
    if (problems_ == 100) std::printf("(further problems are counted, not shown)\n");
    std::fflush(stdout);
  }
  void warning(const std::string& m) {
    ++warnings_;
    progress_clear();
    std::printf("warning: %s\n", m.c_str());
    std::fflush(stdout);
  }
  void progress_clear() {
    if (bar_) bar_->clear();
  }

  void scan_segments() {
    auto list = segs_->list();
    bar_ = std::make_unique<Progress>("scan segments");
    uint64_t done = 0;
    for (const SegmentInfo& seg : list) {
      uint64_t valid = 0;
      Status s = segs_->scan(
          seg.id,
          [&](uint64_t, const RecordHeader&, std::vector<RecordEntry>& entries) {
            ++records_;
            for (auto& e : entries) {
              Latest& l = latest_[e.snap.ino];
              if (e.snap.seq < l.seq) continue;
              l.seq = e.snap.seq;
              l.tomb = e.kind == EntryKind::kTombstone;
              if (!l.tomb) l.snap = std::move(e.snap);
            }
          },
          &valid);
      if (!s.ok()) {
        problem("segment " + seg.path + ": cannot scan: " + s.ToString());
      } else if (valid < seg.bytes) {
        ++torn_;
        warning("segment " + seg.path + ": " + std::to_string(seg.bytes - valid) +
                " bytes after the last complete record (a crash's torn tail; ignored)");
      }
      valid_[seg.id] = valid;
      seg_bytes_ += seg.bytes;
      bar_->update(++done, list.size());
    }
    bar_.reset();
    segments_ = list.size();
  }

  void from_segments() {
    from_index_ = false;
    snaps_.clear();
    for (auto& [ino, l] : latest_)
      if (!l.tomb) snaps_.push_back(l.snap);
  }

  void load_snapshots() {
    index_dir_ = o_.index_dir.empty() ? default_index_dir(segs_->backing_id()) : o_.index_dir;
    if (!fs::exists(fs::path(index_dir_) / "CURRENT")) {
      warning("no index at " + index_dir_ +
              " (kvfs rebuilds it from the segments at the next mount); checking the "
              "segments' latest snapshots instead");
      return from_segments();
    }
    auto idx = Index::Open(index_dir_);
    if (!idx.ok()) {
      problem("cannot open the index at " + index_dir_ + ": " + idx.status().ToString() +
              " (kvfs-admin rebuild-index recreates it)");
      return from_segments();
    }
    auto id = (*idx)->get_meta("backing_id");
    if (!id.ok() || *id != segs_->backing_id()) {
      warning("the index at " + index_dir_ + " " +
              (id.ok() ? "belongs to another backing directory (" + *id + ")"
                       : "carries no backing id") +
              "; kvfs rebuilds it at the next mount; checking the segments instead");
      return from_segments();
    }
    Status s = (*idx)->load_all([&](InodeSnapshot&& snap) { snaps_.push_back(std::move(snap)); });
    if (!s.ok()) {
      problem("the index at " + index_dir_ + " is unreadable: " + s.ToString() +
              " (kvfs-admin rebuild-index recreates it)");
      return from_segments();
    }
    from_index_ = true;
    // The index against the segments: a rebuild keeps the newest snapshot
    // per inode, so both should agree after a clean unmount.
    std::set<uint64_t> in_index;
    uint64_t newer = 0, stale = 0, missing = 0;
    for (const auto& snap : snaps_) {
      in_index.insert(snap.ino);
      auto it = latest_.find(snap.ino);
      if (it == latest_.end() || it->second.seq < snap.seq)
        ++newer;
      else if (it->second.seq > snap.seq)
        ++stale;
    }
    for (auto& [ino, l] : latest_)
      if (!l.tomb && !in_index.count(ino)) ++missing;
    if (newer)
      warning(std::to_string(newer) +
              " index entries are newer than the segments (not yet written there; a "
              "rebuild would return their previous state)");
    if (stale)
      warning(std::to_string(stale) + " index entries are older than the segments' latest record");
    if (missing)
      warning(std::to_string(missing) +
              " inodes in the segments are not in the index (a rebuild would bring them back)");
  }

  std::string path_of(uint64_t ino) const {
    std::vector<std::string> parts;
    std::set<uint64_t> seen;
    while (ino != kRootIno && seen.insert(ino).second) {
      auto it = by_ino_.find(ino);
      if (it == by_ino_.end()) {
        parts.push_back("<inode " + std::to_string(ino) + ">");
        break;
      }
      parts.push_back(printable(it->second->name));
      ino = it->second->parent;
    }
    std::string p;
    for (auto it = parts.rbegin(); it != parts.rend(); ++it) p += "/" + *it;
    return p.empty() ? "/" : p;
  }

  void check_namespace() {
    for (const auto& s : snaps_) by_ino_[s.ino] = &s;
    for (const auto& s : snaps_) {
      if (S_ISDIR(s.mode))
        ++dirs_;
      else if (S_ISREG(s.mode))
        ++files_;
      if (s.ino == kRootIno) continue;
      auto p = by_ino_.find(s.parent);
      if (s.parent != kRootIno && (p == by_ino_.end() || !S_ISDIR(p->second->mode)))
        problem("inode " + std::to_string(s.ino) + " ('" + printable(s.name) +
                "') has no parent directory (inode " + std::to_string(s.parent) +
                "); kvfs drops it at mount");
      for (const auto& be : s.extents) {
        ++extents_;
        data_bytes_ += be.ext.len;
      }
    }
  }

  void verify_data() {
    AlignedBuf buf(kBlockSize);
    bar_ = std::make_unique<Progress>("verify data");
    uint64_t done = 0;
    for (const auto& s : snaps_) {
      for (const auto& be : s.extents) {
        const Extent& e = be.ext;
        const std::string where = "file " + path_of(s.ino) + " (inode " + std::to_string(s.ino) +
                                  "), block " + std::to_string(be.idx);
        auto v = valid_.find(e.seg);
        if (!segs_->has_segment(e.seg)) {
          problem(where + ": segment " + std::to_string(e.seg) + " is missing");
        } else if (e.len > kBlockSize) {
          problem(where + ": extent length " + std::to_string(e.len) + " is too large");
        } else if (v != valid_.end() && e.off + e.len > v->second) {
          problem(where + ": lies past the last complete record of segment " +
                  std::to_string(e.seg) + " (lost if the index is rebuilt)");
        } else if (Status st = segs_->read_extent(e, buf.data); !st.ok()) {
          problem(where + ": " + st.ToString());
        } else {
          ++verified_;
        }
        done += e.len;
        bar_->update(done, data_bytes_);
      }
    }
    bar_.reset();
  }

  void report() {
    std::printf("segments: %llu (%s), %llu records, %llu torn tails\n",
                static_cast<unsigned long long>(segments_), human_bytes(double(seg_bytes_)).c_str(),
                static_cast<unsigned long long>(records_), static_cast<unsigned long long>(torn_));
    std::printf("%s: %s, %llu inodes (%llu files, %llu directories)\n",
                from_index_ ? "index" : "segments' latest snapshots",
                from_index_ ? index_dir_.c_str() : "no usable index",
                static_cast<unsigned long long>(snaps_.size()),
                static_cast<unsigned long long>(files_), static_cast<unsigned long long>(dirs_));
    std::printf(
        "data: %llu of %llu blocks verified (%s)\n", static_cast<unsigned long long>(verified_),
        static_cast<unsigned long long>(extents_), human_bytes(double(data_bytes_)).c_str());
    if (problems_ == 0)
      std::printf("clean%s\n",
                  warnings_ ? (" (" + std::to_string(warnings_) + " warnings)").c_str() : "");
    else
      std::printf("%llu problems found\n", static_cast<unsigned long long>(problems_));
  }

  struct AlignedBuf {
    explicit AlignedBuf(size_t n) {
      if (posix_memalign(reinterpret_cast<void**>(&data), kAlign, n) != 0) throw std::bad_alloc();
    }
    ~AlignedBuf() { std::free(data); }
    char* data = nullptr;
  };

  OfflineOpts o_;
  std::unique_ptr<SegmentStore> segs_;
  std::unique_ptr<Progress> bar_;
  std::unordered_map<uint64_t, Latest> latest_;
  std::unordered_map<uint64_t, uint64_t> valid_;  // segment id -> bytes of complete records
  std::vector<InodeSnapshot> snaps_;
  std::unordered_map<uint64_t, const InodeSnapshot*> by_ino_;
  std::string index_dir_;
  bool from_index_ = false;
  uint64_t segments_ = 0, seg_bytes_ = 0, records_ = 0, torn_ = 0;
  uint64_t files_ = 0, dirs_ = 0, extents_ = 0, data_bytes_ = 0, verified_ = 0;
  uint64_t problems_ = 0, warnings_ = 0;
};

int cmd_rebuild_index(const OfflineOpts& o) {
  auto segs = open_backing(o.backing);
  const std::string dir = o.index_dir.empty() ? default_index_dir(segs->backing_id()) : o.index_dir;
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    if (!fs::is_directory(dir, ec)) fail(kExitUnreachable, dir + " is not a directory");
    if (!looks_like_rocksdb_dir(dir))
      fail(kExitUnreachable,
           dir + " holds files that are not a kvfs index; remove them or choose --index-dir");
    Status s = Index::Destroy(dir);
    if (!s.ok()) fail(kExitUnreachable, "cannot remove the old index: " + s.ToString());
  }
  fs::create_directories(dir, ec);
  if (ec) fail(kExitUnreachable, "cannot create " + dir + ": " + ec.message());
  ::chmod(dir.c_str(), 0700);
  auto idx = Index::Open(dir);
  if (!idx.ok()) fail(kExitUnreachable, "cannot create the index: " + idx.status().ToString());
  RebuildStats st;
  Status s;
  {
    Progress bar("rebuild index");
    s = rebuild_index(*segs, **idx, &st,
                      [&](uint64_t done, uint64_t total) { bar.update(done, total); });
  }
  if (!s.ok()) fail(kExitUnreachable, "rebuild failed: " + s.ToString());
  std::printf(
      "index rebuilt in %s: %llu segments, %llu records, %llu inodes, %llu tombstones, %llu "
      "torn tails\n",
      dir.c_str(), static_cast<unsigned long long>(st.segments),
      static_cast<unsigned long long>(st.records), static_cast<unsigned long long>(st.inodes),
      static_cast<unsigned long long>(st.tombstones),
      static_cast<unsigned long long>(st.torn_tails));
  return kExitOk;
}

// ---------------------------------------------------------------------------

constexpr const char* kFooter = R"(
Exit status: 0 ok, 1 usage, 2 not a kvfs mount / cannot reach the daemon /
backing dir unusable, 3 the daemon refused the request, 4 fsck found problems.
See kvfs-admin(8).)";

int run(int argc, char** argv) {
  CLI::App app{"kvfs-admin: inspect and steer a mounted kvfs; check or repair a backing dir",
               "kvfs-admin"};
  app.footer(kFooter);
  app.require_subcommand(1);
  app.set_version_flag("-V,--version", std::string("kvfs-admin ") + KVFS_VERSION);

  StatsOpts so;
  auto* stats = app.add_subcommand("stats", "show the daemon's counters");
  stats->add_option("MOUNT", so.mount, "kvfs mount point")->required();
  auto* fj = stats->add_flag("--json", so.json_out, "print the daemon's JSON");
  auto* fp = stats->add_flag("--prometheus", so.prometheus,
                             "Prometheus text format (node_exporter textfile collector)");
  fj->excludes(fp);
  stats->add_option("--watch", so.watch, "repeat every SECONDS")
      ->check(CLI::PositiveNumber)
      ->type_name("SECONDS");
  stats->add_option("-o,--output", so.output, "write to FILE atomically instead of stdout")
      ->type_name("FILE");

  EvictOpts eo;
  auto* evict = app.add_subcommand("evict", "remove files from the cache now");
  evict->add_option("MOUNT", eo.mount, "kvfs mount point")->required();
  auto* mode = evict->add_option_group("mode", "what to evict (exactly one)");
  mode->add_option("--path", eo.path, "one file (absolute, or relative to MOUNT)");
  mode->add_option("--prefix", eo.prefix, "every file under a directory");
  mode->add_flag("--all", eo.all, "every file");
  mode->add_option("--to-size", eo.to_size, "least recently used files until SIZE is left")
      ->type_name("SIZE");
  mode->add_option("--older-than", eo.older_than, "files not used for DURATION (30s 10m 2h 1d)")
      ->type_name("DURATION");
  mode->require_option(1);
  evict->add_flag("--force", eo.force, "also open, dirty and recently used files");
  evict->add_flag("--dry-run", eo.dry_run, "only report what would be evicted");

  std::string flush_mount;
  bool flush_wait = false;
  auto* flush = app.add_subcommand("flush", "write every dirty file to the backing dir");
  flush->add_option("MOUNT", flush_mount, "kvfs mount point")->required();
  flush->add_flag("--wait", flush_wait, "return once everything is written and committed");

  LsOpts lo;
  auto* ls = app.add_subcommand("ls", "list a directory with tier, size and last access");
  ls->add_option("MOUNT", lo.mount, "kvfs mount point")->required();
  ls->add_option("PATH", lo.path, "directory or file (absolute, or relative to MOUNT)");
  ls->add_flag("--json", lo.json_out, "print JSON");
  ls->add_flag("--bytes", lo.bytes, "exact sizes in bytes");

  std::string config_mount;
  std::vector<std::string> config_args;
  auto* config = app.add_subcommand("config", "show or change runtime settings");
  config->add_option("MOUNT", config_mount, "kvfs mount point")->required();
  config->add_option("KEY[=VALUE]", config_args,
                     "setting to show, or to change (capacity, ram_size, evict_grace, "
                     "log_level)");

  std::string version_mount;
  auto* version = app.add_subcommand("version", "print the version (and the daemon's)");
  version->add_option("MOUNT", version_mount, "also ask the daemon at MOUNT");

  OfflineOpts fo;
  auto* fsck = app.add_subcommand("fsck", "check an unmounted backing dir and its index");
  fsck->add_option("BACKING_DIR", fo.backing, "backing directory")->required();
  fsck->add_option("--index-dir", fo.index_dir, "index location (default /var/lib/kvfs/<id>)")
      ->type_name("DIR");

  OfflineOpts ro;
  auto* rebuild =
      app.add_subcommand("rebuild-index", "recreate the index of an unmounted backing dir");
  rebuild->add_option("BACKING_DIR", ro.backing, "backing directory")->required();
  rebuild->add_option("--index-dir", ro.index_dir, "index location (default /var/lib/kvfs/<id>)")
      ->type_name("DIR");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitUsage;
  }

  if (*stats) return cmd_stats(so);
  if (*evict) return cmd_evict(eo);
  if (*flush) return cmd_flush(flush_mount, flush_wait);
  if (*ls) return cmd_ls(lo);
  if (*config) return cmd_config(config_mount, config_args);
  if (*version) return cmd_version(version_mount);
  if (*fsck) {
    setup_logging();
    return Fsck(fo).run();
  }
  if (*rebuild) {
    setup_logging();
    return cmd_rebuild_index(ro);
  }
  return kExitUsage;
}

}  // namespace
}  // namespace kvfs::admin

int main(int argc, char** argv) {
  try {
    return kvfs::admin::run(argc, argv);
  } catch (const kvfs::admin::Failure& f) {
    std::fflush(stdout);
    std::fprintf(stderr, "kvfs-admin: %s\n", f.msg.c_str());
    return f.code;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "kvfs-admin: %s\n", e.what());
    return kvfs::admin::kExitUnreachable;
  }
}
