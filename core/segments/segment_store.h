// SPDX-License-Identifier: Apache-2.0
// SegmentStore: everything kvfs keeps in the backing directory: the
// superblock, the lock and the segment files, named as core/backing/disk_layout.h
// says.
//
// No client-chosen name ever becomes a path here. Segment names carry a node
// id. Opened with a node_id, a store knows only its own node's segments:
// several nodes share a backing dir side by side, and nothing in it is
// written, rewritten or deleted except by the node that named it. Without
// one it owns the whole dir, as before nodes (disk_layout.h).
//
// Every backing call is marked in the BackingIo (when given one), and those a
// client waits for (reads, segment deletes) run under its deadline. The
// segment files are reached through a BackingFs (backing_fs.h): the system
// calls, or in a test a disk that fails on cue.
//
// Thread-safe: read_extent() from any thread; each SegmentWriter is used by
// one flusher thread at a time. Guarded members name their mutex; mu_ is
// never held across a backing call (an NFS stall would stop every reader).
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/backing/backing_fs.h"
#include "core/backing/backing_io.h"
#include "core/backing/disk_layout.h"
#include "core/config/config.h"
#include "core/index/index.h"
#include "core/records/record.h"
#include "core/records/segment_scan.h"
#include "core/space/space_budget.h"
#include "core/util/buffer.h"
#include "core/util/status.h"

struct io_uring;

namespace kvfs {

struct SegmentInfo {
  uint64_t id = 0;
  uint64_t bytes = 0;  // file size
  uint64_t live = 0;   // block bytes (4 KiB-padded) that some inode points at
  bool open = false;   // a writer is appending to it
  std::string path;
  // The segment log: complete records end at `valid`; the index has applied
  // them up to `applied` (index.h, S keys). A segment is deleted only when
  // applied == valid: every record in it is known, so none is lost unseen.
  uint64_t valid = 0;
  uint64_t applied = 0;
  uint64_t min_seq = 0, max_seq = 0;  // of the entries in its records (0: none)
};

class HeadPublisher;
class SegmentWriter;

class SegmentStore : public SpaceUsage {
 public:
  // Creates the layout on first use, takes the locks (Busy if another kvfs
  // of this node, or one owning the dir, holds them) and lists the existing
  // segments (the node's own, when shared()).
  // io (optional; offline tools have none) bounds and marks backing calls.
  // fs (optional: the system calls) reaches the segment files; it must
  // outlive the store and every read its deadline left running.
  static Result<std::unique_ptr<SegmentStore>> Open(const StoreConfig& cfg, BackingIo* io = nullptr,
                                                    BackingFs* fs = nullptr);
  ~SegmentStore() override;

  const std::string& backing_id() const { return backing_id_; }
  const std::string& dir() const { return dir_; }
  const std::string& node() const { return node_; }
  // Opened with a node_id: one of the nodes sharing the dir, which knows
  // only its own segments. Otherwise the dir's single owner, which knows all.
  bool shared() const { return shared_; }
  bool direct_io() const { return direct_io_; }
  // The calls its files are reached through (PeerLog reads peers' with it).
  BackingFs& fs() const { return *fs_; }

  // fsync of a directory: the names made or removed in it are durable.
  // fs: the calls it makes (nullptr: the real ones).
  static Status sync_dir(const std::string& dir, BackingFs* fs = nullptr);

  // Starts a new, empty segment with the next id.
  Result<std::unique_ptr<SegmentWriter>> new_writer();
  // Ids up to `id` are never given to a new segment, even where their files
  // are gone: an index that still holds a position in a deleted segment
  // (restored from a copy, say) would otherwise skip the start of a new
  // segment that reused its id.
  void reserve_ids_through(uint64_t id);

