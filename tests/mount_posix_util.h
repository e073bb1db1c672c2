// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the POSIX mount tests (tests/mount_posix_*_test.cc):
// errno-checking assertions, an fd that closes itself, full pread/pwrite
// loops, O_DIRECT reads, directory listings, xattr reads and remount.
//
// The tests check POSIX behaviour of a real kvfs mount, as the KV-cache
// offloaders use it (WORKLOADS.md: vLLM fs tier, llm-d, LMCache). Every test
// runs plain syscalls on a fresh mount; many unmount and mount again to check
// what reached the backing directory and the index, not just the page cache.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/types.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <map>
#include <set>
#include <string>

#include "tests/mount_fixture.h"

namespace kvfs::test {

inline constexpr size_t kMiB = 1 << 20;

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

inline std::string slurp(const std::string& path, int flags = 0) {
  std::string s;
  if (!read_file(path, &s, flags))
    return "<read of " + path + " failed: " + std::strerror(errno) + ">";
  return s;
}

// The file's bytes through O_DIRECT, or a message naming the failure (which
// no expected content equals).
inline std::string read_direct(const std::string& path) {
  int err;
  std::string out = read_direct(path, &err);
  if (err != 0) out = "<O_DIRECT read of " + path + ": " + std::strerror(err) + ">";
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
inline bool pwrite_all(int fd, const void* buf, size_t n, off_t off) {
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

inline std::string pread_str(int fd, size_t n, off_t off) {
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
inline void drop_cache(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// Names in a directory (without "." and ".."), counted, via opendir/readdir.
inline std::map<std::string, int> list_dir(const std::string& path) {
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

inline std::string getx(const std::string& path, const std::string& name) {
  std::string v(65536, '\0');
  ssize_t n = ::getxattr(path.c_str(), name.c_str(), v.data(), v.size());
  if (n < 0) return "<getxattr " + name + ": " + std::strerror(errno) + ">";
  v.resize(static_cast<size_t>(n));
  return v;
}

inline std::set<std::string> listx(const std::string& path) {
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

inline int64_t ns_of(const timespec& t) {
  return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec;
}

inline bool all_zero(const std::string& s, size_t from = 0, size_t to = std::string::npos) {
  to = std::min(to, s.size());
  for (size_t i = from; i < to; ++i)
    if (s[i] != '\0') return false;
  return true;
}

// First differing offset, for readable failures on large buffers.
inline std::string first_diff(const std::string& a, const std::string& b) {
  if (a.size() != b.size())
    return "sizes differ: " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
  auto m = std::mismatch(a.begin(), a.end(), b.begin());
  if (m.first == a.end()) return "equal";
  return "first difference at offset " + std::to_string(m.first - a.begin());
}

#define EXPECT_SAME_BYTES(a, b) EXPECT_TRUE((a) == (b)) << first_diff((a), (b))

inline void remount(KvfsMount& m, const std::string& opts = "") {
  m.unmount();
  ASSERT_TRUE(m.mount_ok(opts));
}

}  // namespace kvfs::test
