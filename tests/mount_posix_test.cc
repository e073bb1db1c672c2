// POSIX behaviour of a real kvfs mount, as the KV-cache offloaders use it
// (WORKLOADS.md: vLLM fs tier, llm-d, LMCache). Every test runs
// plain syscalls on a fresh mount; many unmount and mount again to check what
// reached the backing directory and the index, not just the page cache.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/fs.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "tests/mount_fixture.h"

namespace kvfs::test {
namespace {

constexpr size_t kMiB = 1 << 20;
constexpr size_t kChunk = 37748736;  // one 256-token Qwen3-8B chunk: 36 MiB

#ifndef FUSE_SUPER_MAGIC
#define FUSE_SUPER_MAGIC 0x65735546
#endif

// Expects `expr` to fail with -1 and errno `err`.
#define EXPECT_ERRNO(expr, err)                                                 \
  do {                                                                          \
    errno = 0;                                                                  \
    const long _rc = static_cast<long>(expr);                                   \
    const int _e = errno;                                                       \
    EXPECT_EQ(_rc, -1) << #expr;                                                \
    EXPECT_EQ(_e, (err)) << #expr << ": got " << std::strerror(_e) << ", want " \
                         << std::strerror(err);                                 \
  } while (0)

// Expects `expr` to return 0; prints errno otherwise.
#define EXPECT_OK(expr) \
  EXPECT_EQ(static_cast<long>(expr), 0) << #expr << ": " << std::strerror(errno)
#define ASSERT_OK(expr) \
  ASSERT_EQ(static_cast<long>(expr), 0) << #expr << ": " << std::strerror(errno)

std::string slurp(const std::string& path, int flags = 0) {
  std::string s;
  if (!read_file(path, &s, flags))
    return "<read of " + path + " failed: " + std::strerror(errno) + ">";
  return s;
}

// Reads a whole file with O_DIRECT into 4 KiB-aligned memory, 1 MiB at a time.
std::string read_direct(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (fd < 0) return "<open O_DIRECT " + path + ": " + std::strerror(errno) + ">";
  AlignedBuf b(1 << 20);
  std::string out;
  for (;;) {
    ssize_t n = ::read(fd, b.data, b.size);
    if (n < 0) {
      out = "<O_DIRECT read: " + std::string(std::strerror(errno)) + ">";
      break;
    }
    if (n == 0) break;
    out.append(b.data, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

// Closes on scope exit, so that a failed ASSERT leaves no fd that would keep
// the mount busy at unmount.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  operator int() const { return fd_; }
  int close() {
    int r = ::close(fd_);
    fd_ = -1;
    return r;
  }
  void reset(int fd) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

// Full pwrite/pread loops (a short count is retried, an error returns false).
bool pwrite_all(int fd, const void* buf, size_t n, off_t off) {
  const char* p = static_cast<const char*>(buf);
  while (n > 0) {
    ssize_t w = ::pwrite(fd, p, n, off);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
    off += w;
  }
  return true;
}

std::string pread_str(int fd, size_t n, off_t off) {
  std::string s(n, '\0');
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::pread(fd, &s[got], n - got, off + static_cast<off_t>(got));
    if (r < 0) return "<pread failed: " + std::string(std::strerror(errno)) + ">";
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  s.resize(got);
  return s;
}

// Drops the kernel's cached pages of a file so that the next reads reach the
// daemon (kvfs asks the kernel to keep its cache across opens).
void drop_cache(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// Names in a directory (without "." and ".."), counted, via opendir/readdir.
std::map<std::string, int> list_dir(const std::string& path) {
  std::map<std::string, int> names;
  DIR* d = ::opendir(path.c_str());
  EXPECT_NE(d, nullptr) << path << ": " << std::strerror(errno);
  if (!d) return names;
  errno = 0;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") ++names[n];
  }
  EXPECT_EQ(errno, 0) << "readdir " << path;
  ::closedir(d);
  return names;
}

std::string getx(const std::string& path, const std::string& name) {
  std::string v(65536, '\0');
  ssize_t n = ::getxattr(path.c_str(), name.c_str(), v.data(), v.size());
  if (n < 0) return "<getxattr " + name + ": " + std::strerror(errno) + ">";
  v.resize(static_cast<size_t>(n));
  return v;
}

std::set<std::string> listx(const std::string& path) {
  std::set<std::string> out;
  ssize_t n = ::listxattr(path.c_str(), nullptr, 0);
  EXPECT_GE(n, 0) << "listxattr " << path << ": " << std::strerror(errno);
  if (n <= 0) return out;
  std::string buf(static_cast<size_t>(n), '\0');
  n = ::listxattr(path.c_str(), buf.data(), buf.size());
  EXPECT_GE(n, 0) << std::strerror(errno);
  if (n <= 0) return out;
  for (size_t i = 0; i < static_cast<size_t>(n);) {
    std::string name(buf.c_str() + i);
    out.insert(name);
    i += name.size() + 1;
  }
  return out;
}

int64_t ns_of(const timespec& t) {
  return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec;
}

bool all_zero(const std::string& s, size_t from = 0, size_t to = std::string::npos) {
  to = std::min(to, s.size());
  for (size_t i = from; i < to; ++i)
    if (s[i] != '\0') return false;
  return true;
}

// First differing offset, for readable failures on large buffers.
std::string first_diff(const std::string& a, const std::string& b) {
  if (a.size() != b.size())
    return "sizes differ: " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
  auto m = std::mismatch(a.begin(), a.end(), b.begin());
  if (m.first == a.end()) return "equal";
  return "first difference at offset " + std::to_string(m.first - a.begin());
}

#define EXPECT_SAME_BYTES(a, b) EXPECT_TRUE((a) == (b)) << first_diff((a), (b))

void remount(KvfsMount& m, const std::string& opts = "") {
  m.unmount();
  ASSERT_TRUE(m.mount_ok(opts));
}

}  // namespace

// ---------------------------------------------------------------------------
// lookup / getattr / access

TEST(MountPosix, LookupGetattrAccessPositiveAndNegative) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  ASSERT_TRUE(write_file(m.path("f"), "hello"));
  ASSERT_OK(::chmod(m.path("f").c_str(), 0644));
  ASSERT_OK(::mkdir(m.path("d").c_str(), 0755));

  struct stat st;
  ASSERT_OK(::stat(m.path("f").c_str(), &st));
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  EXPECT_EQ(st.st_size, 5);
  EXPECT_EQ(st.st_nlink, 1u);
  ASSERT_OK(::stat(m.path("d").c_str(), &st));
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  EXPECT_EQ(st.st_nlink, 2u);
  ASSERT_OK(::stat(m.mnt().c_str(), &st));
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_nlink, 3u);  // ".", its entry in the parent, "d/.."

  EXPECT_OK(::access(m.path("f").c_str(), F_OK));
  EXPECT_OK(::access(m.path("f").c_str(), R_OK | W_OK));
  EXPECT_ERRNO(::access(m.path("f").c_str(), X_OK), EACCES);  // no x bit, even for root
  EXPECT_OK(::access(m.path("d").c_str(), R_OK | W_OK | X_OK));

  // Negative: vLLM polls absent chunks; each poll must say ENOENT.
  for (int i = 0; i < 3; ++i) {
    EXPECT_ERRNO(::access(m.path("absent.bin").c_str(), F_OK), ENOENT);
    EXPECT_ERRNO(::stat(m.path("absent.bin").c_str(), &st), ENOENT);
  }
  EXPECT_ERRNO(::lstat(m.path("d/absent").c_str(), &st), ENOENT);
  EXPECT_ERRNO(::access(m.path("nodir/absent").c_str(), F_OK), ENOENT);
  EXPECT_ERRNO(::access(m.path("f/child").c_str(), F_OK), ENOTDIR);
  EXPECT_ERRNO(::open(m.path("absent.bin").c_str(), O_RDONLY), ENOENT);

  // A name that was just looked up as absent appears once created.
  ASSERT_TRUE(write_file(m.path("absent.bin"), "now here"));
  EXPECT_OK(::access(m.path("absent.bin").c_str(), F_OK));
  ASSERT_OK(::stat(m.path("absent.bin").c_str(), &st));
  EXPECT_EQ(st.st_size, 8);
  // ...and absent again once removed.
  ASSERT_OK(::unlink(m.path("absent.bin").c_str()));
  EXPECT_ERRNO(::access(m.path("absent.bin").c_str(), F_OK), ENOENT);

  ASSERT_OK(::chmod(m.path("f").c_str(), 0755));
  EXPECT_OK(::access(m.path("f").c_str(), X_OK));

  remount(m);
  ASSERT_OK(::stat(m.path("f").c_str(), &st));
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  EXPECT_EQ(st.st_size, 5);
  EXPECT_ERRNO(::access(m.path("absent.bin").c_str(), F_OK), ENOENT);
  EXPECT_OK(::access(m.path("d").c_str(), F_OK));
}

// ---------------------------------------------------------------------------
// mkdir -p

TEST(MountPosix, MkdirPDeepTree) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  std::string rel;
  for (int i = 0; i < 64; ++i) rel += (i ? "/" : "") + ("level" + std::to_string(i));
  RunResult r = run_command({"mkdir", "-p", m.path(rel)});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // mkdir -p again is a no-op; plain mkdir of an existing dir is EEXIST.
  r = run_command({"mkdir", "-p", m.path(rel)});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_ERRNO(::mkdir(m.path(rel).c_str(), 0755), EEXIST);
  ASSERT_TRUE(write_file(m.path(rel + "/leaf.bin"), "deep"));

