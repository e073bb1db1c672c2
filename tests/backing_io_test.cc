// SPDX-License-Identifier: Apache-2.0
// BackingIo: deadlines on backing calls and the stall detector. A "backing
// call" here is a function that blocks until the test releases it: the one
// fake in these tests, standing in for a read() on a hung NFS server.
#include "core/backing/backing_io.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <thread>

namespace kvfs {
namespace {

using Clock = BackingIo::Clock;
constexpr double kT = 0.3;  // io_timeout of these tests

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Polls until cond holds, at most 10 s.
template <typename F>
bool eventually(F cond) {
  const auto t0 = Clock::now();
  while (!cond()) {
    if (since(t0) > 10) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

TEST(BackingIo, RunReturnsTheCallsStatus) {
  BackingIo io(kT, 4);
  EXPECT_TRUE(io.run("ok", [] { return Status::OK(); }).ok());
  Status s = io.run("fails", [] { return Status::NoSpace("full"); });
  EXPECT_EQ(s.code(), Status::Code::kNoSpace);
  EXPECT_FALSE(io.stalled());
  EXPECT_EQ(io.stats().timeouts, 0u);
}

TEST(BackingIo, AStuckCallTimesOutAndKeepsItsBufferUntilItReturns) {
  BackingIo io(kT, 4);
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  auto buf = std::make_shared<int>(42);
  std::weak_ptr<int> watch = buf;
  const auto t0 = Clock::now();
  Status s = io.run("stuck read", [gate, buf] {
    gate.wait();
    return Status::OK();
  });
  const double took = since(t0);
  EXPECT_EQ(s.code(), Status::Code::kTimedOut) << s.ToString();
  EXPECT_GE(took, kT * 0.9);
  EXPECT_LT(took, kT + 2);
  buf.reset();
  EXPECT_FALSE(watch.expired()) << "the call's buffer was freed while the call runs";
  EXPECT_TRUE(io.stalled()) << "a call older than io_timeout is in flight";
  BackingIoStats st = io.stats();
  EXPECT_TRUE(st.stalled);
  EXPECT_EQ(st.timeouts, 1u);
  EXPECT_EQ(st.in_flight, 1u);
  EXPECT_EQ(st.abandoned, 1u);
  // Other calls still run on other threads meanwhile.
  EXPECT_TRUE(io.run("next", [] { return Status::OK(); }).ok());

  release.set_value();
  EXPECT_TRUE(eventually([&] { return watch.expired(); })) << "buffer kept after the call ended";
  EXPECT_TRUE(eventually([&] { return !io.stalled(); }));
  EXPECT_TRUE(eventually([&] { return io.stats().abandoned == 0 && io.stats().in_flight == 0; }));
  EXPECT_TRUE(eventually([&] { return io.stats().stalls == 1; })) << "the stall was counted";
}

TEST(BackingIo, TrackedCallsMarkTheStallAndGiveUpBoundsWaiters) {
  BackingIo io(kT, 1);
  const auto waiter_since = Clock::now();
  EXPECT_FALSE(io.gave_up(waiter_since));
  {
    auto op = io.track("fdatasync of segment 1");
    EXPECT_FALSE(io.stalled());
    EXPECT_TRUE(eventually([&] { return io.gave_up(waiter_since); }));
    EXPECT_GE(since(waiter_since), kT * 0.9);
    EXPECT_TRUE(io.stalled());
    // A waiter that only just began has not waited io_timeout yet.
    EXPECT_FALSE(io.gave_up(Clock::now()));
  }
  EXPECT_FALSE(io.stalled()) << "the call returned";
  EXPECT_FALSE(io.gave_up(waiter_since));
}

TEST(BackingIo, TimeoutIsARuntimeSetting) {
  BackingIo io(kT, 1);
  io.set_timeout(5);
  EXPECT_EQ(io.timeout(), 5);
  auto op = io.track("slow call");
  std::this_thread::sleep_for(std::chrono::milliseconds(int(kT * 1500)));  // past the old one
  EXPECT_FALSE(io.stalled()) << "stalled by the old timeout";
}

}  // namespace
}  // namespace kvfs
