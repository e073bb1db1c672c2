// SPDX-License-Identifier: Apache-2.0
// kvfs-core-bench: benchmarks of the core policies, without FUSE.
//
//   kvfs-core-bench scan       RAM tier hit ratio of a hot set during a
//                              one-time scan: segmented LRU vs plain LRU
//   kvfs-core-bench mrqa-tier  the RAM tier's share of multi-round QA's
//                              loads against LRU and an oracle (tier_replay.cc)
//   kvfs-core-bench evict [N]  daemon CPU to evict N files (default 100000)
//   kvfs-core-bench policy     write amplification and hit ratio of the
//                              capacity eviction + reclamation policy, for
//                              several reclaim_ratio settings
//   kvfs-core-bench load create DIR [N]
//   kvfs-core-bench load open DIR [REPS]
//                              startup time with N small files (default
//                              1000000) in the vLLM layout: `create` fills a
//                              store in DIR, `open` times opening it again
//   kvfs-core-bench memtouch [MIB]
//                              GB/s of copying 1 MiB blocks into fresh memory
//                              (as a block buffer is allocated) against the
//                              same buffers reused (default 256 MiB): why
//                              kvfs recycles buffers and prefaults at mount
// Each prints one JSON line per result.
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <list>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "bench/plain_lru.h"
#include "core/ram/ram_tier.h"
#include "core/store/block_store.h"

using namespace kvfs;
namespace fs = std::filesystem;

namespace {

double cpu_seconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// VmRSS of this process in MiB.
long rss_mib() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long kb = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "VmRSS: %ld kB", &kb) == 1) break;
  std::fclose(f);
  return kb / 1024;
}

double wall() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int scan() {
  const size_t cap = 256, hot = 64, cold = 4096;
  RamTier tier(cap * kBlockSize, 4);
  kvfs::bench::PlainLru lru(cap);
  auto touch = [&](uint64_t k, uint64_t* slru_hits, uint64_t* lru_hits) {
    ExtentKey key{1, k * kBlockSize};
    if (tier.lookup(key))
      ++*slru_hits;
    else
      tier.insert(key, BufferPool::allocate(kBlockSize));
    *lru_hits += lru.access(k);
  };
  uint64_t a = 0, b = 0;
  for (int r = 0; r < 4; ++r)  // warm: the hot set is read repeatedly
    for (uint64_t h = 0; h < hot; ++h) touch(h, &a, &b);
  // The scan: every cold block once, with the hot set read in between
  // (one hot read per 4 cold blocks, as a serving workload would).
  uint64_t slru_hot = 0, lru_hot = 0, hot_reads = 0, dummy = 0;
  for (uint64_t c = 0; c < cold; ++c) {
    touch(1000000 + c, &dummy, &dummy);
    if (c % 4 == 3) {
      touch(hot_reads % hot, &slru_hot, &lru_hot);
      ++hot_reads;
    }
  }
  std::printf(
      "{\"bench\":\"scan\",\"ram_blocks\":%zu,\"hot_blocks\":%zu,\"scan_blocks\":%zu,"
      "\"hot_reads\":%lu,\"slru_hot_hit_ratio\":%.3f,\"plain_lru_hot_hit_ratio\":%.3f}\n",
      cap, hot, cold, (unsigned long)hot_reads, double(slru_hot) / hot_reads,
      double(lru_hot) / hot_reads);
  return 0;
}

struct TempStore {
  std::string root;
  std::unique_ptr<BlockStore> store;
  explicit TempStore(StoreConfig c) {
    char t[] = "/var/tmp/kvfs-core-bench-XXXXXX";
    root = ::mkdtemp(t);
    fs::create_directories(root + "/backing");
    c.backing_dir = root + "/backing";
    c.index_dir = root + "/index";
    auto s = BlockStore::Open(c);
    if (!s.ok()) {
      std::fprintf(stderr, "open: %s\n", s.status().ToString().c_str());
      std::exit(1);
    }
    store = std::move(*s);
  }
  ~TempStore() {
    store.reset();
    fs::remove_all(root);
  }
  bool put(uint64_t dir, const std::string& name, const std::string& data) {
    Attr a;
    auto f = store->create(dir, name, 0644, O_CREAT | O_WRONLY | O_TRUNC, Caller{}, &a);
    if (!f.ok()) return false;
    bool ok = store->write(*f, 0, data.data(), data.size()).ok();
    store->release(*f);
    return ok;
  }
};

