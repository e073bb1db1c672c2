// SPDX-License-Identifier: Apache-2.0
// ReuseTable: the uses between two uses of a key, for keys it still holds.
#include "core/ram/reuse_table.h"

#include <gtest/gtest.h>

namespace kvfs {
namespace {

TEST(ReuseTable, GivesTheUsesSinceAKeysPreviousUse) {
  ReuseTable t(64);
  EXPECT_EQ(t.use(0xabc00000ull, 5), ReuseTable::kUnknown) << "first use";
  EXPECT_EQ(t.last_use(0xabc00000ull), 5u);
  EXPECT_EQ(t.use(0xabc00000ull, 12), 7u);
  EXPECT_EQ(t.use(0xabc00000ull, 13), 1u);
  EXPECT_EQ(t.last_use(0xdef00000ull), ReuseTable::kUnknown) << "never used";
}

TEST(ReuseTable, AKeyWhoseSlotAnotherTookIsForgotten) {
  ReuseTable t(64);  // slots from bits 20 and up of the hash: these two share one
  const uint64_t a = 0x3ull << 20, b = (0x3ull << 20) | (1ull << 40);
  t.use(a, 1);
  t.use(b, 2);
  EXPECT_EQ(t.last_use(a), ReuseTable::kUnknown);
  EXPECT_EQ(t.use(a, 3), ReuseTable::kUnknown);
  EXPECT_EQ(t.last_use(b), ReuseTable::kUnknown) << "a took it back";
}

TEST(ReuseTable, KeysThatDifferOnlyInTheirLowBitsKeepTheirOwnSlots) {
  // RamTier's shards take the low bits: the keys of one shard share them.
  ReuseTable t(1024);
  for (uint64_t i = 0; i < 512; ++i) t.use((i << 20) | 0x5, i);
  for (uint64_t i = 0; i < 512; ++i) EXPECT_EQ(t.last_use((i << 20) | 0x5), i);
}

}  // namespace
}  // namespace kvfs
