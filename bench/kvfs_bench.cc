// SPDX-License-Identifier: Apache-2.0
// kvfs-bench: micro-benchmarks of the syscall patterns KV-cache offloaders
// issue (see shared/WORKLOADS.md), run against any directory so that kvfs can
// be compared with tmpfs, a plain disk directory or nullfs (the FUSE ceiling).
// Each subcommand prints one JSON line on stdout; errors go to stderr with exit
// status 2 (1 for bad usage). Every byte read back is checked against the
// deterministic content of bench/pattern.h.
//
//   kvfs-bench read36 DIR --file NAME [--size B] [--iters N] [--count K] [--warmup W]
//                    [--request B]
//       vLLM load: per sample open(O_RDONLY|O_DIRECT) + ONE read() of the whole
//       file + close, into one reused, pre-touched, aligned buffer. With
//       --count K the files are NAME.0 .. NAME.K-1, each read once per
//       iteration (K files and --iters 1 --warmup 0: K cold reads).
//   kvfs-bench write DIR --file NAME [--size B] [--count K] [--direct 0|1] [--sync]
//       helper: writes the pattern files read36 expects (one write each);
//       --sync fsyncs their directory afterwards (on kvfs: flushes everything).
//   kvfs-bench store DIR [--count N] [--size B] [--threads T] [--reps R] [--warmup W] [--keep]
//       vLLM store: access(F_OK), mkdir -p of a vLLM-like layout, open(tmp,
//       O_CREAT|O_EXCL|O_WRONLY|O_TRUNC|O_DIRECT), ONE write, close, rename.
//   kvfs-bench flush DIR [--count N] [--size B] [--reps R] [--hold-open 0|1]
//       N files with buffered 1 MiB writes, then fsync(open(DIR/flush,
//       O_RDONLY|O_DIRECTORY)). flush_gbps = bytes / (close + fsync time);
//       with --hold-open 1 (default) every fd stays open until all are
//       written, so that kvfs cannot start flushing during the writes.
//   kvfs-bench access DIR [--count N] [--seconds S]
//       access(F_OK) rate on present and absent names, 1 and 16 threads.
//
// Client replays (vllm, llmd, lmcache-native, lmcache-local) are in replay.cc,
// nixl-gds and lmcache-fs in replay_lmcache.cc,
// the multi-round QA replay (mrqa) in mrqa.cc, rw1m/meta/scale in micro2.cc;
// shared helpers in bench_util.h.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"

namespace kvfs::bench {
namespace {

std::vector<std::string> file_list(const std::string& dir, const std::string& name, uint64_t n) {
  std::vector<std::string> v;
  if (n <= 1) return {join(dir, name)};
  for (uint64_t i = 0; i < n; ++i) v.push_back(join(dir, name) + "." + std::to_string(i));
  return v;
}

// ---------------------------------------------------------------- read36

int cmd_read36(const std::string& dir, Args& a) {
  const std::string name = a.str("file");
  if (name.empty()) die("read36 needs --file NAME");
  const uint64_t size = a.num("size", kChunk);
  const uint64_t iters = std::max<uint64_t>(1, a.num("iters", 10));
  const uint64_t count = a.num("count", 1);
  const uint64_t warmup = a.num("warmup", 2);
  // 0: the whole file in one read (the kernel splits it and overlaps the
  // parts); B: reads of B bytes one after another, as a loader that issues
  // one request at a time (the case read-ahead is for).
  const uint64_t request = a.num("request", 0);
  if (request % kPage) die("--request must be a multiple of %zu", size_t(kPage));
  a.check_all_used();
  const auto files = file_list(dir, name, count);

  AlignedBuf buf(size), base(size);
  fill_base(base.p, size);
  std::vector<bool> verified(files.size(), false);
  uint64_t verified_bytes = 0;

  auto read_once = [&](size_t fi) {
    const std::string& path = files[fi];
    std::memset(buf.p, 0xa5, kPage);  // a stale first page cannot pass the check
    const double t0 = now_s();
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT);
    if (fd < 0) die("open %s: %s", path.c_str(), strerror(errno));
    ssize_t r = 0;
    if (request == 0) {
      r = ::read(fd, buf.p, size);
    } else {
      while (static_cast<uint64_t>(r) < size) {
        const ssize_t n = ::read(fd, buf.p + r, std::min<uint64_t>(request, size - r));
        if (n < 0) r = -1;
        if (n <= 0) break;
        r += n;
      }
    }
    const int e = errno;
    ::close(fd);
    const double t = now_s() - t0;
    if (r < 0) die("read %s: %s", path.c_str(), strerror(e));
    if (static_cast<uint64_t>(r) != size)
      die("short read of %s: %zd of %llu bytes", path.c_str(), r, (unsigned long long)size);
    if (!verified[fi]) {
      const int64_t bad = verify_content(buf.p, base.p, size, name_seed(path));
      if (bad >= 0) die("%s: wrong content at offset %lld", path.c_str(), (long long)bad);
      verified[fi] = true;
      verified_bytes += size;
    }
    return t;
  };

