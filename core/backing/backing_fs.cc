// SPDX-License-Identifier: Apache-2.0
// BackingFs::posix(): the system calls, -errno on failure (backing_fs.h).
#include "core/backing/backing_fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string_view>

namespace kvfs {
namespace {

// -errno for a failed call, its result otherwise; EINTR is tried again.
template <typename F>
auto retry(F f) -> decltype(f()) {
  for (;;) {
    const auto r = f();
    if (r >= 0) return r;
    if (errno != EINTR) return -errno;
  }
}

class PosixFs final : public BackingFs {
 public:
  int open(const std::string& path, int flags, mode_t mode) override {
    return retry([&] { return ::open(path.c_str(), flags, mode); });
  }
  // Never retried: on Linux the descriptor is gone even when close() says
  // EINTR, and a retry could close one another thread just opened.
  int close(int fd) override { return ::close(fd) == 0 ? 0 : -errno; }
  ssize_t pread(int fd, void* buf, size_t n, uint64_t off) override {
    return retry([&] { return ::pread(fd, buf, n, static_cast<off_t>(off)); });
  }
  ssize_t pwrite(int fd, const void* buf, size_t n, uint64_t off) override {
    return retry([&] { return ::pwrite(fd, buf, n, static_cast<off_t>(off)); });
  }
  int fdatasync(int fd) override {
    return retry([&] { return ::fdatasync(fd); });
  }
  int fsync(int fd) override {
    return retry([&] { return ::fsync(fd); });
  }
  int fallocate(int fd, uint64_t off, uint64_t len) override {
    return retry(
        [&] { return ::fallocate(fd, 0, static_cast<off_t>(off), static_cast<off_t>(len)); });
  }
  int ftruncate(int fd, uint64_t len) override {
    return retry([&] { return ::ftruncate(fd, static_cast<off_t>(len)); });
  }
  int fchmod(int fd, mode_t mode) override {
    return retry([&] { return ::fchmod(fd, mode); });
  }
  int fstat(int fd, struct stat* st) override {
    return retry([&] { return ::fstat(fd, st); });
  }
  int rename(const std::string& from, const std::string& to) override {
    return retry([&] { return ::rename(from.c_str(), to.c_str()); });
  }
  int unlink(const std::string& path) override {
    return retry([&] { return ::unlink(path.c_str()); });
  }
  int mkdir(const std::string& path, mode_t mode) override {
    return retry([&] { return ::mkdir(path.c_str(), mode); });
  }
  int list(const std::string& dir, std::vector<std::string>* names) override {
    DIR* d = ::opendir(dir.c_str());
    if (!d) return -errno;
    errno = 0;
    while (dirent* e = ::readdir(d)) {
      const std::string_view n = e->d_name;
      if (n != "." && n != "..") names->emplace_back(n);
      errno = 0;
    }
    const int e = errno;  // readdir's end or its error
    ::closedir(d);
    return e ? -e : 0;
  }
  bool kernel_direct() const override { return true; }
};

}  // namespace

BackingFs* BackingFs::posix() {
  static PosixFs* fs = new PosixFs;  // never destroyed: used by detached calls at exit
  return fs;
}

}  // namespace kvfs
