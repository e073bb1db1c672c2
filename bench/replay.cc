// SPDX-License-Identifier: Apache-2.0
// Replays of each fs-tier offloader's file pattern (shared/WORKLOADS.md),
// through any directory. Every replay stores --chunks keys with the client's
// store pattern, looks them up, loads them back (every byte verified against
// bench/pattern.h) and prints one JSON line: ops, GB/s, p50/p99 latency of a
// store and of a load.
//
//   kvfs-bench vllm DIR [geometry] [--chunks 32] [--write-threads 16] [--read-threads 32]
//   kvfs-bench llmd DIR [geometry] [--chunks 32] [--threads 64] [--need BYTES]
//   kvfs-bench lmcache-native DIR [geometry] [--chunks 32] [--threads 16]
//   kvfs-bench lmcache-local DIR [geometry] [--chunks 32] [--threads 4] [--budget BYTES]
//   (nixl-gds and lmcache-fs: replay_lmcache.cc)
//
// geometry: --layers 36 --kv-heads 8 --head-dim 128 --dtype-bytes 2
// --block-tokens 256 --tp 1 (Qwen3-8B: 36 MiB files) or --chunk-bytes B.
// Common: --salt N (names), --settle 0|1 (default 1: fsync of a directory
// between the store and the load phase, untimed: on kvfs the loads then do not
// race the flushers), --keep (leave the files; default: unlinked, untimed).
#include <sys/statvfs.h>

#include <list>
#include <memory>
#include <unordered_map>

#include "bench/replay_util.h"