  for (uint64_t w = 0; w < warmup; ++w) read_once(0);
  std::vector<double> rates, ms;
  double total_s = 0;
  for (uint64_t it = 0; it < iters; ++it)
    for (size_t fi = 0; fi < files.size(); ++fi) {
      const double t = read_once(fi);
      total_s += t;
      rates.push_back(gbps(size, t));
      ms.push_back(t * 1e3);
    }
  // total_gbps: all the bytes over all the reads' time (a prefix of K files
  // loaded one after another).
  std::printf(
      "{\"cmd\":\"read36\",\"dir\":%s,\"file\":%s,\"files\":%zu,\"size\":%llu,\"request\":%llu,"
      "\"samples\":%zu,"
      "\"median_gbps\":%.3f,\"best_gbps\":%.3f,\"worst_gbps\":%.3f,\"median_ms\":%.3f,"
      "\"total_gbps\":%.3f,\"verified_bytes\":%llu,\"gbps_all\":%s}\n",
      json_str(dir).c_str(), json_str(name).c_str(), files.size(), (unsigned long long)size,
      (unsigned long long)request, rates.size(), median(rates), percentile(rates, 100),
      percentile(rates, 0), median(ms), gbps(size * rates.size(), total_s),
      (unsigned long long)verified_bytes, json_list(rates).c_str());
  return 0;
}

// ---------------------------------------------------------------- write

int cmd_write(const std::string& dir, Args& a) {
  const std::string name = a.str("file");
  if (name.empty()) die("write needs --file NAME");
  const uint64_t size = a.num("size", kChunk);
  const uint64_t count = a.num("count", 1);
  const bool direct = a.num("direct", 1) != 0;
  const bool sync = a.flag("sync");
  a.check_all_used();
  const auto files = file_list(dir, name, count);
  AlignedBuf buf(size);
  fill_base(buf.p, size);
  mkdir_p(parent_of(files[0]));
  const double t0 = now_s();
  for (const auto& f : files) {
    apply_stamps(buf.p, size, name_seed(f));
    const int fd = ::open(f.c_str(), O_CREAT | O_TRUNC | O_WRONLY | (direct ? O_DIRECT : 0), 0644);
    if (fd < 0) die("create %s: %s", f.c_str(), strerror(errno));
    write_all_once(fd, buf.p, size, f);
    if (::close(fd) != 0) die("close %s: %s", f.c_str(), strerror(errno));
  }
  const double tw = now_s() - t0;
  if (sync) fsync_dir(parent_of(files[0]));
  const double ts = now_s() - t0;
  std::printf(
      "{\"cmd\":\"write\",\"dir\":%s,\"file\":%s,\"files\":%zu,\"size\":%llu,\"direct\":%d,"
      "\"write_gbps\":%.3f,\"with_sync_gbps\":%.3f}\n",
      json_str(dir).c_str(), json_str(name).c_str(), files.size(), (unsigned long long)size, direct,
      gbps(size * files.size(), tw), gbps(size * files.size(), ts));
  return 0;
}

// ---------------------------------------------------------------- store

int cmd_store(const std::string& dir, Args& a) {
  const uint64_t count = std::max<uint64_t>(1, a.num("count", 16));
  const uint64_t size = a.num("size", kChunk);
  const unsigned threads = static_cast<unsigned>(std::max<uint64_t>(1, a.num("threads", 16)));
  const uint64_t reps = std::max<uint64_t>(1, a.num("reps", 3));
  const uint64_t warmup = a.num("warmup", 1);
  const bool keep = a.flag("keep");
  a.check_all_used();

  // <root>/<model>_<12 hex>/config.json and <root>/<model>_<12 hex>_r0/...
  const std::string model = "Qwen_Qwen3-8B_5d1e2c7b9a04";
  const std::string base_dir = join(dir, "store/" + model);
  const std::string rank_dir = base_dir + "_r0";
  mkdir_p(base_dir);
  if (!exists(base_dir + "/config.json")) {
    const int fd = ::open((base_dir + "/config.json").c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd < 0) die("create config.json: %s", strerror(errno));
    const char cfg[] = "{\"model\":\"Qwen/Qwen3-8B\",\"block_size\":256}\n";
    write_all_once(fd, cfg, sizeof(cfg) - 1, "config.json");
    ::close(fd);
  }

  AlignedBuf base(size);
  fill_base(base.p, size);
  std::vector<std::unique_ptr<AlignedBuf>> bufs;
  for (unsigned t = 0; t < threads; ++t) {
    bufs.push_back(std::make_unique<AlignedBuf>(size));
    std::memcpy(bufs.back()->p, base.p, size);
  }
  const uint64_t run_id = static_cast<uint64_t>(::getpid()) ^ static_cast<uint64_t>(now_s() * 1e6);

  std::vector<double> rates, lat_ms;
  std::mutex lat_mu;
  for (uint64_t rep = 0; rep < warmup + reps; ++rep) {
    std::vector<std::string> dests(count);
    for (uint64_t i = 0; i < count; ++i) {
      const std::string h = hex64(run_id + i, rep);
      dests[i] = rank_dir + "/" + h.substr(0, 3) + "/" + h.substr(3, 2) + "_g0/" + h + ".bin";
    }
    std::atomic<uint64_t> next{0};
    std::vector<double> rep_lat;
    auto worker = [&](unsigned t) {
      char* buf = bufs[t]->p;
      std::vector<double> mine;
      for (uint64_t i; (i = next.fetch_add(1)) < count;) {
        const std::string& dest = dests[i];
        apply_stamps(buf, size, name_seed(dest));
        char suffix[32];
        std::snprintf(suffix, sizeof(suffix), "_%08x.tmp",
                      static_cast<unsigned>(splitmix64(run_id ^ (i << 8) ^ rep)));
        const std::string tmp = dest + suffix;
        const double t0 = now_s();
        if (::access(dest.c_str(), F_OK) == 0) continue;  // present: vLLM skips it
        mkdir_p(parent_of(dest));
        const int fd = ::open(tmp.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_TRUNC | O_DIRECT, 0644);
        if (fd < 0) die("create %s: %s", tmp.c_str(), strerror(errno));
        write_all_once(fd, buf, size, tmp);
        if (::close(fd) != 0) die("close %s: %s", tmp.c_str(), strerror(errno));
        if (::rename(tmp.c_str(), dest.c_str()) != 0)
          die("rename %s: %s", tmp.c_str(), strerror(errno));
        mine.push_back((now_s() - t0) * 1e3);
      }
      std::lock_guard l(lat_mu);
      rep_lat.insert(rep_lat.end(), mine.begin(), mine.end());
    };
    const double t0 = now_s();
    std::vector<std::thread> ths;
    for (unsigned t = 0; t < threads; ++t) ths.emplace_back(worker, t);
    for (auto& th : ths) th.join();
    const double el = now_s() - t0;
    if (rep_lat.size() != count)
      die("store: %zu of %llu names already existed", count - rep_lat.size(),
          (unsigned long long)count);
    if (rep >= warmup) {
      rates.push_back(gbps(size * count, el));
      lat_ms.insert(lat_ms.end(), rep_lat.begin(), rep_lat.end());
    }
    // Untimed: drop this round's files and let the daemon settle (on kvfs,
    // the fsync of a directory waits for the flushers) before the next round.
    if (!keep || rep + 1 < warmup + reps) {
      for (const auto& d : dests)
        if (::unlink(d.c_str()) != 0) die("unlink %s: %s", d.c_str(), strerror(errno));
    }
    fsync_dir(rank_dir);
  }
  std::printf(
      "{\"cmd\":\"store\",\"dir\":%s,\"count\":%llu,\"size\":%llu,\"threads\":%u,\"reps\":%llu,"
      "\"gbps\":%.3f,\"best_gbps\":%.3f,\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"max_ms\":%.3f,"
      "\"gbps_all\":%s}\n",
      json_str(dir).c_str(), (unsigned long long)count, (unsigned long long)size, threads,
      (unsigned long long)reps, median(rates), percentile(rates, 100), percentile(lat_ms, 50),
      percentile(lat_ms, 99), percentile(lat_ms, 100), json_list(rates).c_str());
  return 0;
}

// ---------------------------------------------------------------- flush

int cmd_flush(const std::string& dir, Args& a) {
  const uint64_t count = std::max<uint64_t>(1, a.num("count", 16));
  const uint64_t size = a.num("size", kChunk);
  const uint64_t reps = std::max<uint64_t>(1, a.num("reps", 3));
  const bool hold_open = a.num("hold-open", 1) != 0;
  a.check_all_used();
  const std::string fdir = join(dir, "flush");
  mkdir_p(fdir);
  AlignedBuf buf(size);
  fill_base(buf.p, size);
  const uint64_t bytes = size * count;
  std::vector<double> flush_rate, total_rate, write_rate, fsync_s;
  for (uint64_t rep = 0; rep < reps; ++rep) {
    fsync_dir(fdir);  // start with nothing dirty
    std::vector<std::string> files;
    std::vector<int> fds;
    for (uint64_t i = 0; i < count; ++i)
      files.push_back(fdir + "/f" + std::to_string(rep) + "_" + std::to_string(i) + ".bin");
    const double t0 = now_s();
    for (uint64_t i = 0; i < count; ++i) {
      apply_stamps(buf.p, size, name_seed(files[i]));
      const int fd = ::open(files[i].c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
      if (fd < 0) die("create %s: %s", files[i].c_str(), strerror(errno));
      for (uint64_t off = 0; off < size; off += kIoSize) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(kIoSize, size - off));
        write_all_once(fd, buf.p + off, n, files[i]);
      }
      fds.push_back(fd);
      if (!hold_open && ::close(fd) != 0) die("close %s: %s", files[i].c_str(), strerror(errno));
    }
    const double t_written = now_s();
    // kvfs seals (and starts flushing) a file at its last close: with the fds
    // held open until now, the flush starts here and the time below is the
    // time the backing dir took for all the bytes.
    if (hold_open)
      for (size_t i = 0; i < fds.size(); ++i)
        if (::close(fds[i]) != 0) die("close %s: %s", files[i].c_str(), strerror(errno));
    fsync_dir(fdir);
    const double t_end = now_s();
    flush_rate.push_back(gbps(bytes, t_end - t_written));
    total_rate.push_back(gbps(bytes, t_end - t0));
    write_rate.push_back(gbps(bytes, t_written - t0));
    fsync_s.push_back(t_end - t_written);
    for (const auto& f : files)
      if (::unlink(f.c_str()) != 0) die("unlink %s: %s", f.c_str(), strerror(errno));
  }
  std::printf(
      "{\"cmd\":\"flush\",\"dir\":%s,\"count\":%llu,\"size\":%llu,\"reps\":%llu,"
      "\"hold_open\":%d,\"flush_gbps\":%.3f,\"total_gbps\":%.3f,\"write_gbps\":%.3f,"
      "\"fsync_s\":%.3f,\"flush_gbps_all\":%s,\"total_gbps_all\":%s}\n",
      json_str(dir).c_str(), (unsigned long long)count, (unsigned long long)size,
      (unsigned long long)reps, hold_open, median(flush_rate), median(total_rate),
      median(write_rate), median(fsync_s), json_list(flush_rate).c_str(),
      json_list(total_rate).c_str());
  return 0;
}

