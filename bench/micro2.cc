// SPDX-License-Identifier: Apache-2.0
// More kvfs-bench micro-benchmarks: buffered 1 MiB I/O, metadata rates and
// the million-file scale test.
//
//   kvfs-bench rw1m DIR [--size 256M] [--count 4] [--drop-caches 0|1]
//       buffered 1 MiB writes of --count files, then 1 MiB buffered reads of
//       them (every byte verified); with --drop-caches 1 (root) the page cache
//       is dropped between the two, so the reads reach the filesystem.
//   kvfs-bench meta DIR [--count 20000] [--threads 1]
//       create+rename (open O_CREAT|O_EXCL tmp, close, rename) ops/s, and
//       mkdir -p of new vLLM leaf directories (<h[0:3]>/<h[3:5]>_g0) and of
//       existing ones, ops/s.
//   kvfs-bench scale DIR --phase create|lookup [--files N] [--threads 16] [--size 4096]
//       [--samples 20000] [--salt 1] [--verify 200]
//       create: N small files in the vLLM layout with the vLLM store pattern;
//       lookup: stat latency of random present and absent names (one thread,
//       in-process) and a content check of --verify random files.
#include <fcntl.h>

#include <memory>

#include "bench/bench_util.h"
#include "bench/kvfs_control.h"

namespace kvfs::bench {
namespace {

void drop_caches() {
  ::sync();
  const int fd = ::open("/proc/sys/vm/drop_caches", O_WRONLY);
  if (fd < 0 || ::write(fd, "3", 1) != 1) die("drop_caches: %s (needs root)", strerror(errno));
  ::close(fd);
}

Json& add_lat_us(Json& j, const std::string& k, const std::vector<double>& ms) {
  return j.add(k + "_p50_us", percentile(ms, 50) * 1e3, 1)
      .add(k + "_p99_us", percentile(ms, 99) * 1e3, 1)
      .add(k + "_max_us", percentile(ms, 100) * 1e3, 1);
}

}  // namespace

// ---------------------------------------------------------------- rw1m

int cmd_rw1m(const std::string& dir, Args& a) {
  const uint64_t size = a.num("size", 256ull << 20);
  const uint64_t count = std::max<uint64_t>(1, a.num("count", 4));
  const bool drop = a.num("drop-caches", 0) != 0;
  a.check_all_used();
  const std::string d = join(dir, "rw1m");
  mkdir_p(d);
  AlignedBuf base(size), piece(kIoSize);
  fill_base(base.p, size);
  std::vector<std::string> files;
  for (uint64_t i = 0; i < count; ++i) files.push_back(d + "/f" + std::to_string(i) + ".bin");
  const double t0 = now_s();
  for (const auto& f : files) {
    const uint64_t seed = name_seed(f);
    const int fd = ::open(f.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
    if (fd < 0) die("create %s: %s", f.c_str(), strerror(errno));
    for (uint64_t off = 0; off < size; off += kIoSize) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kIoSize, size - off));
      std::memcpy(piece.p, base.p + off, n);
      apply_stamps_at(piece.p, n, seed, off);
      write_all_once(fd, piece.p, n, f);
    }
    if (::close(fd) != 0) die("close %s: %s", f.c_str(), strerror(errno));
  }
  const double write_s = now_s() - t0;
  if (drop) drop_caches();
  double read_s = 0;
  for (const auto& f : files) {
    const uint64_t seed = name_seed(f);
    const double r0 = now_s();
    const int fd = ::open(f.c_str(), O_RDONLY);
    if (fd < 0) die("open %s: %s", f.c_str(), strerror(errno));
    read_s += now_s() - r0;
    for (uint64_t off = 0; off < size; off += kIoSize) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kIoSize, size - off));
      const double s0 = now_s();
      const ssize_t r = ::read(fd, piece.p, n);
      read_s += now_s() - s0;
      if (r != static_cast<ssize_t>(n))
        die("read %s at %llu: %zd", f.c_str(), (unsigned long long)off, r);
      const int64_t bad = verify_range(piece.p, base.p, n, seed, off);
      if (bad >= 0) die("%s: wrong content at offset %lld", f.c_str(), (long long)bad);
    }
    ::close(fd);
  }
  for (const auto& f : files) ::unlink(f.c_str());
  Json j;
  j.add("cmd", "rw1m").add("dir", dir).add("size", size).add("count", count);
  j.add("drop_caches", drop);
  j.add("write_gbps", gbps(size * count, write_s)).add("read_gbps", gbps(size * count, read_s));
  j.add("verified_bytes", size * count);
  std::printf("%s\n", j.str().c_str());
  return 0;
}

// ---------------------------------------------------------------- meta

