// SPDX-License-Identifier: Apache-2.0
// SpaceBudget: the one owner of the backing dir's space budget: the capacity,
// the room granted to flushes in progress, the room flushes wait for, and the
// "no room" state that writers see. Flushing and eviction both ask it; they
// never call each other about space.
//
//   Flusher --wait_for_room/release/refused/flushed--> SpaceBudget
//   Evictor --next_pass/pass_done/room_made----------> SpaceBudget
//   SpaceBudget --used_bytes/live_bytes--------------> SpaceUsage (the segments)
//
// A flush asks for room before it writes (wait_for_room); when there is none,
// the budget wakes the evictor (whose thread waits in next_pass) and waits
// for its passes, giving up (AtCapacity) once a whole pass frees nothing and
// no other flush's grant given back meanwhile could have changed that. The
// backing filesystem's own ENOSPC (backing_full) makes the next pass evict
// below what is used, since the filesystem is smaller than the cap.
//
// Thread-safe. Lock order: mu_ -> the SpaceUsage's lock (SegmentStore::mu_,
// read while a flush waits); nothing else is taken under mu_, and
// wait_for_room's serve runs with no lock held.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
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
  // OK once `bytes` more fit under capacity + slack (a grant, held until
  // release); AtCapacity if the passes could not make room (and no grant in
  // flight was given back while they ran), or the budget is stopped. While
  // it waits it calls serve every 100 ms with no lock held: the pass it
  // waits for may be waiting for what serve writes.
  Status wait_for_room(uint64_t bytes, const std::function<void()>& serve);
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
  // below what is used. backing_full_wait also waits for that pass (at most
  // 10 s), calling serve every 100 ms as wait_for_room does: OK if it freed
  // space (evicted, deleted or copied something).
  void backing_full();
  Status backing_full_wait(const std::function<void()>& serve);
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
  // Waits on room_cv_ (l holds mu_) until done() or `until`, calling serve
  // every 100 ms with mu_ released.
  void wait_serving(std::unique_lock<std::mutex>& l, std::chrono::steady_clock::time_point until,
                    const std::function<bool()>& done, const std::function<void()>& serve);
  bool try_grant(uint64_t bytes);

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
