// SPDX-License-Identifier: Apache-2.0
// Flusher on its own parts (no BlockStore, no FUSE, no RocksDB): a real
// segment store in a temp dir, an in-memory index (tests/mem_index.h) that
// can be made to fail, a namespace, a RAM tier and a space budget. What a flush writes (one
// segment, one commit per batch, extents that read back bit-exact), what it leaves alone (files
// still being written), how it fails for lack of room and goes on once there is room, the pressure
// write-out of an open file's blocks without a commit, and journal entries that cannot reach a
// segment ending flush_all with the cause, a refused flush of a file since unlinked that neither
// does that nor refuses writers (they are refused only while a linked file waits for room), and the
// tombstone that unlinking a file whose first flush is in flight leaves.
#include "core/flush/flusher.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <thread>

#include "core/backing/disk_layout.h"
#include "core/recovery/recovery.h"
#include "tests/core_parts_fixture.h"

namespace kvfs {
namespace {

namespace fs = std::filesystem;

class FlusherTest : public CorePartsFixture {};

TEST_F(FlusherTest, PacksClosedFilesIntoOneSegmentAndCommitsEach) {
  start(256 * kMiB);
  std::vector<InodeRef> files;
  for (int i = 0; i < 8; ++i) files.push_back(make_file("f" + std::to_string(i), 1536 * 1024));
  ASSERT_TRUE(flusher_->flush_all(false).ok());
  EXPECT_EQ(segs_->list().size(), 1u);  // coalesced: one segment for eight files
  // At least once each (flush_all queues a file already in flight again).
  EXPECT_GE(flusher_->flushed_files(), 8u);
  auto idx = committed();
  for (auto& in : files) {
    ASSERT_TRUE(idx.count(in->ino)) << in->ino;
    const InodeSnapshot& s = idx[in->ino];
    EXPECT_EQ(s.size, 1536u * 1024);
    ASSERT_EQ(s.extents.size(), 2u);
    expect_bytes(s);
    std::lock_guard g(in->mu);
    EXPECT_FALSE(in->dirty());
    for (const BlockSlot& b : in->blocks) {
      EXPECT_FALSE(b.buf);  // clean: the copy lives in the RAM tier now
      EXPECT_TRUE(b.ext.valid());
    }
  }
  EXPECT_EQ(ram_->dirty_bytes(), 0u);
  // The live bytes follow the slots: two 4 KiB-aligned blocks per file.
  EXPECT_EQ(segs_->live_bytes(), 8 * (kBlockSize + 512 * 1024));
}

// A flusher that has had nothing to write for 30 s closes its segment, which
// seals it (disk_layout.h): an idle node's segments cost its peers nothing.
// On the fixture's clock: the test moves it instead of waiting.
TEST_F(FlusherTest, AnIdleFlusherSealsItsSegmentAndTheNextFlushStartsANewOne) {
  start(256 * kMiB);
  InodeRef f = make_file("f", 2 * kMiB);
  ASSERT_TRUE(flusher_->flush_all(false).ok());
  std::vector<SegmentInfo> l = segs_->list();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_TRUE(l[0].open);
  auto sealed = [](const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && layout::segment_sealed(st.st_mode);
  };
  EXPECT_FALSE(sealed(l[0].path));
  // 31 s on the clock, and the flushers woken to look at it, until the one
  // that wrote (between its commit and its next wait, maybe) notices.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (segs_->list()[0].open && std::chrono::steady_clock::now() < deadline) {
    clock_.advance(31);
    flusher_->retry_now();
    std::this_thread::yield();
  }
  EXPECT_FALSE(segs_->list()[0].open);
  EXPECT_TRUE(sealed(l[0].path));
  expect_bytes(committed()[f->ino]);
  InodeRef g = make_file("g", kMiB);
  ASSERT_TRUE(flusher_->flush_all(false).ok());
  l = segs_->list();
  ASSERT_EQ(l.size(), 2u);
  EXPECT_TRUE(l[1].open);
  expect_bytes(committed()[g->ino]);
}

TEST_F(FlusherTest, ASmallSegmentWaitsLongerForItsIdleSeal) {
  start(256 * kMiB);
  InodeRef f = make_file("f", 64 * 1024);  // far under an eighth of segment_size
  ASSERT_TRUE(flusher_->flush_all(false).ok());
  ASSERT_EQ(segs_->list().size(), 1u);
  // 31 s idle, the flushers woken again and again for a second to look (a
  // 2 MiB segment is sealed by then, the test above): still open, and the
  // next small file goes into the same segment.
  clock_.advance(31);
  const auto look = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (segs_->list()[0].open && std::chrono::steady_clock::now() < look) {
    flusher_->retry_now();
    std::this_thread::yield();
  }
  InodeRef g = make_file("g", 64 * 1024);
  ASSERT_TRUE(flusher_->flush_all(false).ok());
  std::vector<SegmentInfo> l = segs_->list();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_TRUE(l[0].open);
  // Ten minutes idle: sealed.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (segs_->list()[0].open && std::chrono::steady_clock::now() < deadline) {
    clock_.advance(601);
    flusher_->retry_now();
    std::this_thread::yield();
  }
  EXPECT_FALSE(segs_->list()[0].open);
  expect_bytes(committed()[f->ino]);
  expect_bytes(committed()[g->ino]);
}

