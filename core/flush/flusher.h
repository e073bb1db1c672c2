// SPDX-License-Identifier: Apache-2.0
// Flusher: background threads that turn dirty inodes into segment records
// and index commits (write coalescing).
//
// One pass of a flusher thread: take queued inodes until flush_batch_bytes,
// capture each (dirty buffers + a snapshot of its metadata, under its lock),
// append them as records to the thread's own open segment together with the
// journal's pending metadata entries, fdatasync once, commit every snapshot
// in one RocksDB WriteBatch, then turn the written buffers into clean cache
// entries. Data first, index second: a crash between the two leaves records
// the index does not point to, never an index entry without its data.
//
// Files still open for writing are left alone unless fsync asks for them or
// the RAM tier is full of dirty data; then their dirty blocks are written out
// ahead (kBlocks records) without a commit, so a file larger than RAM can be
// written, and is committed only when it is complete (closed or fsynced).
// "Closed" is the client's close() (OpenCounts::active_writers), not the kernel's
// release, which comes later and in the background.
//
// Owns each file's FlushState (Inode::flush, flush_state.h): queued, in
// flight, committed or failed change only here, through the FlushKey
// transitions; the other parts report changes and wait on marks.
//
// Thread-safe. Lock order: Namespace::commit_mu_ (shared, for a capture and
// a commit) -> Inode::mu -> q_mu_ (the whole
// of core/'s order is in block_store.h). Waiting for room (SpaceBudget) is
// done with no lock held, as its protocol says (space_budget.h).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <vector>

#include "core/flush/flush_pacer.h"
#include "core/index/index.h"
#include "core/inode/inode.h"
#include "core/records/record.h"
#include "core/space/space_budget.h"
#include "core/util/status.h"

namespace kvfs {

class BackingIo;
class Clock;
class FileData;
class Namespace;
class RamTier;
class ReadLoad;
class SegmentStore;
class SegmentWriter;
class SeqCounter;
struct StoreConfig;

class Flusher {
 public:
  // What a flusher uses; every part outlives it (BlockStore owns them all).
  struct Parts {
    const StoreConfig* cfg;  // flush_threads, flush_batch_bytes, segment_size
    const Clock* clock;      // the back-off after a failed batch
    Namespace* ns;           // its lock and inode numbers
    SeqCounter* seqs;        // seqs of the snapshots and tombstones it writes
    RamTier* ram;            // flush errors writers see
    SegmentStore* segs;      // where records go
    IndexWriter* index;      // where commits go
    BackingIo* io;           // stalls: flush_all's deadline
    SpaceBudget* budget;     // room under the cap
    FileData* data;          // the slots a flush settles
    const ReadLoad* reads;   // when clients last read (the pacer gives way)
  };
  explicit Flusher(const Parts& parts);
  ~Flusher();

  void start();
  // Writes everything still dirty, then stops the threads.
  Status stop();

  // Queues an inode for a flush. Requires in.mu.
  void enqueue_locked(const InodeRef& in, bool urgent);
  // Queues the evictor's work (a copy forward, a re-logged snapshot): never
  // held back by the capacity gate, and served even by a flusher that waits
  // there, since the pass that would make room waits for it. Requires in.mu.
  void enqueue_ungated_locked(const InodeRef& in);
  // Remembers an inode written while open (pressure write-out). Requires in.mu.
  void track_locked(const InodeRef& in);
  void untrack_locked(const InodeRef& in);
  // Journal entries to append to the next segment record. Thread-safe.
  void add_meta(std::vector<RecordEntry> entries);
  // The same, waiting up to `timeout` until they are in a synced segment and
  // that append is committed: Busy if not by then, or once an append of
  // metadata fails meanwhile (the evictor carrying tombstones forward
  // before it deletes their segment).
  Status log_meta(std::vector<RecordEntry> entries, std::chrono::milliseconds timeout);
  // Retries failed flushes now instead of after the back-off.
  void retry_now();
  // Called by the RamTier when a writer has to wait for RAM.
  void on_pressure();
  // Writers are refused (ENOSPC) while a linked file's data waits for room
  // that no pass could make. A refusal whose files have all been unlinked
  // since is over: it clears the budget's flag and answers false.
  // Thread-safe; takes q_mu_ (a caller may hold an Inode::mu).
  bool writes_refused();
  // fsync: flushes the file now, even if open for writing, and waits until
  // what it holds now is committed (OK), a flush of it fails after this
  // call began (that error), or the backing dir has been stalled for
  // io_timeout (TimedOut; it stays dirty and queued). OK at once if clean
  // or unlinked. Takes in.mu.
  Status sync(const InodeRef& in);
  // Flushes every dirty inode and waits for it; files still open for
  // writing only with include_open (unmount).
  Status flush_all(bool include_open);
  // Waits (releasing l, the inode's mutex) at most d; woken after every
  // commit or failure.
  void wait_durable_for(std::unique_lock<std::mutex>& l, std::chrono::milliseconds d);

  uint64_t queued() const;
  uint64_t flushed_files() const { return flushed_files_.load(); }
  uint64_t flushed_bytes() const { return flushed_bytes_.load(); }
  uint64_t batches() const { return batches_.load(); }
  uint64_t enospc_errors() const { return enospc_.load(); }
  uint64_t io_errors() const { return io_errors_.load(); }
  FlushPacer::Stats pacer() const { return pacer_.stats(); }

