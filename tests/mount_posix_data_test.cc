// SPDX-License-Identifier: Apache-2.0
// POSIX behaviour of a real kvfs mount: file data. Create with O_TRUNC,
// reads and writes at any offset (sparse holes, block boundaries), O_DIRECT,
// truncate / ftruncate, and mmap. Helpers: tests/mount_posix_util.h.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <string>

#include "tests/mount_posix_util.h"

namespace kvfs::test {

namespace {

constexpr size_t kChunk = 37748736;  // one 256-token Qwen3-8B chunk: 36 MiB

}  // namespace

// ---------------------------------------------------------------------------
// create: O_TRUNC

TEST(MountPosix, CreateTruncate) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  const std::string p = m.path("t.bin");
  const std::string old = random_bytes(3 * kMiB + 17, 11);
  ASSERT_TRUE(write_file(p, old));
  // Commit the old content to a segment too, so truncation must drop extents.
  {
    Fd fd(::open(p.c_str(), O_RDONLY));
    ASSERT_GE(fd, 0);
    EXPECT_OK(::fsync(fd));
    fd.close();
  }
  Fd fd(::open(p.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC));
  ASSERT_GE(fd, 0) << std::strerror(errno);
  struct stat st;
  ASSERT_OK(::fstat(fd, &st));
  EXPECT_EQ(st.st_size, 0);
  ASSERT_EQ(::write(fd, "new", 3), 3);
  ASSERT_OK(fd.close());
  EXPECT_EQ(slurp(p), "new");
  drop_cache(p);
  EXPECT_EQ(slurp(p), "new");

  // O_CREAT|O_TRUNC on an existing file (LMCache writes final names directly).
  fd.reset(::open(p.c_str(), O_CREAT | O_TRUNC | O_RDWR | O_CLOEXEC, 0644));
  ASSERT_GE(fd, 0) << std::strerror(errno);
  EXPECT_EQ(pread_str(fd, 10, 0), "");
  ASSERT_EQ(::write(fd, "second", 6), 6);
  ASSERT_OK(fd.close());
  EXPECT_EQ(slurp(p), "second");
  remount(m);
  EXPECT_EQ(slurp(p), "second");
  ASSERT_OK(::stat(p.c_str(), &st));
  EXPECT_EQ(st.st_size, 6);
}

// ---------------------------------------------------------------------------
// read / write at arbitrary offsets

TEST(MountPosix, SparseHolesReadZeros) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  const std::string p = m.path("sparse.bin");
  Fd fd(::open(p.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644));
  ASSERT_GE(fd, 0);
  const std::string a = random_bytes(10, 1), b = random_bytes(10, 2), c = random_bytes(4096, 3);
  ASSERT_TRUE(pwrite_all(fd, a.data(), a.size(), 0));
  ASSERT_TRUE(pwrite_all(fd, b.data(), b.size(), 600000));        // hole inside block 0
  ASSERT_TRUE(pwrite_all(fd, c.data(), c.size(), 7 * kMiB + 3));  // hole over blocks 1..6
  ASSERT_OK(fd.close());
  std::string want(7 * kMiB + 3 + 4096, '\0');
  want.replace(0, a.size(), a);
  want.replace(600000, b.size(), b);
  want.replace(7 * kMiB + 3, c.size(), c);

  auto check = [&] {
    struct stat st;
    ASSERT_OK(::stat(p.c_str(), &st));
    EXPECT_EQ(size_t(st.st_size), want.size());
    std::string got = slurp(p);
    EXPECT_SAME_BYTES(got, want);
    EXPECT_TRUE(all_zero(got, 10, 600000));
    EXPECT_TRUE(all_zero(got, 600010, 7 * kMiB + 3));
    Fd rfd(::open(p.c_str(), O_RDONLY));
    ASSERT_GE(rfd, 0);
    EXPECT_TRUE(all_zero(pread_str(rfd, 3 * kMiB, 2 * kMiB + 5)));  // entirely in the hole
    rfd.close();
  };
  check();
  drop_cache(p);
  {
    SCOPED_TRACE("before remount");
    check();
  }
  remount(m);
  {
    SCOPED_TRACE("after remount");
    check();
  }
}