TEST_F(FlusherTest, LeavesAFileBeingWrittenUntilItsWriterCloses) {
  start(256 * kMiB);
  InodeRef in = make_file("open", 2 * kMiB, /*writing=*/true);
  ASSERT_TRUE(flusher_->flush_all(false).ok());
  EXPECT_EQ(committed().count(in->ino), 0u);  // incomplete: never committed
  {
    std::lock_guard g(in->mu);
    EXPECT_TRUE(in->dirty());
    ASSERT_TRUE(in->opens.released(/*writable=*/true, /*was_sealed=*/false));
    flusher_->untrack_locked(in);
    ASSERT_TRUE(FileData::ready_to_flush_locked(*in));
    flusher_->enqueue_locked(in, false);
  }
  ASSERT_TRUE(flusher_->flush_all(false).ok());
  auto idx = committed();
  ASSERT_EQ(idx.count(in->ino), 1u);
  expect_bytes(idx[in->ino]);
}

// fsync: the file is committed now, even while its writer has it open, and
// a refusal for room comes back as the file's own error.
TEST_F(FlusherTest, SyncCommitsAFileStillOpenForWritingAndReturnsItsFailure) {
  start(256 * kMiB, std::chrono::milliseconds(200));
  InodeRef in = make_file("open", 2 * kMiB, /*writing=*/true);
  ASSERT_TRUE(flusher_->sync(in).ok());
  auto idx = committed();
  ASSERT_EQ(idx.count(in->ino), 1u);
  expect_bytes(idx[in->ino]);
  {
    std::lock_guard g(in->mu);
    EXPECT_FALSE(in->dirty());
    EXPECT_FALSE(in->flush.syncing());
  }
  EXPECT_TRUE(flusher_->sync(in).ok());  // clean: at once
  budget_->set_capacity(4 * kMiB);
  InodeRef big = make_file("big", 24 * kMiB, /*writing=*/true);
  const Status st = flusher_->sync(big);
  EXPECT_EQ(st.code(), Status::Code::kAtCapacity) << st.ToString();
  std::lock_guard g(big->mu);
  EXPECT_TRUE(big->dirty());
  EXPECT_FALSE(big->flush.syncing());
}