  auto check = [&] {
    std::string p;
    for (int i = 0; i < 64; ++i) {
      p += (i ? "/" : "") + ("level" + std::to_string(i));
      struct stat st;
      ASSERT_OK(::stat(m.path(p).c_str(), &st)) << " at level " << i;
      EXPECT_TRUE(S_ISDIR(st.st_mode));
      EXPECT_EQ(st.st_nlink, i == 63 ? 2u : 3u) << "level " << i;
    }
    EXPECT_EQ(slurp(m.path(rel + "/leaf.bin")), "deep");
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

TEST(MountPosix, MkdirPWideTree) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  constexpr int kWide = 5000;
  ASSERT_OK(::mkdir(m.path("wide").c_str(), 0755));
  for (int i = 0; i < kWide; ++i) {
    // vLLM's layout: <h[0:3]>/<h[3:5]>_g<group>; mkdir -p creates both levels
    // (for one in ten here, to keep the test short).
    std::string p = m.path("wide/" + std::to_string(i) + (i % 10 == 1 ? "/g_0" : ""));
    std::error_code ec;
    ASSERT_TRUE(std::filesystem::create_directories(p, ec)) << p << ": " << ec.message();
  }
  auto check = [&] {
    auto names = list_dir(m.path("wide"));
    ASSERT_EQ(names.size(), size_t(kWide));
    for (int i = 0; i < kWide; ++i) {
      auto it = names.find(std::to_string(i));
      ASSERT_NE(it, names.end()) << i;
      EXPECT_EQ(it->second, 1) << i;
    }
    struct stat st;
    ASSERT_OK(::stat(m.path("wide").c_str(), &st));
    EXPECT_EQ(st.st_nlink, 2u + kWide);
    ASSERT_OK(::stat(m.path("wide/4321/g_0").c_str(), &st));
    EXPECT_TRUE(S_ISDIR(st.st_mode));
    ASSERT_OK(::stat(m.path("wide/4321").c_str(), &st));
    EXPECT_EQ(st.st_nlink, 3u);
    EXPECT_ERRNO(::stat(m.path("wide/4322/g_0").c_str(), &st), ENOENT);
    EXPECT_ERRNO(::stat(m.path("wide/" + std::to_string(kWide)).c_str(), &st), ENOENT);
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
// create: O_EXCL, O_TRUNC

TEST(MountPosix, CreateExclusive) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  const std::string p = m.path("x.tmp");
  Fd fd(::open(p.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644));
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(::write(fd, "first", 5), 5);
  // A second exclusive create fails, while the first is open and after close.
  EXPECT_ERRNO(::open(p.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644), EEXIST);
  ASSERT_OK(fd.close());
  EXPECT_ERRNO(::open(p.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_TRUNC, 0644), EEXIST);
  EXPECT_EQ(slurp(p), "first");  // the failed O_TRUNC did not truncate
  ASSERT_OK(::mkdir(m.path("dir").c_str(), 0755));
  EXPECT_ERRNO(::open(m.path("dir").c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644), EEXIST);
  EXPECT_ERRNO(::mkdir(p.c_str(), 0755), EEXIST);
  EXPECT_ERRNO(::symlink("t", p.c_str()), EEXIST);
  // vLLM's exact flags on a fresh name.
  fd.reset(::open(m.path("y.tmp").c_str(), O_CREAT | O_EXCL | O_WRONLY | O_TRUNC | O_DIRECT, 0644));
  ASSERT_GE(fd, 0) << std::strerror(errno);
  fd.close();
  remount(m);
  EXPECT_EQ(slurp(p), "first");
  EXPECT_ERRNO(::open(p.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644), EEXIST);
  struct stat st;
  ASSERT_OK(::stat(m.path("y.tmp").c_str(), &st));
  EXPECT_EQ(st.st_size, 0);
}

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
// rename

TEST(MountPosix, RenameAtomicReplaceOfExistingTarget) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  const std::string dest = m.path("block.bin"), tmp = m.path("block.bin_42.tmp");
  const std::string old_data = random_bytes(2 * kMiB + 3, 1), new_data = random_bytes(3 * kMiB, 2);
  ASSERT_TRUE(write_file(dest, old_data));
  Fd old_fd(::open(dest.c_str(), O_RDONLY | O_CLOEXEC));  // a reader of the old file
  ASSERT_GE(old_fd, 0);
  struct stat old_st;
  ASSERT_OK(::fstat(old_fd, &old_st));
  ASSERT_TRUE(write_file(tmp, new_data));
  ASSERT_OK(::rename(tmp.c_str(), dest.c_str()));
  EXPECT_ERRNO(::access(tmp.c_str(), F_OK), ENOENT);
  struct stat st;
  ASSERT_OK(::stat(dest.c_str(), &st));
  EXPECT_EQ(size_t(st.st_size), new_data.size());
  EXPECT_NE(st.st_ino, old_st.st_ino);
  EXPECT_SAME_BYTES(slurp(dest), new_data);
  // The replaced file stays whole for its open fd, also past the page cache.
  ASSERT_OK(::posix_fadvise(old_fd, 0, 0, POSIX_FADV_DONTNEED));
  EXPECT_SAME_BYTES(pread_str(old_fd, 4 * kMiB, 0), old_data);
  ASSERT_OK(old_fd.close());
  EXPECT_EQ(list_dir(m.mnt()), (std::map<std::string, int>{{"block.bin", 1}}));
  remount(m);
  EXPECT_SAME_BYTES(slurp(dest), new_data);
  EXPECT_ERRNO(::access(tmp.c_str(), F_OK), ENOENT);
  EXPECT_EQ(list_dir(m.mnt()), (std::map<std::string, int>{{"block.bin", 1}}));
}

// The LMCache/vLLM store loop: write tmp, close, rename over the final name,
// many times in a row (half of them replacing a committed file), then check
// that the index recorded the final names, not the tmp names.
TEST(MountPosix, RenameAfterCloseManyFilesSurvivesRemount) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  constexpr int kFiles = 300;
  for (int i = 0; i < kFiles; i += 2)
    ASSERT_TRUE(write_file(m.path("k" + std::to_string(i) + ".bin"), "old" + std::to_string(i)));
  Fd dfd(::open(m.mnt().c_str(), O_RDONLY | O_DIRECTORY));
  ASSERT_GE(dfd, 0);
  ASSERT_OK(::fsync(dfd));  // commits the "old" files
  dfd.close();
  auto content = [](int i) { return "new" + std::to_string(i) + random_bytes(4096 * (i % 5), i); };
  for (int i = 0; i < kFiles; ++i) {
    const std::string fin = m.path("k" + std::to_string(i) + ".bin");
    const std::string tmp = fin + ".tmp";
    ASSERT_TRUE(write_file(tmp, content(i)));
    ASSERT_OK(::rename(tmp.c_str(), fin.c_str())) << i;
  }
  auto check = [&] {
    auto names = list_dir(m.mnt());
    EXPECT_EQ(names.size(), size_t(kFiles));
    // Counted, with a few examples, rather than one failure per file.
    int missing = 0, tmp_listed = 0, wrong = 0;
    std::string examples;
    for (int i = 0; i < kFiles; ++i) {
      const std::string n = "k" + std::to_string(i) + ".bin";
      const bool bad_name = names.count(n) != 1, bad_tmp = names.count(n + ".tmp") != 0;
      const bool bad_data = slurp(m.path(n)) != content(i);
      missing += bad_name;
      tmp_listed += bad_tmp;
      wrong += bad_data;
      if ((bad_name || bad_tmp || bad_data) && examples.size() < 200) examples += " " + n;
    }
    EXPECT_EQ(missing, 0) << "final names missing from the listing";
    EXPECT_EQ(tmp_listed, 0) << "tmp names (renamed away) listed";
    EXPECT_EQ(wrong, 0) << "final names with wrong content";
    EXPECT_EQ(examples, "") << "of " << kFiles << " files";
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

// A committed file or directory whose attributes change (xattr, mode) and
// that is renamed right after: a flush of the attribute change may be in
// flight during the rename, and must not put the old name back in the index.
TEST(MountPosix, RenameRightAfterAttrChangeSurvivesRemount) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  constexpr int kFiles = 100, kDirs = 20;
  for (int i = 0; i < kFiles; ++i)
    ASSERT_TRUE(write_file(m.path("f" + std::to_string(i) + ".tmp"), "data" + std::to_string(i)));
  for (int i = 0; i < kDirs; ++i) ASSERT_OK(::mkdir(m.path("d" + std::to_string(i)).c_str(), 0755));
  Fd dfd(::open(m.mnt().c_str(), O_RDONLY | O_DIRECTORY));
  ASSERT_GE(dfd, 0);
  ASSERT_OK(::fsync(dfd));  // everything committed under the first names
  ASSERT_OK(dfd.close());
  for (int i = 0; i < kFiles; ++i) {
    const std::string tmp = m.path("f" + std::to_string(i) + ".tmp");
    const std::string crc = "crc" + std::to_string(i);
    ASSERT_OK(::setxattr(tmp.c_str(), "user.vllm.kv_crc32c", crc.data(), crc.size(), 0));
    ASSERT_OK(::rename(tmp.c_str(), m.path("f" + std::to_string(i) + ".bin").c_str()));
  }
  for (int i = 0; i < kDirs; ++i) {
    const std::string d = m.path("d" + std::to_string(i));
    ASSERT_OK(::chmod(d.c_str(), 0700));
    ASSERT_OK(::rename(d.c_str(), m.path("e" + std::to_string(i)).c_str()));
  }
  auto check = [&] {
    std::map<std::string, int> want;
    for (int i = 0; i < kFiles; ++i) want["f" + std::to_string(i) + ".bin"] = 1;
    for (int i = 0; i < kDirs; ++i) want["e" + std::to_string(i)] = 1;
    auto got = list_dir(m.mnt());
    std::string extra, missing;
    for (auto& [n, c] : got)
      if (!want.count(n)) extra += " " + n;
    for (auto& [n, c] : want)
      if (!got.count(n)) missing += " " + n;
    EXPECT_EQ(extra, "") << "names that were renamed away";
    EXPECT_EQ(missing, "") << "names missing";
    int bad = 0;
    for (int i = 0; i < kFiles; ++i) {
      const std::string f = m.path("f" + std::to_string(i) + ".bin");
      bad += slurp(f) != "data" + std::to_string(i) ||
             getx(f, "user.vllm.kv_crc32c") != "crc" + std::to_string(i);
    }
    EXPECT_EQ(bad, 0) << "files with wrong content or xattr";
    struct stat st;
    for (int i = 0; i < kDirs; ++i) {
      if (::stat(m.path("e" + std::to_string(i)).c_str(), &st) == 0) {
        EXPECT_EQ(st.st_mode & 07777, 0700u) << "e" << i;
      }
    }
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

TEST(MountPosix, RenameWhileSourceFdOpen) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  const std::string dest = m.path("chunk.bin"), tmp = m.path("chunk.bin_7.tmp");
  ASSERT_TRUE(write_file(dest, "previous"));
  const std::string data = random_bytes(5 * kMiB + 11, 31);
  // llm-d: buffered 1 MiB writes, flush, rename with the fd still open, close.
  Fd fd(::open(tmp.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644));
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, data.data(), 3 * kMiB), ssize_t(3 * kMiB));
  ASSERT_OK(::rename(tmp.c_str(), dest.c_str()));
  EXPECT_ERRNO(::access(tmp.c_str(), F_OK), ENOENT);
  // Keep writing through the fd after the rename.
  ASSERT_EQ(::write(fd, data.data() + 3 * kMiB, data.size() - 3 * kMiB),
            ssize_t(data.size() - 3 * kMiB));
  struct stat st;
  ASSERT_OK(::fstat(fd, &st));
  EXPECT_EQ(size_t(st.st_size), data.size());
  EXPECT_EQ(st.st_nlink, 1u);
  ASSERT_OK(fd.close());
  EXPECT_SAME_BYTES(slurp(dest), data);
  drop_cache(dest);
  EXPECT_SAME_BYTES(slurp(dest), data);
  remount(m);
  EXPECT_SAME_BYTES(slurp(dest), data);
  EXPECT_ERRNO(::access(tmp.c_str(), F_OK), ENOENT);
  EXPECT_EQ(list_dir(m.mnt()), (std::map<std::string, int>{{"chunk.bin", 1}}));
}

TEST(MountPosix, RenameCarriesUserXattrs) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  const std::string dest = m.path("a.bin"), tmp = m.path("a.bin_1.tmp");
  ASSERT_TRUE(write_file(dest, "old"));
  ASSERT_OK(::setxattr(dest.c_str(), "user.old", "1", 1, 0));
  // vLLM: CRC32C set on the tmp file (fd still open) before the rename.
  Fd fd(::open(tmp.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644));
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "new data", 8), 8);
  const std::string crc("\x12\x34\x00\xff", 4);
  ASSERT_OK(::fsetxattr(fd, "user.vllm.kv_crc32c", crc.data(), crc.size(), XATTR_CREATE));
  ASSERT_OK(fd.close());
  ASSERT_OK(::setxattr(tmp.c_str(), "user.other", "v", 1, 0));
  ASSERT_OK(::rename(tmp.c_str(), dest.c_str()));
  // A directory's xattrs follow its rename too.
  ASSERT_OK(::mkdir(m.path("d1").c_str(), 0755));
  ASSERT_OK(::setxattr(m.path("d1").c_str(), "user.dir", "dv", 2, 0));
  ASSERT_OK(::rename(m.path("d1").c_str(), m.path("d2").c_str()));
  auto check = [&] {
    EXPECT_EQ(getx(dest, "user.vllm.kv_crc32c"), crc);
    EXPECT_EQ(getx(dest, "user.other"), "v");
    EXPECT_ERRNO(::getxattr(dest.c_str(), "user.old", nullptr, 0), ENODATA);
    EXPECT_EQ(listx(dest), (std::set<std::string>{"user.vllm.kv_crc32c", "user.other"}));
    EXPECT_EQ(slurp(dest), "new data");
    EXPECT_EQ(getx(m.path("d2"), "user.dir"), "dv");
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

TEST(MountPosix, RenameNoReplaceGivesEexist) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  ASSERT_TRUE(write_file(m.path("a"), "A"));
  ASSERT_TRUE(write_file(m.path("b"), "B"));
  auto renameat2 = [](const std::string& from, const std::string& to, unsigned flags) {
    return ::syscall(SYS_renameat2, AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), flags);
  };
  EXPECT_ERRNO(renameat2(m.path("a"), m.path("b"), RENAME_NOREPLACE), EEXIST);
  EXPECT_EQ(slurp(m.path("a")), "A");
  EXPECT_EQ(slurp(m.path("b")), "B");
  ASSERT_OK(::mkdir(m.path("d").c_str(), 0755));
  EXPECT_ERRNO(renameat2(m.path("a"), m.path("d"), RENAME_NOREPLACE), EEXIST);
  // To a free name it works.
  ASSERT_OK(renameat2(m.path("a"), m.path("c"), RENAME_NOREPLACE));
  EXPECT_ERRNO(::access(m.path("a").c_str(), F_OK), ENOENT);
  EXPECT_EQ(slurp(m.path("c")), "A");
  remount(m);
  EXPECT_EQ(slurp(m.path("b")), "B");
  EXPECT_EQ(slurp(m.path("c")), "A");
  EXPECT_ERRNO(::access(m.path("a").c_str(), F_OK), ENOENT);
}

