// SPDX-License-Identifier: Apache-2.0
#include "tools/admin_format.h"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <stdexcept>
#include <utility>
#include <vector>

#include "core/config/config.h"
#include "core/config/option_table.h"
#include "fs/prom_text.h"
#include "fs/stats_schema.h"
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

namespace {

// A statistic of the schema (fs/stats_schema.h) in a stats reply: a path
// the schema lacks is a bug here, not a missing value.
double stat(const json& s, const char* path) {
  const stats::Def* d = stats::find(path);
  if (!d) throw std::logic_error(std::string("not in the stats schema: ") + path);
  double v = 0;
  return stats::number_at(s, *d, &v) ? v : 0.0;
}

uint64_t ustat(const json& s, const char* path) {
  return static_cast<uint64_t>(stat(s, path));
}

std::string unit_text(stats::Unit u, double v) {
  char b[64];
  switch (u) {
    case stats::Unit::kBytes:
      return v < 1024 ? prom::number(v) : prom::number(v) + " (" + human_bytes(v) + ")";
    case stats::Unit::kSeconds: std::snprintf(b, sizeof(b), "%.3f s", v); return b;
    case stats::Unit::kRatio: std::snprintf(b, sizeof(b), "%.3f", v); return b;
    case stats::Unit::kFlag: return v != 0 ? "yes" : "no";
    default: return prom::number(v);
  }
}

// The first sentence of a help text, for one line of --all.
std::string first_sentence(const char* help) {
  std::string h(help);
  const size_t dot = h.find(". ");
  return dot == std::string::npos ? h : h.substr(0, dot + 1);
}

}  // namespace

