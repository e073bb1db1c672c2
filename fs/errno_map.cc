// SPDX-License-Identifier: Apache-2.0
#include "fs/errno_map.h"

#include <cerrno>

namespace kvfs {

int to_errno(const Status& s) {
  using C = Status::Code;
  switch (s.code()) {
    case C::kOk: return 0;
    case C::kNotFound: return ENOENT;
    case C::kExists: return EEXIST;
    case C::kNotDir: return ENOTDIR;
    case C::kIsDir: return EISDIR;
    case C::kNotEmpty: return ENOTEMPTY;
    case C::kNameTooLong: return ENAMETOOLONG;
    case C::kInvalid: return EINVAL;
    case C::kNoSpace:
    case C::kAtCapacity: return ENOSPC;
    case C::kIOError: return EIO;
    case C::kCorruption: return EIO;
    case C::kFileTooBig: return EFBIG;
    case C::kNoData: return ENODATA;
    case C::kRange: return ERANGE;
    case C::kPermission: return EPERM;
    case C::kAccess: return EACCES;
    case C::kBusy: return EBUSY;
    case C::kNotSupported: return EOPNOTSUPP;
    case C::kReadOnly: return EROFS;
    case C::kStale: return ESTALE;
    case C::kTimedOut: return EIO;
  }
  return EIO;
}

}  // namespace kvfs