TEST(MountPosix, RenameDirIntoOwnSubtreeIsEinval) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  ASSERT_EQ(run_command({"mkdir", "-p", m.path("a/b/c")}).exit_code, 0);
  ASSERT_TRUE(write_file(m.path("a/b/c/f"), "f"));
  EXPECT_ERRNO(::rename(m.path("a").c_str(), m.path("a/b/c/x").c_str()), EINVAL);
  EXPECT_ERRNO(::rename(m.path("a").c_str(), m.path("a/b/x").c_str()), EINVAL);
  EXPECT_ERRNO(::rename(m.path("a/b").c_str(), m.path("a/b/c/x").c_str()), EINVAL);
  // Moving a directory elsewhere works and takes its subtree along.
  ASSERT_OK(::mkdir(m.path("z").c_str(), 0755));
  ASSERT_OK(::rename(m.path("a/b").c_str(), m.path("z/b").c_str()));
  // Over an empty directory: allowed; over a non-empty one: ENOTEMPTY.
  ASSERT_OK(::mkdir(m.path("empty").c_str(), 0755));
  ASSERT_OK(::rename(m.path("z").c_str(), m.path("empty").c_str()));
  ASSERT_OK(::mkdir(m.path("z").c_str(), 0755));
  ASSERT_OK(::mkdir(m.path("z/child").c_str(), 0755));
  EXPECT_ERRNO(::rename(m.path("a").c_str(), m.path("z").c_str()), ENOTEMPTY);
  // File over directory and directory over file.
  EXPECT_ERRNO(::rename(m.path("empty/b/c/f").c_str(), m.path("z").c_str()), EISDIR);
  EXPECT_ERRNO(::rename(m.path("z").c_str(), m.path("empty/b/c/f").c_str()), ENOTDIR);
  auto check = [&] {
    EXPECT_EQ(slurp(m.path("empty/b/c/f")), "f");
    EXPECT_EQ(list_dir(m.path("a")), (std::map<std::string, int>{}));
    EXPECT_EQ(list_dir(m.mnt()), (std::map<std::string, int>{{"a", 1}, {"empty", 1}, {"z", 1}}));
    EXPECT_EQ(list_dir(m.path("z")), (std::map<std::string, int>{{"child", 1}}));
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
// unlink, rmdir

void unlink_while_open(bool committed_first) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  const std::string p = m.path("victim.bin");
  const std::string data = random_bytes(4 * kMiB + 5, committed_first ? 44 : 43);
  ASSERT_TRUE(write_file(p, data));
  Fd fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_GE(fd, 0);
  if (committed_first) {
    ASSERT_OK(::fsync(fd));
  }
  ASSERT_OK(::unlink(p.c_str()));
  EXPECT_ERRNO(::access(p.c_str(), F_OK), ENOENT);
  EXPECT_ERRNO(::unlink(p.c_str()), ENOENT);
  struct stat st;
  ASSERT_OK(::fstat(fd, &st));
  EXPECT_EQ(st.st_nlink, 0u);
  EXPECT_EQ(size_t(st.st_size), data.size());
  // A new file under the same name is a different file.
  ASSERT_TRUE(write_file(p, "replacement"));
  // Read through the open fd, from the daemon (not the page cache).
  ASSERT_OK(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED));
  EXPECT_SAME_BYTES(pread_str(fd, 8 * kMiB, 0), data);
  AlignedBuf rb(8 * kMiB);
  Fd dfd(::open(("/proc/self/fd/" + std::to_string(fd)).c_str(), O_RDONLY | O_DIRECT));
  if (dfd >= 0) {  // reopening a deleted file through /proc: O_DIRECT path too
    ssize_t r = ::pread(dfd, rb.data, 8 * kMiB, 0);
    EXPECT_EQ(r, ssize_t(data.size())) << std::strerror(errno);
    if (r == ssize_t(data.size())) {
      EXPECT_EQ(std::memcmp(rb.data, data.data(), data.size()), 0);
    }
    dfd.close();
  }
  ASSERT_OK(fd.close());
  EXPECT_EQ(slurp(p), "replacement");
  remount(m);
  EXPECT_EQ(slurp(p), "replacement");
  EXPECT_EQ(list_dir(m.mnt()), (std::map<std::string, int>{{"victim.bin", 1}}));
}

