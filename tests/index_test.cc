// SPDX-License-Identifier: Apache-2.0
// Index: the RocksDB keys of the segment-log follower (snapshots, deletion
// seqs, applied positions, unlogged journal entries), on a real database.
#include "core/index/index.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

namespace kvfs {
namespace {

namespace fs = std::filesystem;

class IndexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char t[] = "/tmp/kvfs-index-XXXXXX";
    dir_ = ::mkdtemp(t);
    reopen();
  }
  void TearDown() override {
    idx_.reset();
    fs::remove_all(dir_);
  }
  void reopen() {
    idx_.reset();
    auto i = Index::Open(dir_);
    ASSERT_TRUE(i.ok()) << i.status().ToString();
    idx_ = std::move(*i);
  }
  std::string dir_;
  std::unique_ptr<Index> idx_;
};

TEST_F(IndexTest, SeqsOfSnapshotsAndTombstones) {
  InodeSnapshot a;
  a.ino = 7;
  a.seq = 40;
  a.name = "a";
  IndexBatch b;
  b.puts.push_back(&a);
  b.deletes.push_back({9, 55});  // deleted, seq kept
  b.deletes.push_back({11, 0});  // dropped, nothing kept
  ASSERT_TRUE(idx_->commit(b, true).ok());
  reopen();
  uint64_t s = 1, t = 1;
  ASSERT_TRUE(idx_->seqs(7, &s, &t).ok());
  EXPECT_EQ(s, 40u);
  EXPECT_EQ(t, 0u);
  ASSERT_TRUE(idx_->seqs(9, &s, &t).ok());
  EXPECT_EQ(s, 0u);
  EXPECT_EQ(t, 55u);
  ASSERT_TRUE(idx_->seqs(11, &s, &t).ok());
  EXPECT_EQ(s + t, 0u);
  // Tombstones never show up as inodes, and all go at once.
  int n = 0;
  ASSERT_TRUE(idx_->load_all([&](InodeSnapshot&& x) {
                    ++n;
                    EXPECT_EQ(x.ino, 7u);
                  })
                  .ok());
  EXPECT_EQ(n, 1);
  auto dropped = idx_->drop_tombstones();
  ASSERT_TRUE(dropped.ok());
  EXPECT_EQ(*dropped, 1u);
  ASSERT_TRUE(idx_->seqs(9, &s, &t).ok());
  EXPECT_EQ(t, 0u);
  ASSERT_TRUE(idx_->seqs(7, &s, &t).ok());
  EXPECT_EQ(s, 40u);
}

TEST_F(IndexTest, SegmentPositionsRoundTrip) {
  IndexBatch b;
  SegmentLogState st;
  st.end = 1 << 20;
  st.records = 3;
  st.add_seq(17);
  st.add_seq(5);
  st.add_seq(0);  // no entry: ignored
  b.segments.emplace_back(2, st);
  b.segments.emplace_back(0x1122334455667788ull, SegmentLogState{4096, 1, 9, 9});
  ASSERT_TRUE(idx_->commit(b, true).ok());
  reopen();
  auto m = idx_->segment_states();
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->size(), 2u);
  EXPECT_EQ(m->at(2).end, 1u << 20);
  EXPECT_EQ(m->at(2).records, 3u);
  EXPECT_EQ(m->at(2).min_seq, 5u);
  EXPECT_EQ(m->at(2).max_seq, 17u);
  EXPECT_EQ(m->at(0x1122334455667788ull).end, 4096u);
  IndexBatch d;
  d.segment_drops.push_back(2);
  ASSERT_TRUE(idx_->commit(d, true).ok());
  m = idx_->segment_states();
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->size(), 1u);
}

TEST_F(IndexTest, PendingJournalEntriesUntilLogged) {
  RecordEntry t;
  t.kind = EntryKind::kTombstone;
  t.snap.ino = 3;
  t.snap.seq = 100;
  RecordEntry r;
  r.snap.ino = 4;
  r.snap.seq = 101;
  r.snap.name = "renamed";
  IndexBatch b;
  b.pending = {&t, &r};
  ASSERT_TRUE(idx_->commit(b, true).ok());
  reopen();
  std::vector<RecordEntry> got;
  ASSERT_TRUE(idx_->pending([&](RecordEntry&& e) { got.push_back(std::move(e)); }).ok());
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].kind, EntryKind::kTombstone);
  EXPECT_EQ(got[0].snap.seq, 100u);
  EXPECT_EQ(got[1].snap.name, "renamed");
  IndexBatch l;
  l.logged = {100, 999};  // one that was never pending: harmless
  ASSERT_TRUE(idx_->commit(l, true).ok());
  got.clear();
  ASSERT_TRUE(idx_->pending([&](RecordEntry&& e) { got.push_back(std::move(e)); }).ok());
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].snap.seq, 101u);
}

TEST_F(IndexTest, PeerUnlinksAreKeptApartFromTheJournal) {
  RecordEntry u;
  u.kind = EntryKind::kPeerUnlink;
  u.snap.name = "node-a";
  u.snap.ino = 42;
  u.snap.mtime_ns = 123456789;
  u.snap.seq = 7;
  IndexBatch b;
  b.pending = {&u};
  b.peer_unlinks = {&u};
  ASSERT_TRUE(idx_->commit(b, true).ok());
  // Logged to a segment: the P key goes, the U key stays.
  IndexBatch l;
  l.logged = {7};
  ASSERT_TRUE(idx_->commit(l, true).ok());
  reopen();
  std::vector<RecordEntry> got;
  ASSERT_TRUE(idx_->pending([&](RecordEntry&& e) { got.push_back(std::move(e)); }).ok());
  EXPECT_TRUE(got.empty());
  ASSERT_TRUE(idx_->peer_unlinks([&](RecordEntry&& e) { got.push_back(std::move(e)); }).ok());
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].kind, EntryKind::kPeerUnlink);
  EXPECT_EQ(got[0].snap.name, "node-a");
  EXPECT_EQ(got[0].snap.ino, 42u);
  EXPECT_EQ(got[0].snap.mtime_ns, 123456789);
  // Dropping deletion seqs leaves them alone; settled, they go.
  ASSERT_TRUE(idx_->drop_tombstones().ok());
  got.clear();
  ASSERT_TRUE(idx_->peer_unlinks([&](RecordEntry&& e) { got.push_back(std::move(e)); }).ok());
  EXPECT_EQ(got.size(), 1u);
  IndexBatch d;
  d.peer_unlinks_done = {7};
  ASSERT_TRUE(idx_->commit(d, true).ok());
  got.clear();
  ASSERT_TRUE(idx_->peer_unlinks([&](RecordEntry&& e) { got.push_back(std::move(e)); }).ok());
  EXPECT_TRUE(got.empty());
}

}  // namespace
}  // namespace kvfs
