// SPDX-License-Identifier: Apache-2.0
// BufferPool: size classes, alignment for O_DIRECT, recycling of freed
// buffers and the bounds that keep idle buffers within the RAM budget. The
// pool is process-wide: each test starts by emptying it.
#include "core/util/buffer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

namespace kvfs {
namespace {

class BufferPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    BufferPool::set_limit(SIZE_MAX);
    BufferPool::set_max_free_bytes(64u << 20);
    BufferPool::trim(0);
  }
  void TearDown() override { BufferPool::trim(0); }
};

TEST_F(BufferPoolTest, ClassesArePowersOfTwoFrom4KiBTo1MiB) {
  EXPECT_EQ(buffer_class(0), 4096u);
  EXPECT_EQ(buffer_class(1), 4096u);
  EXPECT_EQ(buffer_class(4096), 4096u);
  EXPECT_EQ(buffer_class(4097), 8192u);
  EXPECT_EQ(buffer_class(700000), 1u << 20);
  EXPECT_EQ(buffer_class(kBlockSize), kBlockSize);
  for (size_t n : {1ul, 5000ul, 65536ul, 300000ul, kBlockSize}) {
    BufRef b = BufferPool::allocate(n);
    EXPECT_EQ(b->capacity(), buffer_class(n));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % kAlign, 0u) << n;  // O_DIRECT-ready
  }
}

TEST_F(BufferPoolTest, FreedBuffersAreReusedInTheirClass) {
  char* first;
  {
    BufRef b = BufferPool::allocate(kBlockSize);
    first = b->data();
  }
  EXPECT_EQ(BufferPool::free_bytes(), kBlockSize);
  BufRef again = BufferPool::allocate(kBlockSize);
  EXPECT_EQ(again->data(), first);
  EXPECT_EQ(BufferPool::free_bytes(), 0u);
}

bool within(const char* p, const char* base, size_t len) {
  return p >= base && p < base + len;
}

// The mount-time prefault fills the pool with 1 MiB buffers; a cold read of
// a 512 KiB file's block must use that warm memory, not fault in new pages.
TEST_F(BufferPoolTest, ASmallerClassSplitsAnIdleLargerBufferBeforeTakingFreshMemory) {
  char* big;
  {
    BufRef b = BufferPool::allocate(kBlockSize);
    big = b->data();
  }
  BufRef a = BufferPool::allocate(kBlockSize / 2);
  EXPECT_EQ(a->capacity(), kBlockSize / 2);
  EXPECT_TRUE(within(a->data(), big, kBlockSize));
  EXPECT_EQ(BufferPool::free_bytes(), kBlockSize / 2);  // the other half
  BufRef s = BufferPool::allocate(4096);                // from that half, down to 4 KiB
  EXPECT_TRUE(within(s->data(), big, kBlockSize));
  EXPECT_EQ(BufferPool::free_bytes(), kBlockSize / 2 - 4096);
  BufRef q = BufferPool::allocate(kBlockSize / 4);
  EXPECT_TRUE(within(q->data(), big, kBlockSize));
  // Pieces never overlap.
  std::vector<std::pair<const char*, size_t>> v = {
      {a->data(), a->capacity()}, {s->data(), s->capacity()}, {q->data(), q->capacity()}};
  for (size_t i = 0; i < v.size(); ++i)
    for (size_t j = i + 1; j < v.size(); ++j)
      EXPECT_TRUE(v[i].first + v[i].second <= v[j].first || v[j].first + v[j].second <= v[i].first)
          << i << " " << j;
  BufRef fresh = BufferPool::allocate(kBlockSize);  // nothing idle that large
  EXPECT_FALSE(within(fresh->data(), big, kBlockSize));
}

