// SPDX-License-Identifier: Apache-2.0
// The time kvfs reads for file times, LRU order, grace periods and
// housekeeping, and the deadlines of the space budget's and the evictor's
// waits: a seam, so that tests of eviction, grace and giving up move time by
// hand instead of sleeping through it. Thread-safe: now_ns() and mono_ns()
// may be called from any thread; ManualClock's advance() too.
//
// Not behind it: BackingIo's deadlines on backing calls (a stalled NFS
// server is real time, and its I/O threads are real threads) and the
// measurements (pass times, latency histograms).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace kvfs {

class Clock {
 public:
  virtual ~Clock() = default;
  // CLOCK_REALTIME in nanoseconds: file times are shown to users as dates.
  virtual int64_t now_ns() const = 0;
  // Monotonic nanoseconds (CLOCK_MONOTONIC's scale) for deadlines: a wait
  // that sleeps in slices compares it against its deadline after each.
  virtual int64_t mono_ns() const = 0;
  // The same as a steady_clock time point, for code that computes with them.
  std::chrono::steady_clock::time_point mono() const {
    return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(mono_ns()));
  }
};

// The real clock; the default everywhere outside tests.
const Clock& system_clock();

// Wall time starts at the real time and moves only when told to. Monotonic
// time is the real one plus every advance(): a deadline still passes on its
// own, and a test can make it pass at once.
class ManualClock final : public Clock {
 public:
  ManualClock();
  int64_t now_ns() const override { return t_.load(std::memory_order_relaxed); }
  int64_t mono_ns() const override;
  void advance(double seconds) {
    const auto d = static_cast<int64_t>(seconds * 1e9);
    t_.fetch_add(d, std::memory_order_relaxed);
    mono_offset_.fetch_add(d, std::memory_order_relaxed);
  }

 private:
  std::atomic<int64_t> t_;
  std::atomic<int64_t> mono_offset_{0};
};

}  // namespace kvfs
