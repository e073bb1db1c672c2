// SPDX-License-Identifier: Apache-2.0
// nfsemu's passthrough: every request is done on the source directory with
// the *at() calls relative to an O_PATH descriptor per inode, then pays its
// modelled cost (nfsemu_model.cc), then replies.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "bench/nfsemu_pt.h"

namespace nfsemu {

Inode g_root;

namespace {
std::mutex g_mu;
std::map<std::pair<dev_t, ino_t>, Inode*> g_inodes;  // guarded by g_mu
}  // namespace

// An aligned per-thread buffer, for O_DIRECT and as the read buffer.
char* io_buffer(size_t size) {
  thread_local std::unique_ptr<char, decltype(&std::free)> buf(nullptr, &std::free);
  thread_local size_t cap = 0;
  if (size > cap) {
    void* p = nullptr;
    const size_t want = std::max(size, kMaxIo);
    if (posix_memalign(&p, kAlign, want) != 0) return nullptr;
    buf.reset(static_cast<char*>(p));
    cap = want;
  }
  return buf.get();
}

void reply_err(fuse_req_t req, int err) {
  if (err) count_error();
  fuse_reply_err(req, err);
}

int do_lookup(Inode* parent, const char* name, fuse_entry_param* e) {
  std::memset(e, 0, sizeof(*e));
  e->attr_timeout = e->entry_timeout = config().attr_timeout;
  const int fd = openat(parent->fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return errno;
  if (fstatat(fd, "", &e->attr, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0) {
    const int err = errno;
    close(fd);
    return err;
  }
  // Allocated before the lock: a throw leaves the table as it was.
  auto made = std::make_unique<Inode>(Inode{fd, e->attr.st_dev, e->attr.st_ino, 0});
  std::unique_lock l(g_mu);
  auto [it, fresh] = g_inodes.try_emplace({e->attr.st_dev, e->attr.st_ino}, made.get());
  if (fresh) made.release();
  Inode* in = it->second;
  ++in->nlookup;
  l.unlock();
  if (!fresh) close(fd);  // made goes with it; its fd was this one
  e->ino = reinterpret_cast<fuse_ino_t>(in);
  return 0;
}

namespace {

int stat_inode(const Inode* in, struct stat* st) {
  return fstatat(in->fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 ? 0 : errno;
}

void forget_one(fuse_ino_t ino, uint64_t n) {
  if (ino == FUSE_ROOT_ID) return;
  Inode* in = inode(ino);
  std::unique_lock l(g_mu);
  in->nlookup = in->nlookup > n ? in->nlookup - n : 0;
  if (in->nlookup > 0) return;
  g_inodes.erase({in->dev, in->ino});
  l.unlock();
  close(in->fd);
  delete in;
}

// Replies to a request that made a new name (mkdir, symlink, link).
void reply_new_entry(fuse_req_t req, Op op, unsigned rtts, int err, Inode* parent,
                     const char* name) {
  fuse_entry_param e;
  if (err == 0) err = do_lookup(parent, name, &e);
  pay(op, rtts);
  if (err) return reply_err(req, err);
  fuse_reply_entry(req, &e);
}

void em_init(void*, fuse_conn_info* conn) {
  conn->max_write = kMaxIo;
  conn->max_readahead = kMaxIo;
  conn->max_background = 64;
  conn->congestion_threshold = 48;
  auto want = [conn](unsigned cap) {
    if (conn->capable & cap) conn->want |= cap;
  };
  want(FUSE_CAP_ASYNC_READ);
  want(FUSE_CAP_ASYNC_DIO);
  want(FUSE_CAP_ATOMIC_O_TRUNC);
  want(FUSE_CAP_PARALLEL_DIROPS);
  conn->want &= ~(FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
  conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
  if (config().writeback)
    want(FUSE_CAP_WRITEBACK_CACHE);
  else
    conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
}

void em_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  fuse_entry_param e;
  const int err = do_lookup(inode(parent), name, &e);
  pay(kLookup, 1);
  if (err == ENOENT) {
    // Cached like an NFS client's negative dentry (lookupcache=all).
    e.ino = 0;
    return (void)fuse_reply_entry(req, &e);
  }
  if (err) return reply_err(req, err);
  fuse_reply_entry(req, &e);
}

void em_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  forget_one(ino, nlookup);
  pay(kForget, 0);
  fuse_reply_none(req);
}

void em_forget_multi(fuse_req_t req, size_t count, fuse_forget_data* f) {
  for (size_t i = 0; i < count; ++i) forget_one(f[i].ino, f[i].nlookup);
  pay(kForget, 0);
  fuse_reply_none(req);
}

void em_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  struct stat st;
  const int err = stat_inode(inode(ino), &st);
  pay(kGetattr, 1);
  if (err) return reply_err(req, err);
  fuse_reply_attr(req, &st, config().attr_timeout);
}

int do_setattr(Inode* in, struct stat* a, int to_set, fuse_file_info* fi) {
  const std::string p = proc_path(in->fd);
  const int fd = fi ? file(fi)->fd : -1;
  if (to_set & FUSE_SET_ATTR_MODE) {
    if ((fd >= 0 ? fchmod(fd, a->st_mode) : chmod(p.c_str(), a->st_mode)) != 0) return errno;
  }
  if (to_set & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) {
    const uid_t u = (to_set & FUSE_SET_ATTR_UID) ? a->st_uid : static_cast<uid_t>(-1);
    const gid_t g = (to_set & FUSE_SET_ATTR_GID) ? a->st_gid : static_cast<gid_t>(-1);
    if (fchownat(in->fd, "", u, g, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0) return errno;
  }
  if (to_set & FUSE_SET_ATTR_SIZE) {
    if ((fd >= 0 ? ftruncate(fd, a->st_size) : truncate(p.c_str(), a->st_size)) != 0) return errno;
  }
  if (to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME)) {
    timespec tv[2];
    tv[0].tv_nsec = tv[1].tv_nsec = UTIME_OMIT;
    if (to_set & FUSE_SET_ATTR_ATIME_NOW)
      tv[0].tv_nsec = UTIME_NOW;
    else if (to_set & FUSE_SET_ATTR_ATIME)
      tv[0] = a->st_atim;
    if (to_set & FUSE_SET_ATTR_MTIME_NOW)
      tv[1].tv_nsec = UTIME_NOW;
    else if (to_set & FUSE_SET_ATTR_MTIME)
      tv[1] = a->st_mtim;
    if ((fd >= 0 ? futimens(fd, tv) : utimensat(AT_FDCWD, p.c_str(), tv, 0)) != 0) return errno;
  }
  return 0;
}

void em_setattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info* fi) {
  Inode* in = inode(ino);
  int err = do_setattr(in, attr, to_set, fi);
  struct stat st;
  if (err == 0) err = stat_inode(in, &st);
  pay(kSetattr, 1);  // SETATTR returns the new attributes: one round trip
  if (err) return reply_err(req, err);
  fuse_reply_attr(req, &st, config().attr_timeout);
}

void em_readlink(fuse_req_t req, fuse_ino_t ino) {
  char buf[PATH_MAX + 1];
  const ssize_t n = readlinkat(inode(ino)->fd, "", buf, sizeof(buf) - 1);
  const int err = n < 0 ? errno : (n == sizeof(buf) - 1 ? ENAMETOOLONG : 0);
  pay(kReadlink, 1);
  if (err) return reply_err(req, err);
  buf[n] = '\0';
  fuse_reply_readlink(req, buf);
}

void em_mkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  Inode* p = inode(parent);
  const int err = mkdirat(p->fd, name, mode) == 0 ? 0 : errno;
  reply_new_entry(req, kMkdir, 1, err, p, name);
}

void em_symlink(fuse_req_t req, const char* link, fuse_ino_t parent, const char* name) {
  Inode* p = inode(parent);
  const int err = symlinkat(link, p->fd, name) == 0 ? 0 : errno;
  reply_new_entry(req, kSymlink, 1, err, p, name);
}

void em_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname) {
  Inode* p = inode(newparent);
  // AT_EMPTY_PATH on linkat needs CAP_DAC_READ_SEARCH; the /proc link does not.
  const int err =
      linkat(AT_FDCWD, proc_path(inode(ino)->fd).c_str(), p->fd, newname, AT_SYMLINK_FOLLOW) == 0
          ? 0
          : errno;
  reply_new_entry(req, kLink, 1, err, p, newname);
}

