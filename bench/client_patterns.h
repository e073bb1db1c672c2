// SPDX-License-Identifier: Apache-2.0
// The per-chunk file patterns of the two LMCache clients that bypass LMCache's
// own fs backends, shared by their replays (replay_lmcache.cc) and the
// multi-round QA replay (mrqa.cc), so that both measure the same syscalls:
//   NIXL GDS (LMCache MP server): tmp NAME.tmp.<uuid4 hex> opened
//     O_RDWR|O_CREAT|O_TRUNC|O_DIRECT, its extents written concurrently,
//     rename; existence by stat; loads open O_RDWR|O_DIRECT and read the
//     extents concurrently.
//   FSConnector (in-process, remote_url fs://): one fixed tmp name per key,
//     28-byte header + the payload at offset 28 (buffered, unaligned), rename;
//     stat per lookup; buffered reads to the end of the file.
#pragma once

#include <liburing.h>

#include <algorithm>

#include "bench/replay_util.h"

namespace kvfs::bench::clients {

// cuFile (and so NIXL's GDS backend) splits a transfer at 16 MiB.
inline constexpr uint64_t kExtent = 16ull << 20;
inline constexpr size_t kFsHeader = 28;  // FSConnector's metadata header

struct Extent {
  uint64_t off, len;
};

inline std::vector<Extent> extents_of(uint64_t size, uint64_t extent = kExtent) {
  std::vector<Extent> v;
  for (uint64_t off = 0; off < size; off += extent)
    v.push_back({off, std::min(extent, size - off)});
  return v;
}

// A chunk shrunk by --chunk-bytes keeps the extent count of the full-size one
// (Qwen3-8B's 36 MiB: 16 + 16 + 4 MiB); a 16 MiB extent would make it one.
inline uint64_t scaled_extent(const Geometry& g) {
  const uint64_t full =
      2 * g.layers * g.kv_heads * g.head_dim * g.dtype_bytes * g.block_tokens / g.tp;
  if (!g.scaled || g.chunk_bytes >= full) return kExtent;
  const uint64_t e = (kExtent * g.chunk_bytes / full + kPage - 1) / kPage * kPage;
  return std::max<uint64_t>(e, kPage);
}

// A uuid4().hex: the tmp suffix of one store.
inline std::string uuid_hex() {
  char b[33];
  std::snprintf(b, sizeof(b), "%016llx%016llx", (unsigned long long)rand64(),
                (unsigned long long)rand64());
  return b;
}

// All extents of one file in flight at once; they complete in whatever order
// the filesystem finishes them. Returns true when they did not complete in
// offset order. A short transfer is an error (cuFile fails the batch).
class ExtentIo {
 public:
  explicit ExtentIo(bool uring) : uring_(uring) {
    if (uring_ && io_uring_queue_init(16, &ring_, 0) != 0) die("io_uring_queue_init failed");
  }
  ~ExtentIo() {
    if (uring_) io_uring_queue_exit(&ring_);
  }
  ExtentIo(const ExtentIo&) = delete;
  ExtentIo& operator=(const ExtentIo&) = delete;

  bool run(bool write, int fd, char* buf, const std::vector<Extent>& ex, const std::string& path) {
    std::vector<unsigned> done;  // extent indices in completion order
    if (uring_) {
      for (unsigned i = 0; i < ex.size(); ++i) {
        io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
        if (!sqe) die("io_uring: no sqe");
        if (write)
          io_uring_prep_write(sqe, fd, buf + ex[i].off, ex[i].len, ex[i].off);
        else
          io_uring_prep_read(sqe, fd, buf + ex[i].off, ex[i].len, ex[i].off);
        io_uring_sqe_set_data64(sqe, i);
      }
      const int sub = io_uring_submit(&ring_);
      if (sub != static_cast<int>(ex.size())) die("io_uring_submit %s: %d", path.c_str(), sub);
      for (size_t n = 0; n < ex.size(); ++n) {
        io_uring_cqe* cqe;
        const int r = io_uring_wait_cqe(&ring_, &cqe);
        if (r != 0) die("io_uring_wait_cqe %s: %s", path.c_str(), strerror(-r));
        const unsigned i = static_cast<unsigned>(io_uring_cqe_get_data64(cqe));
        const int res = cqe->res;
        io_uring_cqe_seen(&ring_, cqe);
        if (res < 0) die("%s %s: %s", write ? "write" : "read", path.c_str(), strerror(-res));
        if (static_cast<uint64_t>(res) != ex[i].len)
          die("short %s of %s at %llu: %d of %llu", write ? "write" : "read", path.c_str(),
              (unsigned long long)ex[i].off, res, (unsigned long long)ex[i].len);
        done.push_back(i);
      }
    } else {
      // cuFile's compatibility mode: one POSIX pwrite/pread per extent, each
      // on its own thread.
      std::mutex mu;
      std::vector<std::thread> ths;
      for (unsigned i = 0; i < ex.size(); ++i)
        ths.emplace_back([&, i] {
          char* p = buf + ex[i].off;
          const ssize_t r = write ? ::pwrite(fd, p, ex[i].len, static_cast<off_t>(ex[i].off))
                                  : ::pread(fd, p, ex[i].len, static_cast<off_t>(ex[i].off));
          if (r < 0) die("%s %s: %s", write ? "pwrite" : "pread", path.c_str(), strerror(errno));
          if (static_cast<uint64_t>(r) != ex[i].len)
            die("short %s of %s at %llu: %zd of %llu", write ? "pwrite" : "pread", path.c_str(),
                (unsigned long long)ex[i].off, r, (unsigned long long)ex[i].len);
          std::lock_guard l(mu);
          done.push_back(i);
        });
      for (auto& t : ths) t.join();
    }
    return !std::is_sorted(done.begin(), done.end());
  }

