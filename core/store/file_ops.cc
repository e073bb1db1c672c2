// SPDX-License-Identifier: Apache-2.0
#include "core/store/file_ops.h"

#include <fcntl.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "core/backing/backing_io.h"
#include "core/data/block_reader.h"
#include "core/data/file_data.h"
#include "core/data/prefetcher.h"
#include "core/flush/flusher.h"
#include "core/namespace/name_notices.h"
#include "core/namespace/namespace.h"
#include "core/ram/held_blocks.h"
#include "core/ram/ram_tier.h"
#include "core/space/space_budget.h"
#include "core/store/lookup_counters.h"
#include "core/util/log.h"

namespace kvfs {

Result<OpenFile*> FileOps::create(uint64_t parent, std::string_view name, uint32_t mode, int flags,
                                  const Caller& c, Attr* attr) {
  KVFS_RETURN_IF_ERROR(p_.cfg->check_writable());
  bool created = false;
  auto r = p_.ns->create(parent, name, {S_IFREG | (mode & 07777), c.uid, c.gid, {}},
                         (flags & O_EXCL) != 0, &created);
  if (!r.ok()) return r.status();
  InodeRef in = *r;
  const bool writable = (flags & O_ACCMODE) != O_RDONLY;
  std::shared_lock ns(p_.ns->mu());
  std::lock_guard g(in->mu);
  if (!created) {
    if (in->is_dir()) return Status::IsDir();
    if (!in->is_reg()) return Status::Invalid("not a regular file");
    if (in->peer && (writable || (flags & O_TRUNC))) return Namespace::peer_read_only(*in);
    if ((flags & O_TRUNC) && writable && in->size > 0) {
      truncate_locked(*in, 0);
      in->mtime_ns = in->ctime_ns = p_.clock->now_ns();
    }
  }
  in->opens.opened(writable);
  in->nlookup.fetch_add(1);
  in->touch(p_.clock->now_ns());
  *attr = attr_locked(*in);
  return track_handle(new OpenFile{in, writable, (flags & O_NOATIME) != 0});
}

Result<OpenFile*> FileOps::open(uint64_t ino, int flags) {
  auto f = open_file(ino, flags);
  // A reader whose kernel cache is not kept will read the file from here:
  // start on what is only in the backing dir (no lock held now).
  if (f.ok() && !(*f)->writable && !(*f)->keep_cache) p_.prefetch->want((*f)->in);
  return f;
}

Result<OpenFile*> FileOps::open_file(uint64_t ino, int flags) {
  auto r = p_.ns->node(ino);
  if (!r.ok()) return r.status();
  InodeRef in = std::move(*r);
  const bool writable = (flags & O_ACCMODE) != O_RDONLY;
  if (writable) KVFS_RETURN_IF_ERROR(p_.cfg->check_writable());
  if (in->peer && (writable || (flags & O_TRUNC))) return Namespace::peer_read_only(*in);
  std::lock_guard g(in->mu);
  if (in->is_dir()) return Status::IsDir();
  if (!in->is_reg()) return Status::Invalid("not a regular file");
  // Evicted between the kernel's lookup and this open: a miss for a reader,
  // not an empty file. A writer (O_CREAT|O_TRUNC of a name the evictor just
  // took) gets ESTALE: the VFS then looks the name up again and creates it,
  // where ENOENT would fail an open that must create.
  // A peer's file the kernel still names but that its owner replaced or
  // removed: ESTALE makes the VFS look the name up again, and find the
  // owner's version now or nothing.
  if (in->evicted)
    return writable || in->peer ? Status::Stale("evicted") : Status::NotFound("evicted");
  in->touch(p_.clock->now_ns());
  if ((flags & O_TRUNC) && writable && in->size > 0) {
    truncate_locked(*in, 0);
    in->mtime_ns = in->ctime_ns = p_.clock->now_ns();
  }
  const bool keep_cache = in->opens.keep_kernel_cache(writable);
  in->opens.opened(writable);
  OpenFile* f = new OpenFile{in, writable, (flags & O_NOATIME) != 0};
  f->keep_cache = keep_cache;
  return track_handle(f);
}

OpenFile* FileOps::track_handle(OpenFile* f) {
  std::lock_guard l(open_mu_);
  open_files_.insert(f);
  return f;
}

Status FileOps::closed(OpenFile* f) {
  if (!f->writable) return Status::OK();
  Inode& in = *f->in;
  std::lock_guard g(in.mu);
  if (!f->sealed) {
    f->sealed = true;
    in.opens.sealed();
  }
  if (FileData::ready_to_flush_locked(in) && !p_.cfg->read_only)
    p_.flusher->enqueue_locked(f->in, false);
  // Accepted into RAM while the cap is full of what cannot be evicted: it
  // may never be flushed, and the client should know before it relies on it.
  if (in.dirty() && in.linked.load() && p_.flusher->writes_refused())
    return Status::NoSpace("backing dir full: nothing can be evicted, this file is not flushed");
  return Status::OK();
}

void FileOps::release(OpenFile* f) {
  {
    std::lock_guard l(open_mu_);
    open_files_.erase(f);
  }
  {
    std::lock_guard g(f->in->mu);
    p_.held->unhold_locked(&f->held);
  }
  InodeRef in = std::move(f->in);
  const bool writable = f->writable;
  const bool sealed = f->sealed;
  delete f;
  bool unlinked;
  {
    std::lock_guard g(in->mu);
    if (in->opens.released(writable, sealed)) p_.flusher->untrack_locked(in);
    unlinked = !in->linked.load();
    if (unlinked) {
      if (FileData::unused_locked(*in)) p_.data->free_locked(*in);
    } else if (FileData::ready_to_flush_locked(*in) && !p_.cfg->read_only) {
      p_.flusher->enqueue_locked(in, false);
    }
  }
  if (unlinked)
    p_.ns->reap_if_unused(in);
  else if (in->peer)
    (void)p_.ns->release_import(in);  // no-op while the kernel still references it
}

void FileOps::drop_file(const InodeRef& in, const Status& why) {
  if (p_.cfg->read_only) return;
  uint64_t parent;
  std::string name;
  {
    std::shared_lock ns(p_.ns->mu());
    parent = in->parent;
    name = in->name;
  }
  if (p_.ns->drop(in).ok()) {
    p_.counts->dropped_files.fetch_add(1);
    spdlog::error("file {} (inode {}) dropped from the cache: {}", p_.ns->path(parent, name),
                  in->ino, why.ToString());
    p_.notices->gone(parent, name, in->ino);  // the kernel forgets it too
  }
}

Status FileOps::read(OpenFile* f, uint64_t off, size_t size, ReadResult* out) {
  Status st = p_.reader->read(f, off, size, out);
  if (st.ok()) return st;
  if (st.code() == Status::Code::kCorruption) drop_file(f->in, st);
  return Status::IOError(st.message());
}

Result<size_t> FileOps::write(OpenFile* f, uint64_t off, const char* data, size_t size) {
  KVFS_RETURN_IF_ERROR(p_.cfg->check_writable());
  // Refused while a file's data waits for room that cannot be made; once
  // every such file is removed, that is over.
  if (p_.flusher->writes_refused())
    return Status::NoSpace("backing dir full: nothing can be evicted");
  if (off > p_.cfg->max_file_size || size > p_.cfg->max_file_size - off)
    return Status::FileTooBig("write past the maximum file size");
  // A file larger than the cap could never be flushed: it would sit dirty in
  // RAM, reported written, and be lost at unmount. Refuse it up front.
  if (const uint64_t cap = p_.budget->capacity(); off > cap || size > cap - off)
    return Status::FileTooBig("file would be larger than the capacity (" + format_size(cap) + ")");
  InodeRef& in = f->in;
  size_t pos = 0;
  while (pos < size) {
    const uint64_t cur = off + pos;
    const uint32_t idx = static_cast<uint32_t>(cur / kBlockSize);
    const uint32_t bo = static_cast<uint32_t>(cur % kBlockSize);
    const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(kBlockSize - bo, size - pos));
    // Reserve before locking: waiting for the flushers with the inode lock
    // held would stop them from capturing this very inode.
    Status rs = p_.ram->reserve_dirty(kBlockSize);
    if (rs.code() == Status::Code::kTimedOut) p_.io->count_timeout();
    if (!rs.ok()) {
      if (pos > 0) return pos;
      return rs;
    }
    uint64_t used = 0;
    Status ws;
    {
      std::shared_lock rl(*p_.reclaim_mu);
      std::unique_lock<std::mutex> g;
      ConstBufRef old;
      ws = p_.data->lock_with_kept(
          *in, &g,
          [&](const Inode& i, uint32_t* at) {
            *at = idx;
            return FileData::kept_by_write_locked(i, idx, bo, n);
          },
          &old);
      if (ws.ok()) {
        written_locked(f);
        used = p_.data->write_locked(*in, idx, bo, data + pos, n, old);
        in->size = std::max<uint64_t>(in->size, cur + n);
        in->mtime_ns = in->ctime_ns = p_.clock->now_ns();
        in->flush.client_wrote();
        in->opens.data_changed();
        if (in->opens.writers() > 0)
          p_.flusher->track_locked(in);
        else if (in->linked.load())
          p_.flusher->enqueue_locked(in, false);  // mmap write-back after close
      }
    }
    p_.ram->release_dirty(kBlockSize - used);
    if (!ws.ok()) {
      if (pos > 0) return pos;
      return Status::IOError(ws.message());
    }
    pos += n;
  }
  return size;
}

void FileOps::truncate_locked(Inode& in, uint64_t size, const ConstBufRef& old) {
  if (size == in.size) return;
  p_.data->truncate_locked(in, size, old);
  in.flush.changed();
  in.opens.data_changed();
}

Status FileOps::fsync(uint64_t ino) {
  if (p_.cfg->read_only) return Status::OK();
  auto r = p_.ns->node(ino);
  if (!r.ok()) return r.status();
  return p_.flusher->sync(*r);
}

void FileOps::written_locked(OpenFile* f) {
  if (!f->writable || !f->sealed) return;
  f->sealed = false;
  f->in->opens.unsealed();
}

void FileOps::close() {
  std::lock_guard l(open_mu_);
  for (OpenFile* f : open_files_) delete f;
  open_files_.clear();
}

}  // namespace kvfs
