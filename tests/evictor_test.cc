// SPDX-License-Identifier: Apache-2.0
// Evictor policies through BlockStore (no FUSE): LRU order, protection of
// open files and the grace period, the capacity bound, reclamation, the admin
// eviction modes and runtime changes.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <random>

#include "core/backing/disk_layout.h"
#include "core/store/block_store.h"
#include "core/util/clock.h"
#include "tests/reconfigure_util.h"

namespace kvfs {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kMiB = 1 << 20;

class EvictorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char t[] = "/tmp/kvfs-evict-XXXXXX";
    root_ = ::mkdtemp(t);
    fs::create_directories(root_ + "/backing");
  }
  void TearDown() override {
    store_.reset();
    fs::remove_all(root_);
  }
  void open_store(double grace, uint64_t capacity = 64 * kMiB, const Clock* clock = nullptr) {
    StoreConfig c;
    c.backing_dir = root_ + "/backing";
    c.index_dir = root_ + "/index";
    c.ram_size = 32 * kMiB;
    c.segment_size = 4 * kMiB;
    c.flush_batch_bytes = 4 * kMiB;
    c.capacity = capacity;
    c.evict_grace_s = grace;
    c.tmp_max_age_s = 3600;
    auto s = BlockStore::Open(c, clock);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
  }
  // Writes and fsyncs one file: when fsync returns, its data is in a segment.
  uint64_t put(uint64_t dir, const std::string& name, size_t n, Status* err = nullptr) {
    Attr a;
    auto f = store_->create(dir, name, 0644, O_CREAT | O_WRONLY | O_TRUNC, Caller{}, &a);
    if (!f.ok()) {
      if (err) *err = f.status();
      return 0;
    }
    std::string d(n, static_cast<char>(name.back()));
    auto w = store_->write(*f, 0, d.data(), d.size());
    Status s = w.ok() ? store_->fsync(a.ino) : w.status();
    store_->release(*f);
    if (err) *err = s;
    EXPECT_TRUE(err || s.ok()) << s.ToString();
    return a.ino;
  }
  bool exists(uint64_t dir, const std::string& name) { return store_->lookup(dir, name).ok(); }
  uint64_t backing_bytes() {
    uint64_t n = 0;
    for (auto& e : fs::directory_iterator(layout::segment_dir(root_ + "/backing"))) {
      std::error_code ec;  // the evictor may delete a segment meanwhile
      uint64_t sz = e.file_size(ec);
      if (!ec) n += sz;
    }
    return n;
  }

  std::string root_;
  ManualClock clock_;  // for the tests that pass it; outlives store_
  std::unique_ptr<BlockStore> store_;
};

TEST_F(EvictorTest, StaysUnderCapAndEvictsLeastRecentlyUsed) {
  open_store(0);
  // Written in order f0..f47 (4 MiB each, 3x the 64 MiB cap); f0 and f1 are
  // read after every write, so they stay the most recently used.
  for (int i = 0; i < 48; ++i) {
    put(kRootIno, "f" + std::to_string(i), 4 * kMiB);
    ASSERT_TRUE(exists(kRootIno, "f0"));
    ASSERT_TRUE(i < 1 || exists(kRootIno, "f1"));
    EXPECT_LE(backing_bytes(), 64 * kMiB + 4 * kMiB) << "after file " << i;
  }
  EXPECT_TRUE(exists(kRootIno, "f47"));
  for (int i = 2; i < 20; ++i) EXPECT_FALSE(exists(kRootIno, "f" + std::to_string(i))) << i;
  auto st = store_->admin().evictor_stats();
  EXPECT_GT(st.evicted_capacity, 0u);
  EXPECT_GT(st.segments_deleted, 0u);
}

TEST_F(EvictorTest, OpenFilesAreNeverEvicted) {
  open_store(0);
  put(kRootIno, "held", 4 * kMiB);
  auto a = store_->lookup(kRootIno, "held");
  ASSERT_TRUE(a.ok());
  auto f = store_->open(a->ino, O_RDONLY);
  ASSERT_TRUE(f.ok());
  for (int i = 0; i < 40; ++i) put(kRootIno, "x" + std::to_string(i), 4 * kMiB);
  EXPECT_TRUE(exists(kRootIno, "held"));
  ReadResult rr;
  ASSERT_TRUE(store_->read(*f, 0, 4 * kMiB, &rr).ok());
  EXPECT_EQ(rr.bytes, 4 * kMiB);
  for (auto& v : rr.iov)
    for (size_t i = 0; i < v.iov_len; i += 4096) ASSERT_EQ(static_cast<char*>(v.iov_base)[i], 'd');
  store_->release(*f);
}

