// SPDX-License-Identifier: Apache-2.0
// StoreAdmin: what an operator asks of a mounted store, through the daemon's
// control socket (kvfs-admin) and statfs: the statistics gathered from every
// part, `ls` with each file's tier, eviction on request, housekeeping, the
// live settings and the one runtime setter. The filesystem's own calls go to
// BlockStore; this is the other door, and it owns no state of its own: each
// figure is read from the part that owns it, each setting handed to the part
// that owns it (the option table, core/config/option_table.h, says which
// options may change while mounted).
//
// Thread-safe: every method may be called from any thread; it takes only
// the locks of the parts it asks (an inode's mu, one at a time, for stats
// and ls), never one of its own.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/backing/backing_io.h"
#include "core/config/config.h"
#include "core/data/prefetcher.h"
#include "core/evict/evictor.h"
#include "core/flush/flush_pacer.h"
#include "core/peers/peer_log.h"
#include "core/ram/ram_tier.h"
#include "core/segments/segment_windows.h"
#include "core/store/lookup_counters.h"
#include "core/util/status.h"

namespace kvfs {

class BlockReader;
class FileData;
class Flusher;
class HeldBlocks;
class Namespace;
class PeerImports;
class SegmentStore;
class SpaceBudget;

struct StoreStats {
  uint64_t files = 0, dirs = 0, inodes = 0;
  uint64_t logical_bytes = 0;  // sum of regular file sizes
  RamTierStats ram;
  uint64_t segments = 0, segment_bytes = 0;
  uint64_t backing_reads = 0, backing_read_bytes = 0;
  uint64_t joined_reads = 0;  // cold reads that shared one read in flight
  PrefetchStats prefetch;
  SegmentWindowStats windows;
  uint64_t flushed_files = 0, flushed_bytes = 0, flush_batches = 0;
  FlushPacer::Stats pacer;  // batches in flight, the link's model, the give-way
  uint64_t checksum_errors = 0, io_errors = 0, enospc_errors = 0;
  uint64_t dropped_files = 0;
  uint64_t queued = 0;
  uint64_t capacity = 0, live_bytes = 0;
  uint64_t ram_block_hits = 0;    // 1 MiB blocks served from RAM
  uint64_t negative_lookups = 0;  // names looked up that do not exist (KV misses)
  uint64_t file_lookups = 0;      // lookups that found a regular file (KV hits)
  // Of those, the hits on files another node owns (an import, peer_imports.h),
  // and the bytes read from them.
  uint64_t peer_lookups = 0, peer_read_bytes = 0;
  // Files imported from peers' logs, imports dropped for a peer's newer
  // version or removal, directories made here after a peer's.
  uint64_t peer_imports = 0, peer_drops = 0, peer_dirs = 0;
  // Imports released once nothing here referenced them (found again by
  // the next lookup): what is imported stays bounded.
  uint64_t peer_releases = 0;
  // Peers' files unlinked here; this node's files removed for a peer's unlink.
  uint64_t peer_unlinks = 0, peer_unlinks_applied = 0;
  PeerStats peers;
  // Bytes handed to readers from the RAM tier / read from the backing dir.
  uint64_t ram_hit_bytes = 0, ram_miss_bytes = 0;
  // Block reads served by the block their open had read part of before
  // (OpenFile::held), and the bytes such blocks hold now.
  uint64_t held_block_hits = 0, held_bytes = 0;
};

// One entry of `kvfs-admin ls`.
struct LsEntry {
  std::string name;
  uint64_t ino = 0;
  uint32_t mode = 0;
  uint64_t size = 0;
  std::string tier;  // "dirty", "ram", "backing", "mixed", "-" (dirs, empty files)
  int64_t last_access_ns = 0;
};

struct StatFs {
  uint64_t total_bytes = 0, free_bytes = 0, avail_bytes = 0;
  uint64_t files = 0, files_free = 0;
};

class StoreAdmin {
 public:
  // The parts it asks; each outlives it (BlockStore owns them all). peers
  // is nullptr when the dir is not shared.
  struct Parts {
    const StoreConfig* cfg;
    Namespace* ns;
    RamTier* ram;
    SegmentStore* segs;
    FileData* data;
    Prefetcher* prefetch;
    SegmentWindows* windows;
    Flusher* flusher;
    Evictor* evictor;
    SpaceBudget* budget;
    BackingIo* io;
    HeldBlocks* held;
    BlockReader* reader;
    PeerImports* peers;
    const LookupCounters* lookups;
  };
  explicit StoreAdmin(const Parts& p) : p_(p) {}
  StoreAdmin(const StoreAdmin&) = delete;
  StoreAdmin& operator=(const StoreAdmin&) = delete;

  // The cap as the filesystem's size (df, LMCache's statvfs checks).
  StatFs statfs();
  StoreStats stats();
  EvictorStats evictor_stats();
  BackingIoStats backing_io_stats() const;
  PeerStats peer_stats() const;
  uint64_t capacity() const;
  // The entries of a directory with the tier each file's blocks are in.
  Result<std::vector<LsEntry>> ls(uint64_t dir);
  Result<uint64_t> resolve(std::string_view path);  // path relative to the root

  // --- capacity and eviction (evictor.h) ---
  Result<EvictResult> evict(const EvictRequest& r);  // ReadOnly on a read-only mount
  uint64_t housekeep();   // orphaned tmp files now; returns how many went
  void evict_pass_now();  // one capacity pass on this thread
  // Queues every dirty file ready for the flushers and returns at once.
  void flush_async();
  // Reads the peers' logs now, as the poll thread does every peer_poll
  // (tests, and whoever cannot wait for it); OK when the dir is not shared.
  Status poll_peers();

  // The settings as they are now: the mount's with the runtime ones (those
  // the option table marks runtime, which `kvfs-admin config` may change)
  // as last set.
  StoreConfig live_config() const;
  // The one runtime setter: `next` is live_config() with runtime options
  // changed. It is validated as a whole (StoreConfig::validate()), then each
  // changed option is handed to the part that owns it. Invalid, with nothing
  // changed, when a mount-only option differs or `next` is not valid.
  Status reconfigure(const StoreConfig& next);

 private:
  const Parts p_;
};

}  // namespace kvfs
