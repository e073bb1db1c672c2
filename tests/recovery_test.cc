// SPDX-License-Identifier: Apache-2.0
// Recovery: the index as a follower of the segment log (no FUSE, real
// RocksDB, real segment files). An index restored from an older copy is
// caught up with the segments at the next open; deletions and renames
// survive the reclamation of the segment that held their records and a
// rebuild from the segments.
#include "core/recovery/recovery.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "core/backing/disk_layout.h"
#include "core/index/index.h"
#include "core/segments/segment_store.h"
#include "core/store/block_store.h"
#include "tests/reconfigure_util.h"

namespace kvfs {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kMiB = 1 << 20;

std::string pattern(size_t n, uint64_t seed) {
  std::string s(n, '\0');
  std::mt19937_64 r(seed);
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(r() >> 13);
  return s;
}

class RecoveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char t[] = "/tmp/kvfs-recovery-XXXXXX";
    root_ = ::mkdtemp(t);
    fs::create_directories(root_ + "/backing");
  }
  void TearDown() override {
    store_.reset();
    fs::remove_all(root_);
  }
  StoreConfig config() const {
    StoreConfig c;
    c.backing_dir = root_ + "/backing";
    c.index_dir = index_dir();
    c.ram_size = 64 * kMiB;
    c.segment_size = 4 * kMiB;
    c.flush_batch_bytes = 4 * kMiB;
    c.capacity = 256 * kMiB;
    c.evict_grace_s = 3600;  // only what a test evicts goes
    c.flush_threads = 1;     // one open segment: the tests place records in segments
    return c;
  }
  std::string index_dir() const { return root_ + "/index"; }
  void open_store() {
    store_.reset();
    auto s = BlockStore::Open(config());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
  }
  void close_store() {
    ASSERT_TRUE(store_->Close().ok());
    store_.reset();
  }
  // A copy of the index as it is now (the store must be closed).
  void save_index(const std::string& to) {
    fs::remove_all(to);
    fs::copy(index_dir(), to, fs::copy_options::recursive);
  }
  void restore_index(const std::string& from) {
    fs::remove_all(index_dir());
    fs::copy(from, index_dir(), fs::copy_options::recursive);
  }
  // Writes and fsyncs: when it returns, the file is in a segment.
  uint64_t put(uint64_t dir, const std::string& name, const std::string& data) {
    Attr a;
    auto f = store_->create(dir, name, 0644, O_CREAT | O_WRONLY | O_TRUNC, Caller{}, &a);
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    if (!f.ok()) return 0;
    EXPECT_TRUE(store_->write(*f, 0, data.data(), data.size()).ok());
    Status s = store_->fsync(a.ino);
    EXPECT_TRUE(s.ok()) << s.ToString();
    store_->release(*f);
    return a.ino;
  }
  std::string get(uint64_t dir, const std::string& name) {
    auto a = store_->lookup(dir, name);
    if (!a.ok()) return "<missing>";
    auto f = store_->open(a->ino, O_RDONLY);
    EXPECT_TRUE(f.ok());
    std::string out;
    ReadResult rr;
    Status s = store_->read(*f, 0, a->size + 10, &rr);
    for (auto& v : rr.iov) out.append(static_cast<char*>(v.iov_base), v.iov_len);
    store_->release(*f);
    return s.ok() ? out : "<error " + s.ToString() + ">";
  }
  std::set<std::string> segment_files() {
    std::set<std::string> v;
    for (auto& e : fs::directory_iterator(layout::segment_dir(root_ + "/backing")))
      if (layout::parse_segment_name(e.path().filename().string())) v.insert(e.path().filename());
    return v;
  }

  std::string root_;
  std::unique_ptr<BlockStore> store_;
};

