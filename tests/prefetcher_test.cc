// SPDX-License-Identifier: Apache-2.0
// Prefetcher over a real segment store and RAM tier: a file's cold blocks
// are read into RAM ahead of the client, within the budget, skipping what
// RAM has; a block evicted or rewritten before its read is not read; and the
// RAM tier counts each prefetched block used (a client hit) or wasted (left
// unread).
#include "core/data/prefetcher.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <shared_mutex>

#include "file_data_fixture.h"

namespace kvfs {
namespace {

using std::chrono::seconds;

class PrefetcherTest : public FileDataFixture {
 protected:
  // A file of n whole blocks, flushed, with none of them left in RAM.
  InodeRef cold_file(uint32_t n) {
    auto in = std::make_shared<Inode>(2);
    in->mode = S_IFREG | 0644;
    for (uint32_t b = 0; b < n; ++b)
      write(*in, uint64_t(b) * kBlockSize, kBlockSize, char('a' + b));
    flush(*in);
    ram_.drop_clean();
    return in;
  }
  bool in_ram(const Inode& in, uint32_t idx) {
    return ram_.contains(ExtentKey{in.blocks[idx].ext.seg, in.blocks[idx].ext.off});
  }
  std::unique_ptr<Prefetcher> make(uint64_t budget) {
    return std::make_unique<Prefetcher>(
        Prefetcher::Parts{data_.get(), &ram_, &reclaim_mu_, nullptr}, budget);
  }
  std::shared_mutex reclaim_mu_;
};

TEST_F(PrefetcherTest, ReadsAFilesColdBlocksIntoRamAndCountsThemUsed) {
  InodeRef in = cold_file(4);
  const uint64_t wasted0 = ram_.stats().prefetch_wasted;
  auto p = make(64 << 20);
  p->start(4);
  p->want(in);
  ASSERT_TRUE(p->wait_idle(seconds(30)));
  for (uint32_t b = 0; b < 4; ++b) EXPECT_TRUE(in_ram(*in, b)) << b;
  PrefetchStats s = p->stats();
  EXPECT_EQ(s.queued, 4u);
  EXPECT_EQ(s.reads, 4u);
  EXPECT_EQ(s.read_bytes, 4 * kBlockSize);
  EXPECT_EQ(s.pending_bytes, 0u);
  // Asked for again: all in RAM, nothing queued.
  p->want(in);
  EXPECT_EQ(p->stats().queued, 4u);
  // A client reads two of them: used; the other two leave RAM unread.
  ConstBufRef b0 = ram_.lookup(ExtentKey{in->blocks[0].ext.seg, in->blocks[0].ext.off});
  ASSERT_TRUE(b0);
  EXPECT_EQ(b0->data()[0], 'a');
  EXPECT_TRUE(ram_.lookup(ExtentKey{in->blocks[3].ext.seg, in->blocks[3].ext.off}));
  EXPECT_EQ(ram_.stats().prefetch_used, 2u);
  ram_.drop_clean();
  EXPECT_EQ(ram_.stats().prefetch_wasted - wasted0, 2u);
  EXPECT_EQ(ram_.stats().prefetch_used, 2u);
}

TEST_F(PrefetcherTest, StaysWithinItsBudgetAndFromTheBlockAsked) {
  InodeRef in = cold_file(6);
  auto p = make(2 * kBlockSize);
  // Not started: what is queued stays queued, so the budget is full.
  p->want(in, 1);
  PrefetchStats s = p->stats();
  EXPECT_EQ(s.queued, 2u);  // blocks 1 and 2
  EXPECT_EQ(s.over_budget, 3u);
  EXPECT_EQ(s.pending_bytes, 2 * kBlockSize);
  p->start(2);
  ASSERT_TRUE(p->wait_idle(seconds(30)));
  EXPECT_FALSE(in_ram(*in, 0));
  EXPECT_TRUE(in_ram(*in, 1));
  EXPECT_TRUE(in_ram(*in, 2));
  EXPECT_FALSE(in_ram(*in, 3));
  // Read ahead and not taken by a client yet: still in the budget.
  EXPECT_EQ(ram_.prefetched_bytes(), 2 * kBlockSize);
  p->want(in, 3);
  EXPECT_EQ(p->stats().queued, 2u);
  // A client takes them: room again, the rest follows.
  for (uint32_t b : {1u, 2u})
    ASSERT_TRUE(ram_.lookup(ExtentKey{in->blocks[b].ext.seg, in->blocks[b].ext.off}));
  EXPECT_EQ(ram_.prefetched_bytes(), 0u);
  p->want(in, 3);
  ASSERT_TRUE(p->wait_idle(seconds(30)));
  EXPECT_TRUE(in_ram(*in, 3));
  EXPECT_TRUE(in_ram(*in, 4));
  auto off = make(0);  // 0: off
  off->want(in);
  EXPECT_EQ(off->stats().queued, 0u);
}

TEST_F(PrefetcherTest, ABlockAClientReadItselfIsNotReadAhead) {
  InodeRef in = cold_file(3);
  auto p = make(64 << 20);
  p->want(in);  // not started: all three stay queued
  p->taken(ExtentKey{in->blocks[1].ext.seg, in->blocks[1].ext.off});
  p->start(1);
  ASSERT_TRUE(p->wait_idle(seconds(30)));
  const PrefetchStats s = p->stats();
  EXPECT_EQ(s.reads, 2u);
  EXPECT_EQ(s.cancelled, 1u);
  EXPECT_TRUE(in_ram(*in, 0));
  EXPECT_FALSE(in_ram(*in, 1)) << "the client's own read, not a second one";
  EXPECT_TRUE(in_ram(*in, 2));
}

TEST_F(PrefetcherTest, AColdReadAsksForAWindowOfBlocks) {
  InodeRef in = cold_file(6);
  auto p = make(64 << 20);
  p->want(in, 2, 3);
  EXPECT_EQ(p->stats().queued, 3u);  // blocks 2, 3 and 4
  p->start(2);
  ASSERT_TRUE(p->wait_idle(seconds(30)));
  EXPECT_FALSE(in_ram(*in, 1));
  EXPECT_TRUE(in_ram(*in, 2));
  EXPECT_TRUE(in_ram(*in, 4));
  EXPECT_FALSE(in_ram(*in, 5));
}

TEST_F(PrefetcherTest, ABlockEvictedOrRewrittenBeforeItsReadIsNotRead) {
  InodeRef in = cold_file(3);
  auto p = make(64 << 20);
  p->want(in);
  EXPECT_EQ(p->stats().queued, 3u);
  // Before any worker runs: block 1 is rewritten (dirty again), and then
  // the whole file is evicted.
  write(*in, kBlockSize, 10, 'z');
  {
    std::lock_guard g(in->mu);
    in->evicted = true;
  }
  const uint64_t reads0 = data_->backing_reads();
  p->start(2);
  ASSERT_TRUE(p->wait_idle(seconds(30)));
  EXPECT_EQ(p->stats().cancelled, 3u);
  EXPECT_EQ(p->stats().reads, 0u);
  EXPECT_EQ(data_->backing_reads(), reads0);
  p->want(in);  // an evicted file is not queued at all
  EXPECT_EQ(p->stats().queued, 3u);
}

TEST_F(PrefetcherTest, StopDropsWhatIsQueued) {
  InodeRef in = cold_file(3);
  auto p = make(64 << 20);
  p->want(in);
  p->stop();
  EXPECT_EQ(p->stats().pending_bytes, 0u);
  EXPECT_TRUE(p->wait_idle(seconds(1)));
  p->want(in);  // after stop: ignored
  EXPECT_EQ(p->stats().queued, 3u);
}

// A full RAM tier of written blocks, not read yet: a read ahead would push
// one out, and that block's own read would cross the link in its place.
// Blocks a client read once (they went in while there was room) may go.
TEST_F(PrefetcherTest, ReadsNothingAheadIntoRamFullOfWrittenBlocks) {
  InodeRef cold = cold_file(4);
  std::vector<InodeRef> hot;
  for (int f = 0; f < 8; ++f) {  // 64 MiB: the whole tier
    hot.push_back(std::make_shared<Inode>(10 + f));
    hot.back()->mode = S_IFREG | 0644;
    for (uint32_t b = 0; b < 8; ++b) write(*hot.back(), uint64_t(b) * kBlockSize, kBlockSize, 'h');
    flush(*hot.back());
  }
  ASSERT_EQ(ram_.stats().clean_bytes, 64u << 20);
  auto p = make(64 << 20);
  p->start(2);
  p->want(cold);
  ASSERT_TRUE(p->wait_idle(seconds(30)));
  PrefetchStats s = p->stats();
  EXPECT_EQ(s.reads, 0u);
  EXPECT_EQ(s.no_room, 4u);
  for (uint32_t b = 0; b < 4; ++b) EXPECT_FALSE(in_ram(*cold, b)) << b;
  for (auto& in : hot)
    for (uint32_t b = 0; b < 8; ++b) EXPECT_TRUE(in_ram(*in, b));

  // The same tier holding blocks clients read once: read ahead.
  ram_.drop_clean();
  for (auto& in : hot)
    for (uint32_t b = 0; b < 8; ++b) {
      ConstBufRef out;
      ASSERT_TRUE(data_->read_block(in->ino, b, in->blocks[b].ext, &out, false).ok());
    }
  ASSERT_EQ(ram_.stats().clean_bytes, 64u << 20);
  p->want(cold);
  ASSERT_TRUE(p->wait_idle(seconds(30)));
  EXPECT_EQ(p->stats().reads, 4u);
  for (uint32_t b = 0; b < 4; ++b) EXPECT_TRUE(in_ram(*cold, b)) << b;
}

}  // namespace
}  // namespace kvfs
