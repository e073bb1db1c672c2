// SPDX-License-Identifier: Apache-2.0
// Metrics: lock-free latency histograms.
//
// Two views of the same samples. Fine buckets, quarter powers of two of
// nanoseconds (about 19 % wide), give the admin tool's p50/p99 to within one
// bucket. Coarse fixed buckets with decimal edges (kPromBounds) plus a sum
// are what Prometheus needs: counters that only grow, so rate() and
// histogram_quantile() work over any window, not just since the mount.
// Thread-safe: relaxed atomics.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace kvfs {

// Upper bounds (le) of the Prometheus buckets, in nanoseconds: 10 us (a RAM
// hit through FUSE) to 10 s (a stalled backing filesystem); +Inf is implied.
inline constexpr std::array<uint64_t, 19> kPromBounds = {
    10'000,        25'000,        50'000,        100'000,       250'000,
    500'000,       1'000'000,     2'500'000,     5'000'000,     10'000'000,
    25'000'000,    50'000'000,    100'000'000,   250'000'000,   500'000'000,
    1'000'000'000, 2'500'000'000, 5'000'000'000, 10'000'000'000};

// A consistent-enough copy of the Prometheus view: cumulative[i] counts the
// samples <= kPromBounds[i]; the last entry (+Inf) is the count, by
// construction, so +Inf == _count holds even while samples arrive.
struct PromSnapshot {
  std::array<uint64_t, kPromBounds.size() + 1> cumulative{};
  uint64_t count() const { return cumulative.back(); }
  uint64_t sum_ns = 0;
};

class LatencyHistogram {
 public:
  static constexpr int kBuckets = 160;  // 2^(160/4) ns ~ 18 minutes
  void record(uint64_t ns) {
    buckets_[bucket(ns)].fetch_add(1, std::memory_order_relaxed);
    prom_[prom_bucket(ns)].fetch_add(1, std::memory_order_relaxed);
    sum_ns_.fetch_add(ns, std::memory_order_relaxed);
    count_.fetch_add(1, std::memory_order_relaxed);
  }
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  // Upper edge of the bucket holding quantile q (0..1), in nanoseconds.
  uint64_t percentile_ns(double q) const;
  PromSnapshot prom_snapshot() const;

 private:
  static int bucket(uint64_t ns);
  static int prom_bucket(uint64_t ns);
  std::array<std::atomic<uint64_t>, kBuckets> buckets_{};
  std::array<std::atomic<uint64_t>, kPromBounds.size() + 1> prom_{};  // not cumulative
  std::atomic<uint64_t> sum_ns_{0};
  std::atomic<uint64_t> count_{0};
};

// Times a scope into a histogram.
class ScopedLatency {
 public:
  explicit ScopedLatency(LatencyHistogram& h) : h_(h), start_(std::chrono::steady_clock::now()) {}
  ~ScopedLatency() {
    h_.record(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now() - start_)
                                        .count()));
  }

 private:
  LatencyHistogram& h_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace kvfs
