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

#include "bench/nfsemu.h"

namespace nfsemu {
namespace {

struct Inode {
  int fd = -1;  // O_PATH: names nothing, so renames of the file do not matter
  dev_t dev = 0;
  ino_t ino = 0;
  uint64_t nlookup = 0;  // guarded by g_mu
};

struct File {
  int fd = -1;
  bool direct = false;  // opened O_DIRECT: writes need an aligned buffer
};

struct Dir {
  DIR* dp = nullptr;
  off_t offset = 0;
  dirent* entry = nullptr;  // read but not yet replied (it did not fit)
  uint64_t bytes = 0;       // replied so far, for the READDIR round trips
};

std::mutex g_mu;
std::map<std::pair<dev_t, ino_t>, Inode*> g_inodes;  // guarded by g_mu
Inode g_root;

constexpr size_t kAlign = 4096;
constexpr size_t kMaxIo = 1u << 20;
// An NFS READDIR reply carries up to dircount bytes (32 KiB here); FUSE asks
// a page at a time, so a round trip is paid per 32 KiB of entries, not per call.
constexpr uint64_t kReaddirWindow = 32 << 10;

Inode* inode(fuse_ino_t ino) {
  return ino == FUSE_ROOT_ID ? &g_root : reinterpret_cast<Inode*>(ino);
}
File* file(fuse_file_info* fi) {
  return reinterpret_cast<File*>(fi->fh);
}
Dir* dir(fuse_file_info* fi) {
  return reinterpret_cast<Dir*>(fi->fh);
}

std::string proc_path(int fd) {
  return "/proc/self/fd/" + std::to_string(fd);
}

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

int stat_inode(const Inode* in, struct stat* st) {
  return fstatat(in->fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 ? 0 : errno;
}

// Looks name up under parent and takes a reference on its inode; 0 or errno.
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
  std::unique_lock l(g_mu);
  auto [it, fresh] = g_inodes.try_emplace({e->attr.st_dev, e->attr.st_ino}, nullptr);
  if (fresh) {
    it->second = new Inode{fd, e->attr.st_dev, e->attr.st_ino, 0};
  }
  Inode* in = it->second;
  ++in->nlookup;
  l.unlock();
  if (!fresh) close(fd);
  e->ino = reinterpret_cast<fuse_ino_t>(in);
  return 0;
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

// Opens path with flags; an fs that refuses O_DIRECT (tmpfs before 6.6) gets
// the open without it, as an NFS client accepts O_DIRECT on any export.
int open_file(int dirfd, const char* path, int flags, mode_t mode, File* f) {
  flags |= O_CLOEXEC;
  flags &= ~O_NOFOLLOW;
  f->fd = openat(dirfd, path, flags, mode);
  if (f->fd < 0 && errno == EINVAL && (flags & O_DIRECT))
    f->fd = openat(dirfd, path, flags & ~O_DIRECT, mode);
  if (f->fd < 0) return errno;
  f->direct = (fcntl(f->fd, F_GETFL) & O_DIRECT) != 0;
  return 0;
}

void em_create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
               fuse_file_info* fi) {
  Inode* p = inode(parent);
  auto f = std::make_unique<File>();
  // O_EXCL goes to the source fs as it came, so its EEXIST is the answer.
  int err = open_file(p->fd, name, fi->flags | O_CREAT, mode, f.get());
  fuse_entry_param e;
  if (err == 0) err = do_lookup(p, name, &e);
  // An OPEN with create: one round trip (plus LAYOUTGET on pNFS).
  pay(kCreate, 1 + config().layout_rtt);
  if (err) {
    if (f->fd >= 0) close(f->fd);
    return reply_err(req, err);
  }
  fi->fh = reinterpret_cast<uint64_t>(f.release());
  if (fuse_reply_create(req, &e, fi) != 0) {
    // The kernel will send no release for a create whose reply failed.
    File* lost = file(fi);
    close(lost->fd);
    delete lost;
  }
}

void em_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  auto f = std::make_unique<File>();
  const int err = open_file(AT_FDCWD, proc_path(inode(ino)->fd).c_str(),
                            fi->flags & ~(O_CREAT | O_EXCL | O_NOCTTY), 0, f.get());
  // Close-to-open: the client revalidates the attributes on every open (the
  // GETATTR of an NFSv4 OPEN compound), plus LAYOUTGET on pNFS.
  pay(kOpen, 1 + config().layout_rtt);
  if (err) return reply_err(req, err);
  fi->fh = reinterpret_cast<uint64_t>(f.release());
  if (fuse_reply_open(req, fi) != 0) {
    File* lost = file(fi);
    close(lost->fd);
    delete lost;
  }
}

void em_read(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi) {
  char* buf = io_buffer(size);
  if (!buf) return reply_err(req, ENOMEM);
  const ssize_t n = pread(file(fi)->fd, buf, size, off);
  const int err = n < 0 ? errno : 0;
  pay_data(kRead, n < 0 ? 0 : static_cast<uint64_t>(n));
  if (err) return reply_err(req, err);
  fuse_reply_buf(req, buf, static_cast<size_t>(n));
}

void em_write(fuse_req_t req, fuse_ino_t, const char* data, size_t size, off_t off,
              fuse_file_info* fi) {
  File* f = file(fi);
  // libfuse's payload follows the request headers: not aligned for O_DIRECT.
  if (f->direct && reinterpret_cast<uintptr_t>(data) % kAlign != 0) {
    char* buf = io_buffer(size);
    if (!buf) return reply_err(req, ENOMEM);
    std::memcpy(buf, data, size);
    data = buf;
  }
  const ssize_t n = pwrite(f->fd, data, size, off);
  const int err = n < 0 ? errno : 0;
  pay_data(kWrite, n < 0 ? 0 : static_cast<uint64_t>(n));
  if (err) return reply_err(req, err);
  fuse_reply_write(req, static_cast<size_t>(n));
}

void em_flush(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  // close(dup()) reports a deferred write error of the source fs at close(2).
  const int fd = dup(file(fi)->fd);
  const int err = fd < 0 ? errno : (close(fd) == 0 ? 0 : errno);
  pay(kFlush, config().close_rtt);
  reply_err(req, err);
}

void em_release(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  File* f = file(fi);
  close(f->fd);
  delete f;
  pay(kRelease, 0);  // FUSE sends it after close(2) returned: nobody waits
  fuse_reply_err(req, 0);
}

void em_fsync(fuse_req_t req, fuse_ino_t, int datasync, fuse_file_info* fi) {
  const int fd = file(fi)->fd;
  const int err = (datasync ? fdatasync(fd) : fsync(fd)) == 0 ? 0 : errno;
  // COMMIT, plus LAYOUTCOMMIT to the MDS on pNFS.
  pay(kFsync, 1 + config().layout_rtt);
  reply_err(req, err);
}

void em_opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  auto d = std::make_unique<Dir>();
  int err = 0;
  const int fd = open(proc_path(inode(ino)->fd).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    err = errno;
  } else if (!(d->dp = fdopendir(fd))) {
    err = errno;
    close(fd);
  }
  pay(kOpendir, 0);  // the READDIRs pay
  if (err) return reply_err(req, err);
  fi->fh = reinterpret_cast<uint64_t>(d.release());
  if (fuse_reply_open(req, fi) != 0) {
    closedir(dir(fi)->dp);
    delete dir(fi);
  }
}