// ---------------------------------------------------------------- access

int cmd_access(const std::string& dir, Args& a) {
  const uint64_t count = std::max<uint64_t>(1, a.num("count", 1000));
  const double secs = a.real("seconds", 0.5);
  a.check_all_used();
  const std::string adir = join(dir, "access");
  mkdir_p(adir);
  std::vector<std::string> present, absent;
  for (uint64_t i = 0; i < count; ++i) {
    present.push_back(adir + "/p_" + hex64(i, 7).substr(0, 40) + ".bin");
    absent.push_back(adir + "/a_" + hex64(i, 9).substr(0, 40) + ".bin");
  }
  for (const auto& p : present) {
    if (exists(p)) continue;
    const int fd = ::open(p.c_str(), O_CREAT | O_WRONLY, 0644);
    if (fd < 0) die("create %s: %s", p.c_str(), strerror(errno));
    ::close(fd);
  }
  auto check = [](const std::string& p, bool want) {
    const int r = ::access(p.c_str(), F_OK);
    if (want ? r != 0 : (r == 0 || errno != ENOENT))
      die("access %s: %s (expected %s)", p.c_str(), r == 0 ? "present" : strerror(errno),
          want ? "present" : "ENOENT");
  };
  // First pass over absent names: each one is a real lookup in the daemon.
  double t0 = now_s();
  for (const auto& p : absent) check(p, false);
  const double first_absent = count / (now_s() - t0);
  for (const auto& p : present) check(p, true);

  auto rate = [&](const std::vector<std::string>& names, bool want, unsigned threads) {
    std::atomic<uint64_t> ops{0};
    std::atomic<bool> stop{false};
    std::vector<std::thread> ths;
    const double start = now_s();
    for (unsigned t = 0; t < threads; ++t)
      ths.emplace_back([&, t] {
        uint64_t n = 0;
        size_t i = (t * names.size()) / threads;
        while (!stop.load(std::memory_order_relaxed)) {
          for (int k = 0; k < 256; ++k) {
            check(names[i], want);
            if (++i == names.size()) i = 0;
          }
          n += 256;
          if (t == 0 && now_s() - start >= secs) stop = true;
        }
        ops += n;
      });
    for (auto& th : ths) th.join();
    return ops.load() / (now_s() - start);
  };
  const double p1 = rate(present, true, 1), p16 = rate(present, true, 16);
  const double a1 = rate(absent, false, 1), a16 = rate(absent, false, 16);
  std::printf(
      "{\"cmd\":\"access\",\"dir\":%s,\"count\":%llu,\"present_1t_ops\":%.0f,"
      "\"present_16t_ops\":%.0f,\"absent_1t_ops\":%.0f,\"absent_16t_ops\":%.0f,"
      "\"absent_first_pass_ops\":%.0f}\n",
      json_str(dir).c_str(), (unsigned long long)count, p1, p16, a1, a16, first_absent);
  return 0;
}

