// SPDX-License-Identifier: Apache-2.0
// Mount tests: the file patterns of the two LMCache clients that bench/
// replay_lmcache.cc replays: the MP server's NIXL store (GDS backend: O_DIRECT
// read-write fds, 16 MiB extents in flight together, libaio or io_uring in
// NIXL's POSIX backend, a flat directory swept of *.tmp.* at shutdown) and the
// in-process FSConnector (a fixed tmp name per key, a 28-byte header before
// an unaligned payload, an O_DIRECT write without O_TRUNC).
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <liburing.h>
#include <linux/aio_abi.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/mount_fixture.h"
#include "tests/reliability_util.h"

namespace kvfs::test {
namespace {

constexpr size_t kPage = 4096, kMiB = 1 << 20;
constexpr size_t kExtent = 16 * kMiB;  // cuFile's split
constexpr size_t kChunk = 36 * kMiB;   // one Qwen3-8B chunk at TP=1
constexpr size_t kHeader = 28;         // FSConnector's metadata header
// Room for a few 36 MiB chunks in the RAM tier.
constexpr const char* kOpts = "ram_size=512M";

struct Extent {
  size_t off, len;
};
std::vector<Extent> extents_of(size_t size) {
  std::vector<Extent> v;
  for (size_t off = 0; off < size; off += kExtent)
    v.push_back({off, std::min(kExtent, size - off)});
  return v;
}

std::string hex_name(uint64_t seed, size_t len) {
  static const char* d = "0123456789abcdef";
  std::string o;
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 7;
  while (o.size() < len) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    for (int i = 0; i < 16 && o.size() < len; ++i) o += d[(s >> (4 * i)) & 15];
  }
  return o;
}

std::string nixl_name(uint64_t key) {
  return "Qwen--Qwen3-8B_00000000_0_" + hex_name(key, 64) + ".bin";
}

double secs_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  ::closedir(d);
  return out;
}

// Every page of got[0, n) is either the expected content or all zeros (a hole
// of an extent that has not landed). "" or the first bad page.
std::string pages_are_data_or_holes(const char* got, const char* want, size_t n) {
  static const char zeros[kPage] = {};
  for (size_t off = 0; off < n; off += kPage) {
    const size_t len = std::min(kPage, n - off);
    if (std::memcmp(got + off, want + off, len) != 0 && std::memcmp(got + off, zeros, len) != 0)
      return "page at " + std::to_string(off) + " is neither data nor a hole";
  }
  return "";
}

// The adapter's load: open(O_RDWR|O_DIRECT), the extents read concurrently.
std::string nixl_load(const std::string& path, AlignedBuf& buf, size_t size) {
  int fd = ::open(path.c_str(), O_RDWR | O_DIRECT | O_CLOEXEC);
  if (fd < 0) return "open " + path + ": " + errstr(errno);
  Failures f;
  std::vector<std::thread> ts;
  for (const Extent& e : extents_of(size))
    ts.emplace_back([&, e] {
      ssize_t r = ::pread(fd, buf.data + e.off, e.len, off_t(e.off));
      if (r != ssize_t(e.len))
        f.add("pread at " + std::to_string(e.off) + ": " + std::to_string(r));
    });
  for (auto& t : ts) t.join();
  ::close(fd);
  return f.first();
}

