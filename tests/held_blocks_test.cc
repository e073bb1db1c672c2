// SPDX-License-Identifier: Apache-2.0
// HeldBlocks: the block each open keeps for the rest of a read in pieces,
// within a limit that follows the RAM tier's size.
#include "core/ram/held_blocks.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace kvfs {
namespace {

TEST(HeldBlocks, AHoldIsFoundOnlyForItsExtentAndCounted) {
  HeldBlocks hb([] { return uint64_t(1) << 30; });
  HeldBlock h;
  const ExtentKey k{3, 4096};
  EXPECT_FALSE(hb.find_locked(h, k));
  hb.hold_locked(&h, k, BufferPool::allocate(kBlockSize));
  EXPECT_EQ(hb.bytes(), kBlockSize);
  EXPECT_TRUE(hb.find_locked(h, k));
  EXPECT_FALSE(hb.find_locked(h, ExtentKey{3, 8192}));
  EXPECT_FALSE(hb.find_locked(h, ExtentKey{4, 4096}));
  EXPECT_EQ(hb.hits(), 1u);
  // A new hold replaces the old one; the count stays one block.
  hb.hold_locked(&h, ExtentKey{5, 0}, BufferPool::allocate(kBlockSize));
  EXPECT_EQ(hb.bytes(), kBlockSize);
  EXPECT_FALSE(hb.find_locked(h, k));
  hb.unhold_locked(&h);
  EXPECT_EQ(hb.bytes(), 0u);
  EXPECT_FALSE(h.buf);
  hb.unhold_locked(&h);  // nothing held: no change
  EXPECT_EQ(hb.bytes(), 0u);
}

// A quarter of the RAM tier, and 32 blocks at most; past it an open keeps
// what it held. The limit follows a RAM tier resized at run time.
TEST(HeldBlocks, AllHoldsStayWithinAQuarterOfTheRamTier) {
  std::atomic<uint64_t> ram{8 * kBlockSize};
  HeldBlocks hb([&] { return ram.load(); });
  EXPECT_EQ(hb.limit(), 2 * kBlockSize);
  std::vector<HeldBlock> opens(4);
  for (size_t i = 0; i < opens.size(); ++i)
    hb.hold_locked(&opens[i], ExtentKey{1, i * kBlockSize}, BufferPool::allocate(kBlockSize));
  EXPECT_EQ(hb.bytes(), 2 * kBlockSize);
  EXPECT_TRUE(opens[1].buf);
  EXPECT_FALSE(opens[2].buf);
  // Over the limit, an open that held a block keeps it.
  hb.hold_locked(&opens[0], ExtentKey{9, 0}, BufferPool::allocate(kBlockSize));
  EXPECT_TRUE(hb.find_locked(opens[0], ExtentKey{1, 0}));
  ram = 1ull << 40;
  EXPECT_EQ(hb.limit(), 32 * kBlockSize);
  hb.hold_locked(&opens[2], ExtentKey{1, 2 * kBlockSize}, BufferPool::allocate(kBlockSize));
  EXPECT_EQ(hb.bytes(), 3 * kBlockSize);
  for (HeldBlock& h : opens) hb.unhold_locked(&h);
  EXPECT_EQ(hb.bytes(), 0u);
}

}  // namespace
}  // namespace kvfs
