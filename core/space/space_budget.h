// SPDX-License-Identifier: Apache-2.0
// SpaceBudget: the one owner of the backing dir's space budget: the capacity,
// the room granted to flushes in progress, the room flushes wait for, and the
// "no room" state that writers see. Flushing and eviction both ask it; they
// never call each other about space.
//
//   Flusher --ask_room/step/release/refused/flushed--> SpaceBudget
//   Evictor --next_pass/pass_done/room_made----------> SpaceBudget
//   SpaceBudget --used_bytes/live_bytes--------------> SpaceUsage (the segments)
//
// The budget calls no other part but SpaceUsage: it never calls back into a
// flush or the evictor.
//
// What a flush asks and promises (the protocol between flushing, the budget
// and eviction):
//  1. Before it writes client data it asks for room (ask_room); after the
//     backing filesystem said ENOSPC below the cap, for a pass that frees
//     some (ask_backing_room). Metadata records and the evictor's copies
//     forward never ask: the evictor made room for them, and a pass may be
//     waiting for them.
//  2. It steps the wait (step) until the wait is over, and between two
//     steps writes what it has that never asks (the journal's entries, the
//     evictor's copies): with every flusher waiting, nothing else would, and
//     the pass that would make room may be waiting for exactly that. A step
//     blocks at most kStep and returns with no lock held.
//  3. A grant holds its bytes until release(), called once the batch is on
//     disk (then counted in the segments' sizes) or has failed; refused() or
//     flushed() says how the batch ended.
//  4. Near the cap (roomy() false) metadata is written apart from the data,
//     never behind a data batch that waits: the pass may need it logged
//     (tombstones of what it evicted) before it can make the room.
//  5. A flush's segment is closed once full, before it waits, and when its
//     data was refused room: passes never reclaim an open segment, so a
//     full one held open by a waiting flush would keep its room from them.
// The budget, for its part, wakes the evictor (whose thread waits in
// next_pass) and waits for its passes, refusing (AtCapacity) once whole
// passes free nothing and no other flush's grant given back meanwhile could
// change that, or after give_up. The backing filesystem's own ENOSPC makes
// the next pass evict below what is used, since the filesystem is smaller
// than the cap.
//
// Thread-safe. Lock order: mu_ -> the SpaceUsage's lock (SegmentStore::mu_,
// read while a flush waits); nothing else is taken under mu_. A RoomWait is
// stepped by one thread at a time (the flush that asked).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "core/util/clock.h"
#include "core/util/status.h"

namespace kvfs {

// What the budget reads of the segments (SegmentStore implements it).
class SpaceUsage {
 public:
  virtual ~SpaceUsage() = default;
  virtual uint64_t used_bytes() const = 0;  // bytes of every segment file
  virtual uint64_t live_bytes() const = 0;  // of those, bytes a file points to
};

class SpaceBudget {
 public:
  // Room under the gate's slack kept for metadata records, which never wait.
  static constexpr uint64_t kMetaReserve = 1 << 20;
  struct Limits {
    uint64_t capacity = 0;
    double high_watermark = 0.95;
    // Data may fill the cap plus this (one segment less a metadata reserve:
    // metadata records never wait for room).
    uint64_t slack = 0;
    // How long a flush waits for passes that make progress, and how long one
    // round of waiting for two passes lasts before the evictor counts as stuck.
    std::chrono::milliseconds give_up{60000}, round{5000};
    // Whose time those are measured in (tests pass a ManualClock).
    const Clock* clock = &system_clock();
  };
  SpaceBudget(const Limits& limits, const SpaceUsage* usage);

  uint64_t capacity() const { return capacity_.load(); }
  void set_capacity(uint64_t bytes);  // wakes the evictor

  // --- flush side ---
  // The longest one step() blocks.
  static constexpr std::chrono::milliseconds kStep{100};
  // One flush's wait for room, stepped by the flush itself (the protocol
  // above). Its state is the budget's alone; the flush reads whether it is
  // over and the answer.
  class RoomWait {
   public:
    RoomWait() = default;  // over, with nothing asked
    RoomWait(const RoomWait&) = delete;
    RoomWait& operator=(const RoomWait&) = delete;
    ~RoomWait();  // a wait given up before its end stops counting as wanted
    bool over() const { return phase_ == Phase::kOver; }
    // Once over: OK (room granted; for ask_backing_room, a pass freed
    // space), AtCapacity (ask_room: the passes could not make room, or the
    // budget stopped) or NoSpace (ask_backing_room: nothing freed).
    const Status& result() const { return result_; }

