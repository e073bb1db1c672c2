// SPDX-License-Identifier: Apache-2.0
// FaultFs: a BackingFs (core/backing/backing_fs.h) over the real system
// calls that fails, or lies, on cue: the disk of a core unit test, in the
// spirit of CacheLib Navy's MockDevice and RocksDB's FaultInjectionTestFS.
// A rule fails the calls of one kind on the files whose path contains a
// string, after letting some through; reads can come back with a byte
// flipped, and writes short. Calls are counted by kind.
//
// Thread-safe: the rules and counts are under mu_; no system call runs
// under it.
#pragma once

#include <sys/types.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/backing/backing_fs.h"

namespace kvfs {

class FaultFs final : public BackingFs {
 public:
  enum class Op {
    kOpen,
    kClose,
    kPread,
    kPwrite,
    kFdatasync,
    kFsync,
    kFallocate,
    kFtruncate,
    kFchmod,
    kFstat,
    kRename,
    kUnlink,
    kMkdir,
    kList,
    kCount
  };
  struct Rule {
    Op op = Op::kPread;
    int err = EIO;                // the call returns -err
    std::string path_has;         // only files whose path holds this ("": all)
    uint64_t skip = 0;            // matching calls let through first
    uint64_t times = UINT64_MAX;  // then this many fail
  };

  void fail(const Rule& r);
  // What preads of matching files return has its middle byte flipped.
  void corrupt_reads(const std::string& path_has);
  // A pwrite writes at most n bytes (n a multiple of 4 KiB for O_DIRECT).
  void short_writes(size_t n);
  // No rule, no corruption, no short writes from now on.
  void heal();
  uint64_t calls(Op op) const;   // every call of that kind so far
  uint64_t failed(Op op) const;  // those a rule failed

  int open(const std::string& path, int flags, mode_t mode) override;
  int close(int fd) override;
  ssize_t pread(int fd, void* buf, size_t n, uint64_t off) override;
  ssize_t pwrite(int fd, const void* buf, size_t n, uint64_t off) override;
  int fdatasync(int fd) override;
  int fsync(int fd) override;
  int fallocate(int fd, uint64_t off, uint64_t len) override;
  int ftruncate(int fd, uint64_t len) override;
  int fchmod(int fd, mode_t mode) override;
  int fstat(int fd, struct stat* st) override;
  int rename(const std::string& from, const std::string& to) override;
  int unlink(const std::string& path) override;
  int mkdir(const std::string& path, mode_t mode) override;
  int list(const std::string& dir, std::vector<std::string>* names) override;

 private:
  struct Armed {
    Rule rule;
    uint64_t seen = 0;  // matching calls so far
  };
  // Counts the call; -err if a rule fails it, else 0.
  int check(Op op, const std::string& path);
  std::string path_of(int fd) const;
  BackingFs* const real_ = BackingFs::posix();

  mutable std::mutex mu_;
  std::vector<Armed> rules_;                                     // guarded by mu_
  std::string corrupt_;                                          // guarded by mu_
  bool corrupting_ = false;                                      // guarded by mu_
  size_t short_ = 0;                                             // guarded by mu_
  std::unordered_map<int, std::string> paths_;                   // open fds; guarded by mu_
  std::array<uint64_t, size_t(Op::kCount)> calls_{}, failed_{};  // guarded by mu_
};

}  // namespace kvfs