// (a) The NIXL GDS store: extents written out of order and concurrently on an
// O_RDWR|O_DIRECT tmp, holes until the last one lands; close, rename, no
// fsync; bit-exact after a remount.
TEST(Clients, NixlExtentsOutOfOrderHolesRenameRemount) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok(kOpts));
  const std::string dir = m.mnt() + "/l2";
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  AlignedBuf data(kChunk), got(kChunk);
  ASSERT_TRUE(data.data && got.data);
  const std::vector<Extent> ex = extents_of(kChunk);
  ASSERT_EQ(ex.size(), 3u);

  // One file with a fixed completion order (last, first, middle): after each
  // extent the size is the furthest end so far and the gaps read as zeros.
  make_content(data.data, kChunk, 1);
  const std::string fin0 = dir + "/" + nixl_name(0), tmp0 = fin0 + ".tmp." + hex_name(100, 32);
  int fd = ::open(tmp0.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << errstr(errno);
  size_t end = 0;
  std::set<int> landed;
  const std::string zeros(kExtent, '\0');
  for (int i : {2, 0, 1}) {
    ASSERT_EQ(::pwrite(fd, data.data + ex[i].off, ex[i].len, off_t(ex[i].off)), ssize_t(ex[i].len));
    landed.insert(i);
    end = std::max(end, ex[i].off + ex[i].len);
    struct stat st;
    ASSERT_EQ(::stat(tmp0.c_str(), &st), 0);
    EXPECT_EQ(size_t(st.st_size), end) << "after extent " << i;
    int rfd = ::open(tmp0.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
    ASSERT_GE(rfd, 0);
    ASSERT_EQ(read_whole(rfd, got.data, kChunk), ssize_t(end));
    ::close(rfd);
    for (int k = 0; k < 3; ++k) {
      const char* want = landed.count(k) ? data.data + ex[k].off : zeros.data();
      EXPECT_EQ(std::memcmp(got.data + ex[k].off, want, ex[k].len), 0)
          << "extent " << k << " after writing extent " << i << ": "
          << (landed.count(k) ? "data" : "a hole") << " expected";
    }
  }
  ASSERT_EQ(::close(fd), 0);
  ASSERT_EQ(::rename(tmp0.c_str(), fin0.c_str()), 0);

  // Files whose extents are written at once by three threads while a reader
  // polls the tmp: it only ever sees data or holes.
  constexpr int kFiles = 4;
  for (int f = 1; f <= kFiles; ++f) {
    make_content(data.data, kChunk, 1 + f);
    const std::string fin = dir + "/" + nixl_name(f), tmp = fin + ".tmp." + hex_name(100 + f, 32);
    fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0) << errstr(errno);
    std::barrier go(4);
    std::atomic<int> left{3};
    Failures fails;
    std::vector<std::thread> ts;
    for (int i = 2; i >= 0; --i)
      ts.emplace_back([&, i] {
        go.arrive_and_wait();
        if (::pwrite(fd, data.data + ex[i].off, ex[i].len, off_t(ex[i].off)) != ssize_t(ex[i].len))
          fails.add("pwrite extent " + std::to_string(i) + ": " + errstr(errno));
        left--;
      });
    int polls = 0;
    ts.emplace_back([&] {
      AlignedBuf rb(kChunk);
      go.arrive_and_wait();
      do {
        int rfd = ::open(tmp.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
        if (rfd < 0) return fails.add("reader open: " + errstr(errno));
        ssize_t n = read_whole(rfd, rb.data, kChunk);
        ::close(rfd);
        if (n < 0) return fails.add("reader read: " + errstr(int(-n)));
        std::string e = pages_are_data_or_holes(rb.data, data.data, size_t(n));
        if (!e.empty()) fails.add("reader: " + e);
        ++polls;
      } while (left.load() > 0);
    });
    for (auto& t : ts) t.join();
    ASSERT_FALSE(fails.any()) << fails.first();
    EXPECT_GE(polls, 1);
    ASSERT_EQ(::close(fd), 0);
    ASSERT_EQ(::rename(tmp.c_str(), fin.c_str()), 0);
    ASSERT_EQ(nixl_load(fin, got, kChunk), "");
    ASSERT_EQ(std::memcmp(got.data, data.data, kChunk), 0) << "file " << f << " before remount";
  }

  m.unmount();
  ASSERT_TRUE(m.mount_ok(kOpts));
  for (int f = 0; f <= kFiles; ++f) {
    make_content(data.data, kChunk, 1 + f);
    std::memset(got.data, 0xa5, kChunk);
    ASSERT_EQ(nixl_load(dir + "/" + nixl_name(f), got, kChunk), "");
    EXPECT_EQ(std::memcmp(got.data, data.data, kChunk), 0) << "file " << f << " after remount";
  }
  EXPECT_EQ(list_dir(dir).size(), size_t(kFiles + 1)) << "a tmp name survived the renames";
}

// (b) Loads open read-write and only read: nothing is dirtied or written
// again (flush counters, dirty bytes, segment bytes, mtime), before and
// after a remount; a real write through the same kind of fd is counted.
TEST(Clients, NixlReadWriteOpensOnlyReadNeverReflush) {
  // Reclamation copies live files forward through the flusher, which counts
  // them as flushed files; off, so that the counter only moves for writes.
  const std::string kNoReclaim = std::string(kOpts) + ",reclaim_ratio=0";
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok(kNoReclaim));
  constexpr int kFiles = 4;
  AlignedBuf data(kChunk), got(kChunk);
  struct stat before[kFiles];
  for (int f = 0; f < kFiles; ++f) {
    make_content(data.data, kChunk, 50 + f);
    const std::string fin = m.path(nixl_name(f)), tmp = fin + ".tmp." + hex_name(f, 32);
    int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    for (const Extent& e : extents_of(kChunk))
      ASSERT_EQ(::pwrite(fd, data.data + e.off, e.len, off_t(e.off)), ssize_t(e.len));
    ASSERT_EQ(::close(fd), 0);
    ASSERT_EQ(::rename(tmp.c_str(), fin.c_str()), 0);
  }
  ASSERT_TRUE(fsync_dir(m.mnt()));
  const auto stored = stats(m.mnt());
  std::printf("%d stores of %zu B: flush.files %llu, flush.bytes %llu\n", kFiles, kChunk,
              (unsigned long long)stat_u64(stored, "/flush/files"),
              (unsigned long long)stat_u64(stored, "/flush/bytes"));
  // The stores' releases reach the daemon after close(); a remount drains
  // them, so that the baseline below cannot move for their sake.
  m.unmount();
  ASSERT_TRUE(m.mount_ok(kNoReclaim));
  const auto s0 = stats(m.mnt());
  ASSERT_FALSE(s0.contains("error")) << s0.dump();
  const uint64_t files0 = stat_u64(s0, "/flush/files"), bytes0 = stat_u64(s0, "/flush/bytes");
  EXPECT_EQ(stat_u64(s0, "/dirty_bytes"), 0u);
  for (int f = 0; f < kFiles; ++f) ASSERT_EQ(::stat(m.path(nixl_name(f)).c_str(), &before[f]), 0);

  auto load_all = [&] {
    for (int f = 0; f < kFiles; ++f) {
      ASSERT_EQ(nixl_load(m.path(nixl_name(f)), got, kChunk), "");
      make_content(data.data, kChunk, 50 + f);
      ASSERT_EQ(std::memcmp(got.data, data.data, kChunk), 0) << "file " << f;
    }
    ASSERT_TRUE(fsync_dir(m.mnt()));
  };
  // The first read of a file moves its atime (relatime: atime was not newer
  // than mtime), which kvfs keeps for its LRU: at most one metadata-only
  // commit per file, no data.
  load_all();
  const auto s1 = stats(m.mnt());
  EXPECT_EQ(stat_u64(s1, "/flush/bytes"), bytes0) << "the loads wrote data: " << s1["flush"].dump();
  EXPECT_LE(stat_u64(s1, "/flush/files"), files0 + kFiles) << s1["flush"].dump();
  EXPECT_EQ(stat_u64(s1, "/dirty_bytes"), 0u);
  // Later loads change nothing at all.
  for (int round = 0; round < 4; ++round) load_all();
  const auto s2 = stats(m.mnt());
  EXPECT_EQ(stat_u64(s2, "/flush/files"), stat_u64(s1, "/flush/files"))
      << "read-only use of O_RDWR fds flushed again: " << s2["flush"].dump();
  EXPECT_EQ(stat_u64(s2, "/flush/bytes"), bytes0);
  EXPECT_EQ(stat_u64(s2, "/flush/queued"), 0u);
  EXPECT_EQ(stat_u64(s2, "/dirty_bytes"), 0u);
  std::printf(
      "loads of %d files: flush.files %llu -> %llu (first reads) -> %llu, flush.bytes +%llu\n",
      kFiles, (unsigned long long)files0, (unsigned long long)stat_u64(s1, "/flush/files"),
      (unsigned long long)stat_u64(s2, "/flush/files"),
      (unsigned long long)(stat_u64(s2, "/flush/bytes") - bytes0));
  auto same_times = [&](const char* when) {
    for (int f = 0; f < kFiles; ++f) {
      struct stat st;
      ASSERT_EQ(::stat(m.path(nixl_name(f)).c_str(), &st), 0);
      EXPECT_EQ(st.st_size, before[f].st_size);
      EXPECT_EQ(st.st_mtim.tv_sec, before[f].st_mtim.tv_sec) << "file " << f << " " << when;
      EXPECT_EQ(st.st_mtim.tv_nsec, before[f].st_mtim.tv_nsec) << "file " << f << " " << when;
    }
  };
  same_times("after the loads");

  // The loads' releases too arrive after close(): whatever they dirtied
  // would be flushed at the unmount and show in the mtime and content after it.
  m.unmount();
  ASSERT_TRUE(m.mount_ok(kNoReclaim));
  same_times("after the remount");
  for (int f = 0; f < kFiles; ++f) {
    ASSERT_EQ(nixl_load(m.path(nixl_name(f)), got, kChunk), "");
    make_content(data.data, kChunk, 50 + f);
    EXPECT_EQ(std::memcmp(got.data, data.data, kChunk), 0) << "file " << f << " after remount";
  }

  // The counter does move for a write through such an fd (the control).
  ASSERT_TRUE(fsync_dir(m.mnt()));
  const auto s3 = stats(m.mnt());
  int fd = ::open(m.path(nixl_name(0)).c_str(), O_RDWR | O_DIRECT | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  make_content(data.data, kChunk, 50);
  ASSERT_EQ(::pwrite(fd, data.data, kPage, 0), ssize_t(kPage));
  ASSERT_EQ(::close(fd), 0);
  ASSERT_TRUE(fsync_dir(m.mnt()));
  const auto s4 = stats(m.mnt());
  EXPECT_GT(stat_u64(s4, "/flush/files"), stat_u64(s3, "/flush/files"));
  EXPECT_GE(stat_u64(s4, "/flush/bytes"), stat_u64(s3, "/flush/bytes") + kPage);
  std::printf("control write of 4 KiB: flush.files %llu -> %llu, flush.bytes +%llu\n",
              (unsigned long long)stat_u64(s3, "/flush/files"),
              (unsigned long long)stat_u64(s4, "/flush/files"),
              (unsigned long long)(stat_u64(s4, "/flush/bytes") - stat_u64(s3, "/flush/bytes")));
}

// (e) The adapter's one flat directory: ~300,000 names at 10 TB of 36 MiB
// chunks (1 in 10 here a *.tmp.* left by an interrupted store), looked up,
// listed, the tmp names swept as at shutdown, listed again, and the same
// after a remount. 300,000 names take 34-52 s on a shared 2-CPU VM;
// KVFS_FLAT_NAMES=N runs another size.
TEST(Clients, NixlFlatDirectoryManyNamesTmpSweep) {
  const char* env = std::getenv("KVFS_FLAT_NAMES");
  const size_t n = env ? std::strtoull(env, nullptr, 10) : 300000;
  ASSERT_GE(n, 10u);
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  const std::string dir = m.mnt() + "/flat";
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  std::vector<std::string> names(n);
  std::set<std::string> finals, all;
  for (size_t i = 0; i < n; ++i) {
    names[i] = nixl_name(i);
    if (i % 10 == 9)
      names[i] += ".tmp." + hex_name(i, 32);
    else
      finals.insert(names[i]);
    all.insert(names[i]);
  }
  auto t0 = std::chrono::steady_clock::now();
  Failures fails;
  {
    constexpr unsigned kThreads = 4;
    std::vector<std::thread> ts;
    for (unsigned t = 0; t < kThreads; ++t)
      ts.emplace_back([&, t] {
        for (size_t i = t; i < n; i += kThreads) {
          const std::string p = dir + "/" + names[i];
          int fd = ::open(p.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
          if (fd < 0 || ::close(fd) != 0) fails.add("create " + p + ": " + errstr(errno));
        }
      });
    for (auto& t : ts) t.join();
  }
  ASSERT_FALSE(fails.any()) << fails.first();
  const double create_s = secs_since(t0);
  t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < n; ++i) {
    struct stat st;
    ASSERT_EQ(::stat((dir + "/" + names[i]).c_str(), &st), 0) << names[i];
    ASSERT_TRUE(S_ISREG(st.st_mode));
    const std::string absent = dir + "/" + nixl_name(n + i);
    ASSERT_NE(::stat(absent.c_str(), &st), 0);
    ASSERT_EQ(errno, ENOENT);
  }
  const double lookup_s = secs_since(t0);
  t0 = std::chrono::steady_clock::now();
  std::vector<std::string> listed = list_dir(dir);
  const double readdir_s = secs_since(t0);
  ASSERT_EQ(listed.size(), n) << "readdir of the flat directory";
  EXPECT_TRUE(std::set<std::string>(listed.begin(), listed.end()) == all);

  t0 = std::chrono::steady_clock::now();
  size_t swept = 0;
  for (const std::string& name : list_dir(dir))
    if (name.find(".tmp.") != std::string::npos) {
      ASSERT_EQ(::unlink((dir + "/" + name).c_str()), 0) << name << ": " << errstr(errno);
      ++swept;
    }
  const double sweep_s = secs_since(t0);
  EXPECT_EQ(swept, n - finals.size());
  listed = list_dir(dir);
  EXPECT_TRUE(std::set<std::string>(listed.begin(), listed.end()) == finals)
      << listed.size() << " names after the sweep, " << finals.size() << " expected";

  m.unmount();
  t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(m.mount_ok());
  const double remount_s = secs_since(t0);
  listed = list_dir(dir);
  EXPECT_TRUE(std::set<std::string>(listed.begin(), listed.end()) == finals)
      << listed.size() << " names after the remount, " << finals.size() << " expected";
  for (size_t i = 9; i < n; i += 10) {
    struct stat st;
    EXPECT_NE(::stat((dir + "/" + names[i]).c_str(), &st), 0) << "swept name back: " << names[i];
    EXPECT_EQ(::stat((dir + "/" + names[i - 1]).c_str(), &st), 0) << names[i - 1];
  }
  std::printf(
      "flat dir, %zu names: create %.1f s, stat present+absent %.1f s, readdir %.2f s, "
      "sweep of %zu tmps %.1f s, remount %.1f s\n",
      n, create_s, lookup_s, readdir_s, swept, sweep_s, remount_s);
}

// (f) NIXL's POSIX backend: the extents of a chunk submitted in one call on
// an O_DIRECT fd through libaio's kernel interface (io_submit, what libaio
// wraps) or io_uring, completions reaped in any order; each file read back
// through the other interface, and again after a remount.
long aio_extents(int fd, char* buf, size_t size, bool write, std::string* err) {
  aio_context_t ctx = 0;
  if (syscall(SYS_io_setup, 8, &ctx) != 0) return *err = "io_setup: " + errstr(errno), -1;
  const std::vector<Extent> ex = extents_of(size);
  std::vector<iocb> cbs(ex.size());
  std::vector<iocb*> ptrs;
  for (size_t i = 0; i < ex.size(); ++i) {
    std::memset(&cbs[i], 0, sizeof(iocb));
    cbs[i].aio_lio_opcode = write ? IOCB_CMD_PWRITE : IOCB_CMD_PREAD;
    cbs[i].aio_fildes = uint32_t(fd);
    cbs[i].aio_buf = reinterpret_cast<uint64_t>(buf + ex[i].off);
    cbs[i].aio_nbytes = ex[i].len;
    cbs[i].aio_offset = int64_t(ex[i].off);
    cbs[i].aio_data = i;
    ptrs.push_back(&cbs[i]);
  }
  long done = 0;
  if (syscall(SYS_io_submit, ctx, long(ptrs.size()), ptrs.data()) != long(ptrs.size())) {
    *err = "io_submit: " + errstr(errno);
  } else {
    io_event evs[8];
    while (done < long(ex.size())) {
      long r = syscall(SYS_io_getevents, ctx, 1, 8, evs, nullptr);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        *err = "io_getevents: " + errstr(errno);
        break;
      }
      for (long k = 0; k < r; ++k)
        if (evs[k].res != int64_t(ex[evs[k].data].len))
          *err = "extent " + std::to_string(evs[k].data) + ": res " + std::to_string(evs[k].res);
      done += r;
    }
  }
  syscall(SYS_io_destroy, ctx);
  return err->empty() ? done : -1;
}