 private:
  bool uring_;
  io_uring ring_{};
};

// stat of a name expected to hold `size` bytes: 0 when present. A wrong size
// is a torn store, which neither client ever shows.
inline int stat_sized(const std::string& n, uint64_t size) {
  struct stat s;
  const int r = ::stat(n.c_str(), &s);
  if (r == 0 && static_cast<uint64_t>(s.st_size) != size)
    die("stat %s: size %lld, stored %llu", n.c_str(), (long long)s.st_size,
        (unsigned long long)size);
  return r;
}

// ---------------------------------------------------------------- NIXL GDS

// <dir>/<model, / as -->_<rank %08x>_0_<hash>.bin
inline std::string nixl_name(const std::string& dir, const std::string& model, unsigned rank,
                             const std::string& hash) {
  std::string m = model;
  for (size_t p; (p = m.find('/')) != std::string::npos;) m.replace(p, 1, "--");
  char r[16];
  std::snprintf(r, sizeof(r), "_%08x_0_", rank);
  return dir + "/" + m + r + hash + ".bin";
}

// One store; returns true when its extents completed out of order.
inline bool nixl_store(const std::string& n, char* buf, const std::vector<Extent>& ex,
                       ExtentIo& io) {
  const std::string tmp = n + ".tmp." + uuid_hex();
  const int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0644);
  if (fd < 0) die("create %s: %s", tmp.c_str(), strerror(errno));
  const bool ooo = io.run(true, fd, buf, ex, tmp);
  if (::close(fd) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    die("close %s: %s", tmp.c_str(), strerror(e));
  }
  if (::rename(tmp.c_str(), n.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    die("rename %s: %s", tmp.c_str(), strerror(e));
  }
  return ooo;
}

// One load; returns true when its extents completed out of order.
inline bool nixl_load(const std::string& n, char* buf, const std::vector<Extent>& ex,
                      ExtentIo& io) {
  // Read-write even for a read: the adapter opens every object that way.
  const int fd = ::open(n.c_str(), O_RDWR | O_DIRECT);
  if (fd < 0) die("open %s: %s", n.c_str(), strerror(errno));
  const bool ooo = io.run(false, fd, buf, ex, n);
  ::close(fd);
  return ooo;
}

// ---------------------------------------------------------------- FSConnector

// <dir>/vllm@<model>@<tp>@<worker>@<16 hex>@bfloat16.data
inline std::string lmcache_fs_name(const std::string& dir, const std::string& model, uint64_t tp,
                                   unsigned worker, const std::string& hash) {
  return dir + "/vllm@" + model + "@" + std::to_string(tp) + "@" + std::to_string(worker) + "@" +
         hash.substr(0, 16) + "@bfloat16.data";
}

// The header (shape, dtype, format) is the same bytes for one key's object.
inline std::string lmcache_fs_header(const std::string& n) {
  std::string h(kFsHeader, '\0');
  for (size_t i = 0; i < kFsHeader; i += 8) {
    const uint64_t w = splitmix64(name_seed(n) + i);
    std::memcpy(h.data() + i, &w, std::min<size_t>(8, kFsHeader - i));
  }
  return h;
}

inline uint64_t lmcache_fs_file_size(size_t size, bool direct) {
  return size + (direct ? 0 : kFsHeader);
}

// One put: stat (skip when present), the key's fixed tmp, rename. Returns
// false when skipped.
inline bool lmcache_fs_store(const std::string& n, const char* buf, size_t size, bool direct) {
  struct stat st;
  if (::stat(n.c_str(), &st) == 0) return false;
  // One fixed tmp name per key: two writers of a key share it.
  const std::string tmp = n.substr(0, n.size() - 5) + ".tmp";
  const int fd = direct ? ::open(tmp.c_str(), O_CREAT | O_WRONLY | O_DIRECT, 0644)
                        : ::open(tmp.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
  if (fd < 0) die("create %s: %s", tmp.c_str(), strerror(errno));
  if (direct) {
    write_all_once(fd, buf, size, tmp);
  } else {
    const std::string hdr = lmcache_fs_header(n);
    replay::write_loop(fd, hdr.data(), hdr.size(), tmp);
    replay::write_loop(fd, buf, size, tmp);  // at offset 28: unaligned, buffered
  }
  if (::close(fd) != 0) die("close %s: %s", tmp.c_str(), strerror(errno));
  if (::rename(tmp.c_str(), n.c_str()) != 0) die("rename %s: %s", tmp.c_str(), strerror(errno));
  return true;
}

// One get into buf (the payload); the header is checked here, the payload is
// the caller's to verify.
inline void lmcache_fs_load(const std::string& n, char* buf, size_t size, bool direct) {
  if (direct) return vllm_load(n, buf, size, true);  // one O_DIRECT read of the object
  char hdr[kFsHeader];
  const int fd = ::open(n.c_str(), O_RDONLY);
  if (fd < 0) die("open %s: %s", n.c_str(), strerror(errno));
  replay::read_loop(fd, hdr, kFsHeader, n);
  replay::read_loop(fd, buf, size, n);
  char extra;
  const ssize_t r = ::read(fd, &extra, 1);  // f.read() reads to end of file
  ::close(fd);
  if (r != 0) die("%s: longer than header + %zu bytes", n.c_str(), size);
  if (std::memcmp(hdr, lmcache_fs_header(n).data(), kFsHeader) != 0)
    die("%s: wrong header", n.c_str());
}

}  // namespace kvfs::bench::clients