namespace kvfs::bench {

using namespace replay;

// ---------------------------------------------------------------- vLLM fs tier

int cmd_vllm(const std::string& dir, Args& a) {
  Common c = parse_common(a);
  const unsigned wt = static_cast<unsigned>(std::max<uint64_t>(1, a.num("write-threads", 16)));
  const unsigned rt = static_cast<unsigned>(std::max<uint64_t>(1, a.num("read-threads", 32)));
  const std::string model = a.str("model", "Qwen/Qwen3-8B");
  a.check_all_used();
  const size_t size = c.size;
  const std::string base_dir = vllm_base_dir(dir, model, c.salt);
  const bool direct = vllm_probe_o_direct(base_dir);
  if (direct && size % kPage) die("O_DIRECT needs a chunk size that is a multiple of 4096");
  const uint64_t jobs = c.chunks * c.g.tp;
  std::vector<std::string> paths(jobs), absent(std::max<uint64_t>(c.chunks, 4096));
  for (uint64_t j = 0; j < jobs; ++j)
    paths[j] = vllm_block_path(base_dir + "_r" + std::to_string(j % c.g.tp),
                               hex64(c.salt + j / c.g.tp, 1));
  for (uint64_t i = 0; i < absent.size(); ++i)
    absent[i] = vllm_block_path(base_dir + "_r0", hex64(c.salt + i, 2));
  make_base(c, size);

  Phase store;
  {
    Bufs wb = make_bufs(wt, size, c.base->p);
    store = run_phase(jobs, wt, [&](unsigned t, uint64_t j, Phase& p) {
      char* b = wb[t]->p;
      apply_stamps(b, size, name_seed(paths[j]));
      const double t0 = now_s();
      if (!vllm_store(paths[j], b, size, direct)) return void(++p.skipped);
      p.lat_ms.push_back((now_s() - t0) * 1e3);
      ++p.ops, p.bytes += size;
    });
  }
  if (store.skipped) die("vllm: %llu names already existed", (unsigned long long)store.skipped);
  if (c.settle) fsync_dir(base_dir + "_r0");
  auto acc = [](const std::string& n) { return ::access(n.c_str(), F_OK); };
  const Phase present = lookups(paths, true, "access", acc);
  const Phase warm = lookups(paths, true, "access", acc, 4096);
  const Phase missing = lookups(absent, false, "access", acc);

  Bufs rb = make_bufs(rt, size, nullptr);
  const Phase load = run_phase(jobs, rt, [&](unsigned t, uint64_t j, Phase& p) {
    char* b = rb[t]->p;
    std::memset(b, 0xa5, kPage);
    const double t0 = now_s();
    vllm_load(paths[j], b, size, direct);
    const double t1 = now_s();
    p.lat_ms.push_back((t1 - t0) * 1e3);
    ++p.ops, p.bytes += size;
    check_content(b, c.base->p, size, paths[j]);
    p.verify_s += now_s() - t1;
  });
  if (!c.keep) unlink_all(paths);
  Json j = header("vllm", dir, c);
  j.add("write_threads", wt).add("read_threads", rt).add("o_direct", direct);
  add_lookups(j, "access", present, warm, missing);
  finish(j, store, load);
  return 0;
}

// ---------------------------------------------------------------- llm-d fs backend

int cmd_llmd(const std::string& dir, Args& a) {
  Common c = parse_common(a);
  const unsigned th = static_cast<unsigned>(std::max<uint64_t>(1, a.num("threads", 64)));
  const size_t size = c.size;
  // The tail read: pread of `need` bytes at size - need (default: all but the
  // first 512 bytes, an unaligned offset).
  const size_t need = std::min<uint64_t>(size, a.num("need", size > 512 ? size - 512 : size));
  a.check_all_used();
  const std::string base_dir = vllm_base_dir(dir, "Qwen/Qwen3-8B", c.salt);
  const uint64_t jobs = c.chunks * c.g.tp;
  std::vector<std::string> paths(jobs), absent(std::max<uint64_t>(c.chunks, 4096));
  for (uint64_t j = 0; j < jobs; ++j)
    paths[j] = vllm_block_path(base_dir + "_r" + std::to_string(j % c.g.tp),
                               hex64(c.salt + j / c.g.tp, 4));
  for (uint64_t i = 0; i < absent.size(); ++i)
    absent[i] = vllm_block_path(base_dir + "_r0", hex64(c.salt + i, 5));
  make_base(c, size);

  // Store: open+close existence test (hit: utimensat with atime only, skip);
  // else mkdir -p, dst_<u32>.tmp written through 1 MiB buffered writes,
  // rename while the fd is still open, close.
  auto store_pass = [&](Bufs& pieces) {
    return run_phase(jobs, th, [&](unsigned t, uint64_t j, Phase& p) {
      const std::string& dst = paths[j];
      const uint64_t seed = name_seed(dst);
      const double t0 = now_s();
      int fd = ::open(dst.c_str(), O_RDONLY);
      if (fd >= 0) {
        ::close(fd);
        const struct timespec ts[2] = {{0, UTIME_NOW}, {0, UTIME_OMIT}};
        if (::utimensat(AT_FDCWD, dst.c_str(), ts, 0) != 0)
          die("utimensat %s: %s", dst.c_str(), strerror(errno));
        p.lat_ms.push_back((now_s() - t0) * 1e3);
        return void(++p.skipped);
      }
      mkdir_p(parent_of(dst));
      char suffix[32];
      std::snprintf(suffix, sizeof(suffix), "_%u.tmp", static_cast<unsigned>(rand64()));
      const std::string tmp = dst + suffix;
      fd = ::open(tmp.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
      if (fd < 0) die("create %s: %s", tmp.c_str(), strerror(errno));
      char* piece = pieces[t]->p;
      for (uint64_t off = 0; off < size; off += kIoSize) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(kIoSize, size - off));
        std::memcpy(piece, c.base->p + off, n);
        apply_stamps_at(piece, n, seed, off);
        write_loop(fd, piece, n, tmp);
      }
      if (::rename(tmp.c_str(), dst.c_str()) != 0)
        die("rename %s (fd open): %s", tmp.c_str(), strerror(errno));
      if (::close(fd) != 0) die("close %s: %s", dst.c_str(), strerror(errno));
      p.lat_ms.push_back((now_s() - t0) * 1e3);
      ++p.ops, p.bytes += size;
    });
  };
  Phase store, restore;
  {
    Bufs pieces = make_bufs(th, kIoSize, nullptr);
    store = store_pass(pieces);
    if (store.skipped) die("llmd: %llu names already existed", (unsigned long long)store.skipped);
    if (c.settle) fsync_dir(base_dir + "_r0");
    // The same keys again: every one is a hit (open+close, atime-only utimensat).
    restore = store_pass(pieces);
    if (restore.ops) die("llmd: %llu stored keys not found again", (unsigned long long)restore.ops);
  }
  auto st = [](const std::string& n) {
    struct stat s;
    return ::stat(n.c_str(), &s);
  };
  const Phase present = lookups(paths, true, "stat", st);
  const Phase warm = lookups(paths, true, "stat", st, 4096);
  const Phase missing = lookups(absent, false, "stat", st);

