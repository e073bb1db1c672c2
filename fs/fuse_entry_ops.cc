// SPDX-License-Identifier: Apache-2.0
// Names, attributes and directories.
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/util/log.h"
#include "fs/errno_map.h"
#include "fs/fuse_ops.h"

namespace kvfs {

FsContext& ctx(fuse_req_t req) {
  return *static_cast<FsContext*>(fuse_req_userdata(req));
}

void reply_err(fuse_req_t req, const Status& s) {
  fuse_reply_err(req, to_errno(s));
}

Caller caller(fuse_req_t req) {
  const fuse_ctx* c = fuse_req_ctx(req);
  return Caller{c->uid, c->gid};
}

std::optional<Attr> clear_privs_after_write(fuse_req_t req, fuse_ino_t ino, bool o_trunc) {
  const fuse_ctx* c = fuse_req_ctx(req);
  // uid 0 stands for CAP_FSETID, as in op_access.
  if (c->uid == 0 || ino == kControlIno) return std::nullopt;
  auto a = ctx(req).store->getattr(ino);
  if (!a.ok() || !S_ISREG(a->mode) || !(a->mode & (S_ISUID | S_ISGID))) return std::nullopt;
  const bool group_x = a->mode & S_IXGRP;
  uint32_t mode = a->mode;
  if (o_trunc) {
    mode &= ~S_ISUID;
    if (group_x) mode &= ~S_ISGID;
  }
  if ((mode & S_ISGID) && !group_x && c->gid != a->gid) {
    std::vector<gid_t> groups(64);
    int n = fuse_req_getgroups(req, static_cast<int>(groups.size()), groups.data());
    if (n > static_cast<int>(groups.size())) {
      groups.resize(static_cast<size_t>(n));
      n = fuse_req_getgroups(req, n, groups.data());
    }
    // Groups unknown (n < 0): cleared, the safe side.
    const auto end = groups.begin() + std::clamp(n, 0, static_cast<int>(groups.size()));
    if (std::find(groups.begin(), end, a->gid) == end) mode &= ~S_ISGID;
  }
  if (mode == a->mode) return std::nullopt;
  SetAttrRequest r;
  r.set_mode = true;
  r.mode = mode;
  auto res = ctx(req).store->setattr(ino, r, nullptr);
  if (!res.ok()) return std::nullopt;
  return *res;
}

static timespec ts(int64_t ns) {
  return timespec{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
}

void fill_stat(const Attr& a, struct stat* st) {
  std::memset(st, 0, sizeof(*st));
  st->st_ino = a.ino;
  st->st_mode = a.mode;
  st->st_nlink = a.nlink;
  st->st_uid = a.uid;
  st->st_gid = a.gid;
  st->st_rdev = a.rdev;
  st->st_size = static_cast<off_t>(a.size);
  st->st_blocks = static_cast<blkcnt_t>(a.blocks);
  // A large st_blksize makes stdio and cp issue 1 MiB requests.
  st->st_blksize = 1 << 20;
  st->st_atim = ts(a.atime_ns);
  st->st_mtim = ts(a.mtime_ns);
  st->st_ctim = ts(a.ctime_ns);
}

void reply_entry(fuse_req_t req, const Attr& a) {
  fuse_entry_param e;
  std::memset(&e, 0, sizeof(e));
  e.ino = a.ino;
  e.generation = 1;
  e.attr_timeout = ctx(req).cfg.attr_timeout;
  e.entry_timeout = ctx(req).cfg.entry_timeout;
  fill_stat(a, &e.attr);
  fuse_reply_entry(req, &e);
}

void op_init(void* userdata, fuse_conn_info* conn) {
  // 1 MiB requests end to end (the kernel allows 256 pages per request).
  conn->max_write = 1 << 20;
  conn->max_readahead = 1 << 20;
  conn->max_background = 64;
  conn->congestion_threshold = 48;
  auto want = [conn](unsigned cap) {
    if (conn->capable & cap) conn->want |= cap;
  };
  want(FUSE_CAP_ASYNC_READ);
  want(FUSE_CAP_ASYNC_DIO);
  want(FUSE_CAP_ATOMIC_O_TRUNC);
  want(FUSE_CAP_PARALLEL_DIROPS);
  want(FUSE_CAP_CACHE_SYMLINKS);
  // libfuse 3.14 falls back for good to a slow path when a 1 MiB splice does
  // not fit its pipe: reply from memory instead.
  conn->want &= ~(FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
  // Measured: no gain for large sequential writes, and it would hide writes
  // from the RAM tier's accounting until the kernel flushes them.
  conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
  // Pages stay valid until kvfs says otherwise (keep_cache + notify_inval).
  conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
  (void)userdata;  // the "mounted" line is logged by the daemon once mounted
}

Attr control_attr() {
  Attr a;
  a.ino = kControlIno;
  a.mode = S_IFREG | 0666;
  a.nlink = 1;
  a.uid = ::getuid();
  a.gid = ::getgid();
  return a;
}

void op_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  guarded(req, [&] {
    ScopedLatency t(ctx(req).lat.lookup);
    if (is_control(parent, name)) return reply_entry(req, control_attr());
    auto r = ctx(req).store->lookup(parent, name);
    if (r.ok()) return reply_entry(req, *r);
    if (r.status().code() == Status::Code::kNotFound && ctx(req).cfg.negative_timeout > 0) {
      // A cached negative entry: vLLM polls absent chunks every scheduler step.
      fuse_entry_param e;
      std::memset(&e, 0, sizeof(e));
      e.entry_timeout = ctx(req).cfg.negative_timeout;
      fuse_reply_entry(req, &e);
      return;
    }
    reply_err(req, r.status());
  });
}

void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  try {
    if (ino != kControlIno) ctx(req).store->forget(ino, nlookup);
  } catch (...) {
  }
  fuse_reply_none(req);
}

void op_forget_multi(fuse_req_t req, size_t count, fuse_forget_data* forgets) {
  try {
    for (size_t i = 0; i < count; ++i)
      if (forgets[i].ino != kControlIno) ctx(req).store->forget(forgets[i].ino, forgets[i].nlookup);
  } catch (...) {
  }
  fuse_reply_none(req);
}

void op_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  guarded(req, [&] {
    auto r = ino == kControlIno ? Result<Attr>(control_attr()) : ctx(req).store->getattr(ino);
    if (!r.ok()) return reply_err(req, r.status());
    struct stat st;
    fill_stat(*r, &st);
    fuse_reply_attr(req, &st, ctx(req).cfg.attr_timeout);
  });
}

