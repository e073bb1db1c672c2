// SPDX-License-Identifier: Apache-2.0
// Open files: create, open, read, write, fsync, release.
#include <fcntl.h>
#include <linux/falloc.h>

#include <algorithm>
#include <cerrno>

#include "fs/errno_map.h"
#include "fs/fuse_ops.h"

namespace kvfs {
namespace {

OpenFile* handle(fuse_file_info* fi) {
  return reinterpret_cast<OpenFile*>(fi->fh);
}

void set_open_flags(fuse_file_info* fi, const OpenFile* f) {
  // Re-reads of an unchanged file come from the page cache: contents change
  // only through this mount (or by eviction, which invalidates explicitly).
  // A file written since its last open starts from the daemon's bytes.
  fi->keep_cache = f->keep_cache ? 1 : 0;
  fi->direct_io = 0;
  // A close of a handle that cannot write has nothing to do here (closed()
  // returns at once): the kernel skips the FLUSH round trip (FOPEN_NOFLUSH,
  // Linux 5.16+; older kernels ignore it), one request less per load.
  fi->noflush = f->writable ? 0 : 1;
}

}  // namespace

void op_create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
               fuse_file_info* fi) {
  guarded(req, [&] {
    ScopedLatency t(ctx(req).lat.create);
    if (is_control(parent, name)) return (void)fuse_reply_err(req, EEXIST);
    Attr a;
    auto r = ctx(req).store->create(parent, name, mode, fi->flags | O_CREAT, caller(req), &a);
    if (!r.ok()) return reply_err(req, r.status());
    if (fi->flags & O_TRUNC) {  // an existing file, truncated
      if (auto cleared = clear_privs_after_write(req, a.ino, true)) a = *cleared;
    }
    fi->fh = reinterpret_cast<uint64_t>(*r);
    set_open_flags(fi, *r);
    fuse_entry_param e{};
    e.ino = a.ino;
    e.generation = 1;
    e.attr_timeout = ctx(req).cfg.attr_timeout;
    e.entry_timeout = ctx(req).cfg.entry_timeout;
    fill_stat(a, &e.attr);
    if (fuse_reply_create(req, &e, fi) != 0) {
      // The opener went away (interrupted): undo the open, keep the file.
      ctx(req).store->release(*r);
    }
  });
}

void op_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  guarded(req, [&] {
    if (ino == kControlIno) {
      fi->fh = reinterpret_cast<uint64_t>(new ControlHandle);
      fi->direct_io = 1;  // replies are not file pages
      if (fuse_reply_open(req, fi) != 0) delete reinterpret_cast<ControlHandle*>(fi->fh);
      return;
    }
    auto r = ctx(req).store->open(ino, fi->flags);
    if (!r.ok()) return reply_err(req, r.status());
    if (fi->flags & O_TRUNC) (void)clear_privs_after_write(req, ino, true);
    fi->fh = reinterpret_cast<uint64_t>(*r);
    set_open_flags(fi, *r);
    if (fuse_reply_open(req, fi) != 0) ctx(req).store->release(*r);
  });
}

void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  guarded(req, [&] {
    if (off < 0) return (void)fuse_reply_err(req, EINVAL);
    if (ino == kControlIno) {
      auto* h = reinterpret_cast<ControlHandle*>(fi->fh);
      std::string part;
      {
        std::lock_guard l(h->mu);
        const size_t o = std::min(h->reply.size(), static_cast<size_t>(off));
        part = h->reply.substr(o, std::min(size, h->reply.size() - o));
      }
      return (void)fuse_reply_buf(req, part.data(), part.size());
    }
    ScopedLatency t(ctx(req).lat.read);
    ReadResult rr;
    Status s = ctx(req).store->read(handle(fi), static_cast<uint64_t>(off), size, &rr);
    if (!s.ok()) return reply_err(req, s);
    if (rr.iov.empty()) return (void)fuse_reply_buf(req, nullptr, 0);
    fuse_reply_iov(req, rr.iov.data(), static_cast<int>(rr.iov.size()));
  });
}

void op_write(fuse_req_t req, fuse_ino_t ino, const char* buf, size_t size, off_t off,
              fuse_file_info* fi) {
  guarded(req, [&] {
    if (off < 0) return (void)fuse_reply_err(req, EINVAL);
    if (ino == kControlIno) {
      // One write is one request; its reply is read back from offset 0.
      auto* h = reinterpret_cast<ControlHandle*>(fi->fh);
      std::string reply = control_execute(*ctx(req).store, ctx(req).cfg, ctx(req).lat,
                                          std::string(buf, size), fuse_req_ctx(req)->uid);
      std::lock_guard l(h->mu);
      h->reply = std::move(reply);
      return (void)fuse_reply_write(req, size);
    }
    ScopedLatency t(ctx(req).lat.write);
    auto r = ctx(req).store->write(handle(fi), static_cast<uint64_t>(off), buf, size);
    if (!r.ok()) return reply_err(req, r.status());
    (void)clear_privs_after_write(req, ino, false);
    fuse_reply_write(req, *r);
  });
}

void op_flush(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  // close() is cheap: it queues the file for the flushers and returns; fsync
  // is the call that waits for the backing dir. It must mark the file
  // complete here: the kernel sends release later, in the background, so a
  // client's fsync of the directory can arrive before it. Only handles that
  // can write send it (set_open_flags). Counted before the reply, so that a
  // client sees the count once its close() has returned.
  guarded(req, [&] {
    if (ino == kControlIno) return (void)fuse_reply_err(req, 0);
    Status st;
    {
      ScopedLatency t(ctx(req).lat.flush);
      st = ctx(req).store->closed(handle(fi));
    }
    fuse_reply_err(req, to_errno(st));
  });
}

void op_release(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  try {
    if (ino == kControlIno)
      delete reinterpret_cast<ControlHandle*>(fi->fh);
    else
      ctx(req).store->release(handle(fi));
  } catch (...) {
  }
  fuse_reply_err(req, 0);
}

void op_fsync(fuse_req_t req, fuse_ino_t ino, int, fuse_file_info*) {
  guarded(req, [&] {
    if (ino == kControlIno) return (void)fuse_reply_err(req, 0);
    reply_err(req, ctx(req).store->fsync(ino));
  });
}

void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
                  fuse_file_info* fi) {
  guarded(req, [&] {
    // Plain allocation only: blocks are not reserved ahead in a RAM tier,
    // so this just extends the file like posix_fallocate would.
    if (offset < 0 || length <= 0) return (void)fuse_reply_err(req, EINVAL);
    if (mode & ~FALLOC_FL_KEEP_SIZE) return (void)fuse_reply_err(req, EOPNOTSUPP);
    auto a = ctx(req).store->getattr(ino);
    if (!a.ok()) return reply_err(req, a.status());
    const uint64_t end = static_cast<uint64_t>(offset) + static_cast<uint64_t>(length);
    if ((mode & FALLOC_FL_KEEP_SIZE) || end <= a->size) return (void)fuse_reply_err(req, 0);
    SetAttrRequest r;
    r.set_size = true;
    r.size = end;
    auto res = ctx(req).store->setattr(ino, r, handle(fi));
    reply_err(req, res.status());
  });
}

}  // namespace kvfs
