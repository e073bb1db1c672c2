// SPDX-License-Identifier: Apache-2.0
// Status and Result: how core reports failure without exceptions.
//
// Core never throws across its API. A Status carries a POSIX-flavoured code
// and a message for the log; fs/errno.cc turns the code into an errno once,
// at the FUSE edge. Modelled on rocksdb::Status.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace kvfs {

class [[nodiscard]] Status {
 public:
  enum class Code : unsigned char {
    kOk,
    kNotFound,      // ENOENT
    kExists,        // EEXIST
    kNotDir,        // ENOTDIR
    kIsDir,         // EISDIR
    kNotEmpty,      // ENOTEMPTY
    kNameTooLong,   // ENAMETOOLONG
    kInvalid,       // EINVAL
    kNoSpace,       // ENOSPC
    kIOError,       // EIO
    kCorruption,    // EIO, plus the block is dropped
    kFileTooBig,    // EFBIG
    kNoData,        // ENODATA (xattr)
    kRange,         // ERANGE (xattr buffer)
    kPermission,    // EPERM
    kAccess,        // EACCES
    kBusy,          // EBUSY
    kNotSupported,  // EOPNOTSUPP
    kReadOnly,      // EROFS
    kStale,         // ESTALE: the inode went since the kernel looked it up
    kTimedOut,      // EIO: the backing dir did not answer within io_timeout
    kAtCapacity,    // ENOSPC: at the cap (not a full filesystem), nothing evictable
  };

  Status() = default;
  static Status OK() { return Status(); }
  static Status NotFound(std::string m = {}) { return {Code::kNotFound, std::move(m)}; }
  static Status Exists(std::string m = {}) { return {Code::kExists, std::move(m)}; }
  static Status NotDir(std::string m = {}) { return {Code::kNotDir, std::move(m)}; }
  static Status IsDir(std::string m = {}) { return {Code::kIsDir, std::move(m)}; }
  static Status NotEmpty(std::string m = {}) { return {Code::kNotEmpty, std::move(m)}; }
  static Status NameTooLong(std::string m = {}) { return {Code::kNameTooLong, std::move(m)}; }
  static Status Invalid(std::string m = {}) { return {Code::kInvalid, std::move(m)}; }
  static Status NoSpace(std::string m = {}) { return {Code::kNoSpace, std::move(m)}; }
  static Status IOError(std::string m = {}) { return {Code::kIOError, std::move(m)}; }
  static Status Corruption(std::string m = {}) { return {Code::kCorruption, std::move(m)}; }
  static Status FileTooBig(std::string m = {}) { return {Code::kFileTooBig, std::move(m)}; }
  static Status NoData(std::string m = {}) { return {Code::kNoData, std::move(m)}; }
  static Status Range(std::string m = {}) { return {Code::kRange, std::move(m)}; }
  static Status Permission(std::string m = {}) { return {Code::kPermission, std::move(m)}; }
  static Status Access(std::string m = {}) { return {Code::kAccess, std::move(m)}; }
  static Status Busy(std::string m = {}) { return {Code::kBusy, std::move(m)}; }
  static Status NotSupported(std::string m = {}) { return {Code::kNotSupported, std::move(m)}; }
  static Status ReadOnly(std::string m = {}) { return {Code::kReadOnly, std::move(m)}; }
  static Status Stale(std::string m = {}) { return {Code::kStale, std::move(m)}; }
  static Status TimedOut(std::string m = {}) { return {Code::kTimedOut, std::move(m)}; }
  static Status AtCapacity(std::string m = {}) { return {Code::kAtCapacity, std::move(m)}; }
  // From a syscall's errno, for the few places core calls the OS directly.
  static Status FromErrno(int err, std::string m);

  // The same code with context in front of the message (what failed, then why).
  Status Prefixed(const std::string& context) const {
    return ok() ? *this : Status(code_, context + ": " + msg_);
  }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return msg_; }
  std::string ToString() const;

 private:
  Status(Code c, std::string m) : code_(c), msg_(std::move(m)) {}
  Code code_ = Code::kOk;
  std::string msg_;
};

// A value or the Status that explains its absence.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T v) : v_(std::move(v)) {}       // NOLINT: implicit by design
  Result(Status s) : v_(std::move(s)) {}  // NOLINT
  bool ok() const { return v_.index() == 0; }
  T& value() { return std::get<0>(v_); }
  const T& value() const { return std::get<0>(v_); }
  T& operator*() { return value(); }
  T* operator->() { return &value(); }
  Status status() const { return ok() ? Status::OK() : std::get<1>(v_); }

 private:
  std::variant<T, Status> v_;
};

#define KVFS_RETURN_IF_ERROR(expr) \
  do {                             \
    ::kvfs::Status _s = (expr);    \
    if (!_s.ok()) return _s;       \
  } while (0)

}  // namespace kvfs