TEST(MountPosix, WritesStraddlingBlockBoundaries) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  const std::string p = m.path("straddle.bin");
  Fd fd(::open(p.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644));
  ASSERT_GE(fd, 0);
  std::string want;
  auto put = [&](size_t off, size_t len, uint64_t seed) {
    std::string d = random_bytes(len, seed);
    ASSERT_TRUE(pwrite_all(fd, d.data(), d.size(), static_cast<off_t>(off)));
    if (want.size() < off + len) want.resize(off + len, '\0');
    want.replace(off, len, d);
  };
  put(kMiB - 1500, 3000, 1);            // across the 1 MiB boundary
  put(3 * kMiB - 7, 2 * kMiB + 13, 2);  // across two boundaries
  put(2 * kMiB - 1, 2, 3);              // one byte each side of 2 MiB
  put(0, 1, 4);                         // first byte
  put(4 * kMiB - 4096, 8192, 5);        // page-aligned across 4 MiB
  put(5 * kMiB + 6, 1, 6);              // the last byte, past the old end
  put(kMiB - 1, 1, 7);                  // last byte of block 0
  put(kMiB, 1, 8);                      // first byte of block 1
  // Random overwrites inside the file, seeded, at any alignment.
  std::mt19937_64 rng(99);
  for (int i = 0; i < 200; ++i) {
    size_t off = rng() % want.size();
    size_t len = 1 + rng() % (kMiB + 4096);
    put(off, len, 1000 + i);
  }
  // Reads at arbitrary offsets and lengths, also across the end of file.
  auto check_preads = [&](int rfd) {
    std::mt19937_64 r2(7);
    for (int i = 0; i < 200; ++i) {
      size_t off = r2() % (want.size() + 100);
      size_t len = 1 + r2() % (2 * kMiB);
      std::string got = pread_str(rfd, len, static_cast<off_t>(off));
      std::string exp = off >= want.size() ? "" : want.substr(off, len);
      ASSERT_TRUE(got == exp) << "pread(" << len << " @ " << off << "): " << first_diff(got, exp);
    }
  };
  check_preads(fd);
  ASSERT_OK(fd.close());
  auto check = [&] {
    EXPECT_SAME_BYTES(slurp(p), want);
    Fd rfd(::open(p.c_str(), O_RDONLY));
    ASSERT_GE(rfd, 0);
    check_preads(rfd);
    rfd.close();
  };
  drop_cache(p);
  {
    SCOPED_TRACE("before remount");
    check();
  }
  remount(m);
  {
    SCOPED_TRACE("after remount");
    check();
  }
}

// ---------------------------------------------------------------------------
// O_DIRECT

TEST(MountPosix, ODirectAlignedWritesAndReads) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  const std::string p = m.path("direct.bin");
  // vLLM's probe: 4096 B with O_DIRECT, then unlink.
  {
    AlignedBuf probe(4096);
    std::memset(probe.data, 'p', 4096);
    Fd fd(::open(m.path(".o_direct_probe_1234.tmp").c_str(),
                 O_CREAT | O_EXCL | O_WRONLY | O_TRUNC | O_DIRECT, 0644));
    ASSERT_GE(fd, 0) << std::strerror(errno);
    EXPECT_EQ(::write(fd, probe.data, 4096), 4096) << std::strerror(errno);
    ASSERT_OK(fd.close());
    ASSERT_OK(::unlink(m.path(".o_direct_probe_1234.tmp").c_str()));
  }
  const std::string data = random_bytes(6 * kMiB, 21);
  AlignedBuf buf(6 * kMiB);
  std::memcpy(buf.data, data.data(), data.size());
  Fd fd(::open(p.c_str(), O_CREAT | O_RDWR | O_DIRECT | O_CLOEXEC, 0644));
  ASSERT_GE(fd, 0) << std::strerror(errno);
  // Aligned pieces of many sizes, straddling 1 MiB blocks, out of order.
  struct Piece {
    size_t off, len;
  };
  const Piece pieces[] = {{kMiB - 4096, 8192}, {0, 4096},
                          {4096, kMiB - 8192}, {kMiB + 4096, 3 * kMiB - 4096},
                          {4 * kMiB, 4096},    {4 * kMiB + 4096, 2 * kMiB - 4096}};
  for (const Piece& pc : pieces) {
    errno = 0;
    ssize_t w = ::pwrite(fd, buf.data + pc.off, pc.len, static_cast<off_t>(pc.off));
    EXPECT_EQ(w, ssize_t(pc.len)) << "O_DIRECT pwrite " << pc.len << " @ " << pc.off << ": "
                                  << std::strerror(errno);
  }
  // Aligned reads, also straddling blocks.
  AlignedBuf rb(4 * kMiB);
  for (const Piece& pc :
       {Piece{0, 4096}, Piece{kMiB - 4096, 8192}, Piece{12288, 4 * kMiB}, Piece{5 * kMiB, kMiB}}) {
    errno = 0;
    ssize_t r = ::pread(fd, rb.data, pc.len, static_cast<off_t>(pc.off));
    ASSERT_EQ(r, ssize_t(pc.len)) << "O_DIRECT pread " << pc.len << " @ " << pc.off << ": "
                                  << std::strerror(errno);
    EXPECT_EQ(std::memcmp(rb.data, data.data() + pc.off, pc.len), 0) << pc.off;
  }
  ASSERT_OK(fd.close());
  EXPECT_SAME_BYTES(read_direct(p), data);
  remount(m);
  EXPECT_SAME_BYTES(slurp(p), data);
  EXPECT_ERRNO(::access(m.path(".o_direct_probe_1234.tmp").c_str(), F_OK), ENOENT);
}

