// SPDX-License-Identifier: Apache-2.0
// MetaJournal against a real RocksDB index: what a rename, an unlink and a
// new directory leave in the index (the snapshot or tombstone with a fresh
// seq, and a P key until the entry reaches a segment), the inode's committed
// copy afterwards, and that a failed commit changes nothing.
#include "core/flush/meta_journal.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/index/index.h"
#include "core/util/seq_counter.h"

namespace kvfs {
namespace {

namespace fs = std::filesystem;

class MetaJournalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char t[] = "/tmp/kvfs-journal-XXXXXX";
    dir_ = ::mkdtemp(t);
    auto i = Index::Open(dir_ + "/index");
    ASSERT_TRUE(i.ok()) << i.status().ToString();
    index_ = std::move(*i);
    seqs_.start_at(100);
    journal_.use_index(index_.get());
  }
  void TearDown() override {
    index_.reset();
    fs::remove_all(dir_);
  }

  std::vector<RecordEntry> pending() {
    std::vector<RecordEntry> out;
    EXPECT_TRUE(index_->pending([&](RecordEntry&& e) { out.push_back(std::move(e)); }).ok());
    return out;
  }
  InodeSnapshot stored(uint64_t ino) {
    InodeSnapshot found;
    EXPECT_TRUE(
        index_->load_all([&](InodeSnapshot&& s) { found = std::move(s); }, ino, ino + 1).ok());
    return found;
  }

  std::string dir_;
  std::unique_ptr<Index> index_;
  SeqCounter seqs_;
  MetaJournal journal_{false, &seqs_};
};

TEST_F(MetaJournalTest, ARenameCommitsTheCommittedContentUnderTheNewName) {
  Inode f(7);
  f.mode = S_IFREG | 0644;
  f.size = 12345;  // in RAM, not yet flushed: the journal must not use it
  auto c = std::make_unique<InodeSnapshot>();
  c->ino = 7;
  c->parent = kRootIno;
  c->name = "tmp.123";
  c->mode = S_IFREG | 0644;
  c->size = 100;
  c->seq = 5;
  f.committed = std::move(c);
  ASSERT_TRUE(journal_.journal({{&f, kRootIno, "final.bin"}}, {}, 8).ok());
  const InodeSnapshot s = stored(7);
  EXPECT_EQ(s.name, "final.bin");
  EXPECT_EQ(s.size, 100u);  // the committed content, not the dirty size
  EXPECT_EQ(s.seq, 100u);   // a fresh seq, newer than every earlier one
  ASSERT_TRUE(f.committed);
  EXPECT_EQ(f.committed->name, "final.bin");
  EXPECT_EQ(f.committed->seq, 100u);
  auto p = pending();
  ASSERT_EQ(p.size(), 1u);  // kept until a flusher writes it to a segment
  EXPECT_EQ(p[0].kind, EntryKind::kSnapshot);
  EXPECT_EQ(p[0].snap.seq, 100u);
  auto next = index_->get_meta("next_seq");
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(*next, "101");
}

TEST_F(MetaJournalTest, AnUnlinkLeavesATombstoneWithItsSeq) {
  Inode f(9);
  f.mode = S_IFREG | 0644;
  f.committed = std::make_unique<InodeSnapshot>();
  f.committed->ino = 9;
  f.committed->seq = 3;
  ASSERT_TRUE(journal_.journal({{&f, kRootIno, "f"}}, {}, 10).ok());
  ASSERT_TRUE(journal_.journal({}, {&f}, 10).ok());
  uint64_t snap_seq = 1, tomb_seq = 0;
  ASSERT_TRUE(index_->seqs(9, &snap_seq, &tomb_seq).ok());
  EXPECT_EQ(snap_seq, 0u);
  EXPECT_EQ(tomb_seq, 101u);  // an older record of inode 9 cannot come back
  EXPECT_FALSE(f.committed);
  auto p = pending();
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[1].kind, EntryKind::kTombstone);
  EXPECT_EQ(p[1].snap.ino, 9u);
}

TEST_F(MetaJournalTest, ANewDirectoryIsCommittedFromTheInode) {
  Inode d(11);
  d.mode = S_IFDIR | 0750;
  d.uid = 42;
  ASSERT_TRUE(journal_.journal({{&d, kRootIno, "sub"}}, {}, 12).ok());
  const InodeSnapshot s = stored(11);
  EXPECT_EQ(s.name, "sub");
  EXPECT_EQ(s.mode, S_IFDIR | 0750u);
  EXPECT_EQ(s.uid, 42u);
  auto next = index_->get_meta("next_ino");
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(*next, "12");
}

TEST_F(MetaJournalTest, AFailedCommitChangesNothing) {
  Inode f(7);
  f.mode = S_IFREG | 0644;
  f.committed = std::make_unique<InodeSnapshot>();
  f.committed->name = "a";
  f.committed->seq = 5;
  index_->close();
  EXPECT_FALSE(journal_.journal({{&f, kRootIno, "b"}}, {}, 8).ok());
  ASSERT_TRUE(f.committed);
  EXPECT_EQ(f.committed->name, "a");
  EXPECT_EQ(f.committed->seq, 5u);
  MetaJournal ro(true, &seqs_);
  ro.use_index(index_.get());
  EXPECT_EQ(ro.journal({}, {&f}, 8).code(), Status::Code::kReadOnly);
  EXPECT_TRUE(f.committed);
}

}  // namespace
}  // namespace kvfs
