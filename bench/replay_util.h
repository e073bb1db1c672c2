// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the client replays (replay.cc, replay_lmcache.cc): the
// common options, the JSON line, the lookup phases and full read/write loops.
#pragma once

#include <memory>

#include "bench/bench_util.h"

namespace kvfs::bench::replay {

using Bufs = std::vector<std::unique_ptr<AlignedBuf>>;

// n buffers of `size` bytes; with `base`, each starts as a copy of it.
inline Bufs make_bufs(unsigned n, size_t size, const char* base) {
  Bufs v;
  for (unsigned i = 0; i < n; ++i) {
    v.push_back(std::make_unique<AlignedBuf>(size));
    if (base) std::memcpy(v.back()->p, base, size);
  }
  return v;
}

struct Common {
  Geometry g;
  uint64_t chunks = 0, salt = 0;
  bool settle = true, keep = false;
  size_t size = 0;
  std::unique_ptr<AlignedBuf> base;
};

inline Common parse_common(Args& a) {
  Common c;
  c.g = parse_geometry(a);
  c.chunks = std::max<uint64_t>(1, a.num("chunks", 32));
  c.salt = a.num("salt", rand64() & 0xffffffffffull);
  c.settle = a.num("settle", 1) != 0;
  c.keep = a.flag("keep");
  c.size = c.g.chunk_bytes;
  return c;
}

inline void make_base(Common& c, size_t size) {
  c.base = std::make_unique<AlignedBuf>(size);
  fill_base(c.base->p, size);
}

inline Json header(const char* cmd, const std::string& dir, const Common& c) {
  Json j;
  j.add("cmd", cmd).add("dir", dir);
  add_geometry(j, c.g);
  j.add("chunks", c.chunks);
  return j;
}

inline void finish(Json& j, const Phase& store, const Phase& load) {
  j.add("ops", store.ops + load.ops)
      .add("gbps", gbps(store.bytes + load.bytes, store.secs + load.secs));
  add_phase(j, "store", store);
  add_phase(j, "load", load);
  j.add("verified_bytes", load.bytes).add("verify_cpu_s", load.verify_s);
  std::printf("%s\n", j.str().c_str());
}

// Single-threaded lookups of names expected present (or absent): the
// scheduler's lookup thread. `fn` returns 0 when the name exists.
template <class F>
Phase lookups(const std::vector<std::string>& names, bool want, const char* what, F fn,
              size_t min_calls = 0) {
  return run_phase(1, 1, [&](unsigned, uint64_t, Phase& p) {
    for (size_t i = 0; i < std::max(names.size(), min_calls); ++i) {
      const std::string& n = names[i % names.size()];
      const double t0 = now_s();
      const int r = fn(n);
      p.lat_ms.push_back((now_s() - t0) * 1e3);
      if (want ? r != 0 : (r == 0 || errno != ENOENT))
        die("%s %s: %s (expected %s)", what, n.c_str(), r == 0 ? "present" : strerror(errno),
            want ? "present" : "ENOENT");
      ++p.ops;
    }
  });
}

// present: the first lookup of each name after the stores (on FUSE the kernel
// revalidates the attributes the creates and renames invalidated); warm: the
// same names again; absent: names never created, each looked up once.
inline Json& add_lookups(Json& j, const char* kind, const Phase& present, const Phase& warm,
                         const Phase& absent) {
  const std::string k = kind;
  return j.add(k + "_present_ops_s", present.ops_s(), 0)
      .add(k + "_present_p99_us", percentile(present.lat_ms, 99) * 1e3, 1)
      .add(k + "_present_warm_ops_s", warm.ops_s(), 0)
      .add(k + "_absent_ops_s", absent.ops_s(), 0)
      .add(k + "_absent_p99_us", percentile(absent.lat_ms, 99) * 1e3, 1);
}

inline void unlink_all(const std::vector<std::string>& paths) {
  for (const auto& p : paths)
    if (::unlink(p.c_str()) != 0 && errno != ENOENT)
      die("unlink %s: %s", p.c_str(), strerror(errno));
}

// Reads exactly n bytes with a read loop; a short read is an error.
inline void read_loop(int fd, char* buf, size_t n, const std::string& path) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::read(fd, buf + done, n - done);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) die("read %s: %s", path.c_str(), strerror(errno));
    if (r == 0) die("short read of %s: %zu of %zu bytes", path.c_str(), done, n);
    done += static_cast<size_t>(r);
  }
}

inline void write_loop(int fd, const char* buf, size_t n, const std::string& path) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::write(fd, buf + done, n - done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) die("write %s: %s", path.c_str(), r < 0 ? strerror(errno) : "wrote 0 bytes");
    done += static_cast<size_t>(r);
  }
}

}  // namespace kvfs::bench::replay