TEST(MountPosix, UnlinkWhileOpenKeepsDataDirty) {
  unlink_while_open(false);
}
TEST(MountPosix, UnlinkWhileOpenKeepsDataCommitted) {
  unlink_while_open(true);
}

TEST(MountPosix, RmdirErrors) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  ASSERT_EQ(run_command({"mkdir", "-p", m.path("full/sub")}).exit_code, 0);
  ASSERT_TRUE(write_file(m.path("full/file"), "x"));
  ASSERT_OK(::mkdir(m.path("empty").c_str(), 0755));
  EXPECT_ERRNO(::rmdir(m.path("full").c_str()), ENOTEMPTY);
  EXPECT_ERRNO(::rmdir(m.path("full/file").c_str()), ENOTDIR);
  EXPECT_ERRNO(::rmdir(m.path("absent").c_str()), ENOENT);
  EXPECT_ERRNO(::unlink(m.path("empty").c_str()), EISDIR);
  EXPECT_ERRNO(::unlink(m.path("absent").c_str()), ENOENT);
  EXPECT_OK(::rmdir(m.path("empty").c_str()));
  EXPECT_ERRNO(::access(m.path("empty").c_str(), F_OK), ENOENT);
  // A directory with only an (empty) subdirectory is still not empty.
  ASSERT_OK(::unlink(m.path("full/file").c_str()));
  EXPECT_ERRNO(::rmdir(m.path("full").c_str()), ENOTEMPTY);
  remount(m);
  EXPECT_ERRNO(::access(m.path("empty").c_str(), F_OK), ENOENT);
  EXPECT_ERRNO(::rmdir(m.path("full").c_str()), ENOTEMPTY);
  EXPECT_OK(::rmdir(m.path("full/sub").c_str()));
  EXPECT_OK(::rmdir(m.path("full").c_str()));
  remount(m);
  EXPECT_EQ(list_dir(m.mnt()), (std::map<std::string, int>{}));
}