TEST_F(FlusherTest, ARefusedFlushSaysAtCapacityAndGoesOnOnceThereIsRoom) {
  // 24 MiB do not fit under a 4 MiB cap plus one segment's slack: no
  // evictor runs here, so the round ends without a pass and the flush is
  // refused.
  start(4 * kMiB, std::chrono::milliseconds(200));
  InodeRef in = make_file("big", 24 * kMiB);
  Status st = flusher_->flush_all(false);
  EXPECT_EQ(st.code(), Status::Code::kAtCapacity) << st.ToString();
  EXPECT_TRUE(budget_->no_space());
  EXPECT_GE(flusher_->enospc_errors(), 1u);
  EXPECT_EQ(committed().count(in->ino), 0u);
  {
    std::lock_guard g(in->mu);
    EXPECT_TRUE(in->dirty());  // nothing lost: still in RAM, queued again
  }
  budget_->set_capacity(256 * kMiB);
  flusher_->retry_now();
  ASSERT_TRUE(flusher_->flush_all(false).ok());
  EXPECT_FALSE(budget_->no_space());
  auto idx = committed();
  ASSERT_EQ(idx.count(in->ino), 1u);
  expect_bytes(idx[in->ino]);
}

// An index commit that fails (a full or failing index volume): the data is
// in a segment but nothing points to it, so the file stays dirty in RAM,
// flush_all says why, and the retry commits bytes that read back.
TEST_F(FlusherTest, AFailedIndexCommitKeepsTheFileDirtyAndTheRetryCommitsIt) {
  start(256 * kMiB);
  index_.fail_next(1, Status::IOError("index volume failed"));
  InodeRef in = make_file("f", 3 * kMiB);
  Status st = flusher_->flush_all(false);
  EXPECT_EQ(st.code(), Status::Code::kIOError) << st.ToString();
  EXPECT_EQ(index_.failed(), 1u);
  EXPECT_EQ(committed().count(in->ino), 0u);
  {
    std::lock_guard g(in->mu);
    EXPECT_TRUE(in->dirty());
    EXPECT_FALSE(in->flush.in_flight());
    EXPECT_EQ(in->flush.error().code(), Status::Code::kIOError);
    for (const BlockSlot& b : in->blocks) EXPECT_TRUE(b.buf);  // still the RAM copy
  }
  EXPECT_EQ(ram_->dirty_bytes(), 3 * kMiB);
  flusher_->retry_now();
  ASSERT_TRUE(flusher_->flush_all(false).ok());
  auto idx = committed();
  ASSERT_EQ(idx.count(in->ino), 1u);
  expect_bytes(idx[in->ino]);
  std::lock_guard g(in->mu);
  EXPECT_FALSE(in->dirty());
  EXPECT_TRUE(in->flush.error().ok());
  EXPECT_EQ(ram_->dirty_bytes(), 0u);
}

// Writers are refused while a linked file's data waits for room, and no
// longer once that file is removed (its data is gone).
TEST_F(FlusherTest, WritesAreRefusedOnlyWhileALinkedFilesDataWaitsForRoom) {
  start(4 * kMiB, std::chrono::milliseconds(200));
  InodeRef big = make_file("big", 24 * kMiB);
  EXPECT_EQ(flusher_->flush_all(false).code(), Status::Code::kAtCapacity);
  EXPECT_TRUE(flusher_->writes_refused());
  ASSERT_TRUE(ns_->remove(kRootIno, "big", false).ok());
  EXPECT_FALSE(flusher_->writes_refused());
  EXPECT_FALSE(budget_->no_space());
}

