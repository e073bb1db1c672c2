// SPDX-License-Identifier: Apache-2.0
// The statistics schema's tables (see fs/stats_schema.h). The rows are in
// the order kvfs-admin(8) lists them; a row's help is all the documentation
// the statistic gets, so it says what a reader needs to act on it.
#include "fs/stats_schema.h"

#include <algorithm>

namespace kvfs::stats {

namespace {

using json = nlohmann::json;

Value U(uint64_t v) {
  return Value{v, double(v)};
}
Value D(double v) {
  return Value{0, v};
}
Value B(bool v) {
  return Value{v ? 1u : 0u, v ? 1.0 : 0.0};
}

uint64_t dir_used(const Snapshot& s) {
  uint64_t b = s.store.segment_bytes;
  for (const PeerNodeStats& n : s.store.peers.nodes) b += n.segment_bytes;
  return b;
}

constexpr Type G = Type::kGauge, C = Type::kCounter;
constexpr Unit N = Unit::kCount, BY = Unit::kBytes, S = Unit::kSeconds, R = Unit::kRatio,
               F = Unit::kFlag;

// clang-format off
const Def kDefs[] = {
  {"/files", G, N, "Regular files in the namespace.", "kvfs_files", "",
   [](const Snapshot& s) { return U(s.store.files); }},
  {"/directories", G, N, "Directories in the namespace, the root included.", "kvfs_directories", "",
   [](const Snapshot& s) { return U(s.store.dirs); }},
  {"/logical_bytes", G, BY, "Sum of the sizes of all files.", "kvfs_logical_bytes", "",
   [](const Snapshot& s) { return U(s.store.logical_bytes); }},

  {"/ram/used_bytes", G, BY, "File data held in the RAM tier (dirty and clean).",
   "kvfs_ram_used_bytes", "",
   [](const Snapshot& s) { return U(s.store.ram.clean_bytes + s.store.ram.dirty_bytes); }},
  {"/ram/capacity_bytes", G, BY, "RAM tier capacity (ram_size).", "kvfs_ram_capacity_bytes", "",
   [](const Snapshot& s) { return U(s.store.ram.capacity); }},
  {"/ram/dirty_bytes", G, BY, "RAM tier bytes not yet written to the backing dir.",
   "kvfs_ram_dirty_bytes", "",
   [](const Snapshot& s) { return U(s.store.ram.dirty_bytes); }},
  {"/ram/clean_bytes", G, BY, "RAM tier bytes that are cached copies of segment data.",
   "kvfs_ram_clean_bytes", "",
   [](const Snapshot& s) { return U(s.store.ram.clean_bytes); }},
  {"/ram/cached_blocks", G, N, "Clean blocks in the RAM tier's cache.", "kvfs_ram_cached_blocks", "",
   [](const Snapshot& s) { return U(s.store.ram.entries); }},
  {"/ram/evicted_blocks", C, N, "Clean blocks dropped from the RAM tier to make room.",
   "kvfs_ram_evicted_blocks_total", "",
   [](const Snapshot& s) { return U(s.store.ram.evictions); }},
  {"/ram/admitted_blocks", C, N,
   "Blocks read from the backing dir for a client and kept in RAM like written data, because "
   "they came back in less than half the time the blocks they push out had lain unused; the "
   "others are the first to leave RAM (see ram_size in kvfs(8)).",
   "kvfs_ram_admitted_blocks_total", "",
   [](const Snapshot& s) { return U(s.store.ram.admitted); }},
  {"/ram/backpressure_waits", C, N,
   "Writes that waited for the flushers because RAM was full of dirty data.",
   "kvfs_ram_backpressure_waits_total", "",
   [](const Snapshot& s) { return U(s.store.ram.backpressure_waits); }},

  {"/backing/used_bytes", G, BY, "Bytes of this node's segment files in the backing dir.",
   "kvfs_backing_used_bytes", "",
   [](const Snapshot& s) { return U(s.store.segment_bytes); }},
  {"/backing/dir_used_bytes", G, BY,
   "This node's segment bytes and every peer's as last seen: the whole shared dir.",
   "kvfs_backing_dir_used_bytes", "",
   [](const Snapshot& s) { return U(dir_used(s)); }},
  {"/backing/capacity_bytes", G, BY,
   "Capacity kvfs may use in the backing dir (capacity; what df(1) shows as the size).",
   "kvfs_backing_capacity_bytes", "",
   [](const Snapshot& s) { return U(s.store.capacity); }},
  {"/backing/live_bytes", G, BY, "Segment bytes that some file still points at.",
   "kvfs_backing_live_bytes", "",
   [](const Snapshot& s) { return U(s.store.live_bytes); }},
  {"/backing/segments", G, N, "Segment files of this node in the backing dir.",
   "kvfs_backing_segments", "",
   [](const Snapshot& s) { return U(s.store.segments); }},
  {"/backing/live_ratio", G, R, "Live fraction of the segment bytes (live_bytes / used_bytes).",
   "kvfs_backing_live_ratio", "",
   [](const Snapshot& s) {
     return D(s.store.segment_bytes ? double(s.store.live_bytes) / double(s.store.segment_bytes)
                                    : 1.0);
   }},
  {"/backing/read_bytes", C, BY, "Bytes read from the backing dir.",
   "kvfs_backing_read_bytes_total", "",
   [](const Snapshot& s) { return U(s.store.backing_read_bytes); }},
  {"/backing/reads", C, N, "Block reads from the backing dir (client reads and read-ahead).",
   "kvfs_backing_reads_total", "",
   [](const Snapshot& s) { return U(s.store.backing_reads); }},
  {"/backing/written_bytes", C, BY,
   "Bytes written to the backing dir (flushes and reclamation copies).",
   "kvfs_backing_written_bytes_total", "",
   [](const Snapshot& s) { return U(s.store.flushed_bytes + s.evict.reclaim_copied_bytes); }},
  {"/backing/stalled", G, F,
   "Whether a call into the backing dir has not returned within io_timeout now.", nullptr, "",
   [](const Snapshot& s) { return B(s.backing.stalled); }},
  {"/backing/stalled_flag", G, N,
   "1 while a call into the backing dir has not returned within io_timeout.",
   "kvfs_backing_stalled", "",
   [](const Snapshot& s) { return U(s.backing.stalled ? 1 : 0); }},
  {"/backing/stalls", C, N, "Stalls of the backing dir since mount.", "kvfs_backing_stalls_total",
   "", [](const Snapshot& s) { return U(s.backing.stalls); }},
  {"/backing/stalled_seconds", C, S, "Time the backing dir has been stalled since mount.",
   "kvfs_backing_stalled_seconds_total", "",
   [](const Snapshot& s) { return D(s.backing.stalled_seconds); }},
  {"/backing/timeouts", C, N,
   "Client calls that failed with EIO after io_timeout on a stalled backing dir.",
   "kvfs_backing_timeouts_total", "",
   [](const Snapshot& s) { return U(s.backing.timeouts); }},
  {"/backing/calls_in_flight", G, N, "Calls into the backing dir not yet returned.",
   "kvfs_backing_calls_in_flight", "",
   [](const Snapshot& s) { return U(s.backing.in_flight); }},
  {"/backing/oldest_call_seconds", G, S, "Age of the oldest call into the backing dir in flight.",
   "kvfs_backing_oldest_call_seconds", "",
   [](const Snapshot& s) { return D(s.backing.oldest_s); }},
  {"/backing/io_timeout", G, S, "The io_timeout setting now.", nullptr, "",
   [](const Snapshot& s) { return D(s.io_timeout_s); }},

  // hits (1 MiB blocks) and misses (lookups) predate /cache and count
  // different things; they stay for existing readers (bench/, tests).
  {"/hits/ram", C, N, "1 MiB blocks found in the RAM tier by reads.", "kvfs_ram_block_hits_total",
   "", [](const Snapshot& s) { return U(s.store.ram_block_hits); }},
  {"/hits/backing", C, N,
   "Blocks read from the backing dir (client reads and read-ahead; the same as backing.reads).",
   nullptr, "", [](const Snapshot& s) { return U(s.store.backing_reads); }},
  {"/misses", C, N,
   "Lookups of names that do not exist: KV-cache misses (the same as cache.file_misses). The "
   "kernel answers repeated lookups of an absent name itself for negative_timeout seconds; "
   "those are not counted.",
   nullptr, "", [](const Snapshot& s) { return U(s.store.negative_lookups); }},

  {"/cache/file_hits", C, N,
   "Lookups that found a regular file: KV-cache hits. The kernel's name cache answers some "
   "lookups itself (entry_timeout in kvfs(8)).",
   "kvfs_file_lookups_total", "result=\"hit\"",
   [](const Snapshot& s) { return U(s.store.file_lookups); }},
  {"/cache/file_misses", C, N, "Lookups of names that do not exist: KV-cache misses.",
   "kvfs_file_lookups_total", "result=\"miss\"",
   [](const Snapshot& s) { return U(s.store.negative_lookups); }},
  {"/cache/own_file_hits", C, N, "Of the file hits, those on files this node owns.",
   "kvfs_file_hits_total", "origin=\"own\"",
   [](const Snapshot& s) {
     return U(s.store.file_lookups - std::min(s.store.file_lookups, s.store.peer_lookups));
   }},
  {"/cache/peer_file_hits", C, N,
   "Of the file hits, those on files another node of a shared backing dir owns.",
   "kvfs_file_hits_total", "origin=\"peer\"",
   [](const Snapshot& s) { return U(s.store.peer_lookups); }},
  {"/cache/ram_hit_bytes", C, BY, "Bytes returned to readers from the RAM tier.",
   "kvfs_read_served_bytes_total", "tier=\"ram\"",
   [](const Snapshot& s) { return U(s.store.ram_hit_bytes); }},
  {"/cache/ram_miss_bytes", C, BY,
   "Bytes returned to readers that had to be read from the backing dir first.",
   "kvfs_read_served_bytes_total", "tier=\"backing\"",
   [](const Snapshot& s) { return U(s.store.ram_miss_bytes); }},
  {"/cache/held_block_hits", C, N,
   "Block reads served by a block their open had read part of before (one load reading a block "
   "in pieces: parallel extents, a header then the payload).",
   "kvfs_held_block_hits_total", "",
   [](const Snapshot& s) { return U(s.store.held_block_hits); }},
  {"/cache/held_bytes", G, BY,
   "Bytes of blocks open files hold for the rest of a read in pieces: one block per open, all "
   "opens together at most a quarter of the RAM tier and 32 MiB, outside its budget.",
   "kvfs_held_bytes", "",
   [](const Snapshot& s) { return U(s.store.held_bytes); }},

  {"/prefetch/budget_bytes", G, BY,
   "Bytes that may be queued or in flight for read-ahead at once (prefetch in kvfs(8)).",
   "kvfs_prefetch_budget_bytes", "",
   [](const Snapshot& s) { return U(s.store.prefetch.budget_bytes); }},
  {"/prefetch/pending_bytes", G, BY, "Bytes queued or being read ahead now.",
   "kvfs_prefetch_pending_bytes", "",
   [](const Snapshot& s) { return U(s.store.prefetch.pending_bytes); }},
  {"/prefetch/queued_blocks", G, N, "Blocks queued for read-ahead now.", nullptr, "",
   [](const Snapshot& s) { return U(s.store.prefetch.queued); }},
  {"/prefetch/reads", C, N,
   "Blocks read ahead into the RAM tier (a lookup, an open or a cold read of the file).",
   "kvfs_prefetch_reads_total", "",
   [](const Snapshot& s) { return U(s.store.prefetch.reads); }},
  {"/prefetch/read_bytes", C, BY, "Bytes read ahead into the RAM tier.",
   "kvfs_prefetch_read_bytes_total", "",
   [](const Snapshot& s) { return U(s.store.prefetch.read_bytes); }},
  {"/prefetch/used_blocks", C, N, "Blocks read ahead that a client then read.",
   "kvfs_prefetch_blocks_total", "fate=\"used\"",
   [](const Snapshot& s) { return U(s.store.ram.prefetch_used); }},
  {"/prefetch/wasted_blocks", C, N, "Blocks read ahead that left RAM before any client read them.",
   "kvfs_prefetch_blocks_total", "fate=\"wasted\"",
   [](const Snapshot& s) { return U(s.store.ram.prefetch_wasted); }},
  {"/prefetch/cancelled_blocks", C, N,
   "Blocks queued for read-ahead but skipped: the file was evicted or rewritten, or a client "
   "had read the block meanwhile.",
   "kvfs_prefetch_blocks_total", "fate=\"cancelled\"",
   [](const Snapshot& s) { return U(s.store.prefetch.cancelled); }},
  {"/prefetch/over_budget_blocks", C, N,
   "Blocks not queued for read-ahead because budget_bytes were already queued or in flight.",
   "kvfs_prefetch_blocks_total", "fate=\"over_budget\"",
   [](const Snapshot& s) { return U(s.store.prefetch.over_budget); }},
  {"/prefetch/no_room_blocks", C, N,
   "Blocks queued for read-ahead but not read because the RAM tier was full and only blocks "
   "written or kept (not blocks read once) could have made room: the block pushed out would be "
   "as likely to be read soon, and its read would then cross the link instead.",
   "kvfs_prefetch_blocks_total", "fate=\"no_room\"",
   [](const Snapshot& s) { return U(s.store.prefetch.no_room); }},
  {"/prefetch/joined_reads", C, N,
   "Client reads of a block that waited for a read of it already in flight instead of reading "
   "it again.",
   "kvfs_joined_reads_total", "",
   [](const Snapshot& s) { return U(s.store.joined_reads); }},
  {"/prefetch/window_reads", C, N,
   "1 MiB windows of a segment read ahead across files, after a cold read of a file's end "
   "(segment_readahead in kvfs(8)).",
   "kvfs_prefetch_window_reads_total", "",
   [](const Snapshot& s) { return U(s.store.windows.reads); }},
  {"/prefetch/window_read_bytes", C, BY, "Bytes of those windows.", nullptr, "",
   [](const Snapshot& s) { return U(s.store.windows.read_bytes); }},
  {"/prefetch/window_hits", C, N, "Blocks a read took from a segment window (their hash checked).",
   "kvfs_prefetch_window_hits_total", "fate=\"hit\"",
   [](const Snapshot& s) { return U(s.store.windows.hits); }},
  {"/prefetch/window_hit_bytes", C, BY, "Bytes of those blocks.", nullptr, "",
   [](const Snapshot& s) { return U(s.store.windows.hit_bytes); }},
  {"/prefetch/window_mismatches", C, N,
   "Blocks whose bytes in a window did not match the index's hash (read again from the "
   "segment).",
   "kvfs_prefetch_window_hits_total", "fate=\"mismatch\"",
   [](const Snapshot& s) { return U(s.store.windows.mismatches); }},
  {"/prefetch/windows_unused", C, N, "Windows dropped with nothing taken from them.",
   "kvfs_prefetch_window_hits_total", "fate=\"unused_window\"",
   [](const Snapshot& s) { return U(s.store.windows.unused); }},

  {"/peers/file_hits", C, N, "Lookups that found a file another node owns.", nullptr, "",
   [](const Snapshot& s) { return U(s.store.peer_lookups); }},
  {"/peers/read_bytes", C, BY, "Bytes returned to readers from files other nodes own.",
   "kvfs_peer_read_bytes_total", "",
   [](const Snapshot& s) { return U(s.store.peer_read_bytes); }},
  {"/peers/imported_files", C, N,
   "Files of other nodes made visible here (by lookup or readdir).",
   "kvfs_peer_imported_files_total", "",
   [](const Snapshot& s) { return U(s.store.peer_imports); }},
  {"/peers/dropped_imports", C, N,
   "Files of other nodes forgotten here because their owner wrote a newer version, removed "
   "them or reclaimed their segment.",
   "kvfs_peer_dropped_imports_total", "",
   [](const Snapshot& s) { return U(s.store.peer_drops); }},
  {"/peers/released_imports", C, N,
   "Files of other nodes let go here once nothing referenced them (the kernel forgot them, or "
   "a listing made them visible a minute ago and nobody looked them up since); the next lookup "
   "makes them visible again, and their cached blocks stay in RAM.",
   "kvfs_peer_released_files_total", "",
   [](const Snapshot& s) { return U(s.store.peer_releases); }},
  {"/peers/unlinks_sent", C, N,
   "Other nodes' files unlinked here, each logged for its owner.", "kvfs_peer_unlinks_total",
   "dir=\"sent\"", [](const Snapshot& s) { return U(s.store.peer_unlinks); }},
  {"/peers/unlinks_applied", C, N,
   "This node's files removed because another node unlinked them.", "kvfs_peer_unlinks_total",
   "dir=\"applied\"", [](const Snapshot& s) { return U(s.store.peer_unlinks_applied); }},
  {"/peers/dirs_made", C, N, "Directories made here after a peer's.", nullptr, "",
   [](const Snapshot& s) { return U(s.store.peer_dirs); }},
  {"/peers/passes", C, N, "Passes over the other nodes' segment logs.",
   "kvfs_peer_log_passes_total", "",
   [](const Snapshot& s) { return U(s.store.peers.passes); }},
  {"/peers/pass_seconds", C, S,
   "Time spent in those passes (listing heads/ and, now and then, the segment dir; opening and "
   "reading the other nodes' segments that moved); divided by the passes, a pass's mean length.",
   "kvfs_peer_log_pass_seconds_total", "",
   [](const Snapshot& s) { return D(s.store.peers.pass_seconds); }},
  {"/peers/slowest_pass_seconds", G, S, "The longest pass since mount.", nullptr, "",
   [](const Snapshot& s) { return D(s.store.peers.slowest_pass_seconds); }},
  {"/peers/listings", C, N,
   "Listings of the segment dir by those passes (on NFS, READDIR calls in proportion to the "
   "segment files of all nodes).",
   "kvfs_peer_log_listings_total", "",
   [](const Snapshot& s) { return U(s.store.peers.listings); }},
  {"/peers/segment_opens", C, N,
   "Other nodes' segment files the passes opened (each an open and reads at the backing dir's "
   "server, and a stat unless the node's head said where its records end).",
   "kvfs_peer_log_segment_opens_total", "",
   [](const Snapshot& s) { return U(s.store.peers.segment_opens); }},
  {"/peers/head_listings", C, N,
   "Listings of heads/ by those passes: one name per node, which says what each node appends "
   "to, so that a pass opens only the segments that moved.",
   "kvfs_peer_log_head_listings_total", "",
   [](const Snapshot& s) { return U(s.store.peers.head_listings); }},
  {"/peers/head_renames", C, N,
   "Renames of this node's own head in heads/ (one per synced flush batch or closed segment "
   "that changed it).",
   "kvfs_peer_head_renames_total", "",
   [](const Snapshot& s) { return U(s.store.peers.head_renames); }},
  {"/peers/records", C, N, "Records read from the other nodes' segment logs.", nullptr, "",
   [](const Snapshot& s) { return U(s.store.peers.records); }},
  {"/peers/entries", C, N, "Entries (file versions, unlinks) in those records.", nullptr, "",
   [](const Snapshot& s) { return U(s.store.peers.entries); }},
  {"/peers/pass_errors", C, N,
   "Passes over the other nodes' segment logs that met an error (logged).",
   "kvfs_peer_log_pass_errors_total", "",
   [](const Snapshot& s) { return U(s.store.peers.errors); }},

  {"/dirty_bytes", G, BY,
   "Bytes waiting to be flushed to the backing dir (the same as ram.dirty_bytes).",
   "kvfs_dirty_bytes", "",
   [](const Snapshot& s) { return U(s.store.ram.dirty_bytes); }},
  {"/flush/queued", G, N, "Files queued for the flushers.", "kvfs_flush_queued", "",
   [](const Snapshot& s) { return U(s.store.queued); }},
  {"/flush/batches", C, N, "Flush batches (one fdatasync each).", "kvfs_flush_batches_total", "",
   [](const Snapshot& s) { return U(s.store.flush_batches); }},
  {"/flush/files", C, N,
   "File versions committed by the flushers (a file written, closed and written again counts "
   "twice).",
   "kvfs_flushed_files_total", "",
   [](const Snapshot& s) { return U(s.store.flushed_files); }},
  {"/flush/bytes", C, BY, "Bytes flushed.", "kvfs_flushed_bytes_total", "",
   [](const Snapshot& s) { return U(s.store.flushed_bytes); }},
  {"/flush/in_flight_limit", G, N,
   "Flush batches that may write to the backing dir at once now: sized from the link's measured "
   "rate and round trip (flush_pacing), at most flush_threads; 1 while giving way to reads.",
   "kvfs_flush_in_flight_limit", "",
   [](const Snapshot& s) { return U(s.store.pacer.limit); }},
  {"/flush/in_flight", G, N, "Flush batches writing to the backing dir now.",
   "kvfs_flush_in_flight", "",
   [](const Snapshot& s) { return U(s.store.pacer.writing); }},
  {"/flush/link_bytes_per_second", G, N,
   "The backing link's rate as the flush measures it (bytes per second; 0 until measured).",
   "kvfs_flush_link_bytes_per_second", "",
   [](const Snapshot& s) { return U(uint64_t(s.store.pacer.rate_gbps * 1e9)); }},
  {"/flush/link_round_trip_seconds", G, S,
   "A flush batch's time beyond carrying its bytes (fdatasync, index commit), as measured.",
   "kvfs_flush_link_round_trip_seconds", "",
   [](const Snapshot& s) { return D(s.store.pacer.fixed_ms / 1e3); }},
  {"/flush/gave_way", C, N,
   "Times the flush gave way to client reads while nothing was urgent (flush_pacing): a batch "
   "held back before it started, or paused between its writes.",
   "kvfs_flush_gave_way_total", "",
   [](const Snapshot& s) { return U(s.store.pacer.gave_way); }},
  {"/flush/gave_way_seconds", C, S, "The time the flush gave way for.",
   "kvfs_flush_gave_way_seconds_total", "",
   [](const Snapshot& s) { return D(double(s.store.pacer.gave_way_ns) / 1e9); }},

  {"/evictions/capacity", C, N,
   "Files evicted because the backing dir was over its high watermark.",
   "kvfs_evicted_files_total", "reason=\"capacity\"",
   [](const Snapshot& s) { return U(s.evict.evicted_capacity); }},
  {"/evictions/admin", C, N, "Files evicted by kvfs-admin evict.", "kvfs_evicted_files_total",
   "reason=\"admin\"", [](const Snapshot& s) { return U(s.evict.evicted_admin); }},
  {"/evictions/tmp", C, N, "Orphaned temporary files removed.", "kvfs_evicted_files_total",
   "reason=\"tmp\"", [](const Snapshot& s) { return U(s.evict.evicted_tmp); }},
  {"/evictions/reclaim", C, N, "Files evicted with a reclaimed segment.",
   "kvfs_evicted_files_total", "reason=\"reclaim\"",
   [](const Snapshot& s) { return U(s.evict.evicted_reclaim); }},
  {"/evictions/bytes", C, BY, "Bytes of the files evicted.", "kvfs_evicted_bytes_total", "",
   [](const Snapshot& s) { return U(s.evict.evicted_bytes); }},
  {"/evictions/dirs_removed", C, N, "Directories removed after eviction emptied them.",
   "kvfs_evicted_dirs_total", "",
   [](const Snapshot& s) { return U(s.evict.dirs_removed); }},
  {"/evictions/segments_deleted", C, N, "Segment files deleted.", "kvfs_segments_deleted_total",
   "", [](const Snapshot& s) { return U(s.evict.segments_deleted); }},
  {"/evictions/segments_retiring", G, N,
   "With node_id: reclaimed segments in their grace, renamed and not yet deleted.", nullptr, "",
   [](const Snapshot& s) { return U(s.evict.segments_retiring); }},
  {"/evictions/retiring_bytes", G, BY,
   "Bytes of reclaimed segments in their grace before deletion (shared dirs; counted in the "
   "capacity).",
   "kvfs_segments_retiring_bytes", "",
   [](const Snapshot& s) { return U(s.evict.retiring_bytes); }},
  {"/evictions/reclaim_copied_bytes", C, BY, "Bytes copied forward by segment reclamation.",
   "kvfs_reclaim_copied_bytes_total", "",
   [](const Snapshot& s) { return U(s.evict.reclaim_copied_bytes); }},

  {"/index/rebuilt", G, F,
   "Whether this mount rebuilt the index from the segments (it was missing, another backing "
   "dir's, or unreadable).",
   nullptr, "", [](const Snapshot& s) { return B(s.rebuilt_index); }},
  {"/index/caught_up_segments", G, N,
   "Segments with records the index had not applied at mount (a crash, or another node's "
   "writes).",
   nullptr, "", [](const Snapshot& s) { return U(s.catch_up.segments); }},
  {"/index/caught_up_records", G, N, "Records the mount's catch-up read.", nullptr, "",
   [](const Snapshot& s) { return U(s.catch_up.records); }},
  {"/index/caught_up_bytes", G, BY, "Bytes of the records the mount's catch-up read.", nullptr, "",
   [](const Snapshot& s) { return U(s.catch_up.bytes); }},
  {"/index/caught_up_entries", G, N, "Entries newer than the index's that the catch-up applied.",
   nullptr, "", [](const Snapshot& s) { return U(s.catch_up.applied); }},
  {"/index/caught_up_seconds", G, S, "How long the mount's catch-up took.", nullptr, "",
   [](const Snapshot& s) { return D(s.catch_up.seconds); }},

  {"/errors/checksum", C, N, "Blocks that failed their checksum.", "kvfs_errors_total",
   "kind=\"checksum\"", [](const Snapshot& s) { return U(s.store.checksum_errors); }},
  {"/errors/io", C, N, "I/O errors on the backing dir.", "kvfs_errors_total", "kind=\"io\"",
   [](const Snapshot& s) { return U(s.store.io_errors); }},
  {"/errors/enospc", C, N, "Flushes refused for lack of space.", "kvfs_errors_total",
   "kind=\"enospc\"",
   [](const Snapshot& s) { return U(s.store.enospc_errors + s.evict.enospc); }},
  {"/errors/dropped_files", C, N,
   "Files dropped because their data failed a checksum or could not be read.",
   "kvfs_dropped_files_total", "",
   [](const Snapshot& s) { return U(s.store.dropped_files); }},
};

// Families of several series: their HELP says what the label tells apart.
struct Family {
  const char* prom;
  const char* help;
};
const Family kFamilies[] = {
  {"kvfs_file_lookups_total",
   "Lookups of file names, by result: hit (a file) or miss (no such name)."},
  {"kvfs_file_hits_total",
   "File lookups that found a file, by its owner: this node (own) or another node (peer)."},
  {"kvfs_read_served_bytes_total",
   "Bytes returned to readers, by the tier that held them (ram: hit, backing: miss)."},
  {"kvfs_prefetch_blocks_total",
   "Blocks read ahead, by fate: used (a client read them), wasted (left RAM unread), cancelled "
   "(evicted or rewritten before the read), over_budget (not queued), no_room (not read: only "
   "blocks written or kept could have made room)."},
  {"kvfs_prefetch_window_hits_total",
   "Blocks served from a segment window (their hash checked), and windows dropped unused."},
  {"kvfs_peer_unlinks_total",
   "Unlinks across nodes: of other nodes' files here (sent), of this node's files by another "
   "node (applied)."},
  {"kvfs_evicted_files_total", "Files evicted, by reason."},
  {"kvfs_errors_total", "Errors, by kind."},
};

const NodeDef kNodeDefs[] = {
  {"segments", N, "Its segment files, as last opened.", nullptr,
   [](const PeerNodeStats& n) { return U(n.segments); }},
  {"segment_bytes", BY, "Their bytes.", nullptr,
   [](const PeerNodeStats& n) { return U(n.segment_bytes); }},
  {"files", N, "Regular files it has, as this node has read its log.", "kvfs_peer_files",
   [](const PeerNodeStats& n) { return U(n.files); }},
  {"bytes", BY, "Bytes of those files.", "kvfs_peer_bytes",
   [](const PeerNodeStats& n) { return U(n.bytes); }},
  {"read_bytes", BY, "Bytes of its segments read so far.", "kvfs_peer_log_read_bytes",
   [](const PeerNodeStats& n) { return U(n.read_bytes); }},
  {"behind_bytes", BY, "Bytes of records it has begun and this node has not read complete.",
   "kvfs_peer_behind_bytes", [](const PeerNodeStats& n) { return U(n.behind_bytes); }},
  {"lag_seconds", S, "Seconds since this node last read the whole of its segment log.",
   "kvfs_peer_lag_seconds", [](const PeerNodeStats& n) { return D(n.lag_s); }},
  {"max_seq", N, "The newest change of it read here.", nullptr,
   [](const PeerNodeStats& n) { return U(n.max_seq); }},
};
// clang-format on

// A value in the JSON type its unit calls for.
json value_json(Unit u, const Value& v) {
  if (u == Unit::kFlag) return v.u != 0;
  if (u == Unit::kSeconds || u == Unit::kRatio) return v.d;
  return v.u;
}

}  // namespace

std::span<const Def> defs() {
  return kDefs;
}
std::span<const NodeDef> node_defs() {
  return kNodeDefs;
}

const Def* find(std::string_view path) {
  for (const Def& d : kDefs)
    if (path == d.path) return &d;
  return nullptr;
}

std::string family_help(std::string_view prom) {
  for (const Family& f : kFamilies)
    if (prom == f.prom) return f.help;
  for (const Def& d : kDefs)
    if (d.prom && prom == d.prom) return d.help;
  return {};
}

json to_json(const Snapshot& s) {
  json r = json::object();
  for (const Def& d : kDefs) r[json::json_pointer(d.path)] = value_json(d.unit, d.get(s));
  json nodes = json::array();
  for (const PeerNodeStats& n : s.store.peers.nodes) {
    json o{{"node", n.node}};
    for (const NodeDef& d : kNodeDefs) o[d.key] = value_json(d.unit, d.get(n));
    nodes.push_back(std::move(o));
  }
  r["peers"]["nodes"] = std::move(nodes);
  return r;
}

bool number_at(const json& reply, const Def& d, double* out) {
  const json::json_pointer p(d.path);
  if (!reply.contains(p)) return false;
  const json& v = reply.at(p);
  if (v.is_boolean()) {
    *out = v.get<bool>() ? 1.0 : 0.0;
    return true;
  }
  if (!v.is_number()) return false;
  *out = v.get<double>();
  return true;
}

const char* unit_name(Unit u) {
  switch (u) {
    case Unit::kBytes: return "bytes";
    case Unit::kSeconds: return "seconds";
    case Unit::kRatio: return "ratio";
    case Unit::kFlag: return "flag";
    default: return "count";
  }
}

namespace {

// Plain help text as roff: a hyphen is \- (not a hyphenation point), a
// backslash is \e, and no line may begin with '.' or '\''.
std::string roff(std::string_view text) {
  std::string o;
  for (char c : text) {
    if (c == '-')
      o += "\\-";
    else if (c == '\\')
      o += "\\e";
    else
      o += c;
  }
  if (!o.empty() && (o[0] == '.' || o[0] == '\'')) o.insert(0, "\\&");
  return o;
}

std::string dotted(const char* path) {
  std::string n = path + 1;
  std::replace(n.begin(), n.end(), '/', '.');
  return n;
}

}  // namespace

std::string man_list() {
  std::string o;
  for (const Def& d : kDefs) {
    o += ".TP\n.B " + roff(dotted(d.path)) + "\n" + roff(d.help) + "\n";
    o += "(" + std::string(d.type == Type::kCounter ? "counter" : "gauge") + ", " +
         unit_name(d.unit);
    if (d.prom)
      o += "; \\fB" + roff(d.prom) + (*d.labels ? "{" + roff(d.labels) + "}" : "") + "\\fR";
    o += ")\n";
  }
  o += ".TP\n.B peers.nodes\nOne object per peer node of a shared backing dir:\n.B node\n"
       "(its name), and\n.RS\n";
  for (const NodeDef& d : kNodeDefs) {
    o += ".TP\n.B " + roff(d.key) + "\n" + roff(d.help) + " (" + unit_name(d.unit);
    if (d.prom) o += "; \\fB" + roff(d.prom) + "{peer=\"\\fINODE\\fB\"}\\fR";
    o += ")\n";
  }
  o += ".RE\n";
  return o;
}

}  // namespace kvfs::stats
