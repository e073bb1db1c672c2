// SPDX-License-Identifier: Apache-2.0
#include "core/util/metrics.h"

#include <cmath>

namespace kvfs {

int LatencyHistogram::bucket(uint64_t ns) {
  if (ns < 2) return 0;
  int b = static_cast<int>(std::log2(static_cast<double>(ns)) * 4);
  return b < kBuckets ? b : kBuckets - 1;
}

int LatencyHistogram::prom_bucket(uint64_t ns) {
  // 19 bounds: a linear scan costs less than the clock reads around it.
  int i = 0;
  while (i < static_cast<int>(kPromBounds.size()) && ns > kPromBounds[i]) ++i;
  return i;
}

PromSnapshot LatencyHistogram::prom_snapshot() const {
  PromSnapshot s;
  // The count is derived from the buckets, so +Inf == _count always; the sum
  // may be a few in-flight samples apart from them, which only moves a mean
  // by those samples until the next scrape.
  s.sum_ns = sum_ns_.load(std::memory_order_relaxed);
  uint64_t run = 0;
  for (size_t i = 0; i < prom_.size(); ++i)
    s.cumulative[i] = run += prom_[i].load(std::memory_order_relaxed);
  return s;
}

uint64_t LatencyHistogram::percentile_ns(double q) const {
  uint64_t total = 0;
  std::array<uint64_t, kBuckets> snap;
  for (int i = 0; i < kBuckets; ++i) total += snap[i] = buckets_[i].load(std::memory_order_relaxed);
  if (total == 0) return 0;
  const uint64_t want = static_cast<uint64_t>(std::ceil(q * static_cast<double>(total)));
  uint64_t seen = 0;
  for (int i = 0; i < kBuckets; ++i) {
    seen += snap[i];
    if (seen >= want && snap[i] > 0) return static_cast<uint64_t>(std::exp2((i + 1) / 4.0));
  }
  return static_cast<uint64_t>(std::exp2(kBuckets / 4.0));
}

}  // namespace kvfs
