// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the kvfs-bench subcommands (kvfs_bench.cc, replay.cc,
// replay_lmcache.cc, mrqa.cc, micro2.cc): errors, clocks, statistics, JSON output, aligned
// buffers, option parsing, path helpers and the vLLM file layout.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "bench/pattern.h"

namespace kvfs::bench {

inline constexpr uint64_t kChunk = 37748736;  // 256 tokens of Qwen3-8B bf16: 36 MiB
inline constexpr size_t kIoSize = 1u << 20;

[[noreturn]] inline void die(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::fputs("kvfs-bench: ", stderr);
  std::vfprintf(stderr, fmt, ap);
  std::fputc('\n', stderr);
  va_end(ap);
  std::exit(2);
}

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline double gbps(uint64_t bytes, double secs) {
  return secs > 0 ? bytes / secs / 1e9 : 0;
}

inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(p / 100.0 * (v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

inline double median(const std::vector<double>& v) {
  if (v.empty()) return 0;
  std::vector<double> s = v;
  std::sort(s.begin(), s.end());
  const size_t n = s.size();
  return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

inline std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof(b), "\\u%04x", c);
      o += b;
      continue;
    }
    o += c;
  }
  return o + "\"";
}

inline std::string json_list(const std::vector<double>& v) {
  std::string o = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    char b[32];
    std::snprintf(b, sizeof(b), "%s%.3f", i ? "," : "", v[i]);
    o += b;
  }
  return o + "]";
}

// Builds one flat JSON object: j.add("k", v) ... j.str().
class Json {
 public:
  Json& add(const std::string& k, const std::string& v) { return raw(k, json_str(v)); }
  Json& add(const std::string& k, const char* v) { return raw(k, json_str(v)); }
  Json& add(const std::string& k, double v, int prec = 3) {
    char b[64];
    std::snprintf(b, sizeof(b), "%.*f", prec, v);
    return raw(k, b);
  }
  Json& add(const std::string& k, uint64_t v) { return raw(k, std::to_string(v)); }
  Json& add(const std::string& k, int v) { return raw(k, std::to_string(v)); }
  Json& add(const std::string& k, unsigned v) { return raw(k, std::to_string(v)); }
  Json& add(const std::string& k, bool v) { return raw(k, v ? "true" : "false"); }
  Json& raw(const std::string& k, const std::string& v) {
    s_.push_back(s_.empty() ? '{' : ',');
    s_.append(json_str(k)).append(1, ':').append(v);
    return *this;
  }
  std::string str() const { return s_.empty() ? "{}" : s_ + "}"; }

 private:
  std::string s_;
};

// An aligned buffer, touched once so that timed code never faults it in.
struct AlignedBuf {
  explicit AlignedBuf(size_t n) : size(n) {
    const size_t cap = (n + kPage - 1) / kPage * kPage + kPage;
    p = static_cast<char*>(std::aligned_alloc(kPage, cap));
    if (!p) die("out of memory (%zu bytes)", cap);
    std::memset(p, 0, cap);
  }
  ~AlignedBuf() { std::free(p); }
  AlignedBuf(const AlignedBuf&) = delete;
  AlignedBuf& operator=(const AlignedBuf&) = delete;
  char* p;
  size_t size;
};

// --key value options after the subcommand and DIR.
class Args {
 public:
  Args(int argc, char** argv, int first, const std::set<std::string>& flags) {
    for (int i = first; i < argc; ++i) {
      std::string a = argv[i];
      if (a.rfind("--", 0) != 0) die("unexpected argument '%s'", a.c_str());
      a = a.substr(2);
      if (auto eq = a.find('='); eq != std::string::npos) {
        kv_[a.substr(0, eq)] = a.substr(eq + 1);
      } else if (flags.count(a)) {
        kv_[a] = "1";
      } else {
        if (i + 1 >= argc) die("--%s needs a value", a.c_str());
        kv_[a] = argv[++i];
      }
    }
  }
  bool has(const std::string& k) const { return kv_.count(k) != 0; }
  std::string str(const std::string& k, const std::string& def = "") {
    used_.insert(k);
    auto it = kv_.find(k);
    return it == kv_.end() ? def : it->second;
  }
  uint64_t num(const std::string& k, uint64_t def) {
    used_.insert(k);
    auto it = kv_.find(k);
    if (it == kv_.end()) return def;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(it->second.c_str(), &end, 10);
    uint64_t mult = 1;
    if (*end == 'K' || *end == 'k') mult = 1ull << 10, ++end;
    if (*end == 'M' || *end == 'm') mult = 1ull << 20, ++end;
    if (*end == 'G' || *end == 'g') mult = 1ull << 30, ++end;
    if (end == it->second.c_str() || *end)
      die("--%s: not a number: '%s'", k.c_str(), it->second.c_str());
    return v * mult;
  }
  double real(const std::string& k, double def) {
    used_.insert(k);
    auto it = kv_.find(k);
    return it == kv_.end() ? def : std::atof(it->second.c_str());
  }
  bool flag(const std::string& k) { return str(k, "0") != "0"; }
  void check_all_used() {
    for (auto& [k, v] : kv_)
      if (!used_.count(k)) die("unknown option --%s", k.c_str());
  }