  // Reads one block extent into dst (capacity >= align_up(ext.len)) and
  // checks its hash: Corruption on a mismatch or a short segment, TimedOut
  // past io_timeout (the read goes on holding dst; dst's bytes are then
  // undefined to the caller).
  Status read_extent(const Extent& ext, const BufRef& dst);
  // Reads up to len bytes of segment id from off (both 4 KiB multiples)
  // into dst, unchecked: *got is what the file had (less at its end). For
  // read-ahead windows (segment_windows.h), whose bytes are checked against
  // an extent's hash when a read takes them.
  Status read_range(uint64_t id, uint64_t off, size_t len, const BufRef& dst, size_t* got);

  // A peer's segment, read only (peer_log.h), under an id of its own: the
  // high bit set, never one of this node's, so that extents pointing into it
  // are read, cached and read ahead like any other. The same path always
  // gets the same id. reopen_foreign(): the next read opens the file again,
  // so it sees what the peer appended since (close-to-open). A forgotten id
  // reads as Corruption ("missing"), as a deleted segment of one's own.
  static constexpr uint64_t kForeignBit = 1ull << 63;
  uint64_t foreign_segment(const std::string& path);
  void reopen_foreign(uint64_t id);
  void forget_foreign(uint64_t id);
  // Whether a read found a foreign segment's file gone since the last call
  // (PeerLog then lists the dir at its next pass).
  bool take_foreign_missing();

  std::vector<SegmentInfo> list() const;
  bool has_segment(uint64_t id) const;
  // Deleting a segment, in two steps: forget_segment() drops it from the
  // store (no read can start on it after) and returns its path ("" if
  // unknown); unlink_segment() removes the file, under the deadline
  // (TimedOut leaves the unlink running). The caller keeps readers out only
  // for the first: an unlink on NFS may take long.
  std::string forget_segment(uint64_t id);
  Status unlink_segment(const std::string& path);
  // Instead of unlink_segment, in a shared dir: renames a forgotten
  // segment to its retired name (disk_layout.h) for a grace period, after
  // which the evictor unlinks it. Peers stop listing it at once, so they
  // drop what pointed into it, and a read they have in flight on an open
  // descriptor still gets its bytes (NFS keeps a renamed file's handle).
  // Returns the new path.
  Result<std::string> retire_segment(const std::string& path);
  // A retired segment file is kept until due_ns (the caller's clock) and
  // counted in used_bytes() until deleted: its bytes are on the disk, under
  // the capacity. Open keeps those it finds (a grace cut short by a
  // restart) with due_ns 0 until the owner sets their due time.
  void retire_later(std::string path, uint64_t bytes, int64_t due_ns);
  void set_due_of_found_retired(int64_t due_ns);
  // Deletes the retired files due by now, then the oldest others until
  // free_bytes are freed (room the capacity needs: a grace is cut short
  // before any live file is evicted). Returns how many it deleted; one it
  // cannot delete is kept (logged) and tried again next time.
  uint64_t delete_retired(int64_t now, uint64_t free_bytes);
  struct RetiringStats {
    uint64_t files = 0, bytes = 0;
  };
  RetiringStats retiring() const;

  // Walks the records of one segment in order from offset `from` (a record
  // start), stopping quietly at the first torn or corrupt record (the tail of
  // a crash). fn gets the record's offset, header and decoded entries;
  // valid_bytes the end of the last complete record.
  //
  // kBlocks also reads every block a record's snapshots place inside that
  // record and checks its hash, and skips (counts in *damaged, no fn call)
  // a record that fails: a record's header, entries and blocks are separate
  // writes that a crash can leave half done, and inside a preallocated (or,
  // without fallocate, sparse) file the missing part reads as zeros, not as
  // a short file. Skipped, not the end: the same test finds a block damaged
  // later (bit rot), and the records after it still count. What will be
  // applied without having been committed (a catch-up, a rebuild) must pass
  // this; records only walked (reclaim) need not.
  using Check = ScanCheck;
  using RecordFn = kvfs::RecordFn;
  Status scan(uint64_t id, const RecordFn& fn, uint64_t* valid_bytes = nullptr, uint64_t from = 0,
              Check check = Check::kHeaders, uint64_t* damaged = nullptr);