// A file too large for the cap, unlinked while its flush waits for room,
// fails that flush; flush_all then waits for the file written after it and
// succeeds: the unlinked file's data is gone, and its failure is no one's.
TEST_F(FlusherTest, AFileUnlinkedWhileItsFlushIsRefusedDoesNotFailFlushAll) {
  start(4 * kMiB, std::chrono::milliseconds(1000));
  InodeRef big = make_file("big", 24 * kMiB);
  // Its flush is waiting for room (about one round) before it is refused.
  ASSERT_TRUE(wait_in_flush(big));
  ASSERT_TRUE(ns_->remove(kRootIno, "big", false).ok());
  ASSERT_TRUE(wait_in_flush(big, false));
  // Refused after its unlink: nothing waits for room, so writers go on.
  EXPECT_FALSE(budget_->no_space());
  EXPECT_FALSE(flusher_->writes_refused());
  InodeRef fits = make_file("fits", 1 * kMiB);
  Status st = flusher_->flush_all(false);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_GE(flusher_->enospc_errors(), 1u);  // big's flush was refused
  auto idx = committed();
  EXPECT_EQ(idx.count(big->ino), 0u);
  ASSERT_EQ(idx.count(fits->ino), 1u);
  expect_bytes(idx[fits->ino]);
}

// The crash loop's "came back after unlink": a file unlinked after a flush
// captured it, before that flush committed, has no index entry yet, but its
// record may already be in a segment past the index's position; a crash
// then let the next mount's catch-up apply it. Its unlink must leave a
// tombstone newer than the captured snapshot.
TEST_F(FlusherTest, AFileUnlinkedWhileItsFirstFlushIsInFlightLeavesATombstone) {
  MetaJournal meta(false, &seqs_);
  meta.use_index(&index_);
  journal_.to = &meta;
  start(4 * kMiB, std::chrono::milliseconds(300));
  InodeRef in = make_file("f", 24 * kMiB);
  // Captured (its snapshot's seq taken), waiting for room before writing.
  ASSERT_TRUE(wait_in_flush(in));
  ASSERT_FALSE(in->committed);
  const uint64_t captured_below = seqs_.next();
  const int calls = journal_.calls;
  ASSERT_TRUE(ns_->remove(kRootIno, "f", false).ok());
  EXPECT_EQ(journal_.calls, calls + 1);
  EXPECT_EQ(index_.snap_seq(in->ino), 0u);
  // Newer than the captured snapshot: a catch-up never applies that record
  // over it (recovery.cc, apply).
  EXPECT_GE(index_.tomb_seq(in->ino), captured_below);
}

TEST_F(FlusherTest, PressureWritesAnOpenFilesBlocksOutWithoutCommittingIt) {
  start(256 * kMiB);
  InodeRef in = make_file("growing", 4 * kMiB, /*writing=*/true);
  EXPECT_EQ(ram_->dirty_bytes(), 4 * kMiB);
  flusher_->on_pressure();
  {
    // Bounded: the write-out is one batch.
    std::unique_lock l(in->mu);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (in->dirty_charge > 0 && std::chrono::steady_clock::now() < deadline)
      flusher_->wait_durable_for(l, std::chrono::milliseconds(100));
    EXPECT_EQ(in->dirty_charge, 0u);
    EXPECT_TRUE(in->dirty());  // still not complete: no snapshot committed
    for (const BlockSlot& b : in->blocks) EXPECT_TRUE(b.ext.valid());
  }
  EXPECT_EQ(ram_->dirty_bytes(), 0u);
  EXPECT_EQ(committed().count(in->ino), 0u);
  EXPECT_EQ(segs_->list().size(), 1u);
}

TEST_F(FlusherTest, JournalEntriesThatCannotBeWrittenEndFlushAllWithTheCause) {
  start(256 * kMiB);
  // No segment can be created any more (the backing dir wiped under us):
  // the entries go back to the queue after each try, which never drains.
  fs::remove_all(fs::path(cfg_.backing_dir) / layout::kSegDir);
  RecordEntry t;
  t.kind = EntryKind::kTombstone;
  t.snap.ino = 1234;
  t.snap.seq = seqs_.take();
  flusher_->add_meta({t});
  Status st = flusher_->flush_all(false);
  EXPECT_EQ(st.code(), Status::Code::kIOError) << st.ToString();
  EXPECT_NE(st.message().find("journal entries"), std::string::npos) << st.ToString();
  EXPECT_GE(flusher_->io_errors(), 1u);
  // Still queued: once segments can be created again they are written.
  fs::create_directories(fs::path(cfg_.backing_dir) / layout::kSegDir);
  flusher_->retry_now();
  EXPECT_TRUE(flusher_->flush_all(false).ok());
  EXPECT_EQ(segs_->list().size(), 1u);
}

