// SPDX-License-Identifier: Apache-2.0
// nfsemu's cost model: presets, options, the sleeps and the counters.
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <sstream>
#include <vector>

#include "bench/nfsemu.h"

namespace nfsemu {

const char* const kOpNames[kOpCount] = {"lookup",    "getattr", "setattr", "readdir",    "mkdir",
                                        "rmdir",     "create",  "open",    "read",       "write",
                                        "flush",     "release", "fsync",   "fsyncdir",   "rename",
                                        "unlink",    "link",    "symlink", "readlink",   "statfs",
                                        "fallocate", "forget",  "opendir", "releasedir", "access"};

namespace {

struct Preset {
  const char* name;
  double rtt_us, data_us, bw_mbps, jitter;
  unsigned layout_rtt;
  const char* what;  // what it stands for and where the figures come from
};

// Typical published ranges, not measurements of one system: see nfsemu.cc.
const Preset kPresets[] = {
    {"none", 0, 0, 0, 0, 0,
     "pure passthrough, no modelled cost: the emulator's own overhead (FUSE round trip, "
     "one copy) against the bare directory"},
    {"lan-nfs", 400, 500, 1100, 0.1, 0,
     "NFSv4.1/4.2 over 10/25 GbE, one switch hop: metadata RPC 0.3-0.5 ms (nfsiostat/"
     "mountstats RTTs commonly reported for kernel NFS servers on a LAN), 0.5 ms per 1 MiB "
     "READ/WRITE request, 1.1 GB/s (10 GbE line rate less protocol overhead)"},
    {"pnfs-rdma", 200, 75, 6000, 0.1, 1,
     "pNFS with RDMA (NFS/RDMA, 100 Gb/s IB or RoCE) data servers: metadata ~0.2 ms to the "
     "MDS plus one LAYOUTGET/LAYOUTCOMMIT round trip on open/create/fsync, 0.05-0.1 ms per "
     "data request, several GB/s per client (vendor and NFS/RDMA papers' single-client "
     "figures: 5-10 GB/s)"},
    {"cloud-nfs", 1500, 2000, 500, 0.2, 0,
     "a managed cloud NFS service: 'low single-digit ms' metadata and data latency (cloud "
     "vendors' documentation), ~0.5 GB/s per client"},
};

Config g_cfg;

struct Counters {
  std::atomic<uint64_t> ops[kOpCount]{};
  std::atomic<uint64_t> bytes_read{0}, bytes_written{0}, round_trips{0}, errors{0};
  std::atomic<uint64_t> commits{0};  // at close, for direct writes
  std::atomic<uint64_t> modelled_ns{0};
  uint64_t start_ns = 0;
};
Counters g_count;

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void sleep_until(uint64_t t) {
  timespec ts{static_cast<time_t>(t / 1000000000ull), static_cast<long>(t % 1000000000ull)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

// The default 50 us timer slack would overshoot a 0.2 ms round trip by 25%.
void tighten_slack() {
  thread_local bool done = false;
  if (!done) {
    prctl(PR_SET_TIMERSLACK, 1ul, 0, 0, 0);
    done = true;
  }
}

uint64_t jittered(uint64_t ns) {
  if (g_cfg.jitter <= 0 || ns == 0) return ns;
  thread_local std::mt19937_64 rng(std::random_device{}());
  std::uniform_real_distribution<double> d(1.0 - g_cfg.jitter, 1.0 + g_cfg.jitter);
  return static_cast<uint64_t>(static_cast<double>(ns) * d(rng));
}

// A token bucket as a virtual clock: each request reserves size/rate of link
// time after the previous reservation; the bucket's depth (one 1 MiB request)
// is credit an idle link has saved up. Shared by all threads.
class Bucket {
 public:
  // Returns when the request's last byte would have crossed the link.
  uint64_t reserve(uint64_t bytes, uint64_t now) {
    if (g_cfg.bw_bytes_s <= 0) return now;
    const auto cost = static_cast<uint64_t>(static_cast<double>(bytes) * 1e9 / g_cfg.bw_bytes_s);
    const auto depth = static_cast<uint64_t>((1 << 20) * 1e9 / g_cfg.bw_bytes_s);
    std::lock_guard l(mu_);
    next_ = std::max(next_, now > depth ? now - depth : 0) + cost;
    return next_;
  }

 private:
  std::mutex mu_;
  uint64_t next_ = 0;  // guarded by mu_
};
Bucket g_read_bucket, g_write_bucket;

bool parse_double(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (errno || *end != '\0' || !std::isfinite(v) || v < 0) return false;
  *out = v;
  return true;
}

}  // namespace

bool apply_preset(const std::string& name, Config* cfg) {
  for (const Preset& p : kPresets) {
    if (name != p.name) continue;
    cfg->preset = p.name;
    cfg->rtt_ns = static_cast<uint64_t>(p.rtt_us * 1000);
    cfg->data_ns = static_cast<uint64_t>(p.data_us * 1000);
    cfg->bw_bytes_s = p.bw_mbps * 1e6;
    cfg->jitter = p.jitter;
    cfg->layout_rtt = p.layout_rtt;
    return true;
  }
  return false;
}

std::string take_options(const std::string& opts, Config* cfg, std::string* err) {
  std::string rest;
  std::stringstream ss(opts);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    const std::string val = eq == std::string::npos ? "" : item.substr(eq + 1);
    double v = 0;
    auto num = [&](double max) {
      if (parse_double(val, &v) && v <= max) return true;
      *err = "bad value for " + key + ": '" + val + "'";
      return false;
    };
    auto flag = [&](bool* b) {
      if (val != "0" && val != "1") {
        *err = key + " takes 0 or 1";
        return false;
      }
      *b = val == "1";
      return true;
    };
    if (key == "stats") {
      cfg->stats_path = val;
    } else if (key == "pidfile") {
      cfg->pidfile = val;
    } else if (key == "rtt_us" || key == "data_us") {
      if (!num(1e7)) return "";
      (key == "rtt_us" ? cfg->rtt_ns : cfg->data_ns) = static_cast<uint64_t>(v * 1000);
    } else if (key == "bw_mbps") {
      if (!num(1e7)) return "";
      cfg->bw_bytes_s = v * 1e6;
    } else if (key == "jitter") {
      if (!num(1)) return "";
      cfg->jitter = v;
    } else if (key == "attr_timeout") {
      if (!num(1e6)) return "";
      cfg->attr_timeout = v;
    } else if (key == "layout_rtt" || key == "close_rtt") {
      if (!num(100)) return "";
      (key == "layout_rtt" ? cfg->layout_rtt : cfg->close_rtt) = static_cast<unsigned>(v);
    } else if (key == "threads") {
      if (!num(1024)) return "";
      cfg->threads = std::max(1u, static_cast<unsigned>(v));
    } else if (key == "bw_shared") {
      if (!flag(&cfg->bw_shared)) return "";
    } else if (key == "fallocate") {
      if (!flag(&cfg->fallocate)) return "";
    } else if (key == "writeback") {
      if (!flag(&cfg->writeback)) return "";
    } else if (key == "direct_commit") {
      if (!flag(&cfg->direct_commit)) return "";
    } else {
      rest += "," + item;
    }
  }
  return rest;
}

std::string presets_help() {
  std::string s;
  char line[160];
  for (const Preset& p : kPresets) {
    std::snprintf(line, sizeof(line),
                  "  %-10s rtt_us=%g data_us=%g bw_mbps=%g jitter=%g layout_rtt=%u\n", p.name,
                  p.rtt_us, p.data_us, p.bw_mbps, p.jitter, p.layout_rtt);
    s += line;
    s += std::string("             ") + p.what + "\n";
  }
  return s;
}

void model_init(const Config& cfg) {
  g_cfg = cfg;
  g_count.start_ns = now_ns();
}

const Config& config() {
  return g_cfg;
}

void pay(Op op, unsigned rtts) {
  g_count.ops[op].fetch_add(1, std::memory_order_relaxed);
  if (rtts == 0 || g_cfg.rtt_ns == 0) return;
  tighten_slack();
  uint64_t wait = 0;
  for (unsigned i = 0; i < rtts; ++i) wait += jittered(g_cfg.rtt_ns);
  g_count.round_trips.fetch_add(rtts, std::memory_order_relaxed);
  g_count.modelled_ns.fetch_add(wait, std::memory_order_relaxed);
  sleep_until(now_ns() + wait);
}

uint64_t clock_ns() {
  return now_ns();
}

void pay_data(Op op, uint64_t bytes, uint64_t arrived_ns) {
  g_count.ops[op].fetch_add(1, std::memory_order_relaxed);
  (op == kRead ? g_count.bytes_read : g_count.bytes_written)
      .fetch_add(bytes, std::memory_order_relaxed);
  if (g_cfg.data_ns == 0 && g_cfg.bw_bytes_s <= 0) return;
  tighten_slack();
  Bucket& b = (g_cfg.bw_shared || op == kRead) ? g_read_bucket : g_write_bucket;
  const uint64_t done = b.reserve(bytes, arrived_ns) + jittered(g_cfg.data_ns);
  g_count.modelled_ns.fetch_add(done - arrived_ns, std::memory_order_relaxed);
  sleep_until(done);
}

void count_error() {
  g_count.errors.fetch_add(1, std::memory_order_relaxed);
}

void count_commit() {
  g_count.commits.fetch_add(1, std::memory_order_relaxed);
}

std::string stats_json() {
  std::string s = "{\"preset\":\"" + g_cfg.preset + "\"";
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                ",\"rtt_us\":%.1f,\"data_us\":%.1f,\"bw_mbps\":%.0f,\"bw_shared\":%s,"
                "\"jitter\":%g,\"attr_timeout\":%g,\"layout_rtt\":%u,\"close_rtt\":%u,"
                "\"direct_commit\":%s,\"uptime_s\":%.3f",
                static_cast<double>(g_cfg.rtt_ns) / 1e3, static_cast<double>(g_cfg.data_ns) / 1e3,
                g_cfg.bw_bytes_s / 1e6, g_cfg.bw_shared ? "true" : "false", g_cfg.jitter,
                g_cfg.attr_timeout, g_cfg.layout_rtt, g_cfg.close_rtt,
                g_cfg.direct_commit ? "true" : "false",
                static_cast<double>(now_ns() - g_count.start_ns) / 1e9);
  s += buf;
  s += ",\"ops\":{";
  for (int i = 0; i < kOpCount; ++i) {
    std::snprintf(buf, sizeof(buf), "%s\"%s\":%llu", i ? "," : "", kOpNames[i],
                  static_cast<unsigned long long>(g_count.ops[i].load()));
    s += buf;
  }
  std::snprintf(buf, sizeof(buf),
                "},\"bytes_read\":%llu,\"bytes_written\":%llu,\"round_trips\":%llu,"
                "\"errors\":%llu,\"commits\":%llu,\"modelled_wait_s\":%.6f}",
                static_cast<unsigned long long>(g_count.bytes_read.load()),
                static_cast<unsigned long long>(g_count.bytes_written.load()),
                static_cast<unsigned long long>(g_count.round_trips.load()),
                static_cast<unsigned long long>(g_count.errors.load()),
                static_cast<unsigned long long>(g_count.commits.load()),
                static_cast<double>(g_count.modelled_ns.load()) / 1e9);
  s += buf;
  return s;
}

void write_stats() {
  if (g_cfg.stats_path.empty()) return;
  const std::string tmp = g_cfg.stats_path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) return;
  const std::string line = stats_json() + "\n";
  const bool ok = std::fwrite(line.data(), 1, line.size(), f) == line.size();
  if (std::fclose(f) == 0 && ok) std::rename(tmp.c_str(), g_cfg.stats_path.c_str());
}

}  // namespace nfsemu