  // The segment log's state as the index knows it (catch-up at mount), and
  // as the flushers extend it: records complete up to `valid`, applied to
  // the index up to `applied`.
  void set_log_state(uint64_t id, uint64_t valid, const SegmentLogState& applied);
  void note_applied(uint64_t id, uint64_t applied);
  uint64_t applied(uint64_t id) const;
  // Lowest min_seq of every segment but `except` (UINT64_MAX if none has
  // entries): no record older than that remains elsewhere.
  uint64_t min_seq_except(uint64_t except) const;

  // How far ahead of its writes an open segment is allocated.
  uint64_t prealloc_step() const;

  // This node's head renames so far (head_publisher.h; 0 when it has none:
  // not shared, or read-only).
  uint64_t head_renames() const;
  // Publishes the head if there is one: after a sync or a close (here),
  // and on a timer what a failed or held-back rename left (PeerLog).
  void publish_head();
  void publish_pending_head();

  // Disk usage of all segments, the retired ones included, in bytes.
  uint64_t used_bytes() const override;
  // The same without the retired ones.
  uint64_t segment_bytes() const;

  // Live-data accounting, kept by the owners of extents (inode slots): a
  // segment whose live bytes reach zero holds nothing anyone can read.
  void add_live(const Extent& e);
  void remove_live(const Extent& e);
  uint64_t live_bytes() const override;

 private:
  friend class SegmentWriter;
  // A segment file open for reads. Shared with the reads using it, so that
  // deleting the segment (or a read left behind by its deadline) never
  // leaves a read on a closed, or reused, descriptor.
  struct ReadFd {
    BackingFs* fs = nullptr;
    int fd = -1;
    std::string name;  // for messages: the id, or a peer segment's path
    ~ReadFd();
  };
  SegmentStore() = default;
  std::string seg_path(uint64_t id) const;
  BackingIo::Op track(std::string what) const;
  Result<std::shared_ptr<ReadFd>> read_fd(uint64_t id);
  void note_size(uint64_t id, uint64_t bytes);
  // A writer's segment closed, or one that never opened: out of the open
  // set and of the head.
  void note_closed(uint64_t id);
  // For the head: the newest id made, the open segments and their
  // complete records.
  layout::NodeHead head_state() const;

  std::string dir_;  // <backing>/segments
  std::string node_;
  uint64_t segment_size_ = 0;
  std::string backing_id_;
  bool direct_io_ = false;
  bool shared_ = false;
  int lock_fd_ = -1;         // flock()ed exclusively: kvfs.<node>.lock, or kvfs.lock if !shared_
  int shared_lock_fd_ = -1;  // kvfs.lock, flock()ed shared (shared_ only)
  BackingIo* io_ = nullptr;
  BackingFs* fs_ = BackingFs::posix();

  struct Retired {
    std::string path;
    uint64_t bytes = 0;
    int64_t due_ns = 0;
  };
  // Oldest first. A leaf lock: nothing is taken under it, no I/O under it.
  mutable std::mutex retired_mu_;
  std::vector<Retired> retired_;  // guarded by retired_mu_
  std::atomic<uint64_t> retired_bytes_{0};
  mutable std::shared_mutex mu_;
  std::unordered_map<uint64_t, SegmentInfo> segs_;  // guarded by mu_
  std::set<uint64_t> open_;                         // ids of segs_ with open set; guarded by mu_
  std::unordered_map<uint64_t, std::shared_ptr<ReadFd>> read_fds_;  // guarded by mu_
  uint64_t next_id_ = 1;                                            // guarded by mu_
  // The newest id whose file exists (or existed): the head's last_id. Not
  // next_id_ - 1, which an id taken and not yet created would put ahead of
  // the listing a peer makes for it. Guarded by mu_.
  uint64_t made_id_ = 0;
  std::unordered_map<uint64_t, std::string> foreign_;      // guarded by mu_
  std::unordered_map<std::string, uint64_t> foreign_ids_;  // guarded by mu_
  uint64_t next_foreign_ = 1;                              // guarded by mu_
  std::atomic<bool> foreign_missing_{false};
  // Shared and writable only; set at Open, then only read.
  std::unique_ptr<HeadPublisher> head_;
};

// Appends records to one segment (segment_writer.cc). Writes are queued on an io_uring (plain
// pwrite when io_uring is unavailable, or the store's BackingFs is not the
// system calls: backing_fs.h) and complete at sync(), which also
// fdatasyncs: data is durable before the caller commits the index.
// Not thread-safe: one flusher owns it.
class SegmentWriter {
 public:
  ~SegmentWriter();
  uint64_t id() const { return id_; }
  uint64_t size() const { return off_; }
  // What the records appended so far hold (end = size()).
  SegmentLogState log_state() const { return state_; }

