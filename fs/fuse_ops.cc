// SPDX-License-Identifier: Apache-2.0
// The one place that fills fuse_lowlevel_ops.
#include "fs/fuse_ops.h"

namespace kvfs {

const fuse_lowlevel_ops& kvfs_ops() {
  static const fuse_lowlevel_ops ops = [] {
    fuse_lowlevel_ops o{};
    o.init = op_init;
    o.lookup = op_lookup;
    o.forget = op_forget;
    o.forget_multi = op_forget_multi;
    o.getattr = op_getattr;
    o.setattr = op_setattr;
    o.readlink = op_readlink;
    o.mknod = op_mknod;
    o.mkdir = op_mkdir;
    o.unlink = op_unlink;
    o.rmdir = op_rmdir;
    o.symlink = op_symlink;
    o.rename = op_rename;
    o.link = op_link;
    o.open = op_open;
    o.read = op_read;
    o.write = op_write;
    o.flush = op_flush;
    o.release = op_release;
    o.fsync = op_fsync;
    o.opendir = op_opendir;
    o.readdir = op_readdir;
    o.releasedir = op_releasedir;
    o.fsyncdir = op_fsyncdir;
    o.statfs = op_statfs;
    o.setxattr = op_setxattr;
    o.getxattr = op_getxattr;
    o.listxattr = op_listxattr;
    o.removexattr = op_removexattr;
    o.access = op_access;
    o.create = op_create;
    o.fallocate = op_fallocate;
    return o;
  }();
  return ops;
}

}  // namespace kvfs