int evict(uint64_t n) {
  StoreConfig c;
  c.ram_size = 256 << 20;
  c.ram_prefault = 0;
  c.capacity = 64ull << 30;
  c.evict_grace_s = 0;
  TempStore t(c);
  std::string data(4096, 'x');
  // 100 directories, as the vLLM layout spreads blocks.
  std::vector<uint64_t> dirs;
  for (int d = 0; d < 100; ++d)
    dirs.push_back(t.store->mkdir(kRootIno, "d" + std::to_string(d), 0755, Caller{})->ino);
  double w0 = wall();
  for (uint64_t i = 0; i < n; ++i) t.put(dirs[i % dirs.size()], "f" + std::to_string(i), data);
  if (!t.store->flush_all().ok()) return 1;
  double w1 = wall();
  EvictRequest r;
  r.kind = EvictRequest::Kind::kAll;
  double c0 = cpu_seconds(), e0 = wall();
  auto res = t.store->admin().evict(r);
  double c1 = cpu_seconds(), e1 = wall();
  if (!res.ok()) return 1;
  std::printf(
      "{\"bench\":\"evict\",\"files\":%lu,\"evicted\":%lu,\"create_flush_s\":%.2f,"
      "\"evict_wall_s\":%.3f,\"evict_cpu_s\":%.3f}\n",
      (unsigned long)n, (unsigned long)res->files, w1 - w0, e1 - e0, c1 - c0);
  return 0;
}

int policy() {
  const uint64_t kFile = 4 << 20;
  for (double ratio : {0.0, 0.2, 0.5, 1.0}) {
    StoreConfig c;
    c.ram_size = 64 << 20;
    c.ram_prefault = 0;
    c.capacity = 256 << 20;
    c.segment_size = 32 << 20;
    c.evict_grace_s = 0;
    c.reclaim_ratio = ratio;
    TempStore t(c);
    std::mt19937_64 rng(7);
    std::string data(kFile, 'k');
    const int files = 3 * 256 / 4;  // three times the capacity
    uint64_t reads = 0, hits = 0, failed = 0;
    for (int i = 0; i < files; ++i) {
      if (!t.put(kRootIno, "b" + std::to_string(i), data)) ++failed;
      // Two reads per store: 80 % among the 16 newest blocks (a hot prefix),
      // 20 % uniform over everything written so far.
      for (int k = 0; k < 2 && i > 0; ++k) {
        int j = (rng() % 5 != 0) ? i - 1 - int(rng() % std::min(16, i)) : int(rng() % i);
        ++reads;
        auto a = t.store->lookup(kRootIno, "b" + std::to_string(j));
        if (!a.ok()) continue;
        auto f = t.store->open(a->ino, O_RDONLY);
        if (!f.ok()) continue;
        ReadResult rr;
        if (t.store->read(*f, 0, kFile, &rr).ok() && rr.bytes == kFile) ++hits;
        t.store->release(*f);
      }
    }
    (void)t.store->flush_all();
    StoreStats s = t.store->admin().stats();
    EvictorStats e = t.store->admin().evictor_stats();
    const double wa =
        s.flushed_bytes ? double(s.flushed_bytes) / double(s.flushed_bytes - e.reclaim_copied_bytes)
                        : 0;
    std::printf(
        "{\"bench\":\"policy\",\"reclaim_ratio\":%.2f,\"written_files\":%d,\"failed_stores\":%lu,"
        "\"reads\":%lu,\"hit_ratio\":%.3f,\"ram_block_hits\":%lu,\"backing_block_reads\":%lu,"
        "\"client_bytes\":%lu,\"reclaim_copied_bytes\":%lu,\"write_amplification\":%.3f,"
        "\"evicted_lru\":%lu,\"evicted_with_segment\":%lu,\"segments_deleted\":%lu,"
        "\"backing_bytes_end\":%lu}\n",
        ratio, files, (unsigned long)failed, (unsigned long)reads, double(hits) / reads,
        (unsigned long)s.ram_block_hits, (unsigned long)s.backing_reads,
        (unsigned long)(s.flushed_bytes - e.reclaim_copied_bytes),
        (unsigned long)e.reclaim_copied_bytes, wa, (unsigned long)e.evicted_capacity,
        (unsigned long)e.evicted_reclaim, (unsigned long)e.segments_deleted,
        (unsigned long)s.segment_bytes);
  }
  return 0;
}

// The startup cost of a large index: BlockStore::Open reads every inode
// snapshot before the mount can answer. Kept in DIR so that `open` can be
// repeated without the minutes the creation takes.
StoreConfig load_config(const std::string& dir) {
  StoreConfig c;
  c.backing_dir = dir + "/backing";
  c.index_dir = dir + "/index";
  c.ram_size = 1ull << 30;
  c.ram_prefault = 0;
  c.capacity = 256ull << 30;
  return c;
}

