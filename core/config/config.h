// SPDX-License-Identifier: Apache-2.0
// StoreConfig: every knob of the core store, with its default and the reason.
//
// One plain struct, filled by fs/options.cc from the -o mount options through
// the option table (core/config/option_table.h), checked by validate() before
// anything touches the disk, and again, with a change applied, before
// `kvfs-admin config` changes a setting at run time.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/util/status.h"

namespace kvfs {

struct StoreConfig {
  // The backing directory (usually shared storage). Holds the superblock, the
  // lock file and the segment files; nothing else, and never a client name.
  std::string backing_dir;

  // Where RocksDB lives. Empty: a per-backing-dir folder on local disk
  // (default_index_dir()), because RocksDB on NFS is discouraged.
  std::string index_dir;

  // RAM tier capacity: file data in memory, dirty and clean together.
  uint64_t ram_size = 1ull << 30;  // 1 GiB

  // RAM tier memory faulted in ahead, in the background, at mount (fresh
  // memory is slow to touch in VMs: the first blocks then cost a memcpy).
  // Counted in ram_size, never more than it. 0 turns it off.
  uint64_t ram_prefault = 1ull << 30;  // 1 GiB (or ram_size if smaller)

  // Read-ahead into the RAM tier (prefetcher.h): bytes queued or in flight
  // at most (0 turns it off), and the threads that keep them in flight.
  uint64_t prefetch_bytes = 256ull << 20;  // 256 MiB
  unsigned prefetch_threads = 8;
  // Read-ahead along a segment past a cold file's end (segment_windows.h):
  // bytes ahead at most, in 1 MiB windows (0 turns it off).
  uint64_t segment_readahead = 6ull << 20;  // 6 MiB

  // A segment file is closed and a new one started past this size.
  uint64_t segment_size = 256ull << 20;  // 256 MiB

  // Background flusher threads; each owns one open segment, so two overlap
  // one batch's fdatasync with the next batch's writes. 0: not given,
  // default_flush_threads() of the backing dir at mount.
  unsigned flush_threads = 0;

  // The flushers' batches in flight sized from the backing link's measured
  // rate and round trips (at most flush_threads), and the flush giving way
  // while clients read (core/flush/flush_pacer.h). Off: flush_threads always.
  bool flush_pacing = true;

  // A flush batch closes at this many bytes of data; larger batches mean fewer
  // fdatasync calls, smaller ones a shorter wait for fsync callers.
  uint64_t flush_batch_bytes = 64ull << 20;

  // Use O_DIRECT for segment I/O when the backing filesystem accepts it.
  bool direct_io = true;

  // Largest file kvfs accepts; writes past it fail with EFBIG.
  uint64_t max_file_size = 1ull << 40;  // 1 TiB

  // Threads that read the index at startup. 0: one per CPU (at most 8) once
  // the index holds 100,000 inodes, one below that (a few milliseconds).
  unsigned load_threads = 0;

  // How long opening the backing dir waits for a kvfs that was unmounted
  // and is still flushing to release it (a remount right after umount).
  double lock_wait_s = 600;

  // No client call waits longer than this for the backing dir (NFS servers
  // stall): a read that needs it fails with EIO, a writer waiting for the
  // flushers with EIO, and the stall is logged and shown in the stats.
  double io_timeout_s = 30;

  // Read-only mount: every change fails with EROFS, nothing is flushed.
  bool read_only = false;
  Status check_writable() const { return read_only ? Status::ReadOnly() : Status::OK(); }

