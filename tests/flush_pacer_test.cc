// SPDX-License-Identifier: Apache-2.0
// FlushPacer on its own, on a clock the test moves: the limit before and
// after the link is measured (rate and fixed part from the batches' two
// phases), flush_pacing=0, the give-way to reads (one batch at a time, at
// half the rate; batches pausing inside, for a bounded time; urgent batches
// and anyone waiting for the flush end it) and stop() ending a wait.
#include "core/flush/flush_pacer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "core/data/read_load.h"
#include "core/ram/ram_tier.h"
#include "core/util/clock.h"

namespace kvfs {
namespace {

// Time moves only when the test moves it.
class StepClock final : public Clock {
 public:
  int64_t now_ns() const override { return t_.load(); }
  int64_t mono_ns() const override { return t_.load(); }
  void advance_ns(int64_t d) { t_.fetch_add(d); }

 private:
  std::atomic<int64_t> t_{1'000'000'000};
};

constexpr uint64_t kBatch = 8 << 20;

// Waits (spinning, bounded) until pred holds: a thread has reached a wait
// the pacer counts.
template <class Pred>
bool eventually(Pred pred) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::yield();
  }
  return true;
}

// n batches one after another, each carrying kBatch at rate bytes/ns and then
// spending fixed_ns in its fixed part.
void run_batches(FlushPacer* p, StepClock* c, int n, double rate, int64_t fixed_ns) {
  for (int i = 0; i < n; ++i) {
    FlushPacer::Slot s(p);
    s.take(kBatch, /*urgent=*/false);
    c->advance_ns(int64_t(double(kBatch) / rate));
    s.written();
    c->advance_ns(fixed_ns);
    s.release(true);
  }
}

TEST(FlushPacer, UntilTheLinkIsMeasuredAsManyAsFlushThreadsWrite) {
  StepClock c;
  FlushPacer p({&c, nullptr, nullptr, 4, true});
  FlushPacer::Slot a(&p), b(&p), d(&p), e(&p);
  for (auto* s : {&a, &b, &d, &e}) s->take(kBatch, false);  // none waits
  EXPECT_EQ(p.stats().limit, 4u);
  EXPECT_EQ(p.stats().writing, 4u);
  EXPECT_EQ(p.stats().limited, 0u);
}

TEST(FlushPacer, ALongFixedPartKeepsMoreBatchesWriting) {
  StepClock c;
  FlushPacer p({&c, nullptr, nullptr, 8, true});
  // 1 GB/s, 20 ms per fdatasync and commit: 20 MB must be on the way while
  // one syncs, three batches of 8 MiB; and the one syncing, and a spare.
  run_batches(&p, &c, FlushPacer::kWarmup, 1.0, 20'000'000);
  const FlushPacer::Stats s = p.stats();
  EXPECT_NEAR(s.rate_gbps, 1.0, 0.01);
  EXPECT_NEAR(s.fixed_ms, 20.0, 0.01);
  EXPECT_EQ(s.limit, 5u);
}

TEST(FlushPacer, BatchesSharingTheLinkMeasureItsRateOnce) {
  StepClock c;
  FlushPacer p({&c, nullptr, nullptr, 8, true});
  for (int round = 0; round < 2; ++round) {
    // Three batches at once on a 1 GB/s link, started a third apart: each
    // is done carrying when the link has carried it and those before it.
    FlushPacer::Slot a(&p), b(&p), d(&p);
    a.take(kBatch, false);
    c.advance_ns(int64_t(kBatch) / 3);
    b.take(kBatch, false);
    c.advance_ns(int64_t(kBatch) / 3);
    d.take(kBatch, false);
    c.advance_ns(int64_t(kBatch) - 2 * (int64_t(kBatch) / 3));
    a.written();
    c.advance_ns(int64_t(kBatch));
    b.written();
    c.advance_ns(int64_t(kBatch));
    d.written();
    c.advance_ns(1'000'000);
    for (auto* s : {&a, &b, &d}) s->release(true);
  }
  EXPECT_NEAR(p.stats().rate_gbps, 1.0, 0.01);
  EXPECT_NEAR(p.stats().fixed_ms, 1.0, 0.01);
}

TEST(FlushPacer, ALinkWithoutRoundTripsNeedsTwoAndNeverMoreThanFlushThreads) {
  StepClock c;
  FlushPacer p({&c, nullptr, nullptr, 8, true});
  run_batches(&p, &c, FlushPacer::kWarmup, 2.0, 0);
  EXPECT_EQ(p.stats().limit, 2u);
  // The fixed part is the least of the window: one long sync alone does
  // not raise it, a window of them does.
  run_batches(&p, &c, 1, 2.0, 1'000'000'000);
  EXPECT_EQ(p.stats().limit, 2u);
  run_batches(&p, &c, FlushPacer::kWindow, 2.0, 1'000'000'000);
  EXPECT_EQ(p.stats().limit, 8u);  // ceil(2 GB/s x 1 s / 8 MiB) + 2, at most 8
}

TEST(FlushPacer, OffItAlwaysLetsFlushThreadsWrite) {
  StepClock c;
  ReadLoad reads;
  reads.note(c.mono_ns());
  FlushPacer p({&c, &reads, nullptr, 3, /*enabled=*/false});
  run_batches(&p, &c, FlushPacer::kWindow, 1.0, 0);  // a model that would say 2
  FlushPacer::Slot a(&p), b(&p), d(&p);
  reads.note(c.mono_ns());
  for (auto* s : {&a, &b, &d}) s->take(kBatch, false);
  EXPECT_EQ(p.stats().limit, 3u);
  EXPECT_EQ(p.stats().gave_way, 0u);
}

TEST(FlushPacer, WhileClientsReadOneBatchWritesAndUrgentOnesDoNotWait) {
  StepClock c;
  ReadLoad reads;
  FlushPacer p({&c, &reads, nullptr, 4, true});
  reads.note(c.mono_ns());
  FlushPacer::Slot first(&p);
  first.take(kBatch, false);  // nothing writes: it may
  std::atomic<bool> admitted{false};
  std::thread t([&] {
    FlushPacer::Slot s(&p);
    s.take(kBatch, false);
    admitted = true;
  });
  ASSERT_TRUE(eventually([&] { return p.stats().gave_way == 1; }));
  EXPECT_FALSE(admitted);
  FlushPacer::Slot urgent(&p);
  urgent.take(kBatch, /*urgent=*/true);  // an fsync, an unmount: no give-way
  EXPECT_EQ(p.stats().writing, 2u);
  // The reads stop: the flush takes its whole limit again.
  c.advance_ns(FlushPacer::kReadQuiet);
  t.join();
  EXPECT_TRUE(admitted);
  EXPECT_EQ(p.stats().writing, 2u);  // the thread's slot released as failed
  EXPECT_GE(p.stats().gave_way_ns, uint64_t(FlushPacer::kReadQuiet));
}

TEST(FlushPacer, WhileClientsReadBatchesStartAtHalfTheMeasuredRate) {
  StepClock c;
  ReadLoad reads;
  FlushPacer p({&c, &reads, nullptr, 4, true});
  run_batches(&p, &c, FlushPacer::kWarmup, 1.0, 0);
  reads.note(c.mono_ns());
  {
    FlushPacer::Slot s(&p);
    s.take(kBatch, false);  // the next may start 2 x 8 MiB / (1 GB/s) from now
  }
  std::atomic<bool> admitted{false};
  std::thread t([&] {
    FlushPacer::Slot s(&p);
    s.take(kBatch, false);
    admitted = true;
  });
  ASSERT_TRUE(eventually([&] { return p.stats().gave_way == 1; }));
  EXPECT_FALSE(admitted);             // nothing writes, but it is too early
  c.advance_ns(int64_t(2 * kBatch));  // still within the reads' quiet time
  reads.note(c.mono_ns());
  t.join();
  EXPECT_TRUE(admitted);
}

TEST(FlushPacer, OnASlowLinkTheGiveWaySpacesBatchesByAtMostATenthOfASecond) {
  StepClock c;
  ReadLoad reads;
  FlushPacer p({&c, &reads, nullptr, 4, true});
  run_batches(&p, &c, FlushPacer::kWarmup, 0.01, 0);  // 10 MB/s: 1.7 s at half of it
  reads.note(c.mono_ns());
  {
    FlushPacer::Slot s(&p);
    s.take(kBatch, false);
  }
  std::atomic<bool> admitted{false};
  std::thread t([&] {
    FlushPacer::Slot s(&p);
    s.take(kBatch, false);
    admitted = true;
  });
  ASSERT_TRUE(eventually([&] { return p.stats().gave_way == 1; }));
  c.advance_ns(19'000'000);  // reads go on, as they would
  reads.note(c.mono_ns());
  c.advance_ns(19'000'000);
  reads.note(c.mono_ns());
  EXPECT_FALSE(admitted);
  for (int i = 0; i < 4; ++i) {  // 38 + 4 x 19 ms: past 100
    c.advance_ns(19'000'000);
    reads.note(c.mono_ns());
  }
  t.join();
  EXPECT_TRUE(admitted);
}

TEST(FlushPacer, NoGiveWayOnceDirtyDataFillsHalfOfTheRamTier) {
  StepClock c;
  ReadLoad reads;
  RamTier ram(64 << 20);
  FlushPacer p({&c, &reads, &ram, 4, true});
  reads.note(c.mono_ns());
  ASSERT_TRUE(ram.reserve_dirty(40 << 20).ok());  // writers would soon wait
  FlushPacer::Slot a(&p), b(&p);
  a.take(kBatch, false);
  b.take(kBatch, false);  // a second batch while clients read
  EXPECT_EQ(p.stats().writing, 2u);
  EXPECT_EQ(p.stats().gave_way, 0u);
  EXPECT_FALSE(b.may_give_way());  // as many writes on the link as it has
  b.pause_for_reads();             // and no pause
  EXPECT_EQ(p.stats().gave_way, 0u);
  ram.release_dirty(40 << 20);
}

TEST(FlushPacer, ABatchPausesBetweenItsWritesWhileClientsReadAndGoesOnWhenTheyStop) {
  StepClock c;
  ReadLoad reads;
  FlushPacer p({&c, &reads, nullptr, 4, true});
  FlushPacer::Slot s(&p);
  s.take(kBatch, false);          // no reads yet
  EXPECT_TRUE(s.may_give_way());  // slack: it keeps few writes on the link
  s.pause_for_reads();            // no reads: no pause
  EXPECT_EQ(p.stats().gave_way, 0u);
  reads.note(c.mono_ns());
  std::atomic<bool> went_on{false};
  std::thread t([&] {
    s.pause_for_reads();
    went_on = true;
  });
  ASSERT_TRUE(eventually([&] { return p.stats().gave_way == 1; }));
  EXPECT_FALSE(went_on);
  c.advance_ns(FlushPacer::kReadQuiet);  // the reads stop
  t.join();
  EXPECT_GE(p.stats().gave_way_ns, uint64_t(FlushPacer::kReadQuiet));
}

TEST(FlushPacer, ABatchPausesForAtMostMaxPauseInAll) {
  StepClock c;
  ReadLoad reads;
  FlushPacer p({&c, &reads, nullptr, 4, true});
  FlushPacer::Slot s(&p);
  s.take(kBatch, false);
  reads.note(c.mono_ns());
  std::atomic<bool> went_on{false};
  std::thread t([&] {
    s.pause_for_reads();
    went_on = true;
  });
  ASSERT_TRUE(eventually([&] { return p.stats().gave_way == 1; }));
  int64_t moved = 0;
  while (moved < FlushPacer::kMaxPause - 19'000'000) {  // reads go on all along
    c.advance_ns(19'000'000);
    moved += 19'000'000;
    reads.note(c.mono_ns());
  }
  EXPECT_FALSE(went_on);
  c.advance_ns(19'000'000);
  reads.note(c.mono_ns());
  t.join();
  // Its budget is spent: the next pause of the same batch does not wait.
  s.pause_for_reads();
  EXPECT_EQ(p.stats().gave_way, 1u);
}

TEST(FlushPacer, AnFsyncEndsEveryPauseAndAnUrgentBatchNeverPauses) {
  StepClock c;
  ReadLoad reads;
  FlushPacer p({&c, &reads, nullptr, 4, true});
  reads.note(c.mono_ns());
  FlushPacer::Slot s(&p);
  s.take(kBatch, false);  // the first while clients read: it may write
  FlushPacer::Slot urgent(&p);
  urgent.take(kBatch, /*urgent=*/true);
  urgent.pause_for_reads();  // no wait
  EXPECT_FALSE(urgent.may_give_way());
  EXPECT_EQ(p.stats().gave_way, 0u);
  std::thread t([&] { s.pause_for_reads(); });
  ASSERT_TRUE(eventually([&] { return p.stats().gave_way == 1; }));
  {
    // A client's fsync (or a flush of everything) waits: the batch that was
    // taken before it, which may hold its file, goes on at once, and new
    // batches are not held back while reads go on.
    FlushPacer::Hurry hurry(&p);
    t.join();
    FlushPacer::Slot more(&p);
    more.take(kBatch, false);
    EXPECT_EQ(p.stats().writing, 3u);
    EXPECT_EQ(p.stats().gave_way, 1u);
  }
}

TEST(FlushPacer, StopEndsAWaitForTheLimit) {
  StepClock c;
  FlushPacer p({&c, nullptr, nullptr, 1, true});
  FlushPacer::Slot first(&p);
  first.take(kBatch, false);
  std::thread t([&] {
    FlushPacer::Slot s(&p);
    s.take(kBatch, false);
  });
  ASSERT_TRUE(eventually([&] { return p.stats().limited == 1; }));
  p.stop();
  t.join();
  EXPECT_EQ(p.stats().writing, 1u);
}

}  // namespace
}  // namespace kvfs