void em_unlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  const int err = unlinkat(inode(parent)->fd, name, 0) == 0 ? 0 : errno;
  pay(kUnlink, 1);
  reply_err(req, err);
}

void em_rmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  const int err = unlinkat(inode(parent)->fd, name, AT_REMOVEDIR) == 0 ? 0 : errno;
  pay(kRmdir, 1);
  reply_err(req, err);
}

void em_rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent,
               const char* newname, unsigned int flags) {
  int err = 0;
  if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE))
    err = EINVAL;
  else if (renameat2(inode(parent)->fd, name, inode(newparent)->fd, newname, flags) != 0)
    err = errno;
  pay(kRename, 1);
  reply_err(req, err);
}

void em_statfs(fuse_req_t req, fuse_ino_t ino) {
  struct statvfs v;
  const int err = fstatvfs(inode(ino)->fd, &v) == 0 ? 0 : errno;
  pay(kStatfs, 1);
  if (err) return reply_err(req, err);
  fuse_reply_statfs(req, &v);
}

// ENOSYS makes the kernel answer access(2) itself from now on (existence is
// the lookup's), as an NFS client answers it from its access cache; checks
// that matter happen at the operation, against the daemon's credentials.
void em_access(fuse_req_t req, fuse_ino_t, int) {
  pay(kAccess, 0);
  fuse_reply_err(req, ENOSYS);
}

