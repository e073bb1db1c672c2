// SPDX-License-Identifier: Apache-2.0
// FlushPacer: how many flush batches write to the backing dir at once, sized
// from what the link is measured to take, and the flush's give-way to
// clients reading.
//
// The link model is BBR's, with a batch for a packet and two phases to a
// batch: carrying its bytes (from its start until its writes are done) and
// its fixed part (the fdatasync, whose COMMIT on NFS is a round trip and the
// server's flush, and the index commit). The link's rate R is the highest,
// over the last kWindow batches, of the bytes written per second while at
// least one batch was carrying (measured at each batch's end of carrying,
// from the start of that busy stretch: never more than the link took, and
// exact for one batch alone); F is the least fixed part of the same batches.
// While a batch is in its fixed part the link carries R x F bytes only if
// other batches write them: limit = ceil(R x F / b) + 2 batches at once (b
// the recent mean batch; the one in its fixed part and a spare), at most
// max_batches (flush_threads). Until kWarmup batches have been measured,
// max_batches.
//
// Reads first: while a client has read within kReadQuiet and the flush has
// slack (no fsync or unmount waits for it, no writer waits for room in RAM,
// dirty data fills under half of the RAM tier), one batch writes at a time
// and batches start no faster than half the measured rate (spaced by at
// most 100 ms), and a batch already writing pauses between its runs of
// writes (SegmentWriter::set_pause(): while the flush has slack, at most
// two runs of 8 MiB on the link per batch), for at most kMaxPause in all,
// so that the flush's CPU (the kernel's copy, the backing fs's client, on
// NFS-like storage the server's share where it runs on the host) is not
// taken from the reads. The give-way ends as soon as the slack does: a
// Hurry (an fsync, a flush of everything) ends it at once for every batch,
// even one taken before.
//
// Thread-safe: one mutex, mu_, a leaf (only the clock and the RamTier's and
// ReadLoad's atomics are read under it); hurried_ is an atomic, so a Hurry
// may be made under any lock. admit() waits, releasing it, until its batch
// may write: every such wait is bounded by the batches writing, which
// finish or fail on their own (the backing dir's deadlines bound those);
// pause() waits at most kMaxPause per batch.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace kvfs {

class Clock;
class RamTier;
class ReadLoad;

class FlushPacer {
 public:
  struct Parts {
    const Clock* clock;
    const ReadLoad* reads;  // nullptr: never gives way to reads
    const RamTier* ram;     // nullptr: no writer ever waits for room
    unsigned max_batches;   // flush_threads: never more at once
    bool enabled;           // flush_pacing=0: max_batches always, no give-way
  };
  static constexpr unsigned kWindow = 16;            // batches the model looks back on
  static constexpr unsigned kWarmup = 4;             // batches before it is used
  static constexpr int64_t kReadQuiet = 20'000'000;  // ns without a read: reads have stopped
  // The longest a batch pauses inside for reads, in all: what an fsync of a
  // file in it that came after it started may wait longer (a Hurry ends
  // the pause, but not the batch's own wait for the writes it let go).
  static constexpr int64_t kMaxPause = 200'000'000;
  explicit FlushPacer(const Parts& p);

  struct Ticket {
    int64_t start_ns = 0;
    int64_t written_ns = 0;  // 0 until written()
    uint64_t bytes = 0;
    double rate = 0;  // bytes/ns of its busy stretch, at written()
    bool urgent = false;
    int64_t paused_ns = 0;  // inside, for reads: its rate is not a sample
  };

  // One batch's place among those writing. Releases it when destroyed
  // (failed: no sample), unless release() did. Not thread-safe: one
  // flusher's.
  class Slot {
   public:
    explicit Slot(FlushPacer* p) : p_(p) {}
    ~Slot() { release(false); }
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    // Waits until a batch of `bytes` may write (urgent: never gives way to
    // reads). A slot already taken is released first, as failed.
    void take(uint64_t bytes, bool urgent);
    // Between the batch's runs of writes: waits while the flush gives way to
    // reads, at most kMaxPause for the batch in all. Never for an urgent one.
    void pause_for_reads();
    // Whether the flush would give way to reads now if clients read: it has
    // slack (then a batch keeps few writes on the link, so that a pause takes
    // hold at once). Lock-free.
    bool may_give_way() const;
    // Its bytes are written (not yet synced or committed): its fixed part
    // starts. Called once per take(), before release(true).
    void written();
    // The batch is done: ok (written and committed) adds it to the model.
    void release(bool ok);

   private:
    FlushPacer* p_;
    bool held_ = false;
    Ticket t_;
  };

  // Every wait ends now and later ones do not wait (the flushers stop).
  void stop();

  // Someone waits for the flush (fsync, flush of everything): no give-way
  // while one does. Thread-safe and lock-free: callable under any lock.
  class Hurry {
   public:
    explicit Hurry(FlushPacer* p);
    ~Hurry();
    Hurry(const Hurry&) = delete;
    Hurry& operator=(const Hurry&) = delete;

   private:
    FlushPacer* p_;
  };

  struct Stats {
    unsigned limit = 0;        // batches that may write at once now
    unsigned writing = 0;      // and do
    double rate_gbps = 0;      // R (0 until measured)
    double fixed_ms = 0;       // F
    uint64_t gave_way = 0;     // waits for reads: batches held back, or paused inside
    uint64_t gave_way_ns = 0;  // the time they waited for them
    uint64_t limited = 0;      // batches held back by the limit
  };
  Stats stats() const;

 private:
  Ticket admit(uint64_t bytes, bool urgent);
  void pause(Ticket* t);
  void written(Ticket* t);
  void done(const Ticket& t, bool ok);
  bool has_slack(bool urgent) const;  // no lock: p_ and atomics only
  bool giving_way_locked(int64_t now, bool urgent) const;
  void update_model_locked(const Ticket& t, int64_t now);

  const Parts p_;
  mutable std::mutex mu_;
  std::condition_variable cv_;                   // guarded by mu_: a batch finished, or stop
  bool stopping_ = false;                        // guarded by mu_
  std::atomic<int> hurried_{0};                  // Hurry()s alive; atomic, no lock
  unsigned limit_;                               // guarded by mu_
  unsigned writing_ = 0;                         // guarded by mu_
  unsigned carrying_ = 0;                        // guarded by mu_: batches not yet written()
  int64_t busy_since_ns_ = 0;                    // guarded by mu_: when carrying_ last left 0
  uint64_t busy_bytes_ = 0;                      // guarded by mu_: written since then
  int64_t next_start_ns_ = 0;                    // guarded by mu_: the give-way's spacing
  std::array<double, kWindow> rate_samples_{};   // guarded by mu_: bytes/ns
  std::array<double, kWindow> fixed_samples_{};  // guarded by mu_: ns
  uint64_t samples_ = 0;                         // guarded by mu_
  double mean_batch_ = 0;                        // guarded by mu_: bytes, moving mean
  double rate_ = 0, fixed_ns_ = 0;               // guarded by mu_: the model now
  uint64_t gave_way_ = 0, gave_way_ns_ = 0, limited_ = 0;  // guarded by mu_
};

}  // namespace kvfs