 private:
  std::map<std::string, std::string> kv_;
  std::set<std::string> used_;
};

inline std::string join(const std::string& dir, const std::string& name) {
  if (!name.empty() && name[0] == '/') return name;
  return dir + "/" + name;
}

inline std::string parent_of(const std::string& p) {
  const size_t s = p.rfind('/');
  return s == std::string::npos ? "." : s == 0 ? "/" : p.substr(0, s);
}

inline bool exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

// os.makedirs(exist_ok=True): stat the parent, create it first if absent.
inline void mkdir_p(const std::string& p) {
  const std::string head = parent_of(p);
  if (head != p && head != "/" && head != "." && !exists(head)) mkdir_p(head);
  if (::mkdir(p.c_str(), 0755) != 0 && errno != EEXIST)
    die("mkdir %s: %s", p.c_str(), strerror(errno));
}

inline void fsync_dir(const std::string& d) {
  const int fd = ::open(d.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) die("open %s: %s", d.c_str(), strerror(errno));
  if (::fsync(fd) != 0) die("fsync %s: %s", d.c_str(), strerror(errno));
  ::close(fd);
}

// One full-size write; a short write is an error, as in vLLM.
inline void write_all_once(int fd, const char* buf, size_t size, const std::string& path) {
  const ssize_t r = ::write(fd, buf, size);
  if (r < 0) die("write %s: %s", path.c_str(), strerror(errno));
  if (static_cast<size_t>(r) != size) die("short write to %s: %zd of %zu", path.c_str(), r, size);
}

// 64 hex digits, a function of (a, b): the chunk hashes of the replays.
inline std::string hex64(uint64_t a, uint64_t b) {
  char h[65];
  for (int i = 0; i < 4; ++i)
    std::snprintf(h + 16 * i, 17, "%016llx", (unsigned long long)splitmix64(a * 4 + i + (b << 20)));
  return std::string(h, 64);
}

// vLLM fs tier block path: <rank_dir>/<h[0:3]>/<h[3:5]>_g0/<h>.bin
inline std::string vllm_block_path(const std::string& rank_dir, const std::string& h) {
  return rank_dir + "/" + h.substr(0, 3) + "/" + h.substr(3, 2) + "_g0/" + h + ".bin";
}

// Files and directories under a path (not following symlinks), recursively.
struct TreeCount {
  uint64_t files = 0, dirs = 0, bytes = 0;
};
inline void count_tree(const std::string& path, TreeCount* c) {
  DIR* d = ::opendir(path.c_str());
  if (!d) return;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    struct stat st;
    const std::string p = path + "/" + n;
    if (::lstat(p.c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      ++c->dirs;
      count_tree(p, c);
    } else {
      ++c->files;
      c->bytes += static_cast<uint64_t>(st.st_size);
    }
  }
  ::closedir(d);
}

// A per-thread pseudo-random stream (tmp name suffixes, sampling).
inline uint64_t rand64() {
  thread_local uint64_t state =
      splitmix64(reinterpret_cast<uintptr_t>(&state) ^ static_cast<uint64_t>(now_s() * 1e9) ^
                 static_cast<uint64_t>(::getpid()) << 32);
  state += 0x9e3779b97f4a7c15ull;
  return splitmix64(state);
}

