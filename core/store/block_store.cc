// SPDX-License-Identifier: Apache-2.0
#include "core/store/block_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <system_error>
#include <thread>

#include "core/data/file_data.h"
#include "core/flush/flusher.h"
#include "core/flush/meta_journal.h"
#include "core/index/index.h"
#include "core/load/store_load.h"
#include "core/peers/peer_imports.h"
#include "core/recovery/recovery.h"
#include "core/segments/segment_store.h"
#include "core/space/space_budget.h"
#include "core/util/log.h"
#include "core/util/seq_counter.h"

namespace kvfs {

BlockStore::BlockStore(const StoreConfig& cfg, const Clock* clock)
    : cfg_(cfg), clock_(clock ? clock : &system_clock()) {}

BlockStore::~BlockStore() {
  (void)Close();
}

Result<std::unique_ptr<BlockStore>> BlockStore::Open(const StoreConfig& cfg, const Clock* clock,
                                                     BackingFs* fs) {
  KVFS_RETURN_IF_ERROR(cfg.validate());
  std::unique_ptr<BlockStore> s(new BlockStore(cfg, clock));
  // As many backing calls in flight as FUSE workers can wait on.
  s->io_ = std::make_unique<BackingIo>(cfg.io_timeout_s, 16);
  auto segs = SegmentStore::Open(cfg, s->io_.get(), fs);
  if (!segs.ok()) return segs.status();
  s->segs_ = std::move(*segs);
  if (s->cfg_.index_dir.empty())
    s->cfg_.index_dir = default_index_dir(s->segs_->backing_id(), cfg.node_id);
  std::error_code ec;
  std::filesystem::create_directories(s->cfg_.index_dir, ec);
  if (ec) return Status::FromErrno(ec.value(), "index directory " + s->cfg_.index_dir);
  ::chmod(s->cfg_.index_dir.c_str(), 0700);
  if (s->cfg_.capacity == 0) {
    // Default: 80 % of what kvfs may use here, its segments plus free space.
    struct statvfs v;
    uint64_t avail = 0;
    if (::statvfs(cfg.backing_dir.c_str(), &v) == 0) avail = uint64_t(v.f_bavail) * v.f_frsize;
    s->cfg_.capacity = (s->segs_->used_bytes() + avail) / 10 * 8;
    if (s->cfg_.capacity < 2 * cfg.segment_size)
      return Status::NoSpace("backing directory " + cfg.backing_dir + " has room for " +
                             format_size(s->cfg_.capacity) +
                             " only; give a smaller segment_size or an explicit capacity");
  }
  if (s->cfg_.flush_threads == 0) s->cfg_.flush_threads = default_flush_threads(cfg.backing_dir);
  s->ram_ = std::make_unique<RamTier>(cfg.ram_size);
  s->held_ = std::make_unique<HeldBlocks>([r = s->ram_.get()] { return r->capacity(); });
  s->windows_ = std::make_unique<SegmentWindows>(
      s->segs_.get(), cfg.segment_readahead,
      SegmentWindows::max_bytes_for(cfg.prefetch_bytes, cfg.ram_size));
  s->windows_->start();
  s->data_ = std::make_unique<FileData>(s->ram_.get(), s->segs_.get(), s->windows_.get());
  SpaceBudget::Limits lim;
  lim.capacity = s->cfg_.capacity;
  lim.high_watermark = cfg.high_watermark;
  lim.slack = cfg.segment_size - SpaceBudget::kMetaReserve;
  lim.clock = s->clock_;
  s->budget_ = std::make_unique<SpaceBudget>(lim, s->segs_.get());
  s->seqs_ = std::make_unique<SeqCounter>();
  s->journal_ = std::make_unique<MetaJournal>(cfg.read_only, s->seqs_.get());
  s->ns_ = std::make_unique<Namespace>(s->journal_.get(), s->clock_);
  auto loaded = load_store(
      LoadParts{&s->cfg_, s->segs_.get(), s->ns_.get(), s->journal_.get(), s->seqs_.get()});
  if (!loaded.ok()) return loaded.status();
  s->index_ = std::move(loaded->index);
  s->rebuilt_ = loaded->rebuilt;
  s->catch_up_ = loaded->catch_up;
  // The flushers and the evictor are wired once the index is the one to use
  // (load may rebuild it); journal entries made before wait in the journal.
  s->flusher_ = std::make_unique<Flusher>(Flusher::Parts{
      &s->cfg_, s->clock_, s->ns_.get(), s->seqs_.get(), s->ram_.get(), s->segs_.get(),
      s->index_.get(), s->io_.get(), s->budget_.get(), s->data_.get()});
  s->evictor_ = std::make_unique<Evictor>(
      Evictor::Parts{&s->cfg_, s->clock_, s->ns_.get(), s->ram_.get(), s->segs_.get(),
                     s->index_.get(), s->io_.get(), s->budget_.get(), s->data_.get(),
                     s->flusher_.get(), &s->notices_, &s->reclaim_mu_, &s->forgetting_});
  // Segments a restart cut short in their grace get a whole new one: a peer
  // may have been reading them until just now.
  s->segs_->set_due_of_found_retired(s->clock_->now_ns() + int64_t(cfg.segment_grace_s * 1e9));
  s->prefetch_ = std::make_unique<Prefetcher>(
      Prefetcher::Parts{s->data_.get(), s->ram_.get(), &s->reclaim_mu_, &s->forgetting_},
      cfg.prefetch_bytes);
  s->prefetch_->start(cfg.prefetch_threads);
  s->reader_ = std::make_unique<BlockReader>(BlockReader::Parts{s->data_.get(), s->ram_.get(),
                                                                s->held_.get(), s->prefetch_.get(),
                                                                &s->reclaim_mu_, s->clock_});
  s->journal_->attach(s->flusher_.get());
  Flusher* f = s->flusher_.get();
  s->ram_->set_pressure_callback([f] { f->on_pressure(); });
  BackingIo* io = s->io_.get();
  s->ram_->set_give_up([io](auto since) { return io->gave_up(since); });
  // Freed block buffers are kept for reuse (fresh memory is slow to fault in
  // in VMs). A buffer is only allocated when none is free, so the pool never
  // holds more than the RAM tier once used: memory stays under ram_size and
  // the tier's small reserve (RamTier::idle_buffers).
  BufferPool::set_max_free_bytes(cfg.ram_size);
  if (const uint64_t pre = std::min(cfg.ram_prefault, cfg.ram_size); pre > 0) {
    BlockStore* raw = s.get();
    s->prefault_ = std::thread([raw, pre] { BufferPool::prefill(pre, &raw->stop_prefault_); });
  }
  if (!cfg.read_only) {
    s->flusher_->start();
    s->evictor_->start();
  }
  PeerImports::Parts pp{&s->cfg_,       s->clock_,         s->segs_.get(),
                        s->io_.get(),   s->index_.get(),   s->ns_.get(),
                        s->data_.get(), s->evictor_.get(), &s->notices_};
  auto peers = PeerImports::Open(pp);
  if (!peers.ok()) return peers.status();
  s->peers_ = std::move(*peers);
  s->admin_ = std::make_unique<StoreAdmin>(StoreAdmin::Parts{
      &s->cfg_, s->ns_.get(), s->ram_.get(), s->segs_.get(), s->data_.get(), s->prefetch_.get(),
      s->windows_.get(), s->flusher_.get(), s->evictor_.get(), s->budget_.get(), s->io_.get(),
      s->held_.get(), s->reader_.get(), s->peers_.get(), &s->lookups_});
  return s;
}

Status BlockStore::Close() {
  if (closed_.exchange(true)) return Status::OK();
  stop_prefault_ = true;
  if (prefault_.joinable()) prefault_.join();
  Status st;
  if (peers_) peers_->stop();
  if (prefetch_) prefetch_->stop();
  if (windows_) windows_->stop();
  if (evictor_) evictor_->stop();
  if (flusher_) st = flusher_->stop();
  if (!st.ok()) {
    spdlog::error("unmount: some data could not be flushed: {}", st.ToString());
    // Every file that is lost with the daemon, by name, so that the owner
    // of the data can tell what to write again.
    size_t n = 0;
    for (InodeRef& in : ns_->all()) {
      uint64_t parent;
      std::string name;
      {
        std::lock_guard g(in->mu);
        if (!in->is_reg() || !in->dirty() || !in->linked.load()) continue;
        parent = in->parent;
        name = in->name;
      }
      if (++n <= 1000) spdlog::error("unmount: not flushed, lost: {}", ns_->path(parent, name));
    }
    if (n > 1000) spdlog::error("unmount: {} more files not flushed", n - 1000);
  }
  {
    std::lock_guard l(open_mu_);
    for (OpenFile* f : open_files_) delete f;
    open_files_.clear();
  }
  // Nothing writes the index any more: close it now, so that a caller that
  // exits without destroying the store (see fs/main.cc) leaves it closed.
  if (index_) index_->close();
  if (io_) io_->stop();
  return st;
}

// ----------------------------------------------------------------------------
// Namespace operations

Result<InodeRef> BlockStore::node(uint64_t ino) {
  InodeRef in = ns_->get(ino);
  if (!in) return Status::NotFound("stale inode " + std::to_string(ino));
  return in;
}

Attr BlockStore::attr_locked(const Inode& in) const {
  Attr a;
  a.ino = in.ino;
  a.mode = in.mode;
  a.uid = in.uid;
  a.gid = in.gid;
  a.size = in.size;
  a.rdev = in.rdev;
  a.atime_ns = in.atime_ns;
  a.mtime_ns = in.mtime_ns;
  a.ctime_ns = in.ctime_ns;
  a.blocks = align_up(in.size, 4096) / 512;
  a.nlink = in.linked.load() ? 1 : 0;
  return a;
}

static void fix_nlink(const InodeRef& in, Attr* a) {
  // Directory link counts come from the tree (Namespace::mu_ held shared).
  if (in->dir && in->linked.load()) a->nlink = 2 + in->dir->subdirs;
}

Result<Attr> BlockStore::lookup(uint64_t parent, std::string_view name) {
  InodeRef in;
  Attr a;
  for (int tries = 0;; ++tries) {
    auto r = ns_->lookup(parent, name);
    if (!r.ok() && r.status().code() == Status::Code::kNotFound && peers_)
      r = peers_->import(parent, name);
    if (!r.ok()) {
      if (r.status().code() == Status::Code::kNotFound)
        lookups_.negative.fetch_add(1, std::memory_order_relaxed);
      return r.status();
    }
    in = std::move(*r);
    std::shared_lock ns(ns_->mu());
    std::lock_guard g(in->mu);
    // A peer's file released (or dropped) between the two looks: the
    // kernel must not get an inode number that is gone; import it again.
    if (in->peer && !in->linked.load()) {
      if (tries < 3) continue;
      return Status::NotFound("changing on its owner meanwhile");
    }
    a = attr_locked(*in);
    fix_nlink(in, &a);
    in->nlookup.fetch_add(1);
    in->touch(clock_->now_ns());
    break;
  }
  if (S_ISREG(a.mode)) {
    lookups_.files.fetch_add(1, std::memory_order_relaxed);
    if (in->peer) lookups_.peer.fetch_add(1, std::memory_order_relaxed);
    // A hit is loaded right after it is looked up (vLLM, llm-d): start
    // reading what is only in the backing dir.
    if (a.size > 0) prefetch_->want(in);
  }
  return a;
}

Result<Attr> BlockStore::getattr(uint64_t ino) {
  auto r = node(ino);
  if (!r.ok()) return r.status();
  InodeRef& in = *r;
  in->touch(clock_->now_ns());
  std::shared_lock ns(ns_->mu());
  std::lock_guard g(in->mu);
  // Evicted or dropped: the kernel's cached name is stale, make it a miss.
  if (in->evicted && !in->linked.load() && in->open_count == 0) return Status::NotFound("evicted");
  Attr a = attr_locked(*in);
  fix_nlink(in, &a);
  return a;
}

Status BlockStore::check_writable() const {
  return cfg_.read_only ? Status::ReadOnly() : Status::OK();
}

Result<Attr> BlockStore::setattr(uint64_t ino, const SetAttrRequest& r, OpenFile* fh) {
  KVFS_RETURN_IF_ERROR(check_writable());
  auto rn = node(ino);
  if (!rn.ok()) return rn.status();
  InodeRef& in = *rn;
  if (in->peer) {
    // Only a touch (llm-d marks the hits it skips): kept in memory here.
    if (r.set_size || r.set_mode || r.set_uid || r.set_gid || r.set_mtime)
      return Namespace::peer_read_only(*in);
    std::lock_guard g(in->mu);
    if (r.set_atime) in->atime_ns = r.atime_now ? clock_->now_ns() : r.atime_ns;
    in->touch(clock_->now_ns());
    return attr_locked(*in);
  }
  if (r.set_size && r.size > cfg_.max_file_size) return Status::FileTooBig();
  // No namespace lock: a truncate may read the block it shortens from the
  // backing dir (FileData::lock_with_kept), and only a directory's link count needs
  // the tree, read after.
  std::shared_lock rl(reclaim_mu_);
  std::unique_lock<std::mutex> g;
  ConstBufRef old;
  KVFS_RETURN_IF_ERROR(data_->lock_with_kept(
      *in, &g,
      [&](const Inode& i, uint32_t* idx) {
        return r.set_size && i.is_reg() ? FileData::kept_by_truncate_locked(i, r.size, idx)
                                        : Extent{};
      },
      &old));
  const int64_t t = clock_->now_ns();
  bool meta = false;
  if (r.set_size) {
    if (!in->is_reg()) return in->is_dir() ? Status::IsDir() : Status::Invalid("not a file");
    truncate_locked(*in, r.size, old);
    in->mtime_ns = t;
    meta = true;
    if (fh && fh->writable && fh->sealed) {  // ftruncate after a close(): open again
      fh->sealed = false;
      ++in->active_writers;
    }
  }
  if (r.set_mode) in->mode = (in->mode & S_IFMT) | (r.mode & 07777);
  if (r.set_uid) in->uid = r.uid;
  if (r.set_gid) in->gid = r.gid;
  if (r.set_atime) {
    in->atime_ns = r.atime_now ? t : r.atime_ns;
    in->atime_dirty = true;
    in->touch(t);  // llm-d marks the hits it skips: they are in use
  }
  if (r.set_mtime) in->mtime_ns = r.mtime_now ? t : r.mtime_ns;
  // Nothing to set is chown(path, -1, -1): a local filesystem marks ctime
  // for it, and FUSE does not pass the ctime mark itself.
  const bool only_ctime =
      !r.set_size && !r.set_mode && !r.set_uid && !r.set_gid && !r.set_atime && !r.set_mtime;
  meta |= r.set_mode || r.set_uid || r.set_gid || r.set_mtime || only_ctime;
  if (meta || r.set_atime) in->ctime_ns = t;
  // An atime-only touch (llm-d marking a hit) is kept in RAM and written with
  // the next flush of the file: it does not deserve a segment record.
  if (meta) {
    in->flush.changed();
    if (FileData::ready_to_flush_locked(*in)) flusher_->enqueue_locked(in, false);
  }
  Attr a = attr_locked(*in);
  g.unlock();
  rl.unlock();
  if (S_ISDIR(a.mode)) {
    std::shared_lock ns(ns_->mu());
    fix_nlink(in, &a);
  }
  return a;
}

Result<Attr> BlockStore::mknod(uint64_t parent, std::string_view name, uint32_t mode, uint32_t rdev,
                               const Caller& c) {
  KVFS_RETURN_IF_ERROR(check_writable());
  if (S_ISREG(mode)) {
    Attr a;
    auto f = create(parent, name, mode, O_CREAT | O_EXCL, c, &a);
    if (!f.ok()) return f.status();
    release(*f);
    return a;
  }
  // The kernel serves FIFOs and sockets itself and device nodes go to their
  // driver: kvfs keeps only the inode, like a directory without entries.
  if (!S_ISFIFO(mode) && !S_ISSOCK(mode) && !S_ISCHR(mode) && !S_ISBLK(mode))
    return Status::Invalid("unknown file type");
  const bool dev = S_ISCHR(mode) || S_ISBLK(mode);
  return make_node(parent, name,
                   {(mode & S_IFMT) | (mode & 07777), c.uid, c.gid, {}, dev ? rdev : 0});
}

Result<Attr> BlockStore::make_node(uint64_t parent, std::string_view name, const NewNode& n) {
  bool created;
  auto r = ns_->create(parent, name, n, true, &created);
  if (!r.ok()) return r.status();
  InodeRef& in = *r;
  std::lock_guard g(in->mu);
  in->nlookup.fetch_add(1);
  return attr_locked(*in);
}

Result<Attr> BlockStore::mkdir(uint64_t parent, std::string_view name, uint32_t mode,
                               const Caller& c) {
  KVFS_RETURN_IF_ERROR(check_writable());
  bool created;
  auto r = ns_->create(parent, name, {S_IFDIR | (mode & 07777), c.uid, c.gid, {}}, true, &created);
  if (!r.ok()) return r.status();
  InodeRef& in = *r;
  std::shared_lock ns(ns_->mu());
  std::lock_guard g(in->mu);
  in->nlookup.fetch_add(1);
  Attr a = attr_locked(*in);
  fix_nlink(in, &a);
  return a;
}

Result<Attr> BlockStore::symlink(uint64_t parent, std::string_view name, std::string_view target,
                                 const Caller& c) {
  KVFS_RETURN_IF_ERROR(check_writable());
  if (target.empty() || target.size() > 4095) return Status::NameTooLong("symlink target");
  return make_node(parent, name, {S_IFLNK | 0777, c.uid, c.gid, std::string(target)});
}

Result<std::string> BlockStore::readlink(uint64_t ino) {
  auto r = node(ino);
  if (!r.ok()) return r.status();
  std::lock_guard g((*r)->mu);
  if (!(*r)->is_symlink()) return Status::Invalid("not a symlink");
  return (*r)->symlink;
}

Status BlockStore::unlink(uint64_t parent, std::string_view name) {
  KVFS_RETURN_IF_ERROR(check_writable());
  auto r = ns_->remove(parent, name, false);
  if (!r.ok() && r.status().code() == Status::Code::kNotFound) {
    if (auto imp =
            peers_ ? peers_->import_file(parent, name) : Result<InodeRef>(Status::NotFound());
        imp.ok()) {
      r = ns_->remove(parent, name, false);
      if (!r.ok()) (void)ns_->release_import(*imp);
    }
  }
  if (!r.ok()) return r.status();
  int64_t mtime;
  {
    std::lock_guard g((*r)->mu);
    if (FileData::unused_locked(**r)) data_->free_locked(**r);
    mtime = (*r)->mtime_ns;
  }
  if ((*r)->peer && peers_) peers_->unlinked(*(*r)->peer, mtime);
  return Status::OK();
}

Status BlockStore::rmdir(uint64_t parent, std::string_view name) {
  KVFS_RETURN_IF_ERROR(check_writable());
  return ns_->remove(parent, name, true).status();
}

Status BlockStore::rename(uint64_t parent, std::string_view name, uint64_t new_parent,
                          std::string_view new_name, unsigned flags) {
  KVFS_RETURN_IF_ERROR(check_writable());
  auto r = ns_->rename(parent, name, new_parent, new_name, flags);
  if (!r.ok() && r.status().code() == Status::Code::kNotFound) {
    if (auto imp =
            peers_ ? peers_->import_file(parent, name) : Result<InodeRef>(Status::NotFound());
        imp.ok()) {
      r = ns_->rename(parent, name, new_parent, new_name, flags);  // a peer's: refused
      (void)ns_->release_import(*imp);
    }
  }
  if (!r.ok()) return r.status();
  if (InodeRef replaced = *r) {
    std::lock_guard g(replaced->mu);
    if (FileData::unused_locked(*replaced)) data_->free_locked(*replaced);
  }
  return Status::OK();
}

Status BlockStore::readdir(uint64_t ino, uint64_t cookie, const Namespace::DirFn& fn) {
  if (peers_ && cookie == 0) peers_->import_children(ino);  // the listing shows every node's names
  return ns_->readdir(ino, cookie, fn);
}

void BlockStore::forget(uint64_t ino, uint64_t n) {
  // The last kernel reference to an unlinked file: nothing can open it now.
  if (InodeRef gone = ns_->forget(ino, n)) {
    std::lock_guard g(gone->mu);
    if (!gone->evicted) data_->free_locked(*gone);
  }
}

// ----------------------------------------------------------------------------
// xattrs: kept in the inode, persisted with its snapshot, so they follow
// renames for free.

Status BlockStore::setxattr(uint64_t ino, const std::string& name, std::string_view value,
                            int flags) {
  KVFS_RETURN_IF_ERROR(check_writable());
  if (name.empty() || name.size() > 255) return Status::Range("xattr name length");
  if (value.size() > 64 * 1024) return Status::NoSpace("xattr value over 64 KiB");
  auto r = node(ino);
  if (!r.ok()) return r.status();
  InodeRef& in = *r;
  if (in->peer) return Namespace::peer_read_only(*in);
  std::lock_guard g(in->mu);
  auto it = in->xattrs.find(name);
  if ((flags & XATTR_CREATE) && it != in->xattrs.end()) return Status::Exists();
  if ((flags & XATTR_REPLACE) && it == in->xattrs.end()) return Status::NoData();
  if (in->xattrs.size() >= 1024 && it == in->xattrs.end())
    return Status::NoSpace("too many xattrs");
  in->xattrs[name] = std::string(value);
  in->ctime_ns = clock_->now_ns();
  in->flush.changed();
  if (FileData::ready_to_flush_locked(*in)) flusher_->enqueue_locked(in, false);
  return Status::OK();
}

Result<std::string> BlockStore::getxattr(uint64_t ino, const std::string& name) {
  auto r = node(ino);
  if (!r.ok()) return r.status();
  std::lock_guard g((*r)->mu);
  auto it = (*r)->xattrs.find(name);
  if (it == (*r)->xattrs.end()) return Status::NoData();
  return it->second;
}

Result<std::vector<std::string>> BlockStore::listxattr(uint64_t ino) {
  auto r = node(ino);
  if (!r.ok()) return r.status();
  std::lock_guard g((*r)->mu);
  std::vector<std::string> v;
  for (auto& [k, val] : (*r)->xattrs) v.push_back(k);
  return v;
}

Status BlockStore::removexattr(uint64_t ino, const std::string& name) {
  KVFS_RETURN_IF_ERROR(check_writable());
  auto r = node(ino);
  if (!r.ok()) return r.status();
  InodeRef& in = *r;
  if (in->peer) return Namespace::peer_read_only(*in);
  std::lock_guard g(in->mu);
  if (in->xattrs.erase(name) == 0) return Status::NoData();
  in->ctime_ns = clock_->now_ns();
  in->flush.changed();
  if (FileData::ready_to_flush_locked(*in)) flusher_->enqueue_locked(in, false);
  return Status::OK();
}

const std::string& BlockStore::node_id() const {
  return segs_->node();
}

void BlockStore::set_eviction_listener(EvictListener fn) {
  notices_.set_listener(std::move(fn));
}

Status BlockStore::flush_all() {
  if (cfg_.read_only) return Status::OK();
  return flusher_->flush_all(/*include_open=*/false);
}

}  // namespace kvfs