  // Load: open, seek to size - need, read the tail.
  Bufs rb = make_bufs(th, need, nullptr);
  const Phase load = run_phase(jobs, th, [&](unsigned t, uint64_t j, Phase& p) {
    char* b = rb[t]->p;
    const std::string& path = paths[j];
    const double t0 = now_s();
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) die("open %s: %s", path.c_str(), strerror(errno));
    if (::lseek(fd, static_cast<off_t>(size - need), SEEK_SET) < 0)
      die("lseek %s: %s", path.c_str(), strerror(errno));
    read_loop(fd, b, need, path);
    ::close(fd);
    const double t1 = now_s();
    p.lat_ms.push_back((t1 - t0) * 1e3);
    ++p.ops, p.bytes += need;
    const int64_t bad = verify_range(b, c.base->p, need, name_seed(path), size - need);
    if (bad >= 0) die("%s: wrong content at offset %lld", path.c_str(), (long long)bad);
    p.verify_s += now_s() - t1;
  });
  if (!c.keep) unlink_all(paths);
  Json j = header("llmd", dir, c);
  j.add("threads", th).add("need", static_cast<uint64_t>(need));
  j.add("hit_store_ops_s", restore.secs > 0 ? restore.skipped / restore.secs : 0, 0)
      .add("hit_store_p99_ms", percentile(restore.lat_ms, 99));
  add_lookups(j, "stat", present, warm, missing);
  finish(j, store, load);
  return 0;
}

// ---------------------------------------------------------------- LMCache fs_native

