// SPDX-License-Identifier: Apache-2.0
// BlockStore's file operations: create, open, read, write, truncate, fsync,
// release. Each checks the request, takes the inode's lock and leaves the
// block slots to FileData (file_data.h), the queueing to the Flusher and
// reads to the BlockReader (block_reader.h).
#include <fcntl.h>

#include <algorithm>
#include <cstring>

#include "core/data/file_data.h"
#include "core/flush/flusher.h"
#include "core/peers/peer_imports.h"
#include "core/segments/segment_store.h"
#include "core/store/block_store.h"
#include "core/util/log.h"

namespace kvfs {

Result<OpenFile*> BlockStore::create(uint64_t parent, std::string_view name, uint32_t mode,
                                     int flags, const Caller& c, Attr* attr) {
  KVFS_RETURN_IF_ERROR(check_writable());
  bool created = false;
  auto r = ns_->create(parent, name, {S_IFREG | (mode & 07777), c.uid, c.gid, {}},
                       (flags & O_EXCL) != 0, &created);
  if (!r.ok()) return r.status();
  InodeRef in = *r;
  const bool writable = (flags & O_ACCMODE) != O_RDONLY;
  std::shared_lock ns(ns_->mu());
  std::lock_guard g(in->mu);
  if (!created) {
    if (in->is_dir()) return Status::IsDir();
    if (!in->is_reg()) return Status::Invalid("not a regular file");
    if (in->peer && (writable || (flags & O_TRUNC))) return Namespace::peer_read_only(*in);
    if ((flags & O_TRUNC) && writable && in->size > 0) {
      truncate_locked(*in, 0);
      in->mtime_ns = in->ctime_ns = clock_->now_ns();
    }
  }
  ++in->open_count;
  if (writable) ++in->open_writers, ++in->active_writers;
  in->nlookup.fetch_add(1);
  in->touch(clock_->now_ns());
  *attr = attr_locked(*in);
  return track_handle(new OpenFile{in, writable, (flags & O_NOATIME) != 0});
}

Result<OpenFile*> BlockStore::open(uint64_t ino, int flags) {
  auto f = open_file(ino, flags);
  // A reader whose kernel cache is not kept will read the file from here:
  // start on what is only in the backing dir (no lock held now).
  if (f.ok() && !(*f)->writable && !(*f)->keep_cache) prefetch_->want((*f)->in);
  return f;
}

Result<OpenFile*> BlockStore::open_file(uint64_t ino, int flags) {
  auto r = node(ino);
  if (!r.ok()) return r.status();
  InodeRef in = *r;
  const bool writable = (flags & O_ACCMODE) != O_RDONLY;
  if (writable) KVFS_RETURN_IF_ERROR(check_writable());
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
  in->touch(clock_->now_ns());
  if ((flags & O_TRUNC) && writable && in->size > 0) {
    truncate_locked(*in, 0);
    in->mtime_ns = in->ctime_ns = clock_->now_ns();
  }
  const bool keep_cache = !writable && in->open_writers == 0 && in->kernel_cache_ok;
  in->kernel_cache_ok = true;
  ++in->open_count;
  if (writable) ++in->open_writers, ++in->active_writers;
  OpenFile* f = new OpenFile{in, writable, (flags & O_NOATIME) != 0};
  f->keep_cache = keep_cache;
  return track_handle(f);
}

OpenFile* BlockStore::track_handle(OpenFile* f) {
  std::lock_guard l(open_mu_);
  open_files_.insert(f);
  return f;
}

Status BlockStore::closed(OpenFile* f) {
  if (!f->writable) return Status::OK();
  Inode& in = *f->in;
  std::lock_guard g(in.mu);
  if (!f->sealed) {
    f->sealed = true;
    --in.active_writers;
  }
  if (FileData::ready_to_flush_locked(in) && !cfg_.read_only)
    flusher_->enqueue_locked(f->in, false);
  // Accepted into RAM while the cap is full of what cannot be evicted: it
  // may never be flushed, and the client should know before it relies on it.
  if (in.dirty() && in.linked.load() && flusher_->writes_refused())
    return Status::NoSpace("backing dir full: nothing can be evicted, this file is not flushed");
  return Status::OK();
}

void BlockStore::release(OpenFile* f) {
  {
    std::lock_guard l(open_mu_);
    open_files_.erase(f);
  }
  {
    std::lock_guard g(f->in->mu);
    held_->unhold_locked(&f->held);
  }
  InodeRef in = std::move(f->in);
  const bool writable = f->writable;
  const bool sealed = f->sealed;
  delete f;
  bool unlinked;
  {
    std::lock_guard g(in->mu);
    --in->open_count;
    if (writable && !sealed) --in->active_writers;
    if (writable && --in->open_writers == 0) flusher_->untrack_locked(in);
    unlinked = !in->linked.load();
    if (unlinked) {
      if (FileData::unused_locked(*in)) data_->free_locked(*in);
    } else if (FileData::ready_to_flush_locked(*in) && !cfg_.read_only) {
      flusher_->enqueue_locked(in, false);
    }
  }
  if (unlinked)
    ns_->reap_if_unused(in);
  else if (in->peer)
    (void)ns_->release_import(in);  // no-op while the kernel still references it
}

void BlockStore::drop_file(const InodeRef& in, const Status& why) {
  if (cfg_.read_only) return;
  uint64_t parent;
  std::string name;
  {
    std::shared_lock ns(ns_->mu());
    parent = in->parent;
    name = in->name;
  }
  if (ns_->drop(in).ok()) {
    lookups_.dropped_files.fetch_add(1);
    spdlog::error("file {} (inode {}) dropped from the cache: {}", ns_->path(parent, name), in->ino,
                  why.ToString());
    notices_.gone(parent, name, in->ino);  // the kernel forgets it too
  }
}

Status BlockStore::read(OpenFile* f, uint64_t off, size_t size, ReadResult* out) {
  Status st = reader_->read(f, off, size, out);
  if (st.ok()) return st;
  if (st.code() == Status::Code::kCorruption) drop_file(f->in, st);
  return Status::IOError(st.message());
}

Result<size_t> BlockStore::write(OpenFile* f, uint64_t off, const char* data, size_t size) {
  KVFS_RETURN_IF_ERROR(check_writable());
  // Refused while a file's data waits for room that cannot be made; once
  // every such file is removed, that is over.
  if (flusher_->writes_refused())
    return Status::NoSpace("backing dir full: nothing can be evicted");
  if (off > cfg_.max_file_size || size > cfg_.max_file_size - off)
    return Status::FileTooBig("write past the maximum file size");
  // A file larger than the cap could never be flushed: it would sit dirty in
  // RAM, reported written, and be lost at unmount. Refuse it up front.
  if (const uint64_t cap = budget_->capacity(); off > cap || size > cap - off)
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
    Status rs = ram_->reserve_dirty(kBlockSize);
    if (rs.code() == Status::Code::kTimedOut) io_->count_timeout();
    if (!rs.ok()) {
      if (pos > 0) return pos;
      return rs;
    }
    uint64_t used = 0;
    Status ws;
    {
      std::shared_lock rl(reclaim_mu_);
      std::unique_lock<std::mutex> g;
      ConstBufRef old;
      ws = data_->lock_with_kept(
          *in, &g,
          [&](const Inode& i, uint32_t* at) {
            *at = idx;
            return FileData::kept_by_write_locked(i, idx, bo, n);
          },
          &old);
      if (ws.ok()) {
        if (f->sealed) {
          // Written again after a close() (a dup'ed descriptor, mmap): open.
          f->sealed = false;
          ++in->active_writers;
        }
        used = data_->write_locked(*in, idx, bo, data + pos, n, old);
        in->size = std::max<uint64_t>(in->size, cur + n);
        in->mtime_ns = in->ctime_ns = clock_->now_ns();
        in->flush.client_wrote();
        in->kernel_cache_ok = false;
        if (in->open_writers > 0)
          flusher_->track_locked(in);
        else if (in->linked.load())
          flusher_->enqueue_locked(in, false);  // mmap write-back after close
      }
    }
    ram_->release_dirty(kBlockSize - used);
    if (!ws.ok()) {
      if (pos > 0) return pos;
      return Status::IOError(ws.message());
    }
    pos += n;
  }
  return size;
}

