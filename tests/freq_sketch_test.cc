// FreqSketch: approximate counts of recent uses, fading by halving.
#include "core/freq_sketch.h"

#include <gtest/gtest.h>

namespace kvfs {
namespace {

TEST(FreqSketch, CountsUsesUpToItsMaxAndNeverUndercounts) {
  FreqSketch s(256);
  for (int i = 0; i < 5; ++i) s.add(42);
  for (uint64_t k = 1000; k < 1200; ++k) s.add(k);  // others, once each
  EXPECT_GE(s.estimate(42), 5u);
  EXPECT_LE(s.estimate(42), 6u) << "four rows: a collision in all of them is rare";
  EXPECT_LE(s.estimate(7), 1u) << "never used";
  for (int i = 0; i < 40; ++i) s.add(43);
  EXPECT_EQ(s.estimate(43), FreqSketch::kMax);
}

TEST(FreqSketch, OldUsesFade) {
  FreqSketch s(64);  // halves every 640 additions
  for (int i = 0; i < 8; ++i) s.add(1);
  EXPECT_GE(s.estimate(1), 8u);
  for (uint64_t k = 0; k < 640; ++k) s.add(100000 + k % 50);
  EXPECT_LE(s.estimate(1), 4u) << "halved once";
  for (uint64_t k = 0; k < 4 * 640; ++k) s.add(200000 + k % 50);
  EXPECT_EQ(s.estimate(1), 0u);
}

}  // namespace
}  // namespace kvfs
