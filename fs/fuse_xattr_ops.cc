// SPDX-License-Identifier: Apache-2.0
// Extended attributes (vLLM keeps a CRC32C in user.vllm.kv_crc32c).
#include <cerrno>
#include <cstring>
#include <string>

#include "fs/errno_map.h"
#include "fs/fuse_ops.h"

namespace kvfs {

void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value, size_t size,
                 int flags) {
  guarded(req, [&] {
    if (ino == kControlIno) return (void)fuse_reply_err(req, EPERM);
    reply_err(req, ctx(req).store->setxattr(ino, name, std::string_view(value, size), flags));
  });
}

void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  guarded(req, [&] {
    if (ino == kControlIno) return (void)fuse_reply_err(req, ENODATA);
    auto r = ctx(req).store->getxattr(ino, name);
    if (!r.ok()) return reply_err(req, r.status());
    if (size == 0) return (void)fuse_reply_xattr(req, r->size());
    if (r->size() > size) return (void)fuse_reply_err(req, ERANGE);
    fuse_reply_buf(req, r->data(), r->size());
  });
}

void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  guarded(req, [&] {
    if (ino == kControlIno)
      return (void)(size ? fuse_reply_buf(req, nullptr, 0) : fuse_reply_xattr(req, 0));
    auto r = ctx(req).store->listxattr(ino);
    if (!r.ok()) return reply_err(req, r.status());
    std::string out;
    for (const auto& n : *r) {
      out += n;
      out.push_back('\0');
    }
    if (size == 0) return (void)fuse_reply_xattr(req, out.size());
    if (out.size() > size) return (void)fuse_reply_err(req, ERANGE);
    fuse_reply_buf(req, out.data(), out.size());
  });
}

void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
  guarded(req, [&] {
    if (ino == kControlIno) return (void)fuse_reply_err(req, EPERM);
    reply_err(req, ctx(req).store->removexattr(ino, name));
  });
}

}  // namespace kvfs