std::string uring_extents(int fd, char* buf, size_t size, bool write) {
  io_uring ring;
  if (io_uring_queue_init(8, &ring, 0) != 0) return "io_uring_queue_init failed";
  const std::vector<Extent> ex = extents_of(size);
  for (size_t i = 0; i < ex.size(); ++i) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    if (write)
      io_uring_prep_write(sqe, fd, buf + ex[i].off, unsigned(ex[i].len), ex[i].off);
    else
      io_uring_prep_read(sqe, fd, buf + ex[i].off, unsigned(ex[i].len), ex[i].off);
    io_uring_sqe_set_data64(sqe, i);
  }
  std::string e;
  if (io_uring_submit(&ring) != int(ex.size())) e = "io_uring_submit failed";
  for (size_t k = 0; e.empty() && k < ex.size(); ++k) {
    io_uring_cqe* cqe;
    if (io_uring_wait_cqe(&ring, &cqe) != 0) {
      e = "io_uring_wait_cqe failed";
      break;
    }
    const uint64_t i = io_uring_cqe_get_data64(cqe);
    if (cqe->res != int(ex[i].len))
      e = "extent " + std::to_string(i) + ": res " + std::to_string(cqe->res);
    io_uring_cqe_seen(&ring, cqe);
  }
  io_uring_queue_exit(&ring);
  return e;
}

