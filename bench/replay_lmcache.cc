// SPDX-License-Identifier: Apache-2.0
// Replays of the two LMCache clients of the published comparison that do not
// go through LMCache's own fs backends: the MP server's NIXL store with the
// GDS backend, and the in-process FSConnector (remote_url fs://). Same
// contract as replay.cc: --chunks keys stored with the client's pattern,
// looked up, loaded back (every byte verified against bench/pattern.h), one
// JSON line.
//
//   kvfs-bench nixl-gds DIR [geometry] [--chunks 32] [--threads 4] [--io pwrite|io_uring]
//                            [--orphans 4] [--shard-dirs 0|1]
//   kvfs-bench lmcache-fs DIR [geometry] [--chunks 32] [--threads 8] [--odirect 0|1]
#include <dirent.h>

#include <unordered_set>

#include "bench/client_patterns.h"
#include "bench/replay_util.h"

namespace kvfs::bench {

using namespace replay;
using namespace clients;

namespace {

// Files under dir (recursively with shard dirs) whose name contains ".tmp.";
// returns how many entries it saw.
uint64_t sweep_tmps(const std::string& dir, uint64_t* unlinked) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) die("opendir %s: %s", dir.c_str(), strerror(errno));
  uint64_t seen = 0;
  std::vector<std::string> subdirs;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    ++seen;
    if (e->d_type == DT_DIR) {
      subdirs.push_back(dir + "/" + n);
    } else if (n.find(".tmp.") != std::string::npos) {
      if (::unlink((dir + "/" + n).c_str()) != 0) die("unlink %s: %s", n.c_str(), strerror(errno));
      ++*unlinked;
    }
  }
  ::closedir(d);
  for (const auto& s : subdirs) seen += sweep_tmps(s, unlinked);
  return seen;
}

}  // namespace

// ---------------------------------------------------------------- LMCache MP, NIXL GDS

int cmd_nixl_gds(const std::string& dir, Args& a) {
  Common c = parse_common(a);
  const unsigned th = static_cast<unsigned>(std::max<uint64_t>(1, a.num("threads", 4)));
  const std::string io = a.str("io", "pwrite");
  // Tmp files a crashed earlier run left behind, for the shutdown sweep.
  const uint64_t orphans = a.num("orphans", 4);
  const bool shard = a.num("shard-dirs", 0) != 0;
  const std::string model = a.str("model", "Qwen/Qwen3-8B");
  a.check_all_used();
  if (io != "pwrite" && io != "io_uring") die("--io: pwrite or io_uring, not '%s'", io.c_str());
  const size_t size = c.size;
  if (size % kPage) die("nixl-gds: objects are a multiple of 4096 bytes (O_DIRECT)");
  const std::string base_dir = join(dir, "nixl_gds");
  mkdir_p(base_dir);
  auto name_of = [&](uint64_t key, unsigned rank, uint64_t tag) {
    const std::string h = hex64(c.salt + key, tag);
    const std::string d = shard ? base_dir + "/" + h.substr(0, 2) + "/" + h.substr(2, 2) : base_dir;
    return nixl_name(d, model, rank, h);
  };
  std::vector<std::string> names(c.chunks * c.g.tp), absent(std::max<uint64_t>(c.chunks, 4096));
  for (uint64_t j = 0; j < names.size(); ++j)
    names[j] = name_of(j / c.g.tp, static_cast<unsigned>(j % c.g.tp), 10);
  for (uint64_t i = 0; i < absent.size(); ++i) absent[i] = name_of(i, 0, 11);
  if (shard)
    for (const auto& n : names) mkdir_p(parent_of(n));
  const std::vector<Extent> ex = extents_of(size);
  make_base(c, size);

  {
    // A crashed store: the tmp exists and only its second extent landed.
    AlignedBuf junk(kPage);
    for (uint64_t i = 0; i < orphans; ++i) {
      const std::string n = name_of(i, 0, 12);
      mkdir_p(parent_of(n));
      const std::string tmp = n + ".tmp." + uuid_hex();
      const int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0644);
      if (fd < 0) die("create %s: %s", tmp.c_str(), strerror(errno));
      const off_t off = size > kExtent ? static_cast<off_t>(kExtent) : 0;
      if (::pwrite(fd, junk.p, kPage, off) != static_cast<ssize_t>(kPage))
        die("pwrite %s: %s", tmp.c_str(), strerror(errno));
      ::close(fd);
    }
  }

  std::vector<std::unique_ptr<ExtentIo>> ios;
  for (unsigned t = 0; t < th; ++t) ios.push_back(std::make_unique<ExtentIo>(io == "io_uring"));
  std::atomic<uint64_t> ooo_store{0}, ooo_load{0};
  // The adapter's in-memory dict of what it stored.
  std::mutex mu;
  std::unordered_set<std::string> dict;
  Phase store;
  {
    Bufs wb = make_bufs(th, size, c.base->p);
    store = run_phase(names.size(), th, [&](unsigned t, uint64_t j, Phase& p) {
      const std::string& n = names[j];
      char* b = wb[t]->p;
      apply_stamps(b, size, name_seed(n));
      const double t0 = now_s();
      if (nixl_store(n, b, ex, *ios[t])) ++ooo_store;
      p.lat_ms.push_back((now_s() - t0) * 1e3);
      ++p.ops, p.bytes += size;
      std::lock_guard l(mu);
      dict.insert(n);
    });
  }
  if (c.settle) fsync_dir(base_dir);
  // A dict miss (e.g. after a restart) falls back to stat; st_size is the size.
  auto st = [&](const std::string& n) { return stat_sized(n, size); };
  const Phase present = lookups(names, true, "stat", st);
  const Phase warm = lookups(names, true, "stat", st, 4096);
  const Phase missing = lookups(absent, false, "stat", st);

  Bufs rb = make_bufs(th, size, nullptr);
  const Phase load = run_phase(names.size(), th, [&](unsigned t, uint64_t j, Phase& p) {
    const std::string& n = names[j];
    {
      std::lock_guard l(mu);
      if (!dict.count(n)) return void(++p.misses);
    }
    char* b = rb[t]->p;
    std::memset(b, 0xa5, kPage);
    const double t0 = now_s();
    if (nixl_load(n, b, ex, *ios[t])) ++ooo_load;
    const double t1 = now_s();
    p.lat_ms.push_back((t1 - t0) * 1e3);
    ++p.ops, p.bytes += size;
    check_content(b, c.base->p, size, n);
    p.verify_s += now_s() - t1;
  });
  if (load.misses) die("nixl-gds: %llu stored keys missing", (unsigned long long)load.misses);

  // Shutdown: walk the directory, unlink every *.tmp.*.
  uint64_t swept = 0;
  const double s0 = now_s();
  const uint64_t seen = sweep_tmps(base_dir, &swept);
  const double sweep_s = now_s() - s0;
  if (swept != orphans)
    die("nixl-gds: the sweep removed %llu tmp files, %llu were left", (unsigned long long)swept,
        (unsigned long long)orphans);
  for (const auto& n : names)
    if (!exists(n)) die("nixl-gds: %s gone after the sweep", n.c_str());
  if (!c.keep) unlink_all(names);
  Json j = header("nixl-gds", dir, c);
  j.add("threads", th).add("io", io).add("shard_dirs", shard);
  j.add("extents", static_cast<uint64_t>(ex.size())).add("extent_bytes", kExtent);
  j.add("out_of_order_stores", ooo_store.load()).add("out_of_order_loads", ooo_load.load());
  j.add("sweep_entries", seen).add("sweep_unlinked", swept).add("sweep_ms", sweep_s * 1e3);
  add_lookups(j, "stat", present, warm, missing);
  finish(j, store, load);
  return 0;
}

