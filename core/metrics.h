// Metrics: lock-free latency histograms for the admin tool's p50/p99.
//
// Buckets are quarter powers of two of nanoseconds (about 19 % wide), so a
// percentile is exact to within one bucket. Thread-safe: relaxed atomics.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace kvfs {

class LatencyHistogram {
 public:
  static constexpr int kBuckets = 160;  // 2^(160/4) ns ~ 18 minutes
  void record(uint64_t ns) {
    buckets_[bucket(ns)].fetch_add(1, std::memory_order_relaxed);
    count_.fetch_add(1, std::memory_order_relaxed);
  }
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  // Upper edge of the bucket holding quantile q (0..1), in nanoseconds.
  uint64_t percentile_ns(double q) const;

 private:
  static int bucket(uint64_t ns);
  std::array<std::atomic<uint64_t>, kBuckets> buckets_{};
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
