// SPDX-License-Identifier: Apache-2.0
// The core parts a flush and an eviction need, wired as BlockStore wires
// them but without it, FUSE or RocksDB: a real segment store in a temp dir,
// an in-memory index that can be made to fail (mem_index.h), a namespace
// whose journal counts its calls (or hands them to a real MetaJournal), a
// RAM tier, file data, a space budget and a flusher; time is a ManualClock.
// For flusher_test and evictor_parts_test.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>

#include "core/backing/backing_io.h"
#include "core/backing/disk_layout.h"
#include "core/data/file_data.h"
#include "core/flush/flusher.h"
#include "core/flush/meta_journal.h"
#include "core/namespace/namespace.h"
#include "core/ram/ram_tier.h"
#include "core/segments/segment_store.h"
#include "core/space/space_budget.h"
#include "core/util/clock.h"
#include "core/util/seq_counter.h"
#include "tests/mem_index.h"

namespace kvfs {

inline constexpr uint64_t kMiB = 1 << 20;

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

inline char fill_of(uint64_t ino, uint32_t idx) {
  return static_cast<char>('a' + (ino * 7 + idx) % 26);
}

class CorePartsFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    char t[] = "/tmp/kvfs-parts-XXXXXX";
    root_ = ::mkdtemp(t);
    cfg_.backing_dir = root_ + "/backing";
    std::filesystem::create_directories(cfg_.backing_dir);
    cfg_.segment_size = segment_size_;
    cfg_.flush_threads = 1;
    cfg_.flush_batch_bytes = 16 * kMiB;
    io_ = std::make_unique<BackingIo>(30.0, 4);
    auto s = SegmentStore::Open(cfg_, io_.get());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    segs_ = std::move(*s);
    ram_ = std::make_unique<RamTier>(64 * kMiB);
    data_ = std::make_unique<FileData>(ram_.get(), segs_.get());
    ns_ = std::make_unique<Namespace>(&journal_, &clock_);
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
    l.clock = &clock_;
    budget_ = std::make_unique<SpaceBudget>(l, segs_.get());
    flusher_ = std::make_unique<Flusher>(Flusher::Parts{&cfg_, &clock_, ns_.get(), &seqs_,
                                                        ram_.get(), segs_.get(), &index_, io_.get(),
                                                        budget_.get(), data_.get(), nullptr});
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
    std::filesystem::remove_all(root_);
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
      in->opens.opened(/*writable=*/true);
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

  uint64_t segment_size_ = 16 * kMiB;  // a test may change it before SetUp
  std::string root_;
  StoreConfig cfg_;
  ManualClock clock_;  // the namespace's (file times, LRU order) and the evictor's
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

}  // namespace kvfs