// ---------------------------------------------------------------------------
// readdir

TEST(MountPosix, Readdir10000EntriesEachOnce) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  constexpr int kN = 10000;
  ASSERT_OK(::mkdir(m.path("big").c_str(), 0755));
  for (int i = 0; i < kN; ++i) {
    Fd fd(::open(m.path("big/entry_" + std::to_string(i)).c_str(),
                 O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644));
    ASSERT_GE(fd, 0) << i << ": " << std::strerror(errno);
    fd.close();
  }
  auto check = [&] {
    DIR* d = ::opendir(m.path("big").c_str());
    ASSERT_NE(d, nullptr);
    std::map<std::string, int> seen;
    int dots = 0;
    errno = 0;
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n == "." || n == "..") {
        ++dots;
        EXPECT_EQ(e->d_type, DT_DIR);
        continue;
      }
      EXPECT_EQ(e->d_type, DT_REG) << n;
      ++seen[n];
    }
    EXPECT_EQ(errno, 0);
    ::closedir(d);
    EXPECT_EQ(dots, 2);
    ASSERT_EQ(seen.size(), size_t(kN));
    for (int i = 0; i < kN; ++i) {
      auto it = seen.find("entry_" + std::to_string(i));
      ASSERT_NE(it, seen.end()) << i;
      EXPECT_EQ(it->second, 1) << "entry_" << i << " returned " << it->second << " times";
    }
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

TEST(MountPosix, ReaddirWhileCreatingNoDuplicates) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  constexpr int kN = 3000;
  ASSERT_OK(::mkdir(m.path("dir").c_str(), 0755));
  for (int i = 0; i < kN; ++i)
    ASSERT_TRUE(write_file(m.path("dir/old_" + std::to_string(i)), "")) << i;
  DIR* d = ::opendir(m.path("dir").c_str());
  ASSERT_NE(d, nullptr);
  std::map<std::string, int> seen;
  int created = 0, read_calls = 0;
  errno = 0;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") ++seen[n];
    // Between readdir calls: new files appear (a writer pool at work).
    if (++read_calls % 10 == 0) {
      ASSERT_TRUE(write_file(m.path("dir/new_" + std::to_string(created)), "")) << created;
      ++created;
    }
  }
  EXPECT_EQ(errno, 0);
  ::closedir(d);
  ASSERT_GT(created, 250);
  for (auto& [n, c] : seen) EXPECT_EQ(c, 1) << n << " returned " << c << " times";
  for (int i = 0; i < kN; ++i)
    EXPECT_EQ(seen.count("old_" + std::to_string(i)), 1u) << "old_" << i << " missing";
  for (auto& [n, c] : seen)
    EXPECT_TRUE(n.rfind("old_", 0) == 0 || n.rfind("new_", 0) == 0) << "unexpected name " << n;
  // Afterwards a fresh listing has every file once.
  auto all = list_dir(m.path("dir"));
  EXPECT_EQ(all.size(), size_t(kN + created));
  for (auto& [n, c] : all) EXPECT_EQ(c, 1) << n;
}

// ---------------------------------------------------------------------------
// attributes

