// SPDX-License-Identifier: Apache-2.0
#include "core/store/block_store.h"

#include <sys/stat.h>
#include <sys/statvfs.h>
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
      s->index_.get(), s->io_.get(), s->budget_.get(), s->data_.get(), &s->reads_});
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
  s->reader_ = std::make_unique<BlockReader>(
      BlockReader::Parts{s->data_.get(), s->ram_.get(), s->held_.get(), s->prefetch_.get(),
                         &s->reclaim_mu_, s->clock_, &s->reads_});
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
  s->files_ = std::make_unique<FileOps>(FileOps::Parts{
      &s->cfg_, s->clock_, s->ns_.get(), s->data_.get(), s->ram_.get(), s->flusher_.get(),
      s->budget_.get(), s->io_.get(), s->reader_.get(), s->prefetch_.get(), s->held_.get(),
      &s->notices_, &s->lookups_, &s->reclaim_mu_});
  s->names_ = std::make_unique<NameOps>(NameOps::Parts{
      &s->cfg_, s->clock_, s->ns_.get(), s->data_.get(), s->flusher_.get(), s->prefetch_.get(),
      s->files_.get(), s->peers_.get(), &s->lookups_, &s->reclaim_mu_});
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
  if (files_) files_->close();
  // Nothing writes the index any more: close it now, so that a caller that
  // exits without destroying the store (see fs/main.cc) leaves it closed.
  if (index_) index_->close();
  if (io_) io_->stop();
  return st;
}

// The filesystem's calls, forwarded to the parts that make them.

Result<Attr> BlockStore::lookup(uint64_t parent, std::string_view name) {
  return names_->lookup(parent, name);
}
Result<Attr> BlockStore::getattr(uint64_t ino) {
  return names_->getattr(ino);
}
Result<Attr> BlockStore::setattr(uint64_t ino, const SetAttrRequest& r, OpenFile* fh) {
  return names_->setattr(ino, r, fh);
}
Result<Attr> BlockStore::mknod(uint64_t parent, std::string_view name, uint32_t mode, uint32_t rdev,
                               const Caller& c) {
  return names_->mknod(parent, name, mode, rdev, c);
}
Result<Attr> BlockStore::mkdir(uint64_t parent, std::string_view name, uint32_t mode,
                               const Caller& c) {
  return names_->mkdir(parent, name, mode, c);
}
Result<Attr> BlockStore::symlink(uint64_t parent, std::string_view name, std::string_view target,
                                 const Caller& c) {
  return names_->symlink(parent, name, target, c);
}
Result<std::string> BlockStore::readlink(uint64_t ino) {
  return names_->readlink(ino);
}
Status BlockStore::unlink(uint64_t parent, std::string_view name) {
  return names_->unlink(parent, name);
}
Status BlockStore::rmdir(uint64_t parent, std::string_view name) {
  return names_->rmdir(parent, name);
}
Status BlockStore::rename(uint64_t parent, std::string_view name, uint64_t new_parent,
                          std::string_view new_name, unsigned flags) {
  return names_->rename(parent, name, new_parent, new_name, flags);
}
Status BlockStore::readdir(uint64_t ino, uint64_t cookie, const Namespace::DirFn& fn) {
  return names_->readdir(ino, cookie, fn);
}
void BlockStore::forget(uint64_t ino, uint64_t n) {
  names_->forget(ino, n);
}
Status BlockStore::setxattr(uint64_t ino, const std::string& name, std::string_view value,
                            int flags) {
  return names_->setxattr(ino, name, value, flags);
}
Result<std::string> BlockStore::getxattr(uint64_t ino, const std::string& name) {
  return names_->getxattr(ino, name);
}
Result<std::vector<std::string>> BlockStore::listxattr(uint64_t ino) {
  return names_->listxattr(ino);
}
Status BlockStore::removexattr(uint64_t ino, const std::string& name) {
  return names_->removexattr(ino, name);
}
Result<OpenFile*> BlockStore::create(uint64_t parent, std::string_view name, uint32_t mode,
                                     int flags, const Caller& c, Attr* attr) {
  return files_->create(parent, name, mode, flags, c, attr);
}
Result<OpenFile*> BlockStore::open(uint64_t ino, int flags) {
  return files_->open(ino, flags);
}
Status BlockStore::closed(OpenFile* f) {
  return files_->closed(f);
}
void BlockStore::release(OpenFile* f) {
  files_->release(f);
}
Status BlockStore::read(OpenFile* f, uint64_t off, size_t size, ReadResult* out) {
  return files_->read(f, off, size, out);
}
Result<size_t> BlockStore::write(OpenFile* f, uint64_t off, const char* data, size_t size) {
  return files_->write(f, off, data, size);
}
Status BlockStore::fsync(uint64_t ino) {
  return files_->fsync(ino);
}

Status BlockStore::check_writable() const {
  return cfg_.check_writable();
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

PeerLog* BlockStore::peer_log() {
  return peers_ ? &peers_->log() : nullptr;
}

Result<std::string> BlockStore::peer_owner(uint64_t ino) {
  auto in = ns_->node(ino);
  if (!in.ok()) return in.status();
  std::lock_guard g((*in)->mu);
  return (*in)->peer ? (*in)->peer->node : std::string();
}

Status BlockStore::set_lru_time(uint64_t ino, int64_t ns) {
  auto in = ns_->node(ino);
  if (!in.ok()) return in.status();
  (*in)->touch(ns);
  return Status::OK();
}

}  // namespace kvfs
