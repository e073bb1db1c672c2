// BufferPool: size classes, alignment for O_DIRECT, recycling of freed
// buffers and the bounds that keep idle buffers within the RAM budget. The
// pool is process-wide: each test starts by emptying it.
#include "core/buffer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
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
  BufRef small = BufferPool::allocate(4096);  // another class: not that one
  EXPECT_NE(small->data(), first);
  BufRef again = BufferPool::allocate(kBlockSize);
  EXPECT_EQ(again->data(), first);
  EXPECT_EQ(BufferPool::free_bytes(), 0u);
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
  { BufRef b = BufferPool::allocate(4096); }
  EXPECT_EQ(BufferPool::free_bytes(), kBlockSize);  // over the limit: not kept
  // trim frees the largest first.
  BufferPool::set_limit(SIZE_MAX);
  { BufRef b = BufferPool::allocate(4096); }
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