  // --- capacity and eviction (evictor.h) ---
  // Bytes kvfs may keep in the backing dir, segments included. 0: 80 % of the
  // space available to kvfs when it mounts (its segments plus the free space
  // of the backing filesystem).
  uint64_t capacity = 0;
  // Eviction starts above high_watermark * capacity and stops at
  // low_watermark * capacity, so that it runs in batches.
  double high_watermark = 0.95;
  double low_watermark = 0.85;
  // A file opened, looked up, stat'ed, read or touched within this many
  // seconds is never evicted (llm-d cannot tell a file that vanished between
  // its stat and its read from a good one).
  double evict_grace_s = 60;
  // Added to the grace: how long the kernel may answer lookups and stats from
  // its own caches without asking kvfs (the FUSE entry/attr timeouts).
  double kernel_cache_s = 0;
  // A segment whose live data falls under this fraction is reclaimed: its
  // recently used files copied forward, the rest evicted with it.
  // 0.2: write amplification about 1.1 for a better hit ratio than deleting
  // only empty segments (kvfs-core-bench policy, bench/README.md).
  double reclaim_ratio = 0.2;
  // Housekeeping: orphaned "*.tmp" and ".o_direct_probe_*" files older than
  // this are removed; directories emptied by eviction are removed.
  double tmp_max_age_s = 3600;
  bool clean_tmp = true;
  bool clean_empty_dirs = true;

  // Given, this kvfs is one of the nodes sharing the backing dir under this
  // name (segment names, its lock; core/backing/disk_layout.h): each needs its own.
  // Empty: it owns the dir alone and names its segments after the host
  // (default_node_id()).
  std::string node_id;
  // With node_id: every peer_poll_s the other nodes' segment logs are read
  // for what they committed since (core/peers/peer_log.h).
  double peer_poll_s = 0.2;
  // With node_id: a reclaimed segment is renamed and deleted only this long
  // after, so that the peers reading it have moved on (Evictor).
  double segment_grace_s = 5;

  // Set by the daemon, not an option: written into the lock file it holds
  // (the node's, or kvfs.lock), so that a second daemon can tell one still
  // mounted (refused at once) from one that is unmounted and exiting
  // (waited for).
  std::string mount_point;

  // Every rule on the settings: each option's range from the table, then the
  // rules between options. The one check for mount options and for runtime
  // changes alike; Invalid names the first setting that breaks a rule.
  Status validate() const;
};

uint64_t machine_memory();    // physical memory in bytes (0 if unknown)
uint64_t available_memory();  // MemAvailable of /proc/meminfo in bytes (0 if unknown)

// Whether dir is on a filesystem whose requests cross a network (NFS, SMB,
// Ceph, Lustre, GPFS, 9p, FUSE, ...), by statfs's f_type; false if unknown.
bool on_network_fs(const std::string& dir);
// flush_threads when not given: 4 on a network filesystem, where every write
// and COMMIT waits a round trip and more flushers keep more of the link busy
// while one waits on its fdatasync; 2 on a local disk, where more flushers
// only interleave more segments, which later loads pay for (bench/README.md).
unsigned default_flush_threads(const std::string& backing_dir);

// "64M", "1G", "4096", "1.5T" -> bytes. K/M/G/T are powers of 1024.
std::optional<uint64_t> parse_size(const std::string& s);
std::string format_size(uint64_t bytes);

// The default index location for a backing dir id: /var/lib/kvfs/<id> for
// root, $XDG_STATE_HOME/kvfs/<id> (or ~/.local/state/kvfs/<id>) otherwise;
// with ".<node_id>" appended when a node_id is given, so that the nodes of
// one backing dir on one host keep apart.
std::string default_index_dir(const std::string& backing_id, const std::string& node_id = "");

// Letters, digits, '-' and '_': what a node_id (any name option) may hold.
bool is_name_char(char c);
bool is_name(const std::string& v);
// gethostname(), as it is.
std::string host_name();
// A host name's name characters ("node" if none): the name a kvfs without
// node_id gives its segments.
std::string node_id_of_host(const std::string& host);
// node_id_of_host() of this host.
std::string default_node_id();
// cfg.node_id, or default_node_id() when it is empty.
std::string node_id_of(const StoreConfig& cfg);

}  // namespace kvfs