// The scenario, without the mount: an index put back from an older
// copy knows nothing of what was written since; the next open applies it.
TEST_F(RecoveryTest, IndexFromAnOlderCopyIsCaughtUp) {
  open_store();
  const std::string a = pattern(3 * kMiB + 5, 1), b = pattern(100, 2);
  put(kRootIno, "a", a);
  put(kRootIno, "b", b);
  put(kRootIno, "victim", "v");
  close_store();
  save_index(root_ + "/index.old");

  open_store();
  EXPECT_EQ(store_->catch_up_stats().records, 0u) << "a clean remount has nothing to catch up";
  auto d = store_->mkdir(kRootIno, "dir", 0755, Caller{});
  ASSERT_TRUE(d.ok());
  std::vector<std::string> data;
  for (int i = 0; i < 12; ++i) {
    data.push_back(pattern(kMiB + i * 4097, 10 + i));
    put(d->ino, "f" + std::to_string(i), data.back());
  }
  ASSERT_TRUE(store_->unlink(kRootIno, "victim").ok());
  ASSERT_TRUE(store_->rename(kRootIno, "b", kRootIno, "b2", 0).ok());
  ASSERT_TRUE(store_->flush_all().ok());
  uint64_t max_ino = 0;
  for (int i = 0; i < 12; ++i)
    max_ino = std::max(max_ino, store_->lookup(d->ino, "f" + std::to_string(i))->ino);
  close_store();

  restore_index(root_ + "/index.old");
  open_store();
  EXPECT_FALSE(store_->rebuilt_index());
  const CatchUpStats& cu = store_->catch_up_stats();
  EXPECT_GT(cu.records, 0u);
  EXPECT_GT(cu.bytes, 12 * kMiB);
  EXPECT_GE(cu.applied, 14u);  // the directory, 12 files, the unlink, the rename
  auto d2 = store_->lookup(kRootIno, "dir");
  ASSERT_TRUE(d2.ok());
  for (int i = 0; i < 12; ++i) EXPECT_TRUE(get(d2->ino, "f" + std::to_string(i)) == data[i]) << i;
  EXPECT_TRUE(get(kRootIno, "a") == a);
  EXPECT_EQ(get(kRootIno, "b2"), b);
  EXPECT_TRUE(get(kRootIno, "b") == "<missing>");
  EXPECT_TRUE(get(kRootIno, "victim") == "<missing>");
  // Inode numbers and seqs moved past what the old copy knew: a new file
  // never takes the number of one it caught up with.
  EXPECT_GT(put(kRootIno, "new", "n"), max_ino);
  close_store();

  // Caught up once is caught up for good.
  open_store();
  EXPECT_EQ(store_->catch_up_stats().records, 0u);
  EXPECT_TRUE(get(d2->ino, "f11") == data[11]);
  EXPECT_EQ(get(kRootIno, "new"), "n");
}

// A segment the index never saw (its S key lost), and one it knew that is
// gone: the first is applied, the second's files are dropped.
TEST_F(RecoveryTest, UnknownSegmentsAreAppliedAndGoneOnesDropped) {
  open_store();
  put(kRootIno, "one", pattern(5 * kMiB, 3));  // fills the first segment
  put(kRootIno, "two", pattern(kMiB, 4));      // in the second
  close_store();
  auto segs = segment_files();
  ASSERT_GE(segs.size(), 2u);
  {
    // Forget every position: all segments are new to the index.
    auto idx = Index::Open(index_dir());
    ASSERT_TRUE(idx.ok());
    auto states = (*idx)->segment_states();
    ASSERT_TRUE(states.ok());
    ASSERT_EQ(states->size(), segs.size());
    IndexBatch b;
    for (auto& [id, st] : *states) b.segment_drops.push_back(id);
    ASSERT_TRUE((*idx)->commit(b, true).ok());
  }
  open_store();
  EXPECT_EQ(store_->catch_up_stats().new_segments, segs.size());
  EXPECT_TRUE(get(kRootIno, "two") == pattern(kMiB, 4));
  close_store();
  // The last segment removed by hand: what it held is a clean miss.
  fs::remove(layout::segment_dir(root_ + "/backing") + "/" + *segs.rbegin());
  open_store();
  EXPECT_EQ(store_->catch_up_stats().gone_segments, 1u);
  EXPECT_TRUE(get(kRootIno, "one") == pattern(5 * kMiB, 3)) << get(kRootIno, "one").substr(0, 40);
  EXPECT_TRUE(get(kRootIno, "two") == "<missing>");
}

// A segment deleted after the index was copied: its id is never given to a
// new segment, or the copy, put back, would take the new segment's records
// as applied up to where the old one ended and skip them.
TEST_F(RecoveryTest, AnIdTheIndexKnowsIsNeverReused) {
  open_store();
  put(kRootIno, "one", pattern(5 * kMiB, 3));  // fills the first segment
  put(kRootIno, "two", pattern(kMiB, 4));      // in the second
  close_store();
  const std::string copy = root_ + "/index-copy";
  save_index(copy);
  auto before = segment_files();
  const std::string last = *before.rbegin();
  fs::remove(layout::segment_dir(root_ + "/backing") + "/" + last);
  open_store();
  put(kRootIno, "three", pattern(2 * kMiB, 5));
  close_store();
  auto after = segment_files();
  EXPECT_FALSE(after.count(last)) << "segment id reused: " << last;
  restore_index(copy);
  open_store();
  EXPECT_TRUE(get(kRootIno, "three") == pattern(2 * kMiB, 5))
      << get(kRootIno, "three").substr(0, 40);
  EXPECT_TRUE(get(kRootIno, "one") == pattern(5 * kMiB, 3));
}

