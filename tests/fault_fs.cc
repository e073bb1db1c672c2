// SPDX-License-Identifier: Apache-2.0
#include "tests/fault_fs.h"

#include <cerrno>

namespace kvfs {

void FaultFs::fail(const Rule& r) {
  std::lock_guard l(mu_);
  rules_.push_back({r, 0});
}

void FaultFs::corrupt_reads(const std::string& path_has) {
  std::lock_guard l(mu_);
  corrupt_ = path_has;
  corrupting_ = true;
}

void FaultFs::short_writes(size_t n) {
  std::lock_guard l(mu_);
  short_ = n;
}

void FaultFs::heal() {
  std::lock_guard l(mu_);
  rules_.clear();
  corrupting_ = false;
  short_ = 0;
}

uint64_t FaultFs::calls(Op op) const {
  std::lock_guard l(mu_);
  return calls_[size_t(op)];
}

uint64_t FaultFs::failed(Op op) const {
  std::lock_guard l(mu_);
  return failed_[size_t(op)];
}

int FaultFs::check(Op op, const std::string& path) {
  std::lock_guard l(mu_);
  ++calls_[size_t(op)];
  for (Armed& a : rules_) {
    if (a.rule.op != op || path.find(a.rule.path_has) == std::string::npos) continue;
    const uint64_t n = a.seen++;
    if (n >= a.rule.skip && n - a.rule.skip < a.rule.times) {
      ++failed_[size_t(op)];
      return -a.rule.err;
    }
  }
  return 0;
}

std::string FaultFs::path_of(int fd) const {
  std::lock_guard l(mu_);
  auto it = paths_.find(fd);
  return it == paths_.end() ? std::string() : it->second;
}

int FaultFs::open(const std::string& path, int flags, mode_t mode) {
  if (int e = check(Op::kOpen, path)) return e;
  const int fd = real_->open(path, flags, mode);
  if (fd >= 0) {
    std::lock_guard l(mu_);
    paths_[fd] = path;
  }
  return fd;
}

int FaultFs::close(int fd) {
  const std::string path = path_of(fd);
  {
    std::lock_guard l(mu_);
    paths_.erase(fd);  // before the close: the number may be reused at once
  }
  if (int e = check(Op::kClose, path)) {
    (void)real_->close(fd);  // as Linux: the descriptor is gone whatever close says
    return e;
  }
  return real_->close(fd);
}

ssize_t FaultFs::pread(int fd, void* buf, size_t n, uint64_t off) {
  const std::string path = path_of(fd);
  if (int e = check(Op::kPread, path)) return e;
  const ssize_t r = real_->pread(fd, buf, n, off);
  bool flip;
  {
    std::lock_guard l(mu_);
    flip = corrupting_ && path.find(corrupt_) != std::string::npos;
  }
  if (flip && r > 0) static_cast<char*>(buf)[r / 2] ^= 0x5a;
  return r;
}

ssize_t FaultFs::pwrite(int fd, const void* buf, size_t n, uint64_t off) {
  if (int e = check(Op::kPwrite, path_of(fd))) return e;
  size_t cap;
  {
    std::lock_guard l(mu_);
    cap = short_;
  }
  return real_->pwrite(fd, buf, cap && n > cap ? cap : n, off);
}

int FaultFs::fdatasync(int fd) {
  if (int e = check(Op::kFdatasync, path_of(fd))) return e;
  return real_->fdatasync(fd);
}

int FaultFs::fsync(int fd) {
  if (int e = check(Op::kFsync, path_of(fd))) return e;
  return real_->fsync(fd);
}

int FaultFs::fallocate(int fd, uint64_t off, uint64_t len) {
  if (int e = check(Op::kFallocate, path_of(fd))) return e;
  return real_->fallocate(fd, off, len);
}

int FaultFs::ftruncate(int fd, uint64_t len) {
  if (int e = check(Op::kFtruncate, path_of(fd))) return e;
  return real_->ftruncate(fd, len);
}

int FaultFs::fchmod(int fd, mode_t mode) {
  if (int e = check(Op::kFchmod, path_of(fd))) return e;
  return real_->fchmod(fd, mode);
}

int FaultFs::fstat(int fd, struct stat* st) {
  if (int e = check(Op::kFstat, path_of(fd))) return e;
  return real_->fstat(fd, st);
}

int FaultFs::rename(const std::string& from, const std::string& to) {
  if (int e = check(Op::kRename, from)) return e;
  return real_->rename(from, to);
}

int FaultFs::unlink(const std::string& path) {
  if (int e = check(Op::kUnlink, path)) return e;
  return real_->unlink(path);
}

int FaultFs::mkdir(const std::string& path, mode_t mode) {
  if (int e = check(Op::kMkdir, path)) return e;
  return real_->mkdir(path, mode);
}

int FaultFs::list(const std::string& dir, std::vector<std::string>* names) {
  if (int e = check(Op::kList, dir)) return e;
  return real_->list(dir, names);
}

}  // namespace kvfs
