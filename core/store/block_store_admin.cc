// SPDX-License-Identifier: Apache-2.0
// BlockStore, the whole store: statfs, stats, ls, flush_all, eviction and
// the runtime settings (kvfs-admin's commands).
#include <sys/statvfs.h>

#include "core/config/option_table.h"
#include "core/data/file_data.h"
#include "core/flush/flusher.h"
#include "core/peers/peer_imports.h"
#include "core/segments/segment_store.h"
#include "core/segments/segment_windows.h"
#include "core/space/space_budget.h"
#include "core/store/block_store.h"
#include "core/util/log.h"

namespace kvfs {

StatFs BlockStore::statfs() {
  // The cap is the filesystem's size as the offloaders see it (df, and
  // LMCache's statvfs-based checks).
  StatFs s;
  s.total_bytes = budget_->capacity();
  const uint64_t used = segs_->used_bytes();
  s.free_bytes = s.avail_bytes = s.total_bytes > used ? s.total_bytes - used : 0;
  s.files = ns_->count();
  s.files_free = 1ull << 32;
  return s;
}

StoreStats BlockStore::stats() {
  StoreStats st;
  for (auto& in : ns_->all()) {
    std::lock_guard g(in->mu);
    ++st.inodes;
    // Files and directories a client can still open: not ones evicted or
    // unlinked that the kernel still references.
    if (!in->linked.load()) continue;
    if (in->is_reg()) {
      ++st.files;
      st.logical_bytes += in->size;
    } else if (in->is_dir()) {
      ++st.dirs;
    }
  }
  st.ram = ram_->stats();
  auto segs = segs_->list();
  st.segments = segs.size();
  for (auto& s : segs) st.segment_bytes += s.bytes;
  st.backing_reads = data_->backing_reads();
  st.joined_reads = data_->joined_reads();
  st.prefetch = prefetch_->stats();
  st.windows = windows_->stats();
  st.backing_read_bytes = data_->backing_read_bytes();
  st.flushed_files = flusher_->flushed_files();
  st.flushed_bytes = flusher_->flushed_bytes();
  st.flush_batches = flusher_->batches();
  st.checksum_errors = data_->checksum_errors();
  st.io_errors = data_->read_errors() + flusher_->io_errors();
  st.enospc_errors = flusher_->enospc_errors();
  st.dropped_files = dropped_files_.load();
  st.queued = flusher_->queued();
  st.capacity = budget_->capacity();
  const BlockReader::Stats rs = reader_->stats();
  st.ram_block_hits = rs.ram_block_hits;
  st.negative_lookups = negative_lookups_.load();
  st.file_lookups = file_lookups_.load();
  st.ram_hit_bytes = rs.ram_hit_bytes;
  st.held_block_hits = held_->hits();
  st.held_bytes = held_->bytes();
  st.ram_miss_bytes = rs.ram_miss_bytes;
  st.peer_lookups = peer_lookups_.load();
  st.peer_read_bytes = rs.peer_read_bytes;
  if (peers_) {
    const PeerImports::Counters c = peers_->counters();
    st.peer_imports = c.imports;
    st.peer_drops = c.drops;
    st.peer_unlinks = c.unlinks;
    st.peer_unlinks_applied = c.unlinks_applied;
    st.peer_dirs = c.dirs;
    st.peers = peers_->stats();
  }
  st.peer_releases = ns_->released_imports();
  st.live_bytes = segs_->live_bytes();
  return st;
}

void BlockStore::flush_async() {
  if (cfg_.read_only) return;
  for (auto& in : ns_->all()) {
    std::lock_guard g(in->mu);
    if (FileData::ready_to_flush_locked(*in)) flusher_->enqueue_locked(in, false);
  }
}

Result<std::vector<LsEntry>> BlockStore::ls(uint64_t dir) {
  std::vector<std::pair<std::string, uint64_t>> names;
  KVFS_RETURN_IF_ERROR(
      ns_->readdir(dir, 2, [&](std::string_view n, uint64_t ino, uint32_t, uint64_t) {
        names.emplace_back(std::string(n), ino);
        return true;
      }));
  std::vector<LsEntry> out;
  for (auto& [name, ino] : names) {
    InodeRef in = ns_->get(ino);
    if (!in) continue;
    std::lock_guard g(in->mu);
    LsEntry e{name, ino, in->mode, in->size, "-", in->last_access_ns.load()};
    if (in->is_reg()) {
      size_t dirty = 0, ram = 0, disk = 0;
      for (auto& b : in->blocks) {
        if (b.buf)
          ++dirty;
        else if (b.ext.valid())
          (ram_->contains(ExtentKey{b.ext.seg, b.ext.off}) ? ram : disk)++;
      }
      if (dirty)
        e.tier = "dirty";
      else if (ram && !disk)
        e.tier = "ram";
      else if (disk && !ram)
        e.tier = "backing";
      else if (ram && disk)
        e.tier = "mixed";
    }
    out.push_back(std::move(e));
  }
  return out;
}

EvictorStats BlockStore::evictor_stats() {
  return evictor_->stats();
}

Result<EvictResult> BlockStore::evict(const EvictRequest& r) {
  KVFS_RETURN_IF_ERROR(check_writable());
  return evictor_->evict(r);
}

Status BlockStore::poll_peers() {
  return peers_ ? peers_->poll() : Status::OK();
}

PeerStats BlockStore::peer_stats() const {
  return peers_ ? peers_->stats() : PeerStats{};
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

const std::string& BlockStore::node_id() const {
  return segs_->node();
}

void BlockStore::evict_pass_now() {
  evictor_->pass_now();
}

uint64_t BlockStore::housekeep() {
  return cfg_.read_only ? 0 : evictor_->housekeep_now();
}

Result<uint64_t> BlockStore::resolve(std::string_view path) {
  auto r = ns_->resolve(path);
  if (!r.ok()) return r.status();
  return (*r)->ino;
}

void BlockStore::set_eviction_listener(EvictListener fn) {
  notices_.set_listener(std::move(fn));
}

StoreConfig BlockStore::live_config() const {
  StoreConfig c = cfg_;
  c.ram_size = ram_->capacity();
  c.capacity = capacity();
  c.evict_grace_s = evictor_->grace_s();
  c.io_timeout_s = io_->timeout();
  c.prefetch_bytes = prefetch_->budget();
  c.segment_readahead = windows_->readahead();
  c.node_id = node_id();
  return c;
}

Status BlockStore::reconfigure(const StoreConfig& next) {
  // Each runtime option of the table (core/config/option_table.cc) and how its
  // owner takes it; a runtime option missing here is refused, and
  // option_table_test changes each one through this.
  struct Apply {
    const char* name;
    void (*fn)(BlockStore&, const StoreConfig&);
  };
  static const Apply kApply[] = {
      {"ram_size",
       [](BlockStore& b, const StoreConfig& c) {
         b.ram_->set_capacity(c.ram_size);
         // Segment windows live in RAM: their cap follows it, as at mount.
         b.windows_->set_max_bytes(SegmentWindows::max_bytes_for(c.prefetch_bytes, c.ram_size));
       }},
      {"capacity",
       [](BlockStore& b, const StoreConfig& c) {
         b.evictor_->log_held(true);  // what went under the old cap is said before the new one
         b.budget_->set_capacity(c.capacity);
         b.budget_->clear_no_space();
         b.ram_->set_flush_error(Status::OK());
         b.flusher_->retry_now();
       }},
      {"evict_grace",
       [](BlockStore& b, const StoreConfig& c) { b.evictor_->set_grace_s(c.evict_grace_s); }},
      {"io_timeout",
       [](BlockStore& b, const StoreConfig& c) { b.io_->set_timeout(c.io_timeout_s); }},
      {"prefetch",
       [](BlockStore& b, const StoreConfig& c) {
         b.prefetch_->set_budget(c.prefetch_bytes);
         b.windows_->set_max_bytes(SegmentWindows::max_bytes_for(c.prefetch_bytes, c.ram_size));
       }},
      {"segment_readahead",
       [](BlockStore& b, const StoreConfig& c) { b.windows_->set_readahead(c.segment_readahead); }},
  };
  StoreConfig live = live_config(), want = next;
  // 0 in a StoreConfig means "computed at mount", which validate() accepts.
  if (want.capacity == 0) return Status::Invalid("capacity must be at least two segments");
  std::vector<std::pair<const StoreOption*, const Apply*>> changed;
  for (const StoreOption& o : store_options()) {
    const std::string was = option_text(o.spec, o.field(live));
    if (option_text(o.spec, o.field(want)) == was) continue;
    if (!o.spec.runtime)
      return Status::Invalid(std::string("'") + o.spec.name +
                             "' is a mount option: it cannot change while mounted");
    const Apply* a = nullptr;
    for (const Apply& x : kApply)
      if (std::string_view(x.name) == o.spec.name) a = &x;
    if (!a) return Status::NotSupported(std::string("no runtime setter for '") + o.spec.name + "'");
    changed.emplace_back(&o, a);
  }
  KVFS_RETURN_IF_ERROR(want.validate());
  for (auto [o, a] : changed) {
    a->fn(*this, want);
    spdlog::info("{} set to {}", o->spec.name, option_text(o->spec, o->field(want)));
  }
  return Status::OK();
}

BackingIoStats BlockStore::backing_io_stats() const {
  return io_->stats();
}

uint64_t BlockStore::capacity() const {
  return budget_->capacity();
}

Status BlockStore::flush_all() {
  if (cfg_.read_only) return Status::OK();
  return flusher_->flush_all(/*include_open=*/false);
}

}  // namespace kvfs