TEST(Clients, NixlPosixBackendLibaioAndIoUring) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok(kOpts));
  const size_t size = kChunk + 2 * kPage;  // a short last extent
  AlignedBuf data(size), got(size);
  auto check = [&](const std::string& name, uint64_t seed, bool via_aio, const char* when) {
    make_content(data.data, size, seed);
    std::memset(got.data, 0, size);
    int fd = ::open(m.path(name).c_str(), O_RDWR | O_DIRECT | O_CLOEXEC);
    ASSERT_GE(fd, 0) << errstr(errno);
    std::string e;
    if (via_aio)
      EXPECT_EQ(aio_extents(fd, got.data, size, false, &e), 3) << e;
    else
      EXPECT_EQ(uring_extents(fd, got.data, size, false), "");
    ::close(fd);
    EXPECT_EQ(std::memcmp(got.data, data.data, size), 0) << name << " " << when;
  };
  for (bool aio : {true, false}) {
    const std::string name = nixl_name(aio ? 7 : 8), tmp = name + ".tmp." + hex_name(aio, 32);
    make_content(data.data, size, aio ? 7 : 8);
    int fd = ::open(m.path(tmp).c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0) << errstr(errno);
    std::string e;
    if (aio)
      ASSERT_EQ(aio_extents(fd, data.data, size, true, &e), 3) << e;
    else
      ASSERT_EQ(uring_extents(fd, data.data, size, true), "");
    struct stat st;
    ASSERT_EQ(::fstat(fd, &st), 0);
    EXPECT_EQ(size_t(st.st_size), size);
    ASSERT_EQ(::close(fd), 0);
    ASSERT_EQ(::rename(m.path(tmp).c_str(), m.path(name).c_str()), 0);
    check(name, aio ? 7 : 8, !aio, "read through the other interface");
  }
  m.unmount();
  ASSERT_TRUE(m.mount_ok(kOpts));
  for (bool aio : {true, false}) check(nixl_name(aio ? 7 : 8), aio ? 7 : 8, aio, "after remount");
}

}  // namespace
}  // namespace kvfs::test