// vLLM fs tier store of one block: access(F_OK) (skip when present), mkdir -p
// of the parents, open(dest_<random>.tmp, O_CREAT|O_EXCL|O_WRONLY|O_TRUNC|
// O_DIRECT), ONE write, close, rename over dest. Returns false when skipped.
// The random part is a decimal number drawn once per I/O thread, as vLLM
// 0.33.0's tier does (tests/clients/ traced it): one thread reuses it for
// every block it stores.
inline bool vllm_store(const std::string& dest, const char* buf, size_t size, bool direct) {
  if (::access(dest.c_str(), F_OK) == 0) return false;
  mkdir_p(parent_of(dest));
  thread_local const std::string suffix = "_" + std::to_string(rand64() >> 1) + ".tmp";
  const std::string tmp = dest + suffix;
  const int fd =
      ::open(tmp.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_TRUNC | (direct ? O_DIRECT : 0), 0644);
  if (fd < 0) die("create %s: %s", tmp.c_str(), strerror(errno));
  const ssize_t r = ::write(fd, buf, size);
  if (r < 0 || static_cast<size_t>(r) != size) {
    const int e = errno;
    ::unlink(tmp.c_str());
    if (r < 0) die("write %s: %s", tmp.c_str(), strerror(e));
    die("short write to %s: %zd of %zu", tmp.c_str(), r, size);
  }
  if (::close(fd) != 0) die("close %s: %s", tmp.c_str(), strerror(errno));
  if (::rename(tmp.c_str(), dest.c_str()) != 0) die("rename %s: %s", tmp.c_str(), strerror(errno));
  return true;
}

// vLLM fs tier load: open(O_RDONLY|O_DIRECT), ONE read() of the whole block.
// Dies on an error or a short read (vLLM would drop the block: never expected).
inline void vllm_load(const std::string& path, char* buf, size_t size, bool direct) {
  const int fd = ::open(path.c_str(), O_RDONLY | (direct ? O_DIRECT : 0));
  if (fd < 0) die("open %s: %s", path.c_str(), strerror(errno));
  const ssize_t r = ::read(fd, buf, size);
  const int e = errno;
  ::close(fd);
  if (r < 0) die("read %s: %s", path.c_str(), strerror(e));
  if (static_cast<size_t>(r) != size) die("short read of %s: %zd of %zu", path.c_str(), r, size);
}

// Checks a whole file's content read into buf; dies on the first wrong byte.
inline void check_content(const char* buf, const char* base, size_t size, const std::string& path) {
  const int64_t bad = verify_content(buf, base, size, name_seed(path));
  if (bad >= 0) die("%s: wrong content at offset %lld", path.c_str(), (long long)bad);
}

// vLLM's startup O_DIRECT probe: 4096 B written with O_DIRECT to
// <base>/.o_direct_probe_<random>.tmp, then unlinked. False: buffered I/O.
inline bool vllm_probe_o_direct(const std::string& base) {
  const std::string p = base + "/.o_direct_probe_" + std::to_string(rand64() >> 1) + ".tmp";
  const int fd = ::open(p.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_DIRECT, 0644);
  if (fd < 0) return false;
  AlignedBuf b(kPage);
  const bool ok = ::write(fd, b.p, kPage) == static_cast<ssize_t>(kPage);
  ::close(fd);
  ::unlink(p.c_str());
  return ok;
}

// <root>/<model with / as _>_<12 hex>: creates it, its config.json when
// missing, and returns it (the rank dirs are <it>_r<rank>).
inline std::string vllm_base_dir(const std::string& root, std::string model, uint64_t id) {
  std::replace(model.begin(), model.end(), '/', '_');
  char hex[16];
  std::snprintf(hex, sizeof(hex), "%012llx", (unsigned long long)(id & 0xffffffffffffull));
  const std::string base = root + "/" + model + "_" + hex;
  mkdir_p(base);
  const std::string cfg = base + "/config.json";
  if (::access(cfg.c_str(), F_OK) != 0) {
    const int fd = ::open(cfg.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd < 0) die("create %s: %s", cfg.c_str(), strerror(errno));
    const char text[] = "{\"model\":\"Qwen/Qwen3-8B\",\"block_size\":256}\n";
    write_all_once(fd, text, sizeof(text) - 1, cfg);
    ::close(fd);
  }
  return base;
}