  struct Block {
    ConstBufRef buf;  // capacity >= align_up(len); bytes past len are zeroed here
    uint32_t len = 0;
  };
  // Queues one record. Before the entries are encoded, fill (if set) gets
  // each block's segment offset so that snapshots can point at their own
  // blocks; it must not change the encoded length (extents are fixed-width).
  // The buffers must stay unchanged until sync() returns.
  using FillFn = std::function<void(const std::vector<uint64_t>& block_offs)>;
  Status append(RecordType type, std::vector<RecordEntry>& entries,
                const std::vector<Block>& blocks, const FillFn& fill);
  // Waits until every record appended so far is written (not synced): what
  // a batch spends carrying bytes, apart from its sync (FlushPacer).
  Status drain();
  Status sync();
  // Where a flush gives way to client reads inside a batch
  // (FlushPacer::Slot). Between the runs of writes that append() and drain()
  // hand to the kernel (each up to kRunBytes; pwrite writes: every
  // kRunBytes), wait() may wait; while bounded() holds, at most
  // kRunsInFlight runs are on the link at once, so that a wait holds back
  // what is not yet there (not bounded: as many as the batch has, the
  // flush at full speed). Empty functions: never.
  struct Pause {
    std::function<bool()> bounded;
    std::function<void()> wait;
  };
  void set_pause(Pause p) { pause_ = std::move(p); }
  static constexpr uint64_t kRunBytes = 8 << 20;
  static constexpr unsigned kRunsInFlight = 2;
  // A batch failed after appending from `end` on: the file is cut back to
  // `end` when the writer is destroyed (and deleted if that leaves nothing),
  // so that no record of it is left for a later catch-up to apply, nor dead
  // room that no pass can reclaim (its records were never applied).
  void discard_from(uint64_t end) { keep_ = std::min(keep_, end); }

 private:
  friend class SegmentStore;
  SegmentWriter(SegmentStore* store, uint64_t id, int fd);
  Status submit(const char* data, size_t len, uint64_t off);
  // Queues the run of contiguous writes gathered so far as one writev.
  Status queue_run();
  Status preallocate(uint64_t end);
  Status reap(bool all);

  SegmentStore* store_;
  BackingFs* fs_;  // the store's
  uint64_t id_;
  int fd_;
  uint64_t off_ = 0;
  uint64_t keep_ = UINT64_MAX;  // discard_from
  SegmentLogState state_;       // of the records appended (end, records, seqs)
  uint64_t allocated_ = 0;      // fallocate()d size
  bool no_fallocate_ = false;
  std::unique_ptr<io_uring> ring_;
  unsigned inflight_ = 0;
  // Contiguous writes gathered into one writev (io_uring only): a backing
  // dir a round trip away (NFS) gets a few large requests, which its client
  // splits into RPCs in flight together, instead of a queue of 1 MiB writes
  // that io_uring may issue one after another to one file.
  std::vector<iovec> run_;
  uint64_t run_off_ = 0, run_len_ = 0;
  std::deque<std::vector<iovec>> queued_iovs_;  // of queued runs, kept until reaped
  Pause pause_;
  uint64_t since_pause_ = 0;  // pwrite bytes since pause_ was last called
  Status failed_;
  std::vector<BufRef> headers_;      // kept alive until sync
  std::vector<ConstBufRef> pinned_;  // block buffers in flight
};

}  // namespace kvfs
