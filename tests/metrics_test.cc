// SPDX-License-Identifier: Apache-2.0
// LatencyHistogram: the admin tool's percentiles land within one bucket
// (about 19 %) of the true value, and the Prometheus view is cumulative with
// +Inf equal to the count.
#include "core/util/metrics.h"

#include <gtest/gtest.h>

namespace kvfs {
namespace {

TEST(LatencyHistogram, PercentilesAreWithinOneBucket) {
  LatencyHistogram h;
  EXPECT_EQ(h.count(), 0u);
  // 1..1000 us, one sample each: p50 ~ 500 us, p99 ~ 990 us.
  for (uint64_t us = 1; us <= 1000; ++us) h.record(us * 1000);
  EXPECT_EQ(h.count(), 1000u);
  const double p50 = double(h.percentile_ns(0.5)), p99 = double(h.percentile_ns(0.99));
  EXPECT_GE(p50, 500e3);
  EXPECT_LE(p50, 500e3 * 1.2);
  EXPECT_GE(p99, 990e3);
  EXPECT_LE(p99, 990e3 * 1.2);
  EXPECT_LE(h.percentile_ns(0.0), h.percentile_ns(1.0));
}

TEST(LatencyHistogram, PrometheusViewIsCumulative) {
  LatencyHistogram h;
  h.record(5'000);           // <= 10 us
  h.record(10'000);          // an edge belongs to its bucket (le)
  h.record(3'000'000);       // <= 5 ms
  h.record(60'000'000'000);  // past 10 s: only +Inf
  const PromSnapshot s = h.prom_snapshot();
  EXPECT_EQ(s.cumulative[0], 2u);
  EXPECT_EQ(s.cumulative[8], 3u);  // le 5 ms
  EXPECT_EQ(s.cumulative[kPromBounds.size() - 1], 3u);
  EXPECT_EQ(s.count(), 4u);
  EXPECT_EQ(s.sum_ns, 5'000u + 10'000u + 3'000'000u + 60'000'000'000u);
  for (size_t i = 1; i < s.cumulative.size(); ++i) EXPECT_GE(s.cumulative[i], s.cumulative[i - 1]);
}

}  // namespace
}  // namespace kvfs