TEST(MountPosix, ODirectSingle36MiBWriteAndRead) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  ASSERT_OK(::mkdir(m.path("r0").c_str(), 0755));
  const std::string dest = m.path("r0/chunk.bin");
  const std::string tmp = dest + "_abcd.tmp";
  const std::string data = random_bytes(kChunk, 36);
  AlignedBuf wb(kChunk);
  std::memcpy(wb.data, data.data(), kChunk);

  // vLLM store: access -> open tmp (excl, trunc, direct) -> ONE write -> close -> rename.
  EXPECT_ERRNO(::access(dest.c_str(), F_OK), ENOENT);
  Fd fd(::open(tmp.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_TRUNC | O_DIRECT | O_CLOEXEC, 0644));
  ASSERT_GE(fd, 0) << std::strerror(errno);
  errno = 0;
  ssize_t w = ::write(fd, wb.data, kChunk);
  EXPECT_EQ(w, ssize_t(kChunk)) << std::strerror(errno);
  ASSERT_OK(fd.close());
  ASSERT_OK(::rename(tmp.c_str(), dest.c_str()));
  EXPECT_OK(::access(dest.c_str(), F_OK));

  // vLLM load: open direct -> ONE read of the whole file.
  auto load = [&] {
    AlignedBuf rb(kChunk + 4096);
    Fd rfd(::open(dest.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC));
    ASSERT_GE(rfd, 0) << std::strerror(errno);
    errno = 0;
    ssize_t r = ::read(rfd, rb.data, kChunk);
    ASSERT_EQ(r, ssize_t(kChunk)) << std::strerror(errno);
    EXPECT_EQ(std::memcmp(rb.data, data.data(), kChunk), 0);
    // At EOF: 0, not an error.
    EXPECT_EQ(::read(rfd, rb.data, 4096), 0);
    // A larger request returns the whole file and stops exactly at EOF.
    std::memset(rb.data, 0x5a, kChunk + 4096);
    errno = 0;
    r = ::pread(rfd, rb.data, kChunk + 4096, 0);
    ASSERT_EQ(r, ssize_t(kChunk)) << std::strerror(errno);
    EXPECT_EQ(std::memcmp(rb.data, data.data(), kChunk), 0);
    // A tail read (llm-d seeks to size - need) that crosses EOF is short only there.
    r = ::pread(rfd, rb.data, 8192, kChunk - 4096);
    ASSERT_EQ(r, 4096) << std::strerror(errno);
    EXPECT_EQ(std::memcmp(rb.data, data.data() + kChunk - 4096, 4096), 0);
    EXPECT_EQ(::pread(rfd, rb.data, 4096, kChunk), 0);
    EXPECT_EQ(::pread(rfd, rb.data, 4096, kChunk + 8192), 0);
    rfd.close();
  };
  load();
  remount(m);
  load();
  struct stat st;
  ASSERT_OK(::stat(dest.c_str(), &st));
  EXPECT_EQ(size_t(st.st_size), kChunk);
  EXPECT_ERRNO(::access(tmp.c_str(), F_OK), ENOENT);
}

