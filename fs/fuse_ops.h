// SPDX-License-Identifier: Apache-2.0
// The FUSE low-level adapter: one file per family of operations
// (fuse_entry_ops.cc, fuse_file_ops.cc, fuse_xattr_ops.cc), one place that
// fills the operations table (fuse_ops.cc).
//
// Every callback replies exactly once and lets no exception out: core
// reports failure as Status, turned into an errno by reply_err().
#pragma once

// 312, not 34: below 312 libfuse 3.14 maps fuse_session_loop_mt to its 3.2 entry
// point, which misreads fuse_loop_cfg_create()'s config (no idle threads: a new
// thread, buffer and /dev/fuse clone per request).
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <cstring>
#include <optional>

#include "core/store/block_store.h"
#include "fs/control.h"
#include "fs/options.h"

namespace kvfs {

// Shared by all callbacks (fuse_req_userdata). Immutable after mount.
struct FsContext {
  BlockStore* store = nullptr;
  FsConfig cfg;
  OpLatencies lat;
};

// The control file's name is reserved at the root.
inline bool is_control(fuse_ino_t parent, const char* name) {
  return parent == FUSE_ROOT_ID && std::strcmp(name, kControlName) == 0;
}
Attr control_attr();

FsContext& ctx(fuse_req_t req);
void reply_err(fuse_req_t req, const Status& s);
void fill_stat(const Attr& a, struct stat* st);
void reply_entry(fuse_req_t req, const Attr& a);
Caller caller(fuse_req_t req);
// After a write or truncate by a caller other than root (CAP_FSETID):
// clears set-user-ID and set-group-ID as local filesystems do (the VFS's
// should_remove_suid). On a write or a truncate the kernel's FUSE layer
// clears set-user-ID, and set-group-ID with group execute, by itself, but
// not set-group-ID without group execute of a writer outside the file's
// group; on an open with O_TRUNC (o_trunc: kvfs truncates, atomic_o_trunc)
// it clears nothing. Returns the new attributes when the mode changed.
std::optional<Attr> clear_privs_after_write(fuse_req_t req, fuse_ino_t ino, bool o_trunc);

// Runs fn, turning an escaped exception (bad_alloc) into EIO/ENOMEM.
template <typename Fn>
void guarded(fuse_req_t req, Fn&& fn) noexcept {
  try {
    fn();
  } catch (const std::bad_alloc&) {
    fuse_reply_err(req, ENOMEM);
  } catch (...) {
    fuse_reply_err(req, EIO);
  }
}

// fuse_entry_ops.cc
void op_init(void* userdata, fuse_conn_info* conn);
void op_lookup(fuse_req_t req, fuse_ino_t parent, const char* name);
void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup);
void op_forget_multi(fuse_req_t req, size_t count, fuse_forget_data* forgets);
void op_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info* fi);
void op_readlink(fuse_req_t req, fuse_ino_t ino);
void op_mknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev);
void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode);
void op_unlink(fuse_req_t req, fuse_ino_t parent, const char* name);
void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char* name);
void op_symlink(fuse_req_t req, const char* link, fuse_ino_t parent, const char* name);
void op_rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent,
               const char* newname, unsigned int flags);
void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname);
void op_opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi);
void op_releasedir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
void op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, fuse_file_info* fi);
void op_statfs(fuse_req_t req, fuse_ino_t ino);
void op_access(fuse_req_t req, fuse_ino_t ino, int mask);

// fuse_file_ops.cc
void op_create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
               fuse_file_info* fi);
void op_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi);
void op_write(fuse_req_t req, fuse_ino_t ino, const char* buf, size_t size, off_t off,
              fuse_file_info* fi);
void op_flush(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
void op_release(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, fuse_file_info* fi);
void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
                  fuse_file_info* fi);

// fuse_xattr_ops.cc
void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value, size_t size,
                 int flags);
void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size);
void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size);
void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char* name);

const fuse_lowlevel_ops& kvfs_ops();

}  // namespace kvfs