// An unlink and a rename over an existing name whose records sit in a
// segment that is reclaimed while an older segment still holds the old
// snapshots: the tombstones are carried forward, so a rebuild from the
// segments brings nothing back.
TEST_F(RecoveryTest, DeletionsSurviveReclamationAndRebuild) {
  open_store();
  put(kRootIno, "victim", pattern(64 << 10, 5));
  put(kRootIno, "target", "old target");
  put(kRootIno, "src", "new content");
  put(kRootIno, "keep", pattern(4 * kMiB, 6));  // fills segment 1: it stays
  const auto seg1 = segment_files();
  ASSERT_EQ(seg1.size(), 1u);
  // Their records go to segment 2, with filler data that is then evicted.
  ASSERT_TRUE(store_->unlink(kRootIno, "victim").ok());
  ASSERT_TRUE(store_->rename(kRootIno, "src", kRootIno, "target", 0).ok());
  put(kRootIno, "filler", pattern(4 * kMiB, 7));
  put(kRootIno, "last", pattern(kMiB, 8));  // segment 3 (open)
  const auto before = segment_files();
  ASSERT_EQ(before.size(), 3u);
  EvictRequest r;
  r.kind = EvictRequest::Kind::kPath;
  r.ino = store_->lookup(kRootIno, "filler")->ino;
  r.force = true;
  auto ev = store_->admin().evict(r);
  ASSERT_TRUE(ev.ok());
  ASSERT_EQ(ev->files, 1u);
  // Pressure on the cap: the pass deletes the emptied segment 2 (segment
  // 1 is full of live data, segment 3 is open).
  ASSERT_TRUE(kvfs::reconfigure_one(*store_, &StoreConfig::capacity, 8 * kMiB).ok());
  store_->admin().evict_pass_now();
  ASSERT_EQ(store_->admin().evictor_stats().segments_deleted, 1u);
  auto after = segment_files();
  EXPECT_TRUE(after.count(*seg1.begin()));
  EXPECT_FALSE(after.count(*std::next(before.begin())));
  close_store();

  fs::remove_all(index_dir());
  open_store();
  ASSERT_TRUE(store_->rebuilt_index());
  EXPECT_TRUE(get(kRootIno, "victim") == "<missing>");
  EXPECT_TRUE(get(kRootIno, "src") == "<missing>");
  EXPECT_TRUE(get(kRootIno, "filler") == "<missing>");
  EXPECT_EQ(get(kRootIno, "target"), "new content");
  EXPECT_TRUE(get(kRootIno, "keep") == pattern(4 * kMiB, 6));
  EXPECT_TRUE(get(kRootIno, "last") == pattern(kMiB, 8));
}