// ---------------------------------------------------------------- LMCache FSConnector

int cmd_lmcache_fs(const std::string& dir, Args& a) {
  Common c = parse_common(a);
  const unsigned th = static_cast<unsigned>(std::max<uint64_t>(1, a.num("threads", 8)));
  const bool direct = a.num("odirect", 0) != 0;
  const std::string model = a.str("model", "Qwen3-8B");
  a.check_all_used();
  const size_t size = c.size;
  if (direct && size % kPage) die("lmcache-fs --odirect 1 needs a multiple of 4096 bytes");
  const std::string base_dir = join(dir, "lmcache_fs");
  mkdir_p(base_dir);
  auto name_of = [&](uint64_t key, unsigned worker, uint64_t tag) {
    return lmcache_fs_name(base_dir, model, c.g.tp, worker, hex64(c.salt + key, tag));
  };
  std::vector<std::string> names(c.chunks * c.g.tp), absent(std::max<uint64_t>(c.chunks, 4096));
  for (uint64_t j = 0; j < names.size(); ++j)
    names[j] = name_of(j / c.g.tp, static_cast<unsigned>(j % c.g.tp), 13);
  for (uint64_t i = 0; i < absent.size(); ++i) absent[i] = name_of(i, 0, 14);
  make_base(c, size);

  Phase store;
  {
    Bufs wb = make_bufs(th, size, c.base->p);
    store = run_phase(names.size(), th, [&](unsigned t, uint64_t j, Phase& p) {
      const std::string& n = names[j];
      char* b = wb[t]->p;
      apply_stamps(b, size, name_seed(n));
      const double t0 = now_s();
      if (!lmcache_fs_store(n, b, size, direct)) return void(++p.skipped);
      p.lat_ms.push_back((now_s() - t0) * 1e3);
      ++p.ops, p.bytes += size;
    });
  }
  if (store.skipped) die("lmcache-fs: %llu names existed", (unsigned long long)store.skipped);
  if (c.settle) fsync_dir(base_dir);
  const uint64_t file_size = lmcache_fs_file_size(size, direct);
  auto st = [&](const std::string& n) { return stat_sized(n, file_size); };
  const Phase present = lookups(names, true, "stat", st);
  const Phase warm = lookups(names, true, "stat", st, 4096);
  const Phase missing = lookups(absent, false, "stat", st);

  Bufs rb = make_bufs(th, size, nullptr);
  const Phase load = run_phase(names.size(), th, [&](unsigned t, uint64_t j, Phase& p) {
    const std::string& n = names[j];
    char* b = rb[t]->p;
    std::memset(b, 0xa5, kPage);
    const double t0 = now_s();
    lmcache_fs_load(n, b, size, direct);
    const double t1 = now_s();
    p.lat_ms.push_back((t1 - t0) * 1e3);
    ++p.ops, p.bytes += size;
    check_content(b, c.base->p, size, n);
    p.verify_s += now_s() - t1;
  });
  if (!c.keep) unlink_all(names);
  Json j = header("lmcache-fs", dir, c);
  j.add("threads", th)
      .add("o_direct", direct)
      .add("header_bytes", direct ? 0u : unsigned(kFsHeader));
  add_lookups(j, "stat", present, warm, missing);
  finish(j, store, load);
  return 0;
}

}  // namespace kvfs::bench