int usage() {
  std::fputs(
      "usage: kvfs-bench SUBCOMMAND DIR [--option VALUE ...]\n"
      "  read36 DIR --file NAME [--size 37748736] [--iters 10] [--count 1] [--warmup 2]\n"
      "         [--request B (reads of B bytes one at a time; default one read)]\n"
      "  write  DIR --file NAME [--size 37748736] [--count 1] [--direct 1] [--sync]\n"
      "  store  DIR [--count 16] [--size 37748736] [--threads 16] [--reps 3] [--warmup 1] "
      "[--keep]\n"
      "  flush  DIR [--count 16] [--size 37748736] [--reps 3] [--hold-open 1]\n"
      "  access DIR [--count 1000] [--seconds 0.5]\n"
      "replays (geometry: --layers 36 --kv-heads 8 --head-dim 128 --dtype-bytes 2\n"
      "  --block-tokens 256 --tp 1, or --chunk-bytes B; --chunks 32 --settle 1 --keep):\n"
      "  vllm   DIR [--write-threads 16] [--read-threads 32]\n"
      "  llmd   DIR [--threads 64] [--need BYTES]\n"
      "  lmcache-native DIR [--threads 16]\n"
      "  lmcache-local  DIR [--threads 4] [--budget BYTES]\n"
      "  nixl-gds       DIR [--threads 4] [--io pwrite|io_uring] [--orphans 4] [--shard-dirs 0]\n"
      "  lmcache-fs     DIR [--threads 8] [--odirect 0|1]\n"
      "  mrqa   DIR [--client vllm|nixl-gds|lmcache-fs] [--context-tokens 1000] [--users 15]\n"
      "         [--rounds 20] [--qps 2] [--time 1200]\n"
      "         [--concurrency 4] [--write-threads 16] [--read-threads 32] [--backing-dir P]\n"
      "         [--label L] [--flush 1] [--peer-dir DIR2[,DIR3..]] [--route rr|user] [--dry-run]\n"
      "  visibility DIR --peer-dir DIR2 [--files 40] [--size 4M] [--poll-ms 2] [--timeout 30]\n"
      "  rw1m   DIR [--size 256M] [--count 4] [--drop-caches 0]\n"
      "  meta   DIR [--count 20000] [--threads 1]\n"
      "  scale  DIR --phase create|lookup [--files 1000000] [--threads 16] [--size 4096]\n"
      "         [--samples 20000] [--salt 1]\n",
      stderr);
  return 1;
}

}  // namespace
}  // namespace kvfs::bench