// An index written by a kvfs that kept no segment positions is trusted as
// it was (that kvfs could lose deletion records to reclamation: applying the
// segments could bring such files back), and follows the log from then on.
TEST_F(RecoveryTest, IndexWithoutPositionsIsAdopted) {
  open_store();
  put(kRootIno, "a", "aaa");
  const uint64_t b = put(kRootIno, "b", "bbb");
  close_store();
  {
    // What the older kvfs left: no positions, no log_format, and b deleted
    // in the index while the segments still hold its snapshot alone.
    rocksdb::DB* raw = nullptr;
    rocksdb::Options o;
    ASSERT_TRUE(rocksdb::DB::Open(o, index_dir(), &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    ASSERT_TRUE(db->Delete(rocksdb::WriteOptions(), "M:log_format").ok());
    std::string key(9, '\0');
    key[0] = 'I';
    for (int i = 0; i < 8; ++i) key[1 + i] = static_cast<char>(b >> (56 - 8 * i));
    ASSERT_TRUE(db->Delete(rocksdb::WriteOptions(), key).ok());
    ASSERT_TRUE(db->DeleteRange(rocksdb::WriteOptions(), db->DefaultColumnFamily(), "S", "T").ok());
    ASSERT_TRUE(db->Close().ok());
  }
  open_store();
  EXPECT_FALSE(store_->rebuilt_index());
  EXPECT_EQ(store_->catch_up_stats().applied, 0u);
  EXPECT_EQ(get(kRootIno, "a"), "aaa");
  EXPECT_TRUE(get(kRootIno, "b") == "<missing>");
  put(kRootIno, "c", "ccc");
  close_store();
  // Positions kept from now on: a later stale copy is caught up as usual.
  auto idx = Index::Open(index_dir());
  ASSERT_TRUE(idx.ok());
  EXPECT_TRUE(keeps_log_positions(**idx));
  auto states = (*idx)->segment_states();
  ASSERT_TRUE(states.ok());
  EXPECT_FALSE(states->empty());
}

// The fold keeps the newest entry per inode, tombstones included, whatever
// order the records come in.
TEST(LogFoldTest, NewestEntryPerInodeWins) {
  auto snap = [](uint64_t ino, uint64_t seq, const char* name) {
    RecordEntry e;
    e.snap.ino = ino;
    e.snap.seq = seq;
    e.snap.name = name;
    return e;
  };
  auto tomb = [](uint64_t ino, uint64_t seq) {
    RecordEntry e;
    e.kind = EntryKind::kTombstone;
    e.snap.ino = ino;
    e.snap.seq = seq;
    return e;
  };
  LogFold f;
  std::vector<RecordEntry> r1{snap(5, 10, "new"), tomb(6, 12)};
  std::vector<RecordEntry> r2{snap(5, 3, "old"), snap(6, 4, "dead"), snap(7, 1, "x")};
  std::vector<RecordEntry> r3{tomb(6, 12)};  // carried forward: the same seq again
  f.add(r1);
  f.add(r2);
  f.add(r3);
  EXPECT_EQ(f.latest()[5].snap.name, "new");
  EXPECT_FALSE(f.latest()[5].tomb);
  EXPECT_TRUE(f.latest()[6].tomb);
  EXPECT_EQ(f.latest()[6].seq, 12u);
  EXPECT_EQ(f.latest()[7].snap.name, "x");
  EXPECT_EQ(f.max_seq(), 12u);
  EXPECT_EQ(f.max_ino(), 7u);
  // The namespace it describes: the live inodes' newest snapshots only.
  std::set<std::string> names;
  for (const InodeSnapshot& sn : f.snapshots()) names.insert(sn.name);
  EXPECT_EQ(names, (std::set<std::string>{"new", "x"}));
}

// scan_segment, the reading of the log that catch-up and fsck share: the
// records up to a torn tail, and the same again from where a catch-up left off.
TEST_F(RecoveryTest, ScanSegmentStopsAtATornTailAndResumesFromAnOffset) {
  open_store();
  put(kRootIno, "a", pattern(5000, 1));
  put(kRootIno, "b", pattern(7000, 2));
  close_store();
  StoreConfig c = config();
  c.direct_io = false;
  auto segs = SegmentStore::Open(c);
  ASSERT_TRUE(segs.ok()) << segs.status().ToString();
  ASSERT_FALSE((*segs)->list().empty());
  const SegmentInfo seg = (*segs)->list().front();
  LogFold fold;
  auto all = scan_segment(**segs, seg.id, 0, &fold);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_GE(all->records, 2u);
  EXPECT_GT(all->end, 0u);
  EXPECT_LE(all->end, seg.bytes);
  EXPECT_GT(all->min_seq, 0u);
  EXPECT_LE(all->min_seq, all->max_seq);
  EXPECT_EQ(fold.max_seq(), all->max_seq);
  std::set<std::string> names;
  for (const InodeSnapshot& sn : fold.snapshots()) names.insert(sn.name);
  EXPECT_TRUE(names.count("a") && names.count("b"));
  // A crash's torn tail: garbage after the last record is not a record.
  {
    std::ofstream out(seg.path, std::ios::binary | std::ios::app);
    out << pattern(9000, 3);
  }
  auto torn = scan_segment(**segs, seg.id, 0, nullptr);
  ASSERT_TRUE(torn.ok());
  EXPECT_EQ(torn->records, all->records);
  EXPECT_EQ(torn->end, all->end);
  // From the end: nothing more.
  auto rest = scan_segment(**segs, seg.id, all->end, nullptr);
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ(rest->records, 0u);
  EXPECT_EQ(rest->end, all->end);
  EXPECT_EQ(scan_segment(**segs, seg.id + 1000, 0, nullptr).status().code(),
            Status::Code::kNotFound);
}

}  // namespace
}  // namespace kvfs
