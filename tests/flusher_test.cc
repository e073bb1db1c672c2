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
#include "core/flusher.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>

#include "core/backing_io.h"
#include "core/disk_layout.h"
#include "core/file_data.h"
#include "core/meta_journal.h"
#include "core/namespace.h"
#include "core/ram_tier.h"
#include "core/recovery.h"
#include "core/segment_store.h"
#include "core/seq_counter.h"
#include "core/space_budget.h"
#include "tests/mem_index.h"

namespace kvfs {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kMiB = 1 << 20;

// Directories and renames are not what is tested here: the namespace's
// journal only counts its calls, or hands them to a real one (`to`).
struct CountingJournal : Journal {
  int calls = 0;
  Journal* to = nullptr;
  Status journal(const std::vector<Put>& puts, const std::vector<Inode*>& dels,
                 uint64_t next_ino) override {
    ++calls;
    return to ? to->journal(puts, dels, next_ino) : Status::OK();
  }
};

char fill_of(uint64_t ino, uint32_t idx) {
  return static_cast<char>('a' + (ino * 7 + idx) % 26);
}

class FlusherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char t[] = "/tmp/kvfs-flusher-XXXXXX";
    root_ = ::mkdtemp(t);
    cfg_.backing_dir = root_ + "/backing";
    fs::create_directories(cfg_.backing_dir);
    cfg_.segment_size = 16 * kMiB;
    cfg_.flush_threads = 1;
    cfg_.flush_batch_bytes = 16 * kMiB;
    io_ = std::make_unique<BackingIo>(30.0, 4);
    auto s = SegmentStore::Open(cfg_, io_.get());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    segs_ = std::move(*s);
    ram_ = std::make_unique<RamTier>(64 * kMiB);
    data_ = std::make_unique<FileData>(ram_.get(), segs_.get());
    ns_ = std::make_unique<Namespace>(&journal_, &system_clock());
    ASSERT_TRUE(ns_->ensure_root(0, 0).ok());
  }
  // run=false: the flusher exists (files can be queued) but its threads wait
  // for flusher_->start().
  void start(uint64_t capacity, std::chrono::milliseconds round = std::chrono::seconds(5),
             bool run = true) {
    SpaceBudget::Limits l;
    l.capacity = capacity;
    l.slack = cfg_.segment_size - SpaceBudget::kMetaReserve;
    l.round = round;
    budget_ = std::make_unique<SpaceBudget>(l, segs_.get());
    flusher_ =
        std::make_unique<Flusher>(Flusher::Parts{&cfg_, ns_.get(), &seqs_, ram_.get(), segs_.get(),
                                                 &index_, io_.get(), budget_.get(), data_.get()});
    if (run) flusher_->start();
  }
  void TearDown() override {
    if (flusher_) (void)flusher_->stop();
    flusher_.reset();
    budget_.reset();
    ns_.reset();
    data_.reset();
    ram_.reset();
    segs_.reset();
    io_.reset();
    fs::remove_all(root_);
  }

  // Blocks [first, first + bytes) written as a client would leave them:
  // dirty buffers charged to the RAM tier (first: a whole block's offset).
  void write_locked(Inode& in, uint64_t first, uint64_t bytes) {
    const uint64_t end = first + bytes;
    for (uint32_t idx = first / kBlockSize; uint64_t(idx) * kBlockSize < end; ++idx) {
      const uint32_t len =
          static_cast<uint32_t>(std::min<uint64_t>(kBlockSize, end - idx * kBlockSize));
      EXPECT_TRUE(ram_->reserve_dirty(kBlockSize).ok());
      BufRef b = BufferPool::allocate(len);
      std::memset(b->data(), fill_of(in.ino, idx), len);
      zero_tail(*b, len);
      if (in.blocks.size() <= idx) in.blocks.resize(idx + 1);
      BlockSlot& s = in.blocks[idx];
      const uint64_t cap = b->capacity();
      data_->set_dirty_locked(in, s, std::move(b));
      ram_->release_dirty(kBlockSize - cap);
      s.len = len;
    }
    in.size = std::max(in.size, end);
    in.flush.client_wrote();
  }
  // A regular file of `bytes` written as a client would leave it: dirty
  // buffers charged to the RAM tier; `writing` keeps it open for writing.
  InodeRef make_file(const std::string& name, uint64_t bytes, bool writing = false) {
    bool created = false;
    auto r = ns_->create(kRootIno, name, {S_IFREG | 0644, 0, 0, {}, 0}, true, &created);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    InodeRef in = *r;
    std::lock_guard g(in->mu);
    write_locked(*in, 0, bytes);
    if (writing) {
      ++in->open_writers;
      ++in->active_writers;
      flusher_->track_locked(in);
    } else {
      flusher_->enqueue_locked(in, false);
    }
    return in;
  }
  // Waits (30 s at most) until a flusher has captured `in`, or with
  // in_flight=false until that flush has ended; says whether it got there.
  bool wait_in_flush(const InodeRef& in, bool in_flight = true) {
    std::unique_lock l(in->mu);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (in->flush.in_flight() != in_flight && std::chrono::steady_clock::now() < deadline)
      flusher_->wait_durable_for(l, std::chrono::milliseconds(5));
    return in->flush.in_flight() == in_flight;
  }
  std::map<uint64_t, InodeSnapshot> committed() { return index_.snapshots(); }
  // Every block of a committed file, read back from its extent.
  void expect_bytes(const InodeSnapshot& s) {
    for (const auto& e : s.extents) {
      ConstBufRef b;
      ASSERT_TRUE(data_->read_block(s.ino, e.idx, e.ext, &b).ok());
      for (uint32_t i = 0; i < e.ext.len; ++i)
        ASSERT_EQ(b->data()[i], fill_of(s.ino, e.idx)) << "inode " << s.ino << " block " << e.idx;
    }
  }

  std::string root_;
  StoreConfig cfg_;
  CountingJournal journal_;
  SeqCounter seqs_;
  std::unique_ptr<BackingIo> io_;
  std::unique_ptr<SegmentStore> segs_;
  MemIndex index_;
  std::unique_ptr<RamTier> ram_;
  std::unique_ptr<FileData> data_;
  std::unique_ptr<Namespace> ns_;
  std::unique_ptr<SpaceBudget> budget_;
  std::unique_ptr<Flusher> flusher_;
};

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

TEST_F(FlusherTest, LeavesAFileBeingWrittenUntilItsWriterCloses) {
  start(256 * kMiB);
  InodeRef in = make_file("open", 2 * kMiB, /*writing=*/true);
  ASSERT_TRUE(flusher_->flush_all(false).ok());
  EXPECT_EQ(committed().count(in->ino), 0u);  // incomplete: never committed
  {
    std::lock_guard g(in->mu);
    EXPECT_TRUE(in->dirty());
    --in->active_writers;
    --in->open_writers;
    flusher_->untrack_locked(in);
    ASSERT_TRUE(FileData::ready_to_flush_locked(*in));
    flusher_->enqueue_locked(in, false);
  }
  ASSERT_TRUE(flusher_->flush_all(false).ok());
  auto idx = committed();
  ASSERT_EQ(idx.count(in->ino), 1u);
  expect_bytes(idx[in->ino]);
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