int main(int argc, char** argv) {
  using namespace kvfs::bench;
  if (argc < 3) return usage();
  const std::string cmd = argv[1], dir = argv[2];
  Args a(argc, argv, 3, {"sync", "keep", "dry-run"});
  if (cmd == "read36") return cmd_read36(dir, a);
  if (cmd == "write") return cmd_write(dir, a);
  if (cmd == "store") return cmd_store(dir, a);
  if (cmd == "flush") return cmd_flush(dir, a);
  if (cmd == "access") return cmd_access(dir, a);
  if (cmd == "vllm") return cmd_vllm(dir, a);
  if (cmd == "llmd") return cmd_llmd(dir, a);
  if (cmd == "lmcache-native") return cmd_lmcache_native(dir, a);
  if (cmd == "lmcache-local") return cmd_lmcache_local(dir, a);
  if (cmd == "nixl-gds") return cmd_nixl_gds(dir, a);
  if (cmd == "lmcache-fs") return cmd_lmcache_fs(dir, a);
  if (cmd == "mrqa") return cmd_mrqa(dir, a);
  if (cmd == "visibility") return cmd_visibility(dir, a);
  if (cmd == "rw1m") return cmd_rw1m(dir, a);
  if (cmd == "meta") return cmd_meta(dir, a);
  if (cmd == "scale") return cmd_scale(dir, a);
  return usage();
}
