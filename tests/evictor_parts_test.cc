// SPDX-License-Identifier: Apache-2.0
// The Evictor's policies on its own parts (tests/core_parts_fixture.h: no
// BlockStore, no FUSE, no RocksDB; time moved by hand): a capacity pass
// takes the least recently used files first and tells the kernel each name,
// files in their grace period and open files stay, and an eviction whose
// journal commit fails removes nothing. evictor_test covers the same
// policies end to end through BlockStore.
#include <gtest/gtest.h>

#include <set>
#include <shared_mutex>
#include <string>
#include <vector>

#include "core/evict/evictor.h"
#include "tests/core_parts_fixture.h"

namespace kvfs {
namespace {

constexpr int64_t kSec = 1000000000;

class EvictorPartsTest : public CorePartsFixture {
 protected:
  EvictorPartsTest() { segment_size_ = 8 * kMiB; }
  void SetUp() override {
    CorePartsFixture::SetUp();
    cfg_.evict_grace_s = 10;
    cfg_.kernel_cache_s = 0;
    notices_.set_listener([this](uint64_t, const std::string& name, uint64_t) {
      std::lock_guard l(gone_mu_);
      gone_.insert(name);
    });
  }
  void TearDown() override {
    if (evictor_) evictor_->stop();
    evictor_.reset();
    CorePartsFixture::TearDown();
  }
  // The flusher runs (copies forward need it); the evictor's own thread does
  // not: each test runs its passes by hand.
  void start_evictor(uint64_t capacity) {
    start(capacity, std::chrono::milliseconds(200));
    evictor_ = std::make_unique<Evictor>(Evictor::Parts{
        &cfg_, &clock_, ns_.get(), ram_.get(), segs_.get(), &index_, io_.get(), budget_.get(),
        data_.get(), flusher_.get(), &notices_, &reclaim_mu_, &forgetting_});
  }
  // n files of `bytes`, each flushed before the next (so they lie in the
  // segments in this order), last accessed a second apart, the first
  // `age_s` seconds ago.
  std::vector<InodeRef> files(int n, uint64_t bytes, double age_s) {
    std::vector<InodeRef> v;
    for (int i = 0; i < n; ++i) {
      v.push_back(make_file("f" + std::to_string(i), bytes));
      EXPECT_TRUE(flusher_->flush_all(false).ok());
    }
    for (int i = 0; i < n; ++i) v[i]->touch(clock_.now_ns() - int64_t(age_s * kSec) + i * kSec);
    return v;
  }
  bool present(const std::string& name) { return ns_->lookup(kRootIno, name).ok(); }
  std::set<std::string> gone() {
    std::lock_guard l(gone_mu_);
    return gone_;
  }

  NameNotices notices_;
  std::shared_mutex reclaim_mu_;
  std::atomic<int> forgetting_{0};
  std::unique_ptr<Evictor> evictor_;
  std::mutex gone_mu_;
  std::set<std::string> gone_;  // guarded by gone_mu_
};

TEST_F(EvictorPartsTest, ACapacityPassTakesTheLeastRecentlyUsedFirst) {
  start_evictor(1ull << 40);
  auto v = files(8, 2 * kMiB, 100);
  const uint64_t used = segs_->segment_bytes();
  ASSERT_GT(used, 16 * kMiB);
  // 70 % of what is used: above the high watermark, so the pass must go
  // down to the low one.
  const uint64_t cap = used * 7 / 10;
  budget_->set_capacity(cap);
  evictor_->pass_now();
  EXPECT_LE(segs_->segment_bytes(), uint64_t(cap * cfg_.low_watermark));
  // The evicted ones are the oldest: a prefix of the access order.
  int k = 0;
  while (k < 8 && !present("f" + std::to_string(k))) ++k;
  EXPECT_GE(k, 1);
  EXPECT_LT(k, 8);
  for (int i = k; i < 8; ++i) EXPECT_TRUE(present("f" + std::to_string(i))) << i << " of " << k;
  std::set<std::string> want;
  for (int i = 0; i < k; ++i) want.insert("f" + std::to_string(i));
  EXPECT_EQ(gone(), want);  // and the kernel heard of each
  EXPECT_EQ(evictor_->stats().evicted_capacity, uint64_t(k));
  // What stays reads back.
  auto idx = committed();
  for (int i = k; i < 8; ++i) expect_bytes(idx[v[i]->ino]);
}

TEST_F(EvictorPartsTest, FilesInTheirGraceAndOpenFilesStay) {
  start_evictor(1ull << 40);
  auto v = files(6, 2 * kMiB, 5);  // accessed 5 .. 0 s ago: within the 10 s grace
  {
    std::lock_guard g(v[0]->mu);
    v[0]->opens.opened(false);  // the oldest is open
  }
  budget_->set_capacity(segs_->segment_bytes() / 2);
  evictor_->pass_now();
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(present("f" + std::to_string(i))) << i;
  EXPECT_TRUE(gone().empty());
  clock_.advance(60);  // the grace is over, for all but the open file
  evictor_->pass_now();
  EXPECT_TRUE(present("f0"));   // open: never evicted
  EXPECT_FALSE(present("f1"));  // the oldest of the others went first
  EXPECT_EQ(gone().count("f0"), 0u);
  EXPECT_GE(evictor_->stats().evicted_capacity, 1u);
  std::lock_guard g(v[0]->mu);
  (void)v[0]->opens.released(false, false);
}

// The journal's commit of an eviction fails (its index volume is full): no
// name goes, nothing is said to the kernel, no segment is deleted; the next
// pass, with the index back, evicts.
TEST_F(EvictorPartsTest, AnEvictionWhoseJournalCommitFailsRemovesNothing) {
  MetaJournal meta(false, &seqs_);
  meta.use_index(&index_);
  journal_.to = &meta;
  start_evictor(1ull << 40);
  files(8, 2 * kMiB, 100);
  const uint64_t used = segs_->segment_bytes();
  const size_t segments = segs_->list().size();
  budget_->set_capacity(used * 7 / 10);
  index_.fail_next(1000, Status::IOError("index volume failed"));
  evictor_->pass_now();
  EXPECT_GE(index_.failed(), 1u);
  for (int i = 0; i < 8; ++i) EXPECT_TRUE(present("f" + std::to_string(i))) << i;
  EXPECT_TRUE(gone().empty());
  EXPECT_EQ(segs_->list().size(), segments);
  EXPECT_EQ(evictor_->stats().evicted_capacity, 0u);
  index_.fail_next(0, Status::OK());
  evictor_->pass_now();
  EXPECT_FALSE(present("f0"));
  EXPECT_EQ(gone().count("f0"), 1u);
  EXPECT_LT(segs_->segment_bytes(), used);
}

}  // namespace
}  // namespace kvfs