// Offsets are the source fs's d_off cookies, like passthrough_hp's.
void em_readdir(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi) {
  Dir* d = dir(fi);
  char* buf = io_buffer(size);
  if (!buf) return reply_err(req, ENOMEM);
  if (off != d->offset) {
    seekdir(d->dp, off);
    d->entry = nullptr;
    d->offset = off;
  }
  size_t used = 0;
  int err = 0;
  for (;;) {
    if (!d->entry) {
      errno = 0;
      d->entry = readdir(d->dp);
      if (!d->entry) {
        err = errno;
        break;
      }
    }
    struct stat st;
    std::memset(&st, 0, sizeof(st));
    st.st_ino = d->entry->d_ino;
    st.st_mode = static_cast<mode_t>(d->entry->d_type) << 12;
    const size_t n =
        fuse_add_direntry(req, buf + used, size - used, d->entry->d_name, &st, d->entry->d_off);
    if (n > size - used) break;
    used += n;
    d->offset = d->entry->d_off;
    d->entry = nullptr;
  }
  const bool new_window =
      off == 0 || (d->bytes + used) / kReaddirWindow != d->bytes / kReaddirWindow;
  d->bytes += used;
  pay(kReaddir, new_window ? 1 : 0);
  if (err && used == 0) return reply_err(req, err);
  fuse_reply_buf(req, buf, used);
}

void em_releasedir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  Dir* d = dir(fi);
  closedir(d->dp);
  delete d;
  pay(kReleasedir, 0);
  fuse_reply_err(req, 0);
}

void em_fsyncdir(fuse_req_t req, fuse_ino_t, int datasync, fuse_file_info* fi) {
  const int fd = dirfd(dir(fi)->dp);
  const int err = (datasync ? fdatasync(fd) : fsync(fd)) == 0 ? 0 : errno;
  // NFS directory operations are stable when their reply comes: a client's
  // fsync of a directory sends nothing.
  pay(kFsyncdir, 0);
  reply_err(req, err);
}

void em_statfs(fuse_req_t req, fuse_ino_t ino) {
  struct statvfs v;
  const int err = fstatvfs(inode(ino)->fd, &v) == 0 ? 0 : errno;
  pay(kStatfs, 1);
  if (err) return reply_err(req, err);
  fuse_reply_statfs(req, &v);
}

void em_fallocate(fuse_req_t req, fuse_ino_t, int mode, off_t off, off_t len, fuse_file_info* fi) {
  int err = EOPNOTSUPP;
  if (config().fallocate) err = fallocate(file(fi)->fd, mode, off, len) == 0 ? 0 : errno;
  pay(kFallocate, config().fallocate ? 1 : 0);  // NFSv4.2 ALLOCATE
  reply_err(req, err);
}

void em_access(fuse_req_t req, fuse_ino_t ino, int mask) {
  const int err = faccessat(AT_FDCWD, proc_path(inode(ino)->fd).c_str(), mask, 0) == 0 ? 0 : errno;
  // Answered from the client's access cache, which lives as long as the
  // attribute cache; FUSE keeps no such cache, so charging would overcount.
  pay(kAccess, 0);
  reply_err(req, err);
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
