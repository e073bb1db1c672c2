#include "core/metrics.h"

#include <cmath>

namespace kvfs {

int LatencyHistogram::bucket(uint64_t ns) {
  if (ns < 2) return 0;
  int b = static_cast<int>(std::log2(static_cast<double>(ns)) * 4);
  return b < kBuckets ? b : kBuckets - 1;
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