   private:
    friend class SpaceBudget;
    enum class Phase { kRound, kInFlight, kBackingFull, kOver };
    SpaceBudget* budget_ = nullptr;
    uint64_t bytes_ = 0;  // the grant asked for (0: ask_backing_room)
    Phase phase_ = Phase::kOver;
    bool backing_ = false;  // ask_backing_room's
    bool wanted_ = false;   // bytes_ counted in the budget's wanted_
    bool granted_ = false;  // bytes_ counted in the budget's inflight_
    std::chrono::steady_clock::time_point deadline_, phase_end_;
    // The budget's counters when the phase began: its end is judged by what
    // changed since.
    uint64_t passes_ = 0, progress_ = 0, releases_ = 0, used_before_ = 0;
    Status result_;
  };
  // Starts *w (a fresh RoomWait) asking for room for `bytes` more under
  // capacity + slack: over at once when there is room now. A grant (OK)
  // holds the bytes until release().
  void ask_room(uint64_t bytes, RoomWait* w);
  // Starts *w after the backing filesystem's ENOSPC: the next passes evict
  // below what is used; OK if they freed space (within 10 s), else NoSpace.
  void ask_backing_room(RoomWait* w);
  // Waits at most kStep for the wait to move on; true once it is over.
  bool step(RoomWait& w);
  void release(uint64_t bytes);
  // True if `bytes` more stay under the high watermark beside what is used,
  // granted and asked for: a grant would come at once, and no pass is due.
  bool roomy(uint64_t bytes) const;
  // Room held outside the gate (the evictor's copies forward): counted like
  // a grant so that flushes do not take it.
  void hold(uint64_t bytes) { inflight_ += bytes; }
  uint64_t inflight() const { return inflight_.load(); }
  // A flush failed for lack of room (writers are told ENOSPC until room is
  // made), or succeeded (they may go on). flushed() also wakes the evictor.
  void refused() { no_space_ = true; }
  void flushed();
  // The backing filesystem said ENOSPC before the cap: the next pass evicts
  // below what is used (without waiting for it; ask_backing_room waits).
  void backing_full();
  // Asks for a capacity pass (after a flush, an admin eviction, a change).
  void wake();

  // --- state writers see ---
  bool no_space() const { return no_space_.load(std::memory_order_relaxed); }
  // Clears "no room" once no linked file waits for it (Flusher::writes_refused).
  void clear_no_space() { no_space_ = false; }

  // --- evictor side ---
  struct Demand {
    bool stop = false;
    bool backing_full = false;  // the pass must evict below what is used
  };
  // Waits until a pass is asked for, or `period` passes (housekeeping).
  Demand next_pass(std::chrono::milliseconds period);
  // stop() was called: a pass in progress ends early.
  bool stopping() const;
  // Counts a finished pass (and whether it evicted, copied or deleted
  // anything) and wakes the flushes waiting for one.
  void pass_done(bool progress);
  // A pass freed space: writers refused for lack of it may go again.
  void room_made() { no_space_ = false; }
  // Room granted to flushes in progress plus room waiting flushes ask for:
  // a pass must make room for it too.
  uint64_t pending() const { return inflight_.load() + wanted_.load(); }
  uint64_t refusals() const { return refusals_.load(); }

  // Wakes every waiter; later waits return at once.
  void stop();

 private:
  bool try_grant(uint64_t bytes);
  // RoomWait's steps; each requires mu_.
  void begin_round(RoomWait& w);
  bool phase_done(RoomWait& w);  // the phase's end condition (may grant)
  void end_phase(RoomWait& w);   // what follows a phase that ended
  void finish(RoomWait& w, bool room);

  const Limits limits_;
  const SpaceUsage* const usage_;
  std::atomic<uint64_t> capacity_;
  std::atomic<uint64_t> inflight_{0};  // granted, not yet written
  std::atomic<uint64_t> wanted_{0};    // asked for by waiting flushes
  std::atomic<bool> no_space_{false};  // the last flush failed for lack of room
  std::atomic<uint64_t> refusals_{0};  // AtCapacity answers

  mutable std::mutex mu_;
  std::condition_variable pass_cv_;  // guarded by mu_: wakes next_pass
  std::condition_variable room_cv_;  // guarded by mu_: a pass finished
  bool stop_ = false;                // guarded by mu_
  bool asked_ = false;               // guarded by mu_: a pass is asked for
  bool full_ = false;                // guarded by mu_: backing fs said ENOSPC
  uint64_t releases_ = 0;            // guarded by mu_: grants given back
  uint64_t passes_ = 0;              // guarded by mu_
  uint64_t progress_passes_ = 0;     // guarded by mu_: passes that freed something
};

}  // namespace kvfs