TEST(MountPosix, ODirectReadShortOnlyAtEndOfFile) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  // A size that is not a multiple of 4 KiB, written buffered.
  const size_t size = 9 * kMiB + 1000;
  const std::string data = random_bytes(size, 77);
  ASSERT_TRUE(write_file(m.path("odd.bin"), data));
  auto check = [&] {
    AlignedBuf rb(16 * kMiB);
    Fd fd(::open(m.path("odd.bin").c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC));
    ASSERT_GE(fd, 0) << std::strerror(errno);
    errno = 0;
    ssize_t r = ::read(fd, rb.data, 16 * kMiB);
    ASSERT_EQ(r, ssize_t(size)) << std::strerror(errno);
    EXPECT_EQ(std::memcmp(rb.data, data.data(), size), 0);
    // Aligned reads in the middle are never short.
    for (size_t off = 0; off + 2 * kMiB <= size; off += kMiB + 4096) {
      r = ::pread(fd, rb.data, 2 * kMiB, static_cast<off_t>(off));
      ASSERT_EQ(r, ssize_t(2 * kMiB)) << off << ": " << std::strerror(errno);
      EXPECT_EQ(std::memcmp(rb.data, data.data() + off, 2 * kMiB), 0) << off;
    }
    // The last page: exactly the 1000 bytes before EOF... (size - 1000 is aligned)
    r = ::pread(fd, rb.data, 4096, static_cast<off_t>(size - 1000));
    ASSERT_EQ(r, 1000) << std::strerror(errno);
    EXPECT_EQ(std::memcmp(rb.data, data.data() + size - 1000, 1000), 0);
    fd.close();
  };
  {
    SCOPED_TRACE("before remount");
    check();
  }
  remount(m);
  {
    SCOPED_TRACE("after remount");
    check();
  }
}

// ---------------------------------------------------------------------------
// truncate / ftruncate

TEST(MountPosix, TruncateUpReadsZeros) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  const std::string p = m.path("up.bin");
  const std::string head = random_bytes(1000, 5);
  ASSERT_TRUE(write_file(p, head));
  ASSERT_OK(::truncate(p.c_str(), 3 * kMiB + 5));
  Fd fd(::open(p.c_str(), O_RDWR | O_CLOEXEC));
  ASSERT_GE(fd, 0);
  struct stat st;
  ASSERT_OK(::fstat(fd, &st));
  EXPECT_EQ(size_t(st.st_size), 3 * kMiB + 5);
  ASSERT_OK(::ftruncate(fd, 5 * kMiB));
  ASSERT_OK(::fstat(fd, &st));
  EXPECT_EQ(size_t(st.st_size), 5 * kMiB);
  ASSERT_OK(fd.close());
  std::string want = head;
  want.resize(5 * kMiB, '\0');
  EXPECT_SAME_BYTES(slurp(p), want);
  drop_cache(p);
  EXPECT_SAME_BYTES(slurp(p), want);
  remount(m);
  EXPECT_SAME_BYTES(slurp(p), want);
}

TEST(MountPosix, TruncateDownKeepsPrefix) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  const std::string p = m.path("down.bin");
  const std::string data = random_bytes(5 * kMiB + 3, 6);
  ASSERT_TRUE(write_file(p, data));
  Fd fd(::open(p.c_str(), O_RDWR | O_CLOEXEC));
  ASSERT_GE(fd, 0);
  ASSERT_OK(::ftruncate(fd, 2 * kMiB + 12345));
  EXPECT_SAME_BYTES(pread_str(fd, 8 * kMiB, 0), data.substr(0, 2 * kMiB + 12345));
  ASSERT_OK(fd.close());
  ASSERT_OK(::truncate(p.c_str(), 100));
  EXPECT_SAME_BYTES(slurp(p), data.substr(0, 100));
  drop_cache(p);
  EXPECT_SAME_BYTES(slurp(p), data.substr(0, 100));
  remount(m);
  EXPECT_SAME_BYTES(slurp(p), data.substr(0, 100));
  ASSERT_OK(::truncate(p.c_str(), 0));
  EXPECT_EQ(slurp(p), "");
  remount(m);
  EXPECT_EQ(slurp(p), "");
}

