// SPDX-License-Identifier: Apache-2.0
// nfsemu's open files and directories: data requests pay their transfer
// (pay_data), the rest their round trips (pay), before the reply.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "bench/nfsemu_pt.h"

namespace nfsemu {
namespace {

// An NFS READDIR reply carries up to dircount bytes (32 KiB here); FUSE asks
// a page at a time, so a round trip is paid per 32 KiB of entries, not per call.
constexpr uint64_t kReaddirWindow = 32 << 10;

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
  f->client_direct = (flags & O_DIRECT) != 0;
  return 0;
}

}  // namespace

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
  const uint64_t arrived = clock_ns();
  char* buf = io_buffer(size);
  if (!buf) return reply_err(req, ENOMEM);
  const ssize_t n = pread(file(fi)->fd, buf, size, off);
  const int err = n < 0 ? errno : 0;
  pay_data(kRead, n < 0 ? 0 : static_cast<uint64_t>(n), arrived);
  if (err) return reply_err(req, err);
  fuse_reply_buf(req, buf, static_cast<size_t>(n));
}

void em_write(fuse_req_t req, fuse_ino_t, const char* data, size_t size, off_t off,
              fuse_file_info* fi) {
  const uint64_t arrived = clock_ns();
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
  if (n > 0 && f->client_direct) f->uncommitted.store(true, std::memory_order_relaxed);
  pay_data(kWrite, n < 0 ? 0 : static_cast<uint64_t>(n), arrived);
  if (err) return reply_err(req, err);
  fuse_reply_write(req, static_cast<size_t>(n));
}

void em_flush(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  File* f = file(fi);
  // close(dup()) reports a deferred write error of the source fs at close(2).
  const int fd = dup(f->fd);
  int err = fd < 0 ? errno : (close(fd) == 0 ? 0 : errno);
  unsigned rtts = config().close_rtt;
  // An NFS client's O_DIRECT write returns once its bytes are on the server's
  // stable storage (FILE_SYNC, or UNSTABLE WRITEs and a COMMIT: Linux
  // fs/nfs/direct.c). FUSE does not show where a write call ends, so the
  // COMMIT is paid here, one per close (NFS pays one per write call): the
  // local disk's flush, as for fsync, and its round trips.
  if (config().direct_commit && f->uncommitted.exchange(false)) {
    if (fdatasync(f->fd) != 0 && err == 0) err = errno;
    rtts += 1 + config().layout_rtt;
    count_commit();
  }
  pay(kFlush, rtts);
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
  File* f = file(fi);
  const int fd = f->fd;
  f->uncommitted.store(false, std::memory_order_relaxed);  // before: a later write marks again
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

void em_fallocate(fuse_req_t req, fuse_ino_t, int mode, off_t off, off_t len, fuse_file_info* fi) {
  int err = EOPNOTSUPP;
  if (config().fallocate) err = fallocate(file(fi)->fd, mode, off, len) == 0 ? 0 : errno;
  pay(kFallocate, config().fallocate ? 1 : 0);  // NFSv4.2 ALLOCATE
  reply_err(req, err);
}

}  // namespace nfsemu