TEST(MountPosix, UtimensatAtimeOnly) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  const std::string p = m.path("touched.bin");
  ASSERT_TRUE(write_file(p, "data"));
  const timespec both[2] = {{1000, 0}, {2000, 500000000}};
  ASSERT_OK(::utimensat(AT_FDCWD, p.c_str(), both, 0));
  struct stat st;
  ASSERT_OK(::stat(p.c_str(), &st));
  EXPECT_EQ(ns_of(st.st_atim), 1000ll * 1000000000);
  EXPECT_EQ(ns_of(st.st_mtim), 2000ll * 1000000000 + 500000000);
  // llm-d marks a hit: atime only, mtime omitted.
  const timespec atime_only[2] = {{5000, 123456789}, {0, UTIME_OMIT}};
  ASSERT_OK(::utimensat(AT_FDCWD, p.c_str(), atime_only, 0));
  ASSERT_OK(::stat(p.c_str(), &st));
  EXPECT_EQ(ns_of(st.st_atim), 5000ll * 1000000000 + 123456789);
  EXPECT_EQ(ns_of(st.st_mtim), 2000ll * 1000000000 + 500000000);
  // UTIME_NOW for atime, mtime still omitted.
  timespec before;
  ::clock_gettime(CLOCK_REALTIME, &before);
  const timespec now_only[2] = {{0, UTIME_NOW}, {0, UTIME_OMIT}};
  ASSERT_OK(::utimensat(AT_FDCWD, p.c_str(), now_only, 0));
  ASSERT_OK(::stat(p.c_str(), &st));
  EXPECT_GE(st.st_atim.tv_sec, before.tv_sec);
  EXPECT_EQ(ns_of(st.st_mtim), 2000ll * 1000000000 + 500000000);
  EXPECT_EQ(slurp(p), "data");
  // Same through an fd (futimens).
  Fd fd(::open(p.c_str(), O_RDONLY));
  ASSERT_GE(fd, 0);
  const timespec f_only[2] = {{7000, 7}, {0, UTIME_OMIT}};
  ASSERT_OK(::futimens(fd, f_only));
  ASSERT_OK(::fstat(fd, &st));
  EXPECT_EQ(ns_of(st.st_atim), 7000ll * 1000000000 + 7);
  EXPECT_EQ(ns_of(st.st_mtim), 2000ll * 1000000000 + 500000000);
  fd.close();
  remount(m);
  ASSERT_OK(::stat(p.c_str(), &st));
  EXPECT_EQ(ns_of(st.st_mtim), 2000ll * 1000000000 + 500000000);
}

// The evictor of llm-d orders by atime; a clean unmount must keep it.
TEST(MountPosix, AtimeOnlyTouchSurvivesCleanRemount) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  const std::string p = m.path("hit.bin");
  ASSERT_TRUE(write_file(p, "data"));
  Fd dfd(::open(m.mnt().c_str(), O_RDONLY | O_DIRECTORY));
  ASSERT_GE(dfd, 0);
  ASSERT_OK(::fsync(dfd));  // the file is committed before the touch
  dfd.close();
  const timespec atime_only[2] = {{5000, 123456789}, {0, UTIME_OMIT}};
  ASSERT_OK(::utimensat(AT_FDCWD, p.c_str(), atime_only, 0));
  remount(m);
  struct stat st;
  ASSERT_OK(::stat(p.c_str(), &st));
  EXPECT_EQ(ns_of(st.st_atim), 5000ll * 1000000000 + 123456789);
}

