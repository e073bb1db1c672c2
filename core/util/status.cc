// SPDX-License-Identifier: Apache-2.0
#include "core/util/status.h"

#include <cerrno>
#include <cstring>

namespace kvfs {

Status Status::FromErrno(int err, std::string m) {
  m += ": ";
  m += std::strerror(err);
  switch (err) {
    case ENOENT: return NotFound(std::move(m));
    case EEXIST: return Exists(std::move(m));
    case ENOSPC:
    case EDQUOT: return NoSpace(std::move(m));
    case EINVAL: return Invalid(std::move(m));
    case EACCES: return Access(std::move(m));
    case EPERM: return Permission(std::move(m));
    case EROFS: return ReadOnly(std::move(m));
    case EFBIG: return FileTooBig(std::move(m));
    case EBUSY:
    case EWOULDBLOCK: return Busy(std::move(m));
    default: return IOError(std::move(m));
  }
}

std::string Status::ToString() const {
  static const char* const kNames[] = {
      "OK",          "NotFound", "Exists",     "NotDir",    "IsDir",      "NotEmpty",
      "NameTooLong", "Invalid",  "NoSpace",    "IOError",   "Corruption", "FileTooBig",
      "NoData",      "Range",    "Permission", "Access",    "Busy",       "NotSupported",
      "ReadOnly",    "Stale",    "TimedOut",   "AtCapacity"};
  std::string s = kNames[static_cast<int>(code_)];
  if (!msg_.empty()) s += ": " + msg_;
  return s;
}

}  // namespace kvfs