TEST_F(EvictorTest, GracePeriodProtectsAndThenEnospc) {
  open_store(3600);
  Status err;
  int written = 0;
  for (int i = 0; i < 40; ++i) {
    put(kRootIno, "g" + std::to_string(i), 4 * kMiB, &err);
    if (!err.ok()) break;
    ++written;
  }
  EXPECT_EQ(err.code(), Status::Code::kAtCapacity) << err.ToString();
  EXPECT_LE(backing_bytes(), 64 * kMiB + 4 * kMiB);
  // Nothing committed was lost, and the first file still reads.
  EXPECT_TRUE(exists(kRootIno, "g0"));
  EXPECT_GE(written, 12);
  // Raising the cap at runtime lets writes through again.
  ASSERT_TRUE(kvfs::reconfigure_one(*store_, &StoreConfig::capacity, 512 * kMiB).ok());
  put(kRootIno, "after", 4 * kMiB, &err);
  EXPECT_TRUE(err.ok()) << err.ToString();
}

// Dead space the LRU cannot free: every segment keeps one live file in three
// (above reclaim_ratio) and the grace period protects every file. The live
// data fits under the cap, so the evictor compacts (copies the sparse
// segments forward) instead of refusing writes.
TEST_F(EvictorTest, DeadSpaceInFullerSegmentsIsCompacted) {
  open_store(3600);
  auto name = [](int i) { return "c" + std::to_string(i); };
  auto check = [&](int i) {
    auto a = store_->lookup(kRootIno, name(i));
    ASSERT_TRUE(a.ok()) << name(i) << ": " << a.status().ToString();
    auto f = store_->open(a->ino, O_RDONLY);
    ASSERT_TRUE(f.ok());
    ReadResult rr;
    ASSERT_TRUE(store_->read(*f, 0, kMiB, &rr).ok());
    EXPECT_EQ(rr.bytes, kMiB) << name(i);
    std::string got;
    for (auto& v : rr.iov) got.append(static_cast<const char*>(v.iov_base), v.iov_len);
    EXPECT_EQ(got, std::string(kMiB, name(i).back())) << name(i);
    store_->release(*f);
  };
  for (int i = 0; i < 36; ++i) put(kRootIno, name(i), kMiB);
  for (int i = 0; i < 36; ++i) {
    if (i % 3 == 0) continue;
    auto a = store_->lookup(kRootIno, name(i));
    ASSERT_TRUE(a.ok());
    ASSERT_TRUE(store_->unlink(kRootIno, name(i)).ok());
    store_->forget(a->ino, UINT64_MAX);  // as the kernel does once the name is gone
  }
  // 12 MiB live in segments of about 36 MiB; 36 MiB more do not fit beside
  // them under the 64 MiB cap without compaction.
  Status err;
  for (int i = 36; i < 72; ++i) {
    put(kRootIno, name(i), kMiB, &err);
    ASSERT_TRUE(err.ok()) << name(i) << ": " << err.ToString();
  }
  // The cap plus one segment, plus half a segment while a compaction copy is
  // written and its old segment not yet deleted.
  EXPECT_LE(backing_bytes(), 64 * kMiB + 6 * kMiB);
  EXPECT_GT(store_->admin().evictor_stats().reclaim_copied_bytes, 0u);
  EXPECT_EQ(store_->admin().evictor_stats().evicted_capacity, 0u);
  for (int i = 0; i < 72; ++i)
    if (i >= 36 || i % 3 == 0) check(i);
}

TEST_F(EvictorTest, AdminModes) {
  open_store(3600, 1024 * kMiB);
  auto d = store_->mkdir(kRootIno, "sub", 0755, Caller{});
  ASSERT_TRUE(d.ok());
  auto dd = store_->mkdir(d->ino, "deeper", 0755, Caller{});
  ASSERT_TRUE(dd.ok());
  put(d->ino, "a", kMiB);
  put(dd->ino, "b", kMiB);
  put(kRootIno, "c", kMiB);
  put(kRootIno, "e", kMiB);

  EvictRequest r;
  r.kind = EvictRequest::Kind::kPrefix;
  r.ino = d->ino;
  auto res = store_->admin().evict(r);  // in grace: nothing goes without force
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->files, 0u);
  EXPECT_EQ(res->skipped, 2u);
  r.force = true;
  r.dry_run = true;
  res = store_->admin().evict(r);
  EXPECT_EQ(res->files, 2u);
  EXPECT_TRUE(exists(d->ino, "a"));
  r.dry_run = false;
  res = store_->admin().evict(r);
  EXPECT_EQ(res->files, 2u);
  EXPECT_EQ(res->bytes, 2 * kMiB);
  EXPECT_FALSE(exists(d->ino, "a"));
  EXPECT_FALSE(exists(dd->ino, "b"));
  EXPECT_TRUE(exists(kRootIno, "c"));

  EvictRequest p;
  p.kind = EvictRequest::Kind::kPath;
  p.ino = store_->lookup(kRootIno, "c")->ino;
  p.force = true;
  EXPECT_EQ(store_->admin().evict(p)->files, 1u);
  EXPECT_FALSE(exists(kRootIno, "c"));

  ASSERT_TRUE(kvfs::reconfigure_one(*store_, &StoreConfig::evict_grace_s, 0).ok());
  EvictRequest o;
  o.kind = EvictRequest::Kind::kOlderThan;
  o.older_than_s = 3600;  // nothing is that old
  EXPECT_EQ(store_->admin().evict(o)->files, 0u);
  EvictRequest all;
  all.kind = EvictRequest::Kind::kAll;
  EXPECT_EQ(store_->admin().evict(all)->files, 1u);
  EXPECT_FALSE(exists(kRootIno, "e"));
}