TEST_F(FlusherTest, JournalEntriesNobodyWaitsForRideWithTheDataUnderOneSync) {
  start(256 * kMiB, std::chrono::seconds(5), /*run=*/false);
  InodeRef in = make_file("f", 2 * kMiB);
  RecordEntry t;
  t.kind = EntryKind::kTombstone;
  t.snap.ino = 1234;
  t.snap.seq = seqs_.take();
  flusher_->add_meta({t});
  flusher_->start();  // its first batch: the file and the entry
  ASSERT_TRUE(flusher_->flush_all(false).ok());
  // One batch, one fdatasync: apart they were two, each a cache flush of
  // the backing server's disk.
  EXPECT_EQ(flusher_->batches(), 1u);
  EXPECT_EQ(committed().count(in->ino), 1u);
  EXPECT_EQ(segs_->list().size(), 1u);
}

// Queued again while its flush is in flight (as flush_all queues every
// file in flight): once that flush ends clean, nothing is left to commit.
// It cost a second commit of its own: a flush_all racing the flusher's
// first batch made two batches of one.
TEST_F(FlusherTest, AFileQueuedAgainWhileItsFlushIsInFlightIsCommittedOnce) {
  // 24 MiB wait for room under a 4 MiB cap (see ARefusedFlush...); the
  // long round keeps the flush waiting until the cap is raised.
  start(4 * kMiB, std::chrono::seconds(60));
  InodeRef in = make_file("big", 24 * kMiB);
  ASSERT_TRUE(wait_in_flush(in));
  {
    std::lock_guard g(in->mu);
    flusher_->enqueue_locked(in, false);
  }
  budget_->set_capacity(256 * kMiB);
  ASSERT_TRUE(flusher_->flush_all(false).ok());
  EXPECT_EQ(flusher_->batches(), 1u);
  std::lock_guard g(in->mu);
  EXPECT_FALSE(in->dirty());
}

// Renamed while a flush of its new data is in flight: that flush's record
// in the segment has the old name, so the file is committed again, clean as
// it is, or the segments (what the index is rebuilt from) keep the old name.
TEST_F(FlusherTest, AFileRenamedWhileItsFlushIsInFlightIsLoggedAgainUnderItsNewName) {
  start(4 * kMiB, std::chrono::seconds(60));
  InodeRef in = make_file("big", 2 * kMiB);
  ASSERT_TRUE(flusher_->flush_all(false).ok());
  ASSERT_NE(in->committed, nullptr);
  {
    std::lock_guard g(in->mu);
    write_locked(*in, 2 * kMiB, 24 * kMiB);
    flusher_->enqueue_locked(in, false);
  }
  ASSERT_TRUE(wait_in_flush(in));
  const uint64_t batches = flusher_->batches();
  ASSERT_TRUE(ns_->rename(kRootIno, "big", kRootIno, "moved", 0).ok());
  budget_->set_capacity(256 * kMiB);
  ASSERT_TRUE(flusher_->flush_all(false).ok());
  EXPECT_EQ(flusher_->batches(), batches + 2);
  EXPECT_EQ(committed()[in->ino].name, "moved");
  LogFold fold;
  for (const SegmentInfo& seg : segs_->list())
    ASSERT_TRUE(scan_segment(*segs_, seg.id, 0, &fold).ok());
  std::map<uint64_t, std::string> names;
  for (const InodeSnapshot& sn : fold.snapshots()) names[sn.ino] = sn.name;
  EXPECT_EQ(names[in->ino], "moved");
}

}  // namespace
}  // namespace kvfs
