// SPDX-License-Identifier: Apache-2.0
#include "core/store/store_admin.h"

#include "core/config/option_table.h"
#include "core/data/block_reader.h"
#include "core/data/file_data.h"
#include "core/flush/flusher.h"
#include "core/namespace/namespace.h"
#include "core/peers/peer_imports.h"
#include "core/ram/held_blocks.h"
#include "core/segments/segment_store.h"
#include "core/space/space_budget.h"
#include "core/util/log.h"

namespace kvfs {

StatFs StoreAdmin::statfs() {
  // The cap is the filesystem's size as the offloaders see it (df, and
  // LMCache's statvfs-based checks).
  StatFs s;
  s.total_bytes = p_.budget->capacity();
  const uint64_t used = p_.segs->used_bytes();
  s.free_bytes = s.avail_bytes = s.total_bytes > used ? s.total_bytes - used : 0;
  s.files = p_.ns->count();
  s.files_free = 1ull << 32;
  return s;
}

StoreStats StoreAdmin::stats() {
  StoreStats st;
  for (auto& in : p_.ns->all()) {
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
  st.ram = p_.ram->stats();
  auto segs = p_.segs->list();
  st.segments = segs.size();
  for (auto& s : segs) st.segment_bytes += s.bytes;
  st.backing_reads = p_.data->backing_reads();
  st.joined_reads = p_.data->joined_reads();
  st.prefetch = p_.prefetch->stats();
  st.windows = p_.windows->stats();
  st.backing_read_bytes = p_.data->backing_read_bytes();
  st.flushed_files = p_.flusher->flushed_files();
  st.flushed_bytes = p_.flusher->flushed_bytes();
  st.flush_batches = p_.flusher->batches();
  st.pacer = p_.flusher->pacer();
  st.checksum_errors = p_.data->checksum_errors();
  st.io_errors = p_.data->read_errors() + p_.flusher->io_errors();
  st.enospc_errors = p_.flusher->enospc_errors();
  st.dropped_files = p_.lookups->dropped_files.load();
  st.queued = p_.flusher->queued();
  st.capacity = p_.budget->capacity();
  const BlockReader::Stats rs = p_.reader->stats();
  st.ram_block_hits = rs.ram_block_hits;
  st.negative_lookups = p_.lookups->negative.load();
  st.file_lookups = p_.lookups->files.load();
  st.ram_hit_bytes = rs.ram_hit_bytes;
  st.held_block_hits = p_.held->hits();
  st.held_bytes = p_.held->bytes();
  st.ram_miss_bytes = rs.ram_miss_bytes;
  st.peer_lookups = p_.lookups->peer.load();
  st.peer_read_bytes = rs.peer_read_bytes;
  if (p_.peers) {
    const PeerImports::Counters c = p_.peers->counters();
    st.peer_imports = c.imports;
    st.peer_drops = c.drops;
    st.peer_unlinks = c.unlinks;
    st.peer_unlinks_applied = c.unlinks_applied;
    st.peer_dirs = c.dirs;
    st.peers = p_.peers->stats();
  }
  st.peer_releases = p_.ns->released_imports();
  st.live_bytes = p_.segs->live_bytes();
  return st;
}

void StoreAdmin::flush_async() {
  if (p_.cfg->read_only) return;
  for (auto& in : p_.ns->all()) {
    std::lock_guard g(in->mu);
    if (FileData::ready_to_flush_locked(*in)) p_.flusher->enqueue_locked(in, false);
  }
}

Result<std::vector<LsEntry>> StoreAdmin::ls(uint64_t dir) {
  std::vector<std::pair<std::string, uint64_t>> names;
  KVFS_RETURN_IF_ERROR(
      p_.ns->readdir(dir, 2, [&](std::string_view n, uint64_t ino, uint32_t, uint64_t) {
        names.emplace_back(std::string(n), ino);
        return true;
      }));
  std::vector<LsEntry> out;
  for (auto& [name, ino] : names) {
    InodeRef in = p_.ns->get(ino);
    if (!in) continue;
    std::lock_guard g(in->mu);
    LsEntry e{name, ino, in->mode, in->size, "-", in->last_access_ns.load()};
    if (in->is_reg()) {
      size_t dirty = 0, ram = 0, disk = 0;
      for (auto& b : in->blocks) {
        if (b.buf)
          ++dirty;
        else if (b.ext.valid())
          (p_.ram->contains(ExtentKey{b.ext.seg, b.ext.off}) ? ram : disk)++;
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

EvictorStats StoreAdmin::evictor_stats() {
  return p_.evictor->stats();
}

Result<EvictResult> StoreAdmin::evict(const EvictRequest& r) {
  if (p_.cfg->read_only) return Status::ReadOnly();
  return p_.evictor->evict(r);
}

Status StoreAdmin::poll_peers() {
  return p_.peers ? p_.peers->poll() : Status::OK();
}

PeerStats StoreAdmin::peer_stats() const {
  return p_.peers ? p_.peers->stats() : PeerStats{};
}

void StoreAdmin::evict_pass_now() {
  p_.evictor->pass_now();
}

uint64_t StoreAdmin::housekeep() {
  return p_.cfg->read_only ? 0 : p_.evictor->housekeep_now();
}

Result<uint64_t> StoreAdmin::resolve(std::string_view path) {
  auto r = p_.ns->resolve(path);
  if (!r.ok()) return r.status();
  return (*r)->ino;
}

StoreConfig StoreAdmin::live_config() const {
  StoreConfig c = *p_.cfg;
  c.ram_size = p_.ram->capacity();
  c.capacity = capacity();
  c.evict_grace_s = p_.evictor->grace_s();
  c.io_timeout_s = p_.io->timeout();
  c.prefetch_bytes = p_.prefetch->budget();
  c.segment_readahead = p_.windows->readahead();
  c.node_id = p_.segs->node();
  return c;
}

Status StoreAdmin::reconfigure(const StoreConfig& next) {
  // Each runtime option of the table (core/config/option_table.cc) and how its
  // owner takes it; a runtime option missing here is refused, and
  // option_table_test changes each one through this.
  struct Apply {
    const char* name;
    void (*fn)(const Parts&, const StoreConfig&);
  };
  static const Apply kApply[] = {
      {"ram_size",
       [](const Parts& b, const StoreConfig& c) {
         b.ram->set_capacity(c.ram_size);
         // Segment windows live in RAM: their cap follows it, as at mount.
         b.windows->set_max_bytes(SegmentWindows::max_bytes_for(c.prefetch_bytes, c.ram_size));
       }},
      {"capacity",
       [](const Parts& b, const StoreConfig& c) {
         b.evictor->log_held(true);  // what went under the old cap is said before the new one
         b.budget->set_capacity(c.capacity);
         b.budget->clear_no_space();
         b.ram->set_flush_error(Status::OK());
         b.flusher->retry_now();
       }},
      {"evict_grace",
       [](const Parts& b, const StoreConfig& c) { b.evictor->set_grace_s(c.evict_grace_s); }},
      {"io_timeout",
       [](const Parts& b, const StoreConfig& c) { b.io->set_timeout(c.io_timeout_s); }},
      {"prefetch",
       [](const Parts& b, const StoreConfig& c) {
         b.prefetch->set_budget(c.prefetch_bytes);
         b.windows->set_max_bytes(SegmentWindows::max_bytes_for(c.prefetch_bytes, c.ram_size));
       }},
      {"segment_readahead",
       [](const Parts& b, const StoreConfig& c) { b.windows->set_readahead(c.segment_readahead); }},
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
    a->fn(p_, want);
    spdlog::info("{} set to {}", o->spec.name, option_text(o->spec, o->field(want)));
  }
  return Status::OK();
}

BackingIoStats StoreAdmin::backing_io_stats() const {
  return p_.io->stats();
}

uint64_t StoreAdmin::capacity() const {
  return p_.budget->capacity();
}

}  // namespace kvfs