TEST_F(EvictorTest, ToSizeTakesTheLeastRecentlyUsed) {
  open_store(0, 1024 * kMiB);
  for (int i = 0; i < 8; ++i) put(kRootIno, "t" + std::to_string(i), 2 * kMiB);
  ASSERT_TRUE(store_->getattr(store_->lookup(kRootIno, "t0")->ino).ok());  // t0 now recent
  EvictRequest r;
  r.kind = EvictRequest::Kind::kToSize;
  r.target_bytes = 8 * kMiB;  // keep four files' worth
  auto res = store_->admin().evict(r);
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->files, 4u);
  EXPECT_TRUE(exists(kRootIno, "t0"));
  EXPECT_FALSE(exists(kRootIno, "t1"));
  EXPECT_FALSE(exists(kRootIno, "t4"));
  EXPECT_TRUE(exists(kRootIno, "t5"));
  EXPECT_TRUE(exists(kRootIno, "t7"));
}

TEST_F(EvictorTest, ReclaimedSegmentsKeepTheIndexRebuildable) {
  open_store(0);
  auto d = store_->mkdir(kRootIno, "dir", 0700, Caller{});
  ASSERT_TRUE(d.ok());
  for (int i = 0; i < 48; ++i) {
    put(d->ino, "r" + std::to_string(i), 4 * kMiB);
    ASSERT_TRUE(exists(d->ino, "r47") || i < 47);
  }
  ASSERT_GT(store_->admin().evictor_stats().segments_deleted, 0u);
  ASSERT_TRUE(store_->Close().ok());
  store_.reset();
  fs::remove_all(root_ + "/index");
  open_store(0);
  // The directory's snapshot lived in a deleted segment: it was written again.
  auto again = store_->lookup(kRootIno, "dir");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->mode & 07777, 0700u);
  EXPECT_TRUE(exists(again->ino, "r47"));
}

// The grace period is measured on the store's clock: once it has passed,
// the files it protected are evicted in LRU order and writes go on (no sleep:
// the test moves the clock).
TEST_F(EvictorTest, WritesRefusedInGraceGoOnOnceTheGraceHasPassed) {
  open_store(600, 64 * kMiB, &clock_);
  Status err;
  int written = 0;
  for (; written < 40; ++written) {
    put(kRootIno, "g" + std::to_string(written), 4 * kMiB, &err);
    if (!err.ok()) break;
    clock_.advance(1);  // an LRU order the evictor can see
  }
  ASSERT_EQ(err.code(), Status::Code::kAtCapacity) << err.ToString();
  const int refused = written;  // (a lookup would make g0 recent: none here)
  clock_.advance(601);
  // The refused file is still in RAM: flushing it asks for room again, and
  // now the evictor may take the oldest files to make it.
  ASSERT_TRUE(store_->flush_all().ok());
  put(kRootIno, "later", 4 * kMiB, &err);
  EXPECT_TRUE(err.ok()) << err.ToString();
  EXPECT_FALSE(exists(kRootIno, "g0"));  // the least recently used went first
  EXPECT_TRUE(exists(kRootIno, "g" + std::to_string(refused - 1)));
  EXPECT_GT(store_->admin().evictor_stats().evicted_capacity, 0u);
}

TEST_F(EvictorTest, OlderThanAndTmpCleanupFollowTheClock) {
  open_store(0, 1024 * kMiB, &clock_);
  put(kRootIno, "old", kMiB);
  put(kRootIno, "part.tmp", kMiB);  // tmp_max_age is an hour
  clock_.advance(120);
  put(kRootIno, "new", kMiB);
  EvictRequest o;
  o.kind = EvictRequest::Kind::kOlderThan;
  o.older_than_s = 60;
  auto res = store_->admin().evict(o);
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->files, 2u);  // old and part.tmp
  EXPECT_FALSE(exists(kRootIno, "old"));
  EXPECT_TRUE(exists(kRootIno, "new"));

  put(kRootIno, "next.tmp", kMiB);
  EXPECT_EQ(store_->admin().housekeep(), 0u);  // minutes old: kept
  EXPECT_TRUE(exists(kRootIno, "next.tmp"));
  clock_.advance(3601);
  EXPECT_LE(store_->admin().housekeep(), 1u);  // the evictor's own pass may have been first
  EXPECT_FALSE(exists(kRootIno, "next.tmp"));
  EXPECT_EQ(store_->admin().evictor_stats().evicted_tmp, 1u);
  EXPECT_TRUE(exists(kRootIno, "new"));
}

}  // namespace
}  // namespace kvfs