std::string render_table(const std::string& root, const json& s, const json* prev, double dt) {
  std::string o;
  char line[512];
  auto add = [&](const char* label, const std::string& text) {
    std::snprintf(line, sizeof(line), "%-14s %s\n", label, text.c_str());
    o += line;
  };
  auto rate = [&](const char* ptr) -> std::string {
    if (!prev || dt <= 0) return "";
    const double d = stat(s, ptr) - stat(*prev, ptr);
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
  add("files", std::to_string(ustat(s, "/files")) + " in " +
                   std::to_string(ustat(s, "/directories")) + " directories, " +
                   human_bytes(stat(s, "/logical_bytes")) + " logical");
  add("RAM tier", human_bytes(stat(s, "/ram/used_bytes")) + " of " +
                      human_bytes(stat(s, "/ram/capacity_bytes")) + " used (" +
                      pct(stat(s, "/ram/used_bytes"), stat(s, "/ram/capacity_bytes")) + "), " +
                      human_bytes(stat(s, "/ram/dirty_bytes")) + " dirty, " +
                      std::to_string(ustat(s, "/ram/cached_blocks")) + " cached blocks");
  add("backing dir", human_bytes(stat(s, "/backing/used_bytes")) + " of " +
                         human_bytes(stat(s, "/backing/capacity_bytes")) + " used (" +
                         pct(stat(s, "/backing/used_bytes"), stat(s, "/backing/capacity_bytes")) +
                         "), " + std::to_string(ustat(s, "/backing/segments")) + " segments, " +
                         pct(stat(s, "/backing/live_ratio"), 1.0) + " live");
  // A stall is news: one line while it lasts, or when there were any.
  if (stat(s, "/backing/stalled_flag") > 0 || stat(s, "/backing/stalls") > 0) {
    char b[160];
    std::snprintf(b, sizeof(b),
                  "%s; %.0f stalls, %.1f s in all; %.0f calls failed after io_timeout %g s",
                  stat(s, "/backing/stalled_flag") > 0 ? "STALLED now" : "answering",
                  stat(s, "/backing/stalls"), stat(s, "/backing/stalled_seconds"),
                  stat(s, "/backing/timeouts"), stat(s, "/backing/io_timeout"));
    add("backing stall", b);
  }
  const double hr = stat(s, "/hits/ram"), hb = stat(s, "/hits/backing");
  add("hits", "RAM " + std::to_string(ustat(s, "/hits/ram")) + rate("/hits/ram") + ", backing " +
                  std::to_string(ustat(s, "/hits/backing")) + rate("/hits/backing") +
                  " blocks; RAM hit ratio " + pct(hr, hr + hb));
  add("misses", std::to_string(ustat(s, "/misses")) + rate("/misses") + " lookups of absent names");
  // Nodes sharing the backing dir: what this node sees of each.
  const json::json_pointer pn("/peers/nodes");
  if (s.contains(pn) && s.at(pn).is_array() && !s.at(pn).empty()) {
    add("file hits", std::to_string(ustat(s, "/cache/own_file_hits")) + " own, " +
                         std::to_string(ustat(s, "/cache/peer_file_hits")) + " a peer's (" +
                         human_bytes(stat(s, "/peers/read_bytes")) + " read); whole dir " +
                         human_bytes(stat(s, "/backing/dir_used_bytes")) + " used");
    for (const json& n : s.at(pn)) {
      char b[256];
      std::snprintf(b, sizeof(b), "%s: %llu files, %s in %llu segments; %.1f s behind, %s unread",
                    n.value("node", "?").c_str(), (unsigned long long)n.value("files", 0ull),
                    human_bytes(n.value("bytes", 0.0)).c_str(),
                    (unsigned long long)n.value("segments", 0ull), n.value("lag_seconds", 0.0),
                    human_bytes(n.value("behind_bytes", 0.0)).c_str());
      add("peer", b);
    }
  }
  add("prefetch", std::to_string(ustat(s, "/prefetch/reads")) + " blocks read ahead (" +
                      human_bytes(stat(s, "/prefetch/read_bytes")) + "), " +
                      std::to_string(ustat(s, "/prefetch/used_blocks")) + " used, " +
                      std::to_string(ustat(s, "/prefetch/wasted_blocks")) + " wasted, " +
                      std::to_string(ustat(s, "/prefetch/cancelled_blocks")) + " cancelled, " +
                      std::to_string(ustat(s, "/prefetch/no_room_blocks")) + " no room; " +
                      human_bytes(stat(s, "/prefetch/pending_bytes")) + " in flight of " +
                      human_bytes(stat(s, "/prefetch/budget_bytes")));
  add("flush", std::to_string(ustat(s, "/flush/queued")) + " queued, " +
                   std::to_string(ustat(s, "/flush/files")) + " files / " +
                   human_bytes(stat(s, "/flush/bytes")) + " written in " +
                   std::to_string(ustat(s, "/flush/batches")) + " batches");
  add("evictions", std::to_string(ustat(s, "/evictions/capacity")) + " capacity, " +
                       std::to_string(ustat(s, "/evictions/admin")) + " admin, " +
                       std::to_string(ustat(s, "/evictions/tmp")) + " tmp, " +
                       std::to_string(ustat(s, "/evictions/reclaim")) + " reclaim files; " +
                       human_bytes(stat(s, "/evictions/bytes")) + "; " +
                       std::to_string(ustat(s, "/evictions/segments_deleted")) +
                       " segments deleted");
  add("errors", std::to_string(ustat(s, "/errors/checksum")) + " checksum, " +
                    std::to_string(ustat(s, "/errors/io")) + " I/O, " +
                    std::to_string(ustat(s, "/errors/enospc")) + " ENOSPC; " +
                    std::to_string(ustat(s, "/errors/dropped_files")) + " files dropped");
  std::string lat;
  for (const char* op : prom::kLatencyOps) {
    const std::string base = std::string("/latency/") + op;
    char b[128];
    std::snprintf(b, sizeof(b), "%s%s %.0f/%.0f", lat.empty() ? "" : ", ", op,
                  num(s, (base + "/p50_us").c_str()), num(s, (base + "/p99_us").c_str()));
    lat += b;
  }
  add("latency (us)", lat + "  (p50/p99)");
  return o;
}

std::string render_all(const json& s) {
  std::string o;
  char line[1024];
  for (const stats::Def& d : stats::defs()) {
    double v = 0;
    const bool have = stats::number_at(s, d, &v);
    std::string name = d.path + 1;
    for (char& c : name)
      if (c == '/') c = '.';
    std::snprintf(line, sizeof(line), "%-32s %-24s %s\n", name.c_str(),
                  have ? unit_text(d.unit, v).c_str() : "-", first_sentence(d.help).c_str());
    o += line;
  }
  const json::json_pointer pn("/peers/nodes");
  if (s.contains(pn) && s.at(pn).is_array()) {
    for (const json& n : s.at(pn)) {
      for (const stats::NodeDef& d : stats::node_defs()) {
        const std::string name = "peers.nodes[" + printable(n.value("node", "?")) + "]." + d.key;
        const double v = n.contains(d.key) && n[d.key].is_number() ? n[d.key].get<double>() : 0;
        std::snprintf(line, sizeof(line), "%-32s %-24s %s\n", name.c_str(),
                      unit_text(d.unit, v).c_str(), first_sentence(d.help).c_str());
        o += line;
      }
    }
  }
  return o;
}

namespace {

bool is_size_key(const std::string& k) {
  const StoreOption* o = find_store_option(k);
  return o && o->spec.type == OptType::kSize;
}

}  // namespace

std::string config_value(const std::string& k, const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (is_size_key(k) && v.is_number_unsigned()) {
    const uint64_t b = v.get<uint64_t>();
    std::string f = format_size(b);
    if (!f.empty() && std::isdigit(static_cast<unsigned char>(f.back())))
      f = human_bytes(double(b));
    return f + " (" + std::to_string(b) + " bytes)";
  }
  if (v.is_number_float()) return prom::number(v.get<double>());
  return v.dump();
}

}  // namespace kvfs::admin