// Model geometry: KV bytes of one chunk file (per TP rank).
struct Geometry {
  uint64_t layers = 36, kv_heads = 8, head_dim = 128, dtype_bytes = 2, block_tokens = 256, tp = 1;
  uint64_t chunk_bytes = 0;  // per file
  bool scaled = false;       // --chunk-bytes overrode the geometry
};
inline Geometry parse_geometry(Args& a) {
  Geometry g;
  g.layers = a.num("layers", g.layers);
  g.kv_heads = a.num("kv-heads", g.kv_heads);
  g.head_dim = a.num("head-dim", g.head_dim);
  g.dtype_bytes = a.num("dtype-bytes", g.dtype_bytes);
  g.block_tokens = a.num("block-tokens", g.block_tokens);
  g.tp = std::max<uint64_t>(1, a.num("tp", g.tp));
  g.chunk_bytes = 2 * g.layers * g.kv_heads * g.head_dim * g.dtype_bytes * g.block_tokens / g.tp;
  if (a.has("chunk-bytes")) {
    g.chunk_bytes = a.num("chunk-bytes", g.chunk_bytes);
    g.scaled = true;
  }
  if (g.chunk_bytes == 0) die("chunk size is 0");
  return g;
}
inline Json& add_geometry(Json& j, const Geometry& g) {
  return j.add("chunk_bytes", g.chunk_bytes)
      .add("block_tokens", g.block_tokens)
      .add("tp", g.tp)
      .add("chunk_bytes_scaled", g.scaled);
}

// One timed phase of a replay, run by a pool of threads.
struct Phase {
  uint64_t ops = 0, bytes = 0, skipped = 0, misses = 0;
  double secs = 0, verify_s = 0;
  std::vector<double> lat_ms;
  void merge(const Phase& o) {
    ops += o.ops, bytes += o.bytes, skipped += o.skipped, misses += o.misses;
    verify_s += o.verify_s;
    lat_ms.insert(lat_ms.end(), o.lat_ms.begin(), o.lat_ms.end());
  }
  double gbps() const { return kvfs::bench::gbps(bytes, secs); }
  double ops_s() const { return secs > 0 ? ops / secs : 0; }
};

// Runs fn(thread, job, Phase&) for jobs 0..n-1 on `threads` threads, jobs
// handed out in order; returns the merged counters and the wall time.
template <class F>
Phase run_phase(uint64_t n, unsigned threads, F fn) {
  std::atomic<uint64_t> next{0};
  std::mutex mu;
  Phase total;
  std::vector<std::thread> ths;
  const double t0 = now_s();
  for (unsigned t = 0; t < threads; ++t)
    ths.emplace_back([&, t] {
      Phase mine;
      for (uint64_t j; (j = next.fetch_add(1)) < n;) fn(t, j, mine);
      std::lock_guard l(mu);
      total.merge(mine);
    });
  for (auto& th : ths) th.join();
  total.secs = now_s() - t0;
  return total;
}

// "<prefix>_gbps", "<prefix>_ops", "_p50_ms", "_p99_ms" of a phase.
inline Json& add_phase(Json& j, const std::string& prefix, const Phase& p) {
  return j.add(prefix + "s", p.ops)
      .add(prefix + "_gbps", p.gbps())
      .add(prefix + "_ops_s", p.ops_s(), 1)
      .add(prefix + "_p50_ms", percentile(p.lat_ms, 50))
      .add(prefix + "_p99_ms", percentile(p.lat_ms, 99))
      .add(prefix + "_s", p.secs);
}

// Subcommands outside kvfs_bench.cc.
int cmd_vllm(const std::string& dir, Args& a);
int cmd_llmd(const std::string& dir, Args& a);
int cmd_lmcache_native(const std::string& dir, Args& a);
int cmd_lmcache_local(const std::string& dir, Args& a);
int cmd_nixl_gds(const std::string& dir, Args& a);
int cmd_lmcache_fs(const std::string& dir, Args& a);
int cmd_mrqa(const std::string& dir, Args& a);
int cmd_visibility(const std::string& dir, Args& a);
int cmd_rw1m(const std::string& dir, Args& a);
int cmd_meta(const std::string& dir, Args& a);
int cmd_scale(const std::string& dir, Args& a);

}  // namespace kvfs::bench
