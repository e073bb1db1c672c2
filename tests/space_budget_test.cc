// SPDX-License-Identifier: Apache-2.0
// SpaceBudget on its own: grants under the cap, waiting for passes (stepped
// by the flush, which writes what a pass waits for between the steps),
// giving up, the no-space state and stop. The segments' usage is a counter
// here: the budget only reads it.
#include "core/space/space_budget.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <thread>

namespace kvfs {
namespace {

constexpr uint64_t kMiB = 1 << 20;

struct Usage : SpaceUsage {
  std::atomic<uint64_t> used{0}, live{0};
  uint64_t used_bytes() const override { return used.load(); }
  uint64_t live_bytes() const override { return live.load(); }
};

SpaceBudget::Limits limits(uint64_t cap) {
  SpaceBudget::Limits l;
  l.capacity = cap;
  l.high_watermark = 0.9;
  l.slack = 0;
  l.give_up = std::chrono::seconds(20);
  l.round = std::chrono::milliseconds(300);
  return l;
}

// What a flush does (the protocol in space_budget.h): ask, then step until
// the wait is over, doing `between` after each step that is not the last.
Status wait_for_room(SpaceBudget& b, uint64_t bytes, const std::function<void()>& between = {}) {
  SpaceBudget::RoomWait w;
  b.ask_room(bytes, &w);
  while (!b.step(w))
    if (between) between();
  return w.result();
}

// An evictor thread that also runs every 10 ms, as the real one does
// (housekeeping); `pass` says whether the pass freed anything.
std::thread periodic_passes(SpaceBudget& b, std::function<bool()> pass) {
  return std::thread([&b, pass = std::move(pass)] {
    while (!b.next_pass(std::chrono::milliseconds(10)).stop) b.pass_done(pass());
  });
}

TEST(SpaceBudgetTest, GrantsUnderTheCapAndHoldsAGrantUntilReleased) {
  Usage u;
  u.used = 2 * kMiB;
  SpaceBudget b(limits(10 * kMiB), &u);
  ASSERT_TRUE(wait_for_room(b, 6 * kMiB).ok());
  EXPECT_EQ(b.inflight(), 6 * kMiB);
  EXPECT_EQ(b.pending(), 6 * kMiB);
  // 2 used + 6 granted + 4 asked > 10: no evictor runs here, so the round
  // ends without a pass and the flush is refused.
  Status st = wait_for_room(b, 4 * kMiB);
  EXPECT_EQ(st.code(), Status::Code::kAtCapacity) << st.ToString();
  EXPECT_EQ(b.refusals(), 1u);
  EXPECT_EQ(b.pending(), 6 * kMiB);  // the refused ask is not left behind
  b.release(6 * kMiB);
  EXPECT_TRUE(wait_for_room(b, 4 * kMiB).ok());
  EXPECT_EQ(b.inflight(), 4 * kMiB);
}

TEST(SpaceBudgetTest, AWaitingFlushAsksForAPassAndGetsTheRoomItFrees) {
  Usage u;
  u.used = 9 * kMiB;
  SpaceBudget b(limits(10 * kMiB), &u);
  std::atomic<uint64_t> seen_pending{0};
  std::thread evictor([&] {
    for (;;) {
      SpaceBudget::Demand d = b.next_pass(std::chrono::seconds(30));
      if (d.stop) return;
      // A pass started by the early hint (the flush is near the high
      // watermark) may run before the ask is counted: it frees nothing.
      // One that sees the ask evicts enough for it.
      const uint64_t pending = b.pending();
      seen_pending = std::max<uint64_t>(seen_pending.load(), pending);
      const bool frees = pending >= 3 * kMiB && u.used >= 4 * kMiB;
      if (frees) u.used -= 4 * kMiB;
      b.pass_done(frees);
    }
  });
  Status st = wait_for_room(b, 3 * kMiB);
  EXPECT_TRUE(st.ok()) << st.ToString();
  // The pass saw what the flush waited for: it must make room for it too.
  EXPECT_GE(seen_pending.load(), 3 * kMiB);
  b.stop();
  evictor.join();
}

TEST(SpaceBudgetTest, AWaitingFlushServesWhatThePassWaitsFor) {
  // The evictor's pass cannot free space until the flusher that waits for
  // room has written something (a re-logged snapshot): each step must give
  // the flush back its thread, with no lock held, or the two wait for each
  // other.
  Usage u;
  u.used = 10 * kMiB;
  SpaceBudget b(limits(10 * kMiB), &u);
  std::atomic<bool> served{false};
  std::thread evictor([&] {
    SpaceBudget::Demand d = b.next_pass(std::chrono::seconds(30));
    if (d.stop) return;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!served && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    if (served) u.used = 2 * kMiB;
    b.pass_done(served);
    b.pass_done(false);  // counts as the second pass that began after the ask
  });
  Status st = wait_for_room(b, 1 * kMiB, [&] { served = true; });
  evictor.join();
  EXPECT_TRUE(served.load());
  EXPECT_TRUE(st.ok()) << st.ToString();
}

TEST(SpaceBudgetTest, GivesUpOnceAWholePassFreesNothing) {
  Usage u;
  u.used = 10 * kMiB;
  u.live = 10 * kMiB;
  SpaceBudget b(limits(10 * kMiB), &u);
  std::atomic<int> passes{0};
  std::thread evictor = periodic_passes(b, [&] {
    ++passes;  // everything is protected: nothing freed
    return false;
  });
  const auto t0 = std::chrono::steady_clock::now();
  Status st = wait_for_room(b, 1 * kMiB);
  EXPECT_EQ(st.code(), Status::Code::kAtCapacity) << st.ToString();
  // Long before give_up (20 s): the passes ran and freed nothing.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(15));
  EXPECT_GE(passes.load(), 2);
  b.stop();
  evictor.join();
}

TEST(SpaceBudgetTest, AFlushWaitsForAnotherFlushInFlightBeforeGivingUp) {
  // Two flushers under a small cap: one's batch is granted and being
  // written (slowly: an NFS round trip, a busy CPU), the other asks for more
  // than is left. Passes free nothing meanwhile (what could go is in the
  // batch being written), but the batch's end changes that: it must not be
  // refused before then (it was, and its client saw ENOSPC).
  Usage u;
  u.used = 4 * kMiB;
  SpaceBudget b(limits(10 * kMiB), &u);
  ASSERT_TRUE(wait_for_room(b, 5 * kMiB).ok());  // the batch in flight
  std::atomic<int> passes{0};
  std::thread evictor = periodic_passes(b, [&] {
    ++passes;
    return false;
  });
  std::atomic<bool> done{false};
  Status st;
  std::thread asker([&] {
    st = wait_for_room(b, 4 * kMiB);
    done = true;
  });
  // Well past the two passes that used to end the wait.
  while (passes.load() < 6 && !done.load()) std::this_thread::yield();
  EXPECT_FALSE(done.load()) << "refused while another flush was in flight";
  // The batch is written and its grant given back. (The bytes used stay at
  // 4 MiB: the batch added 4 and a pass evicted 4 older ones.)
  b.release(5 * kMiB);
  asker.join();
  EXPECT_TRUE(st.ok()) << st.ToString();
  b.stop();
  evictor.join();
}

TEST(SpaceBudgetTest, AFlushWaitsWhilePassesEvictThoughOtherFlushesFillWhatTheyFree) {
  // Each pass evicts files, but another flusher's writes take as much as it
  // frees, so the bytes used do not drop for a while: the waiting flush goes
  // by what the passes report, and gets its room once one frees enough.
  Usage u;
  u.used = 10 * kMiB;
  u.live = 10 * kMiB;
  SpaceBudget b(limits(10 * kMiB), &u);
  std::atomic<int> passes{0};
  std::thread evictor = periodic_passes(b, [&] {
    // The first eight passes free 1 MiB each that another flush refills.
    if (++passes > 8 && u.used >= 10 * kMiB) u.used -= 4 * kMiB;
    return true;
  });
  Status st = wait_for_room(b, 3 * kMiB);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_GT(passes.load(), 8);
  b.stop();
  evictor.join();
}

// give_up is measured on the budget's clock: passes that report progress
// but never free enough keep a flush waiting until then, and a test moves
// the clock there instead of waiting an hour.
TEST(SpaceBudgetTest, AWaitWhosePassesNeverFreeEnoughEndsAtGiveUpOnTheBudgetsClock) {
  Usage u;
  u.used = 10 * kMiB;
  u.live = 10 * kMiB;
  ManualClock clock;
  SpaceBudget::Limits l = limits(10 * kMiB);
  l.give_up = std::chrono::hours(1);
  l.clock = &clock;
  SpaceBudget b(l, &u);
  std::thread evictor = periodic_passes(b, [] { return true; });  // "progress", never room
  auto wait = std::async(std::launch::async, [&] { return wait_for_room(b, 3 * kMiB); });
  // An hour on, again until the wait is over (the first one after the wait
  // took its deadline ends it); bounded, where the real hour is not.
  int hours = 0;
  while (wait.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready &&
         hours < 300) {
    clock.advance(3600);
    ++hours;
  }
  ASSERT_EQ(wait.wait_for(std::chrono::seconds(0)), std::future_status::ready)
      << "the wait did not end on the budget's clock";
  const Status st = wait.get();
  EXPECT_EQ(st.code(), Status::Code::kAtCapacity) << st.ToString();
  EXPECT_GE(hours, 1);
  b.stop();
  evictor.join();
}

TEST(SpaceBudgetTest, NoSpaceFollowsRefusedAndSucceededFlushes) {
  Usage u;
  SpaceBudget b(limits(10 * kMiB), &u);
  EXPECT_FALSE(b.no_space());
  b.refused();
  EXPECT_TRUE(b.no_space());
  b.room_made();
  EXPECT_FALSE(b.no_space());
  b.refused();
  b.flushed();  // a flush that succeeded also asks for a pass
  EXPECT_FALSE(b.no_space());
  SpaceBudget::Demand d = b.next_pass(std::chrono::seconds(30));
  EXPECT_FALSE(d.stop);
  EXPECT_FALSE(d.backing_full);
}

TEST(SpaceBudgetTest, BackingFullMakesTheNextPassEvictBelowWhatIsUsed) {
  Usage u;
  SpaceBudget b(limits(10 * kMiB), &u);
  b.backing_full();
  EXPECT_TRUE(b.next_pass(std::chrono::seconds(30)).backing_full);
  b.wake();
  EXPECT_FALSE(b.next_pass(std::chrono::seconds(30)).backing_full);
}

TEST(SpaceBudgetTest, StopEndsEveryWait) {
  Usage u;
  u.used = 10 * kMiB;
  u.live = 10 * kMiB;
  SpaceBudget::Limits l = limits(10 * kMiB);
  l.round = std::chrono::seconds(60);  // only stop can end this wait early
  SpaceBudget b(l, &u);
  std::atomic<bool> waiting{false};
  Status st;
  std::thread flush([&] { st = wait_for_room(b, 1 * kMiB, [&] { waiting = true; }); });
  while (!waiting) std::this_thread::yield();  // it is inside the wait
  b.stop();
  flush.join();
  EXPECT_EQ(st.code(), Status::Code::kAtCapacity);
  EXPECT_TRUE(b.next_pass(std::chrono::seconds(30)).stop);
}

TEST(SpaceBudgetTest, AStepGivesTheThreadBackAndAWaitLeftBeforeItsEndIsNotCounted) {
  Usage u;
  u.used = 10 * kMiB;
  SpaceBudget::Limits l = limits(10 * kMiB);
  l.round = std::chrono::seconds(60);  // no pass runs: only a step can end
  SpaceBudget b(l, &u);
  {
    SpaceBudget::RoomWait w;
    b.ask_room(2 * kMiB, &w);
    EXPECT_FALSE(w.over());
    EXPECT_EQ(b.pending(), 2 * kMiB);  // the passes are told what it wants
    // Each step comes back (at most kStep) while nothing has changed.
    for (int i = 0; i < 3; ++i) EXPECT_FALSE(b.step(w));
    // The flush gives up (its thread is stopping, say).
  }
  EXPECT_EQ(b.pending(), 0u);
  EXPECT_EQ(b.inflight(), 0u);
  EXPECT_EQ(b.refusals(), 0u);
  // A grant at once is over before any step, and counted in flight.
  u.used = 0;
  SpaceBudget::RoomWait w;
  b.ask_room(2 * kMiB, &w);
  EXPECT_TRUE(w.over());
  EXPECT_TRUE(b.step(w));
  EXPECT_TRUE(w.result().ok());
  EXPECT_EQ(b.inflight(), 2 * kMiB);
  b.release(2 * kMiB);
}

TEST(SpaceBudgetTest, ABackingFullWaitIsOkOnceAPassFreesSomethingAndNoSpaceIfNone) {
  Usage u;
  u.used = 6 * kMiB;
  SpaceBudget b(limits(10 * kMiB), &u);  // the filesystem is smaller than the cap
  std::atomic<bool> frees{true};
  std::atomic<int> full_passes{0};
  std::thread evictor([&] {
    for (;;) {
      SpaceBudget::Demand d = b.next_pass(std::chrono::milliseconds(10));
      if (d.stop) return;
      if (d.backing_full) ++full_passes;  // evicts below what is used
      b.pass_done(d.backing_full && frees.load());
    }
  });
  SpaceBudget::RoomWait w;
  b.ask_backing_room(&w);
  while (!b.step(w)) {
  }
  EXPECT_TRUE(w.result().ok()) << w.result().ToString();
  EXPECT_GE(full_passes.load(), 1);
  frees = false;  // now nothing more can go
  SpaceBudget::RoomWait w2;
  b.ask_backing_room(&w2);
  while (!b.step(w2)) {
  }
  EXPECT_EQ(w2.result().code(), Status::Code::kNoSpace) << w2.result().ToString();
  EXPECT_EQ(b.refusals(), 0u);  // not the cap's refusals
  b.stop();
  evictor.join();
}

TEST(SpaceBudgetTest, RoomyCountsWhatIsUsedAndGrantedUpToTheHighWatermark) {
  Usage u;
  u.used = 4 * kMiB;
  SpaceBudget b(limits(10 * kMiB), &u);  // high watermark 0.9: 9 MiB
  EXPECT_TRUE(b.roomy(5 * kMiB));
  EXPECT_FALSE(b.roomy(6 * kMiB));
  ASSERT_TRUE(wait_for_room(b, 3 * kMiB).ok());
  EXPECT_TRUE(b.roomy(2 * kMiB));  // 4 used + 3 granted + 2
  EXPECT_FALSE(b.roomy(3 * kMiB));
  b.release(3 * kMiB);
  EXPECT_TRUE(b.roomy(5 * kMiB));
}

}  // namespace
}  // namespace kvfs