// No exception may unwind into libfuse's C frames: a request that throws
// (only allocation can) is answered ENOMEM.
template <typename F, F f>
struct Guard;
template <typename... A, void (*f)(fuse_req_t, A...)>
struct Guard<void (*)(fuse_req_t, A...), f> {
  static void call(fuse_req_t req, A... a) noexcept {
    try {
      f(req, a...);
    } catch (...) {
      reply_err(req, ENOMEM);
    }
  }
};
#define GUARD(fn) Guard<decltype(&fn), &fn>::call

}  // namespace

bool ops_init(const char* source) {
  g_root.fd = open(source, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (g_root.fd < 0) return false;
  struct stat st;
  if (fstat(g_root.fd, &st) != 0) return false;
  g_root.dev = st.st_dev;
  g_root.ino = st.st_ino;
  g_root.nlookup = 1;
  return true;
}

void ops_shutdown() {
  std::lock_guard l(g_mu);
  for (auto& [key, in] : g_inodes) {
    close(in->fd);
    delete in;
  }
  g_inodes.clear();
  if (g_root.fd >= 0) close(g_root.fd);
  g_root.fd = -1;
}

fuse_lowlevel_ops ops_table() {
  fuse_lowlevel_ops ops{};
  ops.init = em_init;
  ops.lookup = GUARD(em_lookup);
  ops.forget = em_forget;  // frees only: cannot throw, and must not reply
  ops.forget_multi = em_forget_multi;
  ops.getattr = GUARD(em_getattr);
  ops.setattr = GUARD(em_setattr);
  ops.readlink = GUARD(em_readlink);
  ops.mkdir = GUARD(em_mkdir);
  ops.symlink = GUARD(em_symlink);
  ops.link = GUARD(em_link);
  ops.unlink = GUARD(em_unlink);
  ops.rmdir = GUARD(em_rmdir);
  ops.rename = GUARD(em_rename);
  ops.create = GUARD(em_create);
  ops.open = GUARD(em_open);
  ops.read = GUARD(em_read);
  ops.write = GUARD(em_write);
  ops.flush = GUARD(em_flush);
  ops.release = GUARD(em_release);
  ops.fsync = GUARD(em_fsync);
  ops.opendir = GUARD(em_opendir);
  ops.readdir = GUARD(em_readdir);
  ops.releasedir = GUARD(em_releasedir);
  ops.fsyncdir = GUARD(em_fsyncdir);
  ops.statfs = GUARD(em_statfs);
  ops.fallocate = GUARD(em_fallocate);
  ops.access = GUARD(em_access);
  // No flock/getlk/setlk: the kernel emulates locks locally (kvfs.lock).
  return ops;
}

}  // namespace nfsemu