int load_create(const std::string& dir, uint64_t n) {
  fs::create_directories(dir + "/backing");
  auto s = BlockStore::Open(load_config(dir));
  if (!s.ok()) {
    std::fprintf(stderr, "open: %s\n", s.status().ToString().c_str());
    return 1;
  }
  BlockStore& st = **s;
  auto model = st.mkdir(kRootIno, "Qwen3-8B_0123456789ab_r0", 0755, Caller{});
  if (!model.ok()) return 1;
  std::mt19937_64 rng(1);
  std::string data(4096, 'k');
  char hex[17];
  double w0 = wall();
  for (uint64_t i = 0; i < n; ++i) {
    std::snprintf(hex, sizeof hex, "%016lx", (unsigned long)rng());
    auto dir_of = [&](uint64_t parent, const std::string& name) -> uint64_t {
      auto a = st.lookup(parent, name);
      if (a.ok()) return a->ino;
      auto m = st.mkdir(parent, name, 0755, Caller{});
      return m.ok() ? m->ino : 0;
    };
    uint64_t d1 = dir_of(model->ino, std::string(hex, 3));
    uint64_t d2 = d1 ? dir_of(d1, std::string(hex + 3, 2) + "_g0") : 0;
    Attr a;
    auto f = d2 ? st.create(d2, std::string(hex) + ".bin", 0644, O_CREAT | O_WRONLY, Caller{}, &a)
                : Result<OpenFile*>(Status::IOError("mkdir"));
    if (!f.ok() || !st.write(*f, 0, data.data(), data.size()).ok()) {
      std::fprintf(stderr, "create %lu failed\n", (unsigned long)i);
      return 1;
    }
    st.release(*f);
  }
  if (!st.flush_all().ok()) return 1;
  const long rss = rss_mib();
  if (!st.Close().ok()) return 1;
  std::printf("{\"bench\":\"load_create\",\"files\":%lu,\"seconds\":%.1f,\"rss_mib\":%ld}\n",
              (unsigned long)n, wall() - w0, rss);
  return 0;
}

int load_open(const std::string& dir, int reps) {
  for (int r = 0; r < reps; ++r) {
    double c0 = cpu_seconds(), w0 = wall();
    auto s = BlockStore::Open(load_config(dir));
    double w1 = wall(), c1 = cpu_seconds();
    if (!s.ok()) {
      std::fprintf(stderr, "open: %s\n", s.status().ToString().c_str());
      return 1;
    }
    uint64_t inodes = (*s)->admin().stats().inodes;
    const long rss = rss_mib();
    double w2 = wall();
    (void)(*s)->Close();
    s->reset();
    std::printf(
        "{\"bench\":\"load_open\",\"inodes\":%lu,\"open_s\":%.3f,\"open_cpu_s\":%.3f,"
        "\"close_free_s\":%.3f,\"rss_mib\":%ld}\n",
        (unsigned long)inodes, w1 - w0, c1 - c0, wall() - w2, rss);
  }
  return 0;
}

int memtouch(uint64_t mib) {
  constexpr size_t kMiB = 1 << 20;
  const std::vector<char> src(kMiB, 'k');
  std::vector<char*> bufs(mib);
  const double w0 = wall();
  for (char*& b : bufs) {
    b = static_cast<char*>(std::aligned_alloc(4096, kMiB));
    if (b == nullptr) return 1;
    std::memcpy(b, src.data(), kMiB);
  }
  const double w1 = wall();
  for (char* b : bufs) std::memcpy(b, src.data(), kMiB);
  const double w2 = wall();
  for (char* b : bufs) std::free(b);
  std::printf("{\"bench\":\"memtouch\",\"mib\":%lu,\"fresh_gbps\":%.2f,\"reused_gbps\":%.2f}\n",
              (unsigned long)mib, mib * double(kMiB) / 1e9 / (w1 - w0),
              mib * double(kMiB) / 1e9 / (w2 - w1));
  return 0;
}

}  // namespace

namespace kvfs::bench {
int mrqa_tier(int argc, char** argv);  // tier_replay.cc
}

int main(int argc, char** argv) {
  spdlog::set_level(spdlog::level::warn);
  std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "scan") return scan();
  if (cmd == "mrqa-tier") return kvfs::bench::mrqa_tier(argc - 2, argv + 2);
  if (cmd == "evict") return evict(argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 100000);
  if (cmd == "policy") return policy();
  if (cmd == "memtouch") return memtouch(argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 256);
  std::string sub = argc > 2 ? argv[2] : "";
  if (cmd == "load") spdlog::set_level(spdlog::level::info);
  if (cmd == "load" && sub == "create" && argc > 3)
    return load_create(argv[3], argc > 4 ? std::strtoull(argv[4], nullptr, 10) : 1000000);
  if (cmd == "load" && sub == "open" && argc > 3)
    return load_open(argv[3], argc > 4 ? std::atoi(argv[4]) : 3);
  std::fprintf(stderr,
               "usage: kvfs-core-bench scan | evict [N] | policy | load create DIR [N] |"
               " load open DIR [REPS] | memtouch [MIB] | mrqa-tier [L] [--shuffle]\n");
  return 2;
}
