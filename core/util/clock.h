// SPDX-License-Identifier: Apache-2.0
// The time kvfs reads for file times, LRU order, grace periods and
// housekeeping: a seam, so that tests of eviction and grace move time by hand
// instead of sleeping through it. Thread-safe: now_ns() may be called from any
// thread; ManualClock's advance() too.
#pragma once

#include <atomic>
#include <cstdint>

namespace kvfs {

class Clock {
 public:
  virtual ~Clock() = default;
  // CLOCK_REALTIME in nanoseconds: file times are shown to users as dates.
  virtual int64_t now_ns() const = 0;
};

// The real clock; the default everywhere outside tests.
const Clock& system_clock();

// Starts at the real time and moves only when told to.
class ManualClock final : public Clock {
 public:
  ManualClock();
  int64_t now_ns() const override { return t_.load(std::memory_order_relaxed); }
  void advance(double seconds) {
    t_.fetch_add(static_cast<int64_t>(seconds * 1e9), std::memory_order_relaxed);
  }

 private:
  std::atomic<int64_t> t_;
};

}  // namespace kvfs
