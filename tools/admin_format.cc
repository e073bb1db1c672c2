#include "tools/admin_format.h"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <utility>
#include <vector>

#include "core/config.h"
#include "tools/admin_exit.h"

namespace kvfs::admin {

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
// stats

std::string render_table(const std::string& root, const json& s, const json* prev, double dt) {
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
  o += "kvfs at " + root + "\n";
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

namespace {

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

bool is_size_key(const std::string& k) {
  return k == "ram_size" || k == "capacity" || k == "segment_size";
}

}  // namespace

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

}  // namespace kvfs::admin