// A trimmed piece is not freed (it is not the start of an allocation): its
// pages go back to the system and the piece is handed out again later.
TEST_F(BufferPoolTest, TrimmedPiecesGiveTheirPagesBackAndAreReused) {
  char* big;
  {
    BufRef b = BufferPool::allocate(kBlockSize);
    big = b->data();
    std::memset(big, 0xab, kBlockSize);
  }
  { BufRef a = BufferPool::allocate(kBlockSize / 2); }
  EXPECT_EQ(BufferPool::free_bytes(), kBlockSize);
  BufferPool::trim(0);
  EXPECT_EQ(BufferPool::free_bytes(), 0u);
  BufRef a = BufferPool::allocate(kBlockSize / 2);
  ASSERT_TRUE(within(a->data(), big, kBlockSize));
  for (size_t i = 0; i < a->capacity(); i += 4096) ASSERT_EQ(a->data()[i], 0) << i;
  std::memset(a->data(), 0x5c, a->capacity());  // usable again
}

TEST_F(BufferPoolTest, IdleBuffersStayUnderTheLimitAndTheCap) {
  BufferPool::set_max_free_bytes(3 * kBlockSize);
  {
    std::vector<BufRef> v;
    for (int i = 0; i < 8; ++i) v.push_back(BufferPool::allocate(kBlockSize));
  }
  EXPECT_EQ(BufferPool::free_bytes(), 3 * kBlockSize);  // the rest went to the system
  BufferPool::set_limit(kBlockSize);                    // the RAM tier's budget is used up
  BufferPool::trim(kBlockSize);
  EXPECT_EQ(BufferPool::free_bytes(), kBlockSize);
  {
    BufRef b = BufferPool::allocate(kBlockSize);  // the idle one
    BufRef c = BufferPool::allocate(kBlockSize);  // fresh
  }
  EXPECT_EQ(BufferPool::free_bytes(), kBlockSize);  // over the limit: not kept
  // trim frees the largest first.
  BufferPool::set_limit(SIZE_MAX);
  {
    BufRef b = BufferPool::allocate(kBlockSize);
    BufRef s = BufferPool::allocate(4096);  // nothing idle to split
  }
  EXPECT_EQ(BufferPool::free_bytes(), kBlockSize + 4096);
  BufferPool::trim(4096);
  EXPECT_EQ(BufferPool::free_bytes(), 4096u);
}

TEST_F(BufferPoolTest, PrefillStopsAtItsTargetTheCapOrWhenAsked) {
  std::atomic<bool> stop{false};
  BufferPool::prefill(4 * kBlockSize, &stop);
  EXPECT_EQ(BufferPool::free_bytes(), 4 * kBlockSize);
  BufferPool::set_max_free_bytes(6 * kBlockSize);
  BufferPool::prefill(100 * kBlockSize, &stop);
  EXPECT_EQ(BufferPool::free_bytes(), 6 * kBlockSize);
  BufferPool::trim(0);
  stop = true;
  BufferPool::prefill(4 * kBlockSize, &stop);
  EXPECT_EQ(BufferPool::free_bytes(), 0u);
}

// The RAM tier takes buffers from the pool while the mount-time prefault
// fills it: the prefault touches its target once in all, it does not keep
// the pool topped up (that zeroed fresh memory for every block read).
TEST_F(BufferPoolTest, PrefillTouchesItsTargetOnceWhileBuffersAreTaken) {
  std::atomic<bool> stop{false}, done{false};
  std::vector<BufRef> taken;
  std::thread taker([&] {
    while (!done.load() && taken.size() < 400) {
      if (BufferPool::free_bytes() >= kBlockSize) taken.push_back(BufferPool::allocate(kBlockSize));
    }
  });
  const size_t touched = BufferPool::prefill(8 * kBlockSize, &stop);
  done = true;
  taker.join();
  EXPECT_LE(touched, 8 * kBlockSize);
  EXPECT_LE(taken.size() * kBlockSize + BufferPool::free_bytes(), 8 * kBlockSize);
}

TEST_F(BufferPoolTest, ManyThreadsAllocateAndFree) {
  std::vector<std::thread> ts;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        BufRef b = BufferPool::allocate(size_t(4096) << ((i + t) % 9));
        b->data()[0] = static_cast<char>(t);
        if (b->data()[0] != static_cast<char>(t)) ++bad;
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_LE(BufferPool::free_bytes(), 64u << 20);
}

}  // namespace
}  // namespace kvfs