TEST(MountPosix, ChmodChownStoredAndReported) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  const std::string f = m.path("f"), d = m.path("d"), l = m.path("l");
  ASSERT_TRUE(write_file(f, "x"));
  ASSERT_OK(::mkdir(d.c_str(), 0755));
  ASSERT_OK(::symlink("f", l.c_str()));
  ASSERT_OK(::chmod(f.c_str(), 0640));
  ASSERT_OK(::chown(f.c_str(), 1234, 5678));
  ASSERT_OK(::chmod(d.c_str(), 01750));
  ASSERT_OK(::chown(d.c_str(), 4321, 8765));
  ASSERT_OK(::lchown(l.c_str(), 111, 222));
  Fd fd(::open(m.path("g").c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
  ASSERT_GE(fd, 0);
  ASSERT_OK(::fchmod(fd, 0604));
  ASSERT_OK(::fchown(fd, 42, 43));
  ASSERT_OK(fd.close());
  auto check = [&] {
    struct stat st;
    ASSERT_OK(::stat(f.c_str(), &st));
    EXPECT_EQ(st.st_mode, S_IFREG | 0640u);
    EXPECT_EQ(st.st_uid, 1234u);
    EXPECT_EQ(st.st_gid, 5678u);
    ASSERT_OK(::stat(d.c_str(), &st));
    EXPECT_EQ(st.st_mode, S_IFDIR | 01750u);
    EXPECT_EQ(st.st_uid, 4321u);
    EXPECT_EQ(st.st_gid, 8765u);
    ASSERT_OK(::lstat(l.c_str(), &st));
    EXPECT_TRUE(S_ISLNK(st.st_mode));
    EXPECT_EQ(st.st_uid, 111u);
    EXPECT_EQ(st.st_gid, 222u);
    ASSERT_OK(::stat(m.path("g").c_str(), &st));
    EXPECT_EQ(st.st_mode, S_IFREG | 0604u);
    EXPECT_EQ(st.st_uid, 42u);
    EXPECT_EQ(st.st_gid, 43u);
    EXPECT_EQ(slurp(f), "x");
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

TEST(MountPosix, SymlinkReadlink) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  ASSERT_TRUE(write_file(m.path("target.bin"), "through the link"));
  const std::string odd_target = "some/dir with spaces/caf\xc3\xa9/\xff-x/../y";
  ASSERT_OK(::symlink("target.bin", m.path("rel").c_str()));
  ASSERT_OK(::symlink(odd_target.c_str(), m.path("dangling").c_str()));
  const std::string long_target(4000, 'a');
  ASSERT_OK(::symlink(long_target.c_str(), m.path("long").c_str()));
  EXPECT_ERRNO(::symlink("x", m.path("rel").c_str()), EEXIST);
  auto rl = [](const std::string& p) {
    std::string b(8192, '\0');
    ssize_t n = ::readlink(p.c_str(), b.data(), b.size());
    if (n < 0) return "<readlink: " + std::string(std::strerror(errno)) + ">";
    b.resize(static_cast<size_t>(n));
    return b;
  };
  auto check = [&] {
    EXPECT_EQ(rl(m.path("rel")), "target.bin");
    EXPECT_EQ(rl(m.path("dangling")), odd_target);
    EXPECT_EQ(rl(m.path("long")), long_target);
    struct stat st;
    ASSERT_OK(::lstat(m.path("rel").c_str(), &st));
    EXPECT_TRUE(S_ISLNK(st.st_mode));
    EXPECT_EQ(st.st_size, 10);
    ASSERT_OK(::stat(m.path("rel").c_str(), &st));
    EXPECT_TRUE(S_ISREG(st.st_mode));
    EXPECT_EQ(slurp(m.path("rel")), "through the link");
    EXPECT_ERRNO(::stat(m.path("dangling").c_str(), &st), ENOENT);
    char rbuf[16];
    EXPECT_ERRNO(::readlink(m.path("target.bin").c_str(), rbuf, sizeof(rbuf)), EINVAL);
    EXPECT_ERRNO(::open(m.path("rel").c_str(), O_RDONLY | O_NOFOLLOW), ELOOP);
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

TEST(MountPosix, Statfs) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  struct statvfs v;
  ASSERT_OK(::statvfs(m.mnt().c_str(), &v));
  EXPECT_EQ(v.f_bsize, 4096u);
  EXPECT_EQ(v.f_frsize, 4096u);
  EXPECT_EQ(v.f_namemax, 255u);
  EXPECT_GT(v.f_blocks, 0u);
  EXPECT_LE(v.f_bfree, v.f_blocks);
  EXPECT_LE(v.f_bavail, v.f_bfree);
  EXPECT_GT(v.f_files, 0u);
  struct statfs sf;
  ASSERT_OK(::statfs(m.path("").c_str(), &sf));
  EXPECT_EQ(static_cast<unsigned long>(sf.f_type), static_cast<unsigned long>(FUSE_SUPER_MAGIC));
  EXPECT_EQ(sf.f_bsize, 4096);
  EXPECT_EQ(sf.f_namelen, 255);
  // Also through a file and a file descriptor inside the mount.
  ASSERT_TRUE(write_file(m.path("f"), "x"));
  struct statvfs v2;
  ASSERT_OK(::statvfs(m.path("f").c_str(), &v2));
  EXPECT_EQ(v2.f_bsize, 4096u);
  EXPECT_EQ(v2.f_namemax, 255u);
  Fd fd(::open(m.path("f").c_str(), O_RDONLY));
  ASSERT_GE(fd, 0);
  ASSERT_OK(::fstatvfs(fd, &v2));
  EXPECT_EQ(v2.f_bsize, 4096u);
  EXPECT_GT(v2.f_blocks, 0u);
  fd.close();
}

// ---------------------------------------------------------------------------
// fsync

TEST(MountPosix, FsyncReturnsZeroAndDataPersists) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  ASSERT_OK(::mkdir(m.path("d").c_str(), 0755));
  const std::string p = m.path("d/synced.bin");
  const std::string data = random_bytes(4 * kMiB + 99, 17);
  Fd fd(::open(p.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(pwrite_all(fd, data.data(), data.size(), 0));
  EXPECT_OK(::fsync(fd));
  EXPECT_OK(::fdatasync(fd));
  EXPECT_OK(::fsync(fd));  // nothing dirty: still 0
  ASSERT_TRUE(pwrite_all(fd, "tail", 4, static_cast<off_t>(data.size())));
  EXPECT_OK(::fdatasync(fd));
  ASSERT_OK(fd.close());
  Fd dfd(::open(m.path("d").c_str(), O_RDONLY | O_DIRECTORY));
  ASSERT_GE(dfd, 0);
  EXPECT_OK(::fsync(dfd));
  dfd.close();
  remount(m);
  EXPECT_SAME_BYTES(slurp(p), data + "tail");
}

// fsync means durable: the data must survive the daemon dying right after.
TEST(MountPosix, FsyncedDataSurvivesKill9) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  ASSERT_OK(::mkdir(m.path("d").c_str(), 0755));
  const std::string p = m.path("d/synced.bin");
  const std::string data = random_bytes(3 * kMiB + 1, 18);
  Fd fd(::open(p.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(pwrite_all(fd, data.data(), data.size(), 0));
  ASSERT_OK(::fsync(fd));
  ASSERT_OK(fd.close());
  m.kill9();
  ASSERT_TRUE(m.mount_ok());
  EXPECT_SAME_BYTES(slurp(p), data);
}

// ---------------------------------------------------------------------------
// xattrs

TEST(MountPosix, UserXattrs) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  const std::string f = m.path("x.bin");
  ASSERT_TRUE(write_file(f, "payload"));
  ASSERT_OK(::mkdir(m.path("dir").c_str(), 0755));
  EXPECT_EQ(listx(f), std::set<std::string>{});
  ASSERT_OK(::setxattr(f.c_str(), "user.a", "alpha", 5, 0));
  const std::string bin("\0\x01\xff\0zz", 6);
  ASSERT_OK(::setxattr(f.c_str(), "user.bin", bin.data(), bin.size(), XATTR_CREATE));
  ASSERT_OK(::setxattr(f.c_str(), "user.empty", "", 0, 0));
  const std::string big = random_bytes(60000, 5);
  ASSERT_OK(::setxattr(f.c_str(), "user.big", big.data(), big.size(), 0));
  EXPECT_EQ(getx(f, "user.a"), "alpha");
  EXPECT_EQ(getx(f, "user.bin"), bin);
  EXPECT_EQ(getx(f, "user.empty"), "");
  EXPECT_EQ(getx(f, "user.big"), big);
  // Size probe, then a buffer too small.
  EXPECT_EQ(::getxattr(f.c_str(), "user.a", nullptr, 0), 5);
  char small[2];
  EXPECT_ERRNO(::getxattr(f.c_str(), "user.a", small, sizeof(small)), ERANGE);
  // Flags.
  EXPECT_ERRNO(::setxattr(f.c_str(), "user.a", "x", 1, XATTR_CREATE), EEXIST);
  EXPECT_EQ(getx(f, "user.a"), "alpha");
  EXPECT_ERRNO(::setxattr(f.c_str(), "user.missing", "x", 1, XATTR_REPLACE), ENODATA);
  EXPECT_ERRNO(::getxattr(f.c_str(), "user.missing", nullptr, 0), ENODATA);
  ASSERT_OK(::setxattr(f.c_str(), "user.a", "beta!", 5, XATTR_REPLACE));
  EXPECT_EQ(getx(f, "user.a"), "beta!");
  ASSERT_OK(::setxattr(f.c_str(), "user.a", "gamma-longer", 12, 0));
  EXPECT_EQ(getx(f, "user.a"), "gamma-longer");
  // list, and a list buffer too small.
  EXPECT_EQ(listx(f), (std::set<std::string>{"user.a", "user.bin", "user.empty", "user.big"}));
  char lsmall[4];
  EXPECT_ERRNO(::listxattr(f.c_str(), lsmall, sizeof(lsmall)), ERANGE);
  // remove.
  ASSERT_OK(::removexattr(f.c_str(), "user.bin"));
  EXPECT_ERRNO(::getxattr(f.c_str(), "user.bin", nullptr, 0), ENODATA);
  EXPECT_ERRNO(::removexattr(f.c_str(), "user.bin"), ENODATA);
  EXPECT_ERRNO(::removexattr(f.c_str(), "user.never"), ENODATA);
  // On a directory, and through an fd.
  ASSERT_OK(::setxattr(m.path("dir").c_str(), "user.d", "dirval", 6, 0));
  Fd fd(::open(f.c_str(), O_RDONLY));
  ASSERT_GE(fd, 0);
  ASSERT_OK(::fsetxattr(fd, "user.fd", "1", 1, 0));
  char fbuf[16];
  EXPECT_EQ(::fgetxattr(fd, "user.fd", fbuf, sizeof(fbuf)), 1);
  fd.close();
  // Setting xattrs does not touch the data.
  EXPECT_EQ(slurp(f), "payload");
  auto check = [&] {
    EXPECT_EQ(getx(f, "user.a"), "gamma-longer");
    EXPECT_EQ(getx(f, "user.empty"), "");
    EXPECT_EQ(getx(f, "user.big"), big);
    EXPECT_EQ(getx(f, "user.fd"), "1");
    EXPECT_ERRNO(::getxattr(f.c_str(), "user.bin", nullptr, 0), ENODATA);
    EXPECT_EQ(listx(f), (std::set<std::string>{"user.a", "user.empty", "user.big", "user.fd"}));
    EXPECT_EQ(getx(m.path("dir"), "user.d"), "dirval");
    EXPECT_EQ(slurp(f), "payload");
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

// ---------------------------------------------------------------------------
// names

TEST(MountPosix, NameOf255BytesWorks256IsTooLong) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  std::string n255;
  for (int i = 0; n255.size() < 255; ++i) n255 += static_cast<char>('a' + i % 26);
  const std::string n256 = n255 + "z";
  ASSERT_EQ(n255.size(), 255u);
  ASSERT_TRUE(write_file(m.path(n255), "max name")) << std::strerror(errno);
  ASSERT_OK(::mkdir(m.path("d").c_str(), 0755));
  ASSERT_OK(::mkdir(m.path("d/" + n255).c_str(), 0755));
  struct stat st;
  EXPECT_OK(::stat(m.path(n255).c_str(), &st));
  EXPECT_ERRNO(::open(m.path(n256).c_str(), O_CREAT | O_WRONLY, 0644), ENAMETOOLONG);
  EXPECT_ERRNO(::stat(m.path(n256).c_str(), &st), ENAMETOOLONG);
  EXPECT_ERRNO(::access(m.path(n256).c_str(), F_OK), ENAMETOOLONG);
  EXPECT_ERRNO(::mkdir(m.path(n256).c_str(), 0755), ENAMETOOLONG);
  EXPECT_ERRNO(::symlink("t", m.path(n256).c_str()), ENAMETOOLONG);
  EXPECT_ERRNO(::rename(m.path(n255).c_str(), m.path(n256).c_str()), ENAMETOOLONG);
  EXPECT_ERRNO(::unlink(m.path(n256).c_str()), ENAMETOOLONG);
  auto check = [&] {
    EXPECT_EQ(slurp(m.path(n255)), "max name");
    EXPECT_EQ(list_dir(m.mnt()), (std::map<std::string, int>{{n255, 1}, {"d", 1}}));
    EXPECT_EQ(list_dir(m.path("d")), (std::map<std::string, int>{{n255, 1}}));
    struct stat s2;
    EXPECT_ERRNO(::stat(m.path(n256).c_str(), &s2), ENAMETOOLONG);
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
  // Rename to and from a 255-byte name.
  ASSERT_OK(::rename(m.path(n255).c_str(), m.path("short").c_str()));
  ASSERT_OK(::rename(m.path("short").c_str(), m.path("d/" + n255 + "/" + n255).c_str()));
  remount(m);
  EXPECT_EQ(slurp(m.path("d/" + n255 + "/" + n255)), "max name");
}

TEST(MountPosix, NamesWithAnyByteExceptSlashAndNul) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  std::vector<std::string> names = {"with space",
                                    " leading space",
                                    "trailing space ",
                                    "new\nline",
                                    "\nstarts",
                                    "\xff",
                                    "\xff\xfe\xfd",
                                    "caf\xc3\xa9",
                                    "\xc3\x28",
                                    "\xed\xa0\x80",
                                    "-leading-dash",
                                    "--",
                                    "-",
                                    "-rf",
                                    "tab\tname",
                                    "\x01\x02\x7f",
                                    "...",
                                    ".hidden",
                                    "a\\b",
                                    "*?[]{}",
                                    "'\"`$(x)",
                                    "a:b;c|d&e",
                                    "\r\x1b[0m",
                                    "%s%n%x",
                                    "\xe2\x80\x8b"};
  // Every byte value 1..255 except '/' appears in some name.
  std::string all;
  for (int c = 1; c < 256; ++c)
    if (c != '/') all += static_cast<char>(c);
  names.push_back(all.substr(0, 200));
  names.push_back(all.substr(200));
  for (size_t i = 0; i < names.size(); ++i)
    ASSERT_TRUE(write_file(m.path(names[i]), "content " + std::to_string(i)))
        << "create of name #" << i << ": " << std::strerror(errno);
  ASSERT_OK(::mkdir(m.path("dir \xff\n-x").c_str(), 0755));
  ASSERT_TRUE(write_file(m.path("dir \xff\n-x/-inner\xfe"), "inner"));
  auto check = [&] {
    std::map<std::string, int> want;
    for (auto& n : names) want[n] = 1;
    want["dir \xff\n-x"] = 1;
    EXPECT_EQ(list_dir(m.mnt()), want);
    for (size_t i = 0; i < names.size(); ++i) {
      EXPECT_EQ(slurp(m.path(names[i])), "content " + std::to_string(i)) << "name #" << i;
      EXPECT_OK(::access(m.path(names[i]).c_str(), F_OK)) << "name #" << i;
    }
    EXPECT_EQ(slurp(m.path("dir \xff\n-x/-inner\xfe")), "inner");
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
  // Renames between odd names.
  ASSERT_OK(::rename(m.path(names[3]).c_str(), m.path("\xff\xff renamed\n").c_str()));
  EXPECT_EQ(slurp(m.path("\xff\xff renamed\n")), "content 3");
  EXPECT_ERRNO(::access(m.path(names[3]).c_str(), F_OK), ENOENT);
}

TEST(MountPosix, HardLinkIsEperm) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  ASSERT_TRUE(write_file(m.path("a"), "A"));
  EXPECT_ERRNO(::link(m.path("a").c_str(), m.path("b").c_str()), EPERM);
  EXPECT_ERRNO(::linkat(AT_FDCWD, m.path("a").c_str(), AT_FDCWD, m.path("c").c_str(), 0), EPERM);
  EXPECT_ERRNO(::access(m.path("b").c_str(), F_OK), ENOENT);
  EXPECT_ERRNO(::access(m.path("c").c_str(), F_OK), ENOENT);
  struct stat st;
  ASSERT_OK(::stat(m.path("a").c_str(), &st));
  EXPECT_EQ(st.st_nlink, 1u);
  EXPECT_EQ(slurp(m.path("a")), "A");
  EXPECT_EQ(list_dir(m.mnt()), (std::map<std::string, int>{{"a", 1}}));
}

// ---------------------------------------------------------------------------
// Misc errors the clients can hit.

TEST(MountPosix, OpenErrors) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  ASSERT_OK(::mkdir(m.path("d").c_str(), 0755));
  ASSERT_TRUE(write_file(m.path("f"), "x"));
  EXPECT_ERRNO(::open(m.path("d").c_str(), O_WRONLY), EISDIR);
  EXPECT_ERRNO(::open(m.path("f").c_str(), O_RDONLY | O_DIRECTORY), ENOTDIR);
  EXPECT_ERRNO(::open(m.path("f/x").c_str(), O_CREAT | O_WRONLY, 0644), ENOTDIR);
  EXPECT_ERRNO(::open(m.path("nodir/x").c_str(), O_CREAT | O_WRONLY, 0644), ENOENT);
  EXPECT_ERRNO(::mkdir(m.path("nodir/x").c_str(), 0755), ENOENT);
  EXPECT_ERRNO(::rename(m.path("absent").c_str(), m.path("y").c_str()), ENOENT);
  Fd fd(::open(m.path("f").c_str(), O_RDONLY));
  ASSERT_GE(fd, 0);
  char c;
  EXPECT_ERRNO(::write(fd, &c, 1), EBADF);
  fd.close();
}

}  // namespace kvfs::test