void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info* fi) {
  guarded(req, [&] {
    SetAttrRequest r;
    r.set_mode = to_set & FUSE_SET_ATTR_MODE;
    r.set_uid = to_set & FUSE_SET_ATTR_UID;
    r.set_gid = to_set & FUSE_SET_ATTR_GID;
    r.set_size = to_set & FUSE_SET_ATTR_SIZE;
    r.set_atime = to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_ATIME_NOW);
    r.set_mtime = to_set & (FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_MTIME_NOW);
    r.atime_now = to_set & FUSE_SET_ATTR_ATIME_NOW;
    r.mtime_now = to_set & FUSE_SET_ATTR_MTIME_NOW;
    r.mode = attr->st_mode;
    r.uid = attr->st_uid;
    r.gid = attr->st_gid;
    r.size = static_cast<uint64_t>(attr->st_size);
    r.atime_ns = int64_t(attr->st_atim.tv_sec) * 1000000000 + attr->st_atim.tv_nsec;
    r.mtime_ns = int64_t(attr->st_mtim.tv_sec) * 1000000000 + attr->st_mtim.tv_nsec;
    if (attr->st_size < 0 && r.set_size) return (void)fuse_reply_err(req, EINVAL);
    if (ino == kControlIno) {
      struct stat st;
      fill_stat(control_attr(), &st);
      return (void)fuse_reply_attr(req, &st, 0);
    }
    auto* fh = fi ? reinterpret_cast<OpenFile*>(fi->fh) : nullptr;
    auto res = ctx(req).store->setattr(ino, r, fh);
    if (!res.ok()) return reply_err(req, res.status());
    if (r.set_size) {
      if (auto cleared = clear_privs_after_write(req, ino, false)) res = *cleared;
    }
    struct stat st;
    fill_stat(*res, &st);
    fuse_reply_attr(req, &st, ctx(req).cfg.attr_timeout);
  });
}

void op_readlink(fuse_req_t req, fuse_ino_t ino) {
  guarded(req, [&] {
    auto r = ctx(req).store->readlink(ino);
    if (!r.ok()) return reply_err(req, r.status());
    fuse_reply_readlink(req, r->c_str());
  });
}

void op_mknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev) {
  guarded(req, [&] {
    if (is_control(parent, name)) return (void)fuse_reply_err(req, EEXIST);
    // The kernel sends 32 bits (new_encode_dev); st_rdev gives them back.
    auto r = ctx(req).store->mknod(parent, name, mode, static_cast<uint32_t>(rdev), caller(req));
    if (!r.ok()) return reply_err(req, r.status());
    reply_entry(req, *r);
  });
}

void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  guarded(req, [&] {
    if (is_control(parent, name)) return (void)fuse_reply_err(req, EEXIST);
    auto r = ctx(req).store->mkdir(parent, name, mode, caller(req));
    if (!r.ok()) return reply_err(req, r.status());
    reply_entry(req, *r);
  });
}

void op_unlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  guarded(req, [&] {
    if (is_control(parent, name)) return (void)fuse_reply_err(req, EPERM);
    reply_err(req, ctx(req).store->unlink(parent, name));
  });
}