int cmd_lmcache_native(const std::string& dir, Args& a) {
  Common c = parse_common(a);
  const unsigned th = static_cast<unsigned>(std::max<uint64_t>(1, a.num("threads", 16)));
  const std::string model = a.str("model", "Qwen3-8B");
  a.check_all_used();
  const size_t size = c.size;
  const std::string base_dir = join(dir, "lmcache_native");
  mkdir_p(base_dir);
  std::vector<std::string> names(c.chunks * c.g.tp);
  for (uint64_t j = 0; j < names.size(); ++j) {
    char rank[32];
    std::snprintf(rank, sizeof(rank), "@0x%llx@", (unsigned long long)(j % c.g.tp));
    names[j] =
        base_dir + "/" + model + rank + hex64(c.salt + j / c.g.tp, 6).substr(0, 16) + ".data";
  }
  make_base(c, size);
  Phase store;
  {
    // Store: stat; write <name>.tmp (the same tmp name for every writer of a
    // key), close, rename.
    Bufs wb = make_bufs(th, size, c.base->p);
    store = run_phase(names.size(), th, [&](unsigned t, uint64_t j, Phase& p) {
      const std::string& n = names[j];
      char* b = wb[t]->p;
      apply_stamps(b, size, name_seed(n));
      const double t0 = now_s();
      struct stat st;
      if (::stat(n.c_str(), &st) == 0) return void(++p.skipped);
      const std::string tmp = n + ".tmp";
      const int fd = ::open(tmp.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
      if (fd < 0) die("create %s: %s", tmp.c_str(), strerror(errno));
      write_loop(fd, b, size, tmp);
      if (::close(fd) != 0) die("close %s: %s", tmp.c_str(), strerror(errno));
      if (::rename(tmp.c_str(), n.c_str()) != 0) die("rename %s: %s", tmp.c_str(), strerror(errno));
      p.lat_ms.push_back((now_s() - t0) * 1e3);
      ++p.ops, p.bytes += size;
    });
  }
  if (store.skipped) die("lmcache-native: %llu names existed", (unsigned long long)store.skipped);
  if (c.settle) fsync_dir(base_dir);
  // Load: read loop; a short read is an error.
  Bufs rb = make_bufs(th, size, nullptr);
  const Phase load = run_phase(names.size(), th, [&](unsigned t, uint64_t j, Phase& p) {
    char* b = rb[t]->p;
    std::memset(b, 0xa5, kPage);
    const double t0 = now_s();
    const int fd = ::open(names[j].c_str(), O_RDONLY);
    if (fd < 0) die("open %s: %s", names[j].c_str(), strerror(errno));
    read_loop(fd, b, size, names[j]);
    ::close(fd);
    const double t1 = now_s();
    p.lat_ms.push_back((t1 - t0) * 1e3);
    ++p.ops, p.bytes += size;
    check_content(b, c.base->p, size, names[j]);
    p.verify_s += now_s() - t1;
  });
  // Delete: unlink.
  const Phase del = run_phase(names.size(), th, [&](unsigned, uint64_t j, Phase& p) {
    if (c.keep) return;
    const double t0 = now_s();
    if (::unlink(names[j].c_str()) != 0) die("unlink %s: %s", names[j].c_str(), strerror(errno));
    p.lat_ms.push_back((now_s() - t0) * 1e3);
    ++p.ops;
  });
  Json j = header("lmcache-native", dir, c);
  j.add("threads", th).add("unlink_ops_s", del.ops_s(), 0);
  finish(j, store, load);
  return 0;
}

// ---------------------------------------------------------------- LMCache local_disk

int cmd_lmcache_local(const std::string& dir, Args& a) {
  Common c = parse_common(a);
  const unsigned th = static_cast<unsigned>(std::max<uint64_t>(1, a.num("threads", 4)));
  const size_t size = c.size;
  // LMCache's own byte budget (default: half of the keys fit).
  const uint64_t budget = a.num("budget", std::max<uint64_t>(1, c.chunks / 2) * size);
  a.check_all_used();
  const std::string path = join(dir, "lmcache_local");
  mkdir_p(path);
  struct statvfs vfs;
  if (::statvfs(path.c_str(), &vfs) != 0) die("statvfs %s: %s", path.c_str(), strerror(errno));
  const bool direct = vfs.f_bsize && size % vfs.f_bsize == 0;
  auto file = [&](uint64_t i) {
    return path + "/vllm@Qwen_Qwen3-8B@1@0@" + hex64(c.salt + i, 8).substr(0, 16) + ".pt";
  };
  make_base(c, size);

  // The client's in-memory index and LRU (oldest first); it unlinks files itself.
  std::mutex mu;
  std::list<uint64_t> lru;
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> idx;
  uint64_t used = 0, evicted = 0;

  Phase store;
  {
    Bufs wb = make_bufs(th, size, c.base->p);
    store = run_phase(c.chunks, th, [&](unsigned t, uint64_t i, Phase& p) {
      const std::string f = file(i);
      char* b = wb[t]->p;
      apply_stamps(b, size, name_seed(f));
      const double t0 = now_s();
      {
        std::lock_guard l(mu);
        if (auto it = idx.find(i); it != idx.end()) {
          lru.splice(lru.end(), lru, it->second);
          return void(++p.skipped);
        }
        while (used + size > budget && !lru.empty()) {
          const uint64_t v = lru.front();
          lru.pop_front();
          idx.erase(v);
          used -= size;
          ++evicted;
          if (::unlink(file(v).c_str()) != 0)
            die("unlink %s: %s", file(v).c_str(), strerror(errno));
        }
        used += size;  // reserved while writing
      }
      const int fd =
          ::open(f.c_str(), O_CREAT | O_WRONLY | O_TRUNC | (direct ? O_DIRECT : 0), 0644);
      if (fd < 0) die("create %s: %s", f.c_str(), strerror(errno));
      write_loop(fd, b, size, f);
      if (::close(fd) != 0) die("close %s: %s", f.c_str(), strerror(errno));
      {
        std::lock_guard l(mu);
        idx[i] = lru.insert(lru.end(), i);
      }
      p.lat_ms.push_back((now_s() - t0) * 1e3);
      ++p.ops, p.bytes += size;
    });
  }
  if (c.settle) fsync_dir(path);
  Bufs rb = make_bufs(th, size, nullptr);
  const Phase load = run_phase(c.chunks, th, [&](unsigned t, uint64_t i, Phase& p) {
    {
      std::lock_guard l(mu);
      auto it = idx.find(i);
      if (it == idx.end()) return void(++p.misses);
      lru.splice(lru.end(), lru, it->second);
    }
    const std::string f = file(i);
    char* b = rb[t]->p;
    std::memset(b, 0xa5, kPage);
    const double t0 = now_s();
    const int fd = ::open(f.c_str(), O_RDONLY | (direct ? O_DIRECT : 0));
    if (fd < 0) die("open %s: %s", f.c_str(), strerror(errno));
    read_loop(fd, b, size, f);
    ::close(fd);
    const double t1 = now_s();
    p.lat_ms.push_back((t1 - t0) * 1e3);
    ++p.ops, p.bytes += size;
    check_content(b, c.base->p, size, f);
    p.verify_s += now_s() - t1;
  });
  if (!c.keep)
    for (const auto& [i, it] : idx) ::unlink(file(i).c_str());
  Json j = header("lmcache-local", dir, c);
  j.add("threads", th).add("budget", budget).add("o_direct", direct);
  j.add("lru_evictions", evicted).add("load_misses", load.misses);
  finish(j, store, load);
  return 0;
}

}  // namespace kvfs::bench