// Runs the truncate-into-a-block-then-extend sequence, with the file's blocks
// either dirty in RAM or already committed to a segment (fsync first).
void truncate_mid_block_then_extend(bool committed_first) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  const std::string p = m.path("mid.bin");
  const std::string data = random_bytes(3 * kMiB, committed_first ? 8 : 7);
  Fd fd(::open(p.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644));
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(pwrite_all(fd, data.data(), data.size(), 0));
  if (committed_first) {
    ASSERT_OK(::fsync(fd));
    ASSERT_OK(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED));
  }
  const size_t cut = kMiB + kMiB / 2 + 7;  // middle of block 1
  ASSERT_OK(::ftruncate(fd, static_cast<off_t>(cut)));
  ASSERT_OK(::ftruncate(fd, static_cast<off_t>(3 * kMiB)));
  std::string want = data.substr(0, cut);
  want.resize(3 * kMiB, '\0');
  EXPECT_SAME_BYTES(pread_str(fd, 4 * kMiB, 0), want);
  // A write past the cut inside the same block keeps the zeros around it.
  ASSERT_TRUE(pwrite_all(fd, "XY", 2, static_cast<off_t>(cut + 100)));
  want.replace(cut + 100, 2, "XY");
  ASSERT_OK(fd.close());
  EXPECT_SAME_BYTES(slurp(p), want);
  drop_cache(p);
  EXPECT_SAME_BYTES(slurp(p), want);
  remount(m);
  EXPECT_SAME_BYTES(slurp(p), want);
}

TEST(MountPosix, TruncateMidBlockThenExtendDirty) {
  truncate_mid_block_then_extend(false);
}
TEST(MountPosix, TruncateMidBlockThenExtendCommitted) {
  truncate_mid_block_then_extend(true);
}

// Grow a file with ftruncate only (no block ever written), then shrink it.
TEST(MountPosix, TruncateSparseUpThenDown) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  const std::string p = m.path("sparse_trunc.bin");
  Fd fd(::open(p.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644));
  ASSERT_GE(fd, 0);
  ASSERT_OK(::ftruncate(fd, 8 * kMiB));
  ASSERT_OK(::ftruncate(fd, 4 * kMiB + kMiB / 2 + 3));
  struct stat st;
  ASSERT_OK(::fstat(fd, &st));
  EXPECT_EQ(size_t(st.st_size), 4 * kMiB + kMiB / 2 + 3);
  ASSERT_TRUE(pwrite_all(fd, "abc", 3, 4 * kMiB));
  ASSERT_OK(fd.close());
  std::string want(4 * kMiB + kMiB / 2 + 3, '\0');
  want.replace(4 * kMiB, 3, "abc");
  EXPECT_SAME_BYTES(slurp(p), want);
  remount(m);
  EXPECT_SAME_BYTES(slurp(p), want);
}

// ---------------------------------------------------------------------------
// mmap (LMCache gds POSIX fallback)

TEST(MountPosix, MmapSharedWriteThenRead) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  const std::string p = m.path("mm.kvcache.safetensors");
  const size_t size = 8 * kMiB;
  std::string want = random_bytes(size, 123);
  std::memcpy(want.data(), "HDR!", 4);  // a 4 KiB header at 0, data at 4096
  Fd fd(::open(p.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644));
  ASSERT_GE(fd, 0);
  ASSERT_OK(::ftruncate(fd, static_cast<off_t>(size)));
  void* map = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(map, MAP_FAILED) << std::strerror(errno);
  std::memcpy(static_cast<char*>(map) + 4096, want.data() + 4096, size - 4096);
  std::memcpy(map, want.data(), 4096);
  ASSERT_OK(::munmap(map, size));
  ASSERT_OK(fd.close());

  auto check = [&] {
    struct stat st;
    ASSERT_OK(::stat(p.c_str(), &st));
    EXPECT_EQ(size_t(st.st_size), size);
    EXPECT_SAME_BYTES(slurp(p), want);
    Fd rfd(::open(p.c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_GE(rfd, 0);
    void* r = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, rfd, 0);
    ASSERT_NE(r, MAP_FAILED) << std::strerror(errno);
    EXPECT_EQ(std::memcmp(r, want.data(), size), 0);
    ::munmap(r, size);
    rfd.close();
  };
  check();
  drop_cache(p);
  check();
  // The data reached the daemon, not just the page cache.
  EXPECT_SAME_BYTES(read_direct(p), want);
  remount(m);
  check();
}

}  // namespace kvfs::test