 private:
  struct Captured;
  // Where one write_batch put its records: they extend the index's applied
  // position of the segment only if they start where it ends (a batch whose
  // commit failed leaves a gap that the next mount's catch-up fills).
  struct LogPos {
    uint64_t seg = 0;
    uint64_t start = 0;
    SegmentLogState state;
  };
  struct Worker {
    std::thread thread;
    std::unique_ptr<SegmentWriter> writer;
  };
  void run(Worker* w);
  // Takes inodes (and pending meta) for one pass; false when stopping.
  // awaited: log_meta() waits for one of the meta entries. A worker with
  // a segment passes seal_after (else 0): a wait that finds nothing for
  // that long ends with *idle set and nothing taken, and it seals it.
  // urgent: someone waits for it (fsync, unmount, a writer short of RAM).
  bool take_batch(std::vector<Captured>* batch, std::vector<RecordEntry>* meta, bool* sync,
                  bool* urgent, bool* awaited, std::chrono::nanoseconds seal_after, bool* idle);
  bool capture(const InodeRef& in, bool force, bool from_queue, bool pressure, Captured* c);
  // slot (client data only): taken once its room is granted, before the
  // first byte is written; the caller releases it after the commit.
  Status write_batch(Worker* w, std::vector<Captured>& batch, std::vector<RecordEntry>& meta,
                     bool gate, LogPos* pos, FlushPacer::Slot* slot = nullptr, bool urgent = false);
  // The room under the cap a batch asks for (write_batch's grant).
  uint64_t room_for(const std::vector<Captured>& batch) const;
  // Steps a wait for room to its end, writing the ungated work between the
  // steps (space_budget.h's protocol); its answer.
  Status await_room(Worker* w, SpaceBudget::RoomWait& wait);
  // Writes pending journal entries and the ungated queue.
  void serve_ungated(Worker* w);
  // Closes the worker's segment after a failed write_batch, cutting off
  // what that batch appended (pos: where it began).
  void drop_failed_writer(Worker* w, const LogPos& pos);
  // Closes the worker's segment once it has reached segment_size.
  void seal_if_full(Worker* w);
  // Writes one part of a batch (not gated), then commits or fails it.
  void write_part(Worker* w, std::vector<Captured>& part, std::vector<RecordEntry>& meta,
                  bool sync);
  void finish_batch(std::vector<Captured>& batch, const std::vector<RecordEntry>& meta,
                    const LogPos& pos, bool sync);
  void fail_batch(std::vector<Captured>& batch, std::vector<RecordEntry>& meta, const Status& st);

  const Parts p_;
  FlushPacer pacer_;  // thread-safe on its own; how many data batches write at once
  std::vector<std::unique_ptr<Worker>> workers_;

  mutable std::mutex q_mu_;
  std::condition_variable q_cv_;          // guarded by q_mu_
  std::deque<InodeRef> queue_;            // guarded by q_mu_
  std::deque<InodeRef> ungated_;          // guarded by q_mu_: enqueue_ungated_locked
  std::vector<InodeRef> retry_;           // failed, retried at retry_at_; q_mu_
  std::unordered_set<InodeRef> writing_;  // guarded by q_mu_
  // Files whose data found no room, until a flush of them commits; the
  // budget's no_space flag is set and cleared under q_mu_ along with it.
  std::unordered_set<InodeRef> refused_;  // guarded by q_mu_
  std::vector<RecordEntry> meta_;         // guarded by q_mu_
  // Failed appends of meta_ (put back, retried): flush_all gives up on a
  // round once it sees one, instead of waiting for a queue that never drains.
  uint64_t meta_failures_ = 0;            // guarded by q_mu_
  Status meta_error_;                     // guarded by q_mu_: the last one's cause
  std::unordered_set<uint64_t> tracked_;  // guarded by q_mu_: seqs log_meta waits for
  std::unordered_set<uint64_t> logged_;   // guarded by q_mu_: of those, committed
  std::condition_variable meta_cv_;       // guarded by q_mu_: logged_ grew, or meta_failures_
  bool stopping_ = false;                 // guarded by q_mu_
  bool pressure_ = false;                 // guarded by q_mu_
  bool force_all_ = false;                // guarded by q_mu_
  bool sync_all_ = false;                 // guarded by q_mu_: flush_all also syncs the index WAL
  int active_ = 0;                        // passes in progress, guarded by q_mu_
  std::condition_variable idle_cv_;       // guarded by q_mu_
  int64_t retry_at_ns_ = 0;  // guarded by q_mu_; error back-off, on the clock's mono_ns()

  std::condition_variable_any durable_cv_;  // waiters hold their inode's mu

  std::atomic<uint64_t> flushed_files_{0}, flushed_bytes_{0}, batches_{0};
  std::atomic<uint64_t> enospc_{0}, io_errors_{0};
  // stop() gave up on workers stuck in the backing dir: one that gets its
  // answer while the process exits must not touch the index or the log.
  std::atomic<bool> abandoned_{false};
};

}  // namespace kvfs
