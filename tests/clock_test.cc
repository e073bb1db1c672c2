// SPDX-License-Identifier: Apache-2.0
// Clock: the seam tests move time through instead of sleeping.
#include "core/util/clock.h"

#include <gtest/gtest.h>

namespace kvfs {
namespace {

TEST(Clock, ManualClockMovesOnlyWhenTold) {
  ManualClock c;
  const int64_t t0 = c.now_ns();
  EXPECT_NEAR(double(t0), double(system_clock().now_ns()), 60e9);  // starts at the real time
  EXPECT_EQ(c.now_ns(), t0);
  c.advance(1.5);
  EXPECT_EQ(c.now_ns(), t0 + 1'500'000'000);
}

}  // namespace
}  // namespace kvfs