void BlockStore::truncate_locked(Inode& in, uint64_t size, const ConstBufRef& old) {
  if (size == in.size) return;
  data_->truncate_locked(in, size, old);
  in.flush.changed();
  in.kernel_cache_ok = false;
}

Status BlockStore::fsync(uint64_t ino) {
  if (cfg_.read_only) return Status::OK();
  auto r = node(ino);
  if (!r.ok()) return r.status();
  InodeRef in = *r;
  std::unique_lock l(in->mu);
  if (!in->dirty() || !in->linked.load()) return Status::OK();
  // A flush in flight now may fail for a fault that has cleared since: only
  // a later attempt's failure counts (FlushMark).
  const FlushMark mark = in->flush.begin_fsync();
  flusher_->enqueue_locked(in, true);
  auto done = [&] {
    return in->flush.durable(mark) || !in->linked.load() || in->flush.failed_since(mark);
  };
  // Bounded: a flusher stuck on a stalled backing dir makes this an EIO
  // after io_timeout (the data stays dirty and is flushed once it answers).
  const auto since = std::chrono::steady_clock::now();
  bool gave_up = false;
  while (!done() && !(gave_up = io_->gave_up(since)))
    flusher_->wait_durable_for(l, std::chrono::milliseconds(100));
  in->flush.end_fsync();
  if (in->flush.durable(mark) || !in->linked.load()) return Status::OK();
  if (gave_up) {
    io_->count_timeout();
    return Status::TimedOut("fsync: the backing dir is stalled");
  }
  return in->flush.error();
}

PeerLog* BlockStore::peer_log() {
  return peers_ ? &peers_->log() : nullptr;
}

Result<std::string> BlockStore::peer_owner(uint64_t ino) {
  auto in = node(ino);
  if (!in.ok()) return in.status();
  std::lock_guard g((*in)->mu);
  return (*in)->peer ? (*in)->peer->node : std::string();
}

Status BlockStore::set_lru_time(uint64_t ino, int64_t ns) {
  auto in = node(ino);
  if (!in.ok()) return in.status();
  (*in)->touch(ns);
  return Status::OK();
}

}  // namespace kvfs
