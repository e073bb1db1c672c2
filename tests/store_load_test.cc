// SPDX-License-Identifier: Apache-2.0
// load_store (core/load/): the mount's load on its own, over real segment
// files and a real RocksDB index that a BlockStore wrote and closed. A fresh
// dir gets an index of its own; what a store wrote comes back with its
// extents live and seqs past it; an index of another dir is rebuilt from the
// segments; an index another process holds is refused, never rebuilt.
#include "core/load/store_load.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "core/backing/backing_io.h"
#include "core/flush/meta_journal.h"
#include "core/index/index.h"
#include "core/namespace/namespace.h"
#include "core/segments/segment_store.h"
#include "core/store/block_store.h"
#include "core/util/seq_counter.h"

namespace kvfs {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kMiB = 1 << 20;

class StoreLoadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char t[] = "/tmp/kvfs-store-load-XXXXXX";
    root_ = ::mkdtemp(t);
    fs::create_directories(root_ + "/backing");
  }
  void TearDown() override {
    drop_parts();
    fs::remove_all(root_);
  }
  StoreConfig config() const {
    StoreConfig c;
    c.backing_dir = root_ + "/backing";
    c.index_dir = root_ + "/index";
    c.ram_size = 64 * kMiB;
    c.segment_size = 4 * kMiB;
    c.flush_batch_bytes = 4 * kMiB;
    c.capacity = 256 * kMiB;
    c.flush_threads = 1;
    return c;
  }
  // Files written and fsynced by a BlockStore, which is then closed.
  void write_files(int n, size_t bytes) {
    auto s = BlockStore::Open(config());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    for (int i = 0; i < n; ++i) {
      Attr a;
      auto f =
          (*s)->create(kRootIno, "f" + std::to_string(i), 0644, O_CREAT | O_WRONLY, Caller{}, &a);
      ASSERT_TRUE(f.ok()) << f.status().ToString();
      const std::string data(bytes, static_cast<char>('a' + i));
      ASSERT_TRUE((*s)->write(*f, 0, data.data(), data.size()).ok());
      ASSERT_TRUE((*s)->fsync(a.ino).ok());
      (*s)->release(*f);
    }
    ASSERT_TRUE((*s)->Close().ok());
  }
  // The parts a BlockStore hands load_store, made fresh.
  void make_parts() {
    drop_parts();
    cfg_ = config();
    io_ = std::make_unique<BackingIo>(cfg_.io_timeout_s, 4);
    auto segs = SegmentStore::Open(cfg_, io_.get());
    ASSERT_TRUE(segs.ok()) << segs.status().ToString();
    segs_ = std::move(*segs);
    seqs_ = std::make_unique<SeqCounter>();
    journal_ = std::make_unique<MetaJournal>(false, seqs_.get());
    ns_ = std::make_unique<Namespace>(journal_.get(), &system_clock());
  }
  void drop_parts() {
    loaded_.index.reset();
    ns_.reset();
    journal_.reset();
    seqs_.reset();
    segs_.reset();
    io_.reset();
  }
  Status load() {
    auto r = load_store(LoadParts{&cfg_, segs_.get(), ns_.get(), journal_.get(), seqs_.get()});
    if (!r.ok()) return r.status();
    loaded_ = std::move(*r);
    return Status::OK();
  }
  uint64_t max_seq_in_index() {
    uint64_t m = 0;
    EXPECT_TRUE(loaded_.index->load_all([&](InodeSnapshot&& s) { m = std::max(m, s.seq); }).ok());
    return m;
  }

  std::string root_;
  StoreConfig cfg_;
  std::unique_ptr<BackingIo> io_;
  std::unique_ptr<SegmentStore> segs_;
  std::unique_ptr<SeqCounter> seqs_;
  std::unique_ptr<MetaJournal> journal_;
  std::unique_ptr<Namespace> ns_;
  LoadedStore loaded_;
};

TEST_F(StoreLoadTest, AFreshDirGetsAnIndexOfItsOwnAndARootOnly) {
  make_parts();
  ASSERT_TRUE(load().ok());
  EXPECT_FALSE(loaded_.rebuilt);
  EXPECT_EQ(loaded_.catch_up.records, 0u);
  EXPECT_EQ(ns_->count(), 1u);
  ASSERT_TRUE(ns_->get(kRootIno));
  auto id = loaded_.index->get_meta("backing_id");
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(*id, segs_->backing_id());
}

TEST_F(StoreLoadTest, WhatAStoreWroteComesBackLiveWithSeqsPastIt) {
  write_files(3, 300 * 1024);
  make_parts();
  ASSERT_TRUE(load().ok());
  EXPECT_FALSE(loaded_.rebuilt);
  EXPECT_EQ(ns_->count(), 4u);  // the root and three files
  for (int i = 0; i < 3; ++i) {
    auto in = ns_->lookup(kRootIno, "f" + std::to_string(i));
    ASSERT_TRUE(in.ok()) << in.status().ToString();
    EXPECT_EQ((*in)->size, 300u * 1024);
  }
  // Every extent a loaded file points at counts as live, so the evictor's
  // and the cap's view of the segments starts right.
  EXPECT_GE(segs_->live_bytes(), 3u * 300 * 1024);
  EXPECT_GT(seqs_->next(), max_seq_in_index());
}

TEST_F(StoreLoadTest, AnIndexOfAnotherBackingDirIsRebuiltFromTheSegments) {
  write_files(2, 100 * 1024);
  {
    auto idx = Index::Open(config().index_dir);
    ASSERT_TRUE(idx.ok());
    ASSERT_TRUE((*idx)->put_meta("backing_id", "some-other-dir").ok());
  }
  make_parts();
  ASSERT_TRUE(load().ok());
  EXPECT_TRUE(loaded_.rebuilt);
  EXPECT_EQ(*loaded_.index->get_meta("backing_id"), segs_->backing_id());
  EXPECT_TRUE(ns_->lookup(kRootIno, "f0").ok());
  EXPECT_TRUE(ns_->lookup(kRootIno, "f1").ok());
  EXPECT_GT(seqs_->next(), max_seq_in_index());
}

TEST_F(StoreLoadTest, AnIndexHeldByAnotherIsRefusedAndKept) {
  write_files(2, 100 * 1024);
  auto held = Index::Open(config().index_dir);
  ASSERT_TRUE(held.ok());
  make_parts();
  Status s = load();
  EXPECT_EQ(s.code(), Status::Code::kBusy) << s.ToString();
  EXPECT_EQ(ns_->count(), 0u);
  uint64_t files = 0;
  ASSERT_TRUE((*held)->load_all([&](InodeSnapshot&&) { ++files; }).ok());
  EXPECT_EQ(files, 3u);  // the root and both files: nothing was rebuilt under it
}

}  // namespace
}  // namespace kvfs