int cmd_meta(const std::string& dir, Args& a) {
  const uint64_t count = std::max<uint64_t>(1, a.num("count", 20000));
  const unsigned th = static_cast<unsigned>(std::max<uint64_t>(1, a.num("threads", 1)));
  const uint64_t salt = a.num("salt", rand64() & 0xffffffffffull);
  a.check_all_used();
  char tag[32];
  std::snprintf(tag, sizeof(tag), "meta_%llx", (unsigned long long)salt);
  const std::string root = join(dir, tag);
  mkdir_p(root + "/cr");
  // create+rename: the tmp-then-rename of every offloader, without data.
  const Phase cr = run_phase(count, th, [&](unsigned, uint64_t i, Phase& p) {
    const std::string f = root + "/cr/" + hex64(salt + i, 12).substr(0, 40);
    const std::string tmp = f + "_1234abcd.tmp";
    const double t0 = now_s();
    const int fd = ::open(tmp.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_TRUNC, 0644);
    if (fd < 0) die("create %s: %s", tmp.c_str(), strerror(errno));
    if (::close(fd) != 0) die("close %s: %s", tmp.c_str(), strerror(errno));
    if (::rename(tmp.c_str(), (f + ".bin").c_str()) != 0)
      die("rename %s: %s", tmp.c_str(), strerror(errno));
    p.lat_ms.push_back((now_s() - t0) * 1e3);
    ++p.ops;
  });
  // mkdir -p of vLLM leaf directories: new (most stores create one), then existing.
  auto leaf = [&](uint64_t i) {
    const std::string h = hex64(salt + i, 13);
    return root + "/mk_r0/" + h.substr(0, 3) + "/" + h.substr(3, 2) + "_g0";
  };
  auto mk = [&](unsigned, uint64_t i, Phase& p) {
    const double t0 = now_s();
    mkdir_p(leaf(i));
    p.lat_ms.push_back((now_s() - t0) * 1e3);
    ++p.ops;
  };
  const Phase mk_new = run_phase(count, th, mk);
  const Phase mk_old = run_phase(count, th, mk);
  Json j;
  j.add("cmd", "meta").add("dir", dir).add("count", count).add("threads", th);
  j.add("create_rename_ops_s", cr.ops_s(), 0);
  add_lat_us(j, "create_rename", cr.lat_ms);
  j.add("mkdirp_new_ops_s", mk_new.ops_s(), 0);
  add_lat_us(j, "mkdirp_new", mk_new.lat_ms);
  j.add("mkdirp_existing_ops_s", mk_old.ops_s(), 0);
  std::printf("%s\n", j.str().c_str());
  return 0;
}

// ---------------------------------------------------------------- scale

int cmd_scale(const std::string& dir, Args& a) {
  const std::string phase = a.str("phase", "create");
  const uint64_t files = std::max<uint64_t>(1, a.num("files", 1000000));
  const unsigned th = static_cast<unsigned>(std::max<uint64_t>(1, a.num("threads", 16)));
  const size_t size = a.num("size", 4096);
  const uint64_t samples = std::max<uint64_t>(1, a.num("samples", 20000));
  const uint64_t salt = a.num("salt", 1);
  const uint64_t nverify = a.num("verify", 200);
  a.check_all_used();
  const std::string base_dir = vllm_base_dir(dir, "Qwen/Qwen3-8B", salt);
  const std::string rank_dir = base_dir + "_r0";
  auto path = [&](uint64_t i, uint64_t kind) {
    return vllm_block_path(rank_dir, hex64(salt + i, kind));
  };
  AlignedBuf base(size);
  fill_base(base.p, size);
  Json j;
  j.add("cmd", "scale").add("dir", dir).add("phase", phase).add("files", files);
  if (phase == "create") {
    const bool direct = vllm_probe_o_direct(base_dir) && size % kPage == 0;
    std::vector<std::unique_ptr<AlignedBuf>> bufs;
    for (unsigned t = 0; t < th; ++t) {
      bufs.push_back(std::make_unique<AlignedBuf>(size));
      std::memcpy(bufs.back()->p, base.p, size);
    }
    const Phase cr = run_phase(files, th, [&](unsigned t, uint64_t i, Phase& p) {
      const std::string f = path(i, 14);
      apply_stamps(bufs[t]->p, size, name_seed(f));
      const double t0 = now_s();
      if (!vllm_store(f, bufs[t]->p, size, direct)) return void(++p.skipped);
      if (p.ops % 16 == 0) p.lat_ms.push_back((now_s() - t0) * 1e3);
      ++p.ops;
    });
    j.add("threads", th).add("size", static_cast<uint64_t>(size)).add("o_direct", direct);
    j.add("created", cr.ops).add("existed", cr.skipped).add("create_s", cr.secs);
    j.add("create_ops_s", cr.ops_s(), 0);
    add_lat_us(j, "store", cr.lat_ms);
  } else if (phase == "lookup") {
    std::vector<double> pres, abs;
    struct stat st;
    for (uint64_t s = 0; s < samples; ++s) {
      const std::string p = path(rand64() % files, 14), q = path(rand64(), 15);
      double t0 = now_s();
      if (::stat(p.c_str(), &st) != 0) die("stat %s: %s", p.c_str(), strerror(errno));
      pres.push_back((now_s() - t0) * 1e3);
      t0 = now_s();
      if (::stat(q.c_str(), &st) == 0 || errno != ENOENT) die("stat %s: not ENOENT", q.c_str());
      abs.push_back((now_s() - t0) * 1e3);
    }
    AlignedBuf rb(size);
    for (uint64_t v = 0; v < nverify; ++v) {
      const std::string p = path(rand64() % files, 14);
      vllm_load(p, rb.p, size, size % kPage == 0);
      check_content(rb.p, base.p, size, p);
    }
    j.add("samples", samples).add("verified_files", nverify);
    add_lat_us(j, "stat_present", pres);
    add_lat_us(j, "stat_absent", abs);
    // The daemon's own view (cumulative since mount): time inside kvfs per lookup.
    if (const std::string ctl = find_kvfs_control(dir); !ctl.empty())
      if (auto st = kvfs_control(ctl, "{\"cmd\":\"stats\"}")) {
        j.add("kvfs_lookup_count", static_cast<uint64_t>(jnum(*st, "latency.lookup.count")));
        j.add("kvfs_lookup_p50_us", jnum(*st, "latency.lookup.p50_us"), 1);
        j.add("kvfs_lookup_p99_us", jnum(*st, "latency.lookup.p99_us"), 1);
      }
  } else {
    die("scale: --phase create or lookup");
  }
  std::printf("%s\n", j.str().c_str());
  return 0;
}

}  // namespace kvfs::bench