void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  guarded(req, [&] { reply_err(req, ctx(req).store->rmdir(parent, name)); });
}

void op_symlink(fuse_req_t req, const char* link, fuse_ino_t parent, const char* name) {
  guarded(req, [&] {
    if (is_control(parent, name)) return (void)fuse_reply_err(req, EEXIST);
    auto r = ctx(req).store->symlink(parent, name, link, caller(req));
    if (!r.ok()) return reply_err(req, r.status());
    reply_entry(req, *r);
  });
}

void op_rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent,
               const char* newname, unsigned int flags) {
  guarded(req, [&] {
    ScopedLatency t(ctx(req).lat.rename);
    if (is_control(parent, name) || is_control(newparent, newname))
      return (void)fuse_reply_err(req, EPERM);
    reply_err(req, ctx(req).store->rename(parent, name, newparent, newname, flags));
  });
}

void op_link(fuse_req_t req, fuse_ino_t, fuse_ino_t, const char*) {
  // One name per inode keeps snapshots self-describing; no client needs links.
  fuse_reply_err(req, EPERM);
}

void op_opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  guarded(req, [&] {
    auto r = ctx(req).store->getattr(ino);
    if (!r.ok()) return reply_err(req, r.status());
    if (!S_ISDIR(r->mode)) return (void)fuse_reply_err(req, ENOTDIR);
    fi->fh = 0;
    fuse_reply_open(req, fi);
  });
}

void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  guarded(req, [&] {
    // Not zeroed: the kernel asks for up to max_pages (1 MiB), and zeroing
    // that for every call faulted in 256 fresh pages per readdir, when a
    // listing touches only the bytes its entries fill.
    std::unique_ptr<char[]> mem(new char[size]);
    char* const buf = mem.get();
    size_t used = 0;
    Status s = ctx(req).store->readdir(
        ino, static_cast<uint64_t>(off),
        [&](std::string_view name, uint64_t child, uint32_t mode, uint64_t next) {
          struct stat st;
          std::memset(&st, 0, sizeof(st));
          st.st_ino = child;
          st.st_mode = mode;
          std::string n(name);
          size_t need = fuse_add_direntry(req, buf + used, size - used, n.c_str(), &st,
                                          static_cast<off_t>(next));
          if (need > size - used) return false;
          used += need;
          return true;
        });
    if (!s.ok()) return reply_err(req, s);
    fuse_reply_buf(req, buf, used);
  });
}

void op_releasedir(fuse_req_t req, fuse_ino_t, fuse_file_info*) {
  fuse_reply_err(req, 0);
}

// fsync of a directory makes everything written so far durable: names and
// data of every file, like syncfs() (which FUSE does not forward). Cheap when
// nothing is dirty; the offloaders never call it on their hot path.
void op_fsyncdir(fuse_req_t req, fuse_ino_t, int, fuse_file_info*) {
  guarded(req, [&] { reply_err(req, ctx(req).store->flush_all()); });
}

void op_statfs(fuse_req_t req, fuse_ino_t) {
  guarded(req, [&] {
    StatFs s = ctx(req).store->admin().statfs();
    struct statvfs v;
    std::memset(&v, 0, sizeof(v));
    v.f_bsize = 4096;
    v.f_frsize = 4096;
    v.f_blocks = s.total_bytes / 4096;
    v.f_bfree = s.free_bytes / 4096;
    v.f_bavail = s.avail_bytes / 4096;
    v.f_files = s.files + s.files_free;
    v.f_ffree = s.files_free;
    v.f_favail = s.files_free;
    v.f_namemax = kNameMax;
    fuse_reply_statfs(req, &v);
  });
}

// Only reached without default_permissions: a plain owner/group/other check.
void op_access(fuse_req_t req, fuse_ino_t ino, int mask) {
  guarded(req, [&] {
    if (ino == kControlIno) return (void)fuse_reply_err(req, 0);
    auto r = ctx(req).store->getattr(ino);
    if (!r.ok()) return reply_err(req, r.status());
    if (mask == F_OK) return (void)fuse_reply_err(req, 0);
    const fuse_ctx* c = fuse_req_ctx(req);
    unsigned bits;
    if (c->uid == 0) {
      bool any_x = (r->mode & 0111) || S_ISDIR(r->mode);
      return (void)fuse_reply_err(req, (mask & X_OK) && !any_x ? EACCES : 0);
    }
    if (c->uid == r->uid)
      bits = (r->mode >> 6) & 7;
    else if (c->gid == r->gid)
      bits = (r->mode >> 3) & 7;
    else
      bits = r->mode & 7;
    unsigned want = ((mask & R_OK) ? 4 : 0) | ((mask & W_OK) ? 2 : 0) | ((mask & X_OK) ? 1 : 0);
    fuse_reply_err(req, (bits & want) == want ? 0 : EACCES);
  });
}

}  // namespace kvfs
