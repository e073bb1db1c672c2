// SPDX-License-Identifier: Apache-2.0
// A real BlockStore over a disk that fails or lies (tests/fault_fs.h),
// without a mount: a failed segment write, fdatasync, create or read is an
// error the caller can name, what was written stays served from RAM and is
// flushed once the disk takes writes again, and a byte the disk changed is
// never handed out.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <random>

#include "core/backing/disk_layout.h"
#include "core/store/block_store.h"
#include "tests/fault_fs.h"

namespace kvfs {
namespace {

namespace fs = std::filesystem;
using Op = FaultFs::Op;

std::string pattern(size_t n, uint64_t seed) {
  std::string s(n, '\0');
  std::mt19937_64 r(seed);
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(r() >> 13);
  return s;
}

class BackingFaultsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char t[] = "/tmp/kvfs-faults-XXXXXX";
    root_ = ::mkdtemp(t);
    fs::create_directories(root_ + "/backing");
    open_store();
  }
  void TearDown() override {
    fs_.heal();
    store_.reset();
    fs::remove_all(root_);
  }
  void open_store() {
    store_.reset();
    StoreConfig c;
    c.backing_dir = root_ + "/backing";
    c.index_dir = root_ + "/index";
    c.ram_size = 64 << 20;
    c.segment_size = 8 << 20;
    c.flush_batch_bytes = 4 << 20;
    c.prefetch_bytes = 0;  // each read below is the test's own
    // One flusher, one open segment: a batch that needs a new segment
    // cannot go to another flusher's instead, so a fault meets it.
    c.flush_threads = 1;
    auto s = BlockStore::Open(c, nullptr, &fs_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
    // What the mount writes by itself (the root's record) is written now,
    // before a test sets a rule: only the test's own writes meet it.
    ASSERT_TRUE(store_->flush_all().ok());
  }
  // Files of 10 MiB, each flushed, until a call of kind op failed (at most
  // six): a file goes whole into the flusher's segment, which is closed
  // once past segment_size (8 MiB), so the next file needs a new one.
  // Returns what was written; last_error_ is the flush_all that failed.
  std::vector<std::string> put_until_failed(Op op) {
    std::vector<std::string> data;
    for (int i = 0; i < 6 && fs_.failed(op) == 0; ++i) {
      data.push_back(pattern(10 * kBlockSize, 10 + i));
      put("f" + std::to_string(i), data.back());
      if (Status st = store_->flush_all(); !st.ok()) {
        EXPECT_EQ(st.code(), Status::Code::kIOError) << st.ToString();
        last_error_ = st;
        if (fs_.failed(op) > 0) break;
      }
    }
    return data;
  }
  // After heal(): an attempt the flusher made on its own before the heal
  // (a file queued again while in flight goes again at once) may still fail
  // and end one flush_all with that failure, as flush_all reports every
  // failure it sees; the next finds the disk healed. One flusher: at most
  // one such attempt.
  Status flush_after_heal() {
    Status st = store_->flush_all();
    return st.ok() ? st : store_->flush_all();
  }
  void expect_files(const std::vector<std::string>& data) {
    for (size_t i = 0; i < data.size(); ++i) EXPECT_EQ(get("f" + std::to_string(i)), data[i]);
  }
  // Closed and opened again: RAM is empty, every read comes from a segment.
  void reopen() {
    ASSERT_TRUE(store_->Close().ok());
    open_store();
  }
  void put(const std::string& name, const std::string& data) {
    Attr a;
    auto f = store_->create(kRootIno, name, 0644, O_CREAT | O_WRONLY | O_TRUNC, Caller{}, &a);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    auto w = store_->write(*f, 0, data.data(), data.size());
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    store_->release(*f);
  }
  // The file's bytes, or "<error>" with *st set.
  std::string get(const std::string& name, Status* st = nullptr) {
    auto a = store_->lookup(kRootIno, name);
    if (!a.ok()) {
      if (st) *st = a.status();
      return "<missing>";
    }
    auto f = store_->open(a->ino, O_RDONLY);
    EXPECT_TRUE(f.ok());
    if (!f.ok()) return "<error>";
    ReadResult rr;
    Status s = store_->read(*f, 0, a->size + 10, &rr);
    std::string out;
    for (auto& v : rr.iov) out.append(static_cast<char*>(v.iov_base), v.iov_len);
    store_->release(*f);
    if (st) *st = s;
    return s.ok() ? out : "<error>";
  }

  std::string root_;
  FaultFs fs_;
  Status last_error_;  // put_until_failed's last failed flush_all
  std::unique_ptr<BlockStore> store_;
};

TEST_F(BackingFaultsTest, AFullDiskRefusesTheFlushAndTheFileIsFlushedOnceThereIsRoom) {
  const std::string d = pattern(3 * kBlockSize + 123, 1);
  fs_.fail({.op = Op::kPwrite, .err = ENOSPC, .path_has = "/segments/"});
  put("f", d);
  const Status st = store_->flush_all();
  EXPECT_EQ(st.code(), Status::Code::kNoSpace) << st.ToString();
  EXPECT_GT(fs_.failed(Op::kPwrite), 0u) << "segment writes went past the BackingFs";
  EXPECT_GT(store_->admin().stats().enospc_errors, 0u);
  EXPECT_EQ(get("f"), d) << "what the flush could not write is still served from RAM";
  fs_.heal();
  ASSERT_TRUE(flush_after_heal().ok());
  reopen();
  EXPECT_EQ(get("f"), d);
  EXPECT_GT(store_->admin().stats().backing_reads, 0u);
}

TEST_F(BackingFaultsTest, AFailedFdatasyncCommitsNothingAndTheBatchIsWrittenAgain) {
  const std::string d = pattern(2 * kBlockSize, 2);
  fs_.fail({.op = Op::kFdatasync, .err = EIO, .path_has = "/segments/", .times = 1});
  put("f", d);
  const Status st = store_->flush_all();
  EXPECT_EQ(st.code(), Status::Code::kIOError) << st.ToString();
  EXPECT_EQ(fs_.failed(Op::kFdatasync), 1u);
  EXPECT_GT(store_->admin().stats().io_errors, 0u);
  EXPECT_EQ(store_->admin().stats().flushed_files, 0u)
      << "committed though its data was not durable";
  ASSERT_TRUE(store_->flush_all().ok());  // the fault was once
  EXPECT_EQ(store_->admin().stats().flushed_files, 1u);
  reopen();
  EXPECT_EQ(get("f"), d);
}

TEST_F(BackingFaultsTest, ASegmentThatCannotBeCreatedIsAnIoErrorNotAMissingFile) {
  fs_.fail({.op = Op::kOpen, .err = ENOENT, .path_has = "/segments/"});
  const std::vector<std::string> data = put_until_failed(Op::kOpen);
  ASSERT_GT(fs_.failed(Op::kOpen), 0u) << "no new segment was made";
  EXPECT_EQ(last_error_.code(), Status::Code::kIOError) << last_error_.ToString();
  fs_.heal();
  ASSERT_TRUE(flush_after_heal().ok());
  reopen();
  expect_files(data);
}

// A new segment whose name could not be made durable (the dir's fsync
// failed) holds nothing: it leaves the store and the dir, and the flush
// goes to another one once the disk recovers.
TEST_F(BackingFaultsTest, ASegmentWhoseNameIsNotDurableIsRemovedAndTheFlushGoesElsewhere) {
  // Segment files, and those of them that hold nothing.
  auto files_in_segments = [&](bool empty_only) {
    size_t n = 0;
    for (auto& e : fs::directory_iterator(root_ + "/backing/segments"))
      n += layout::parse_segment_name(e.path().filename().string()).has_value() &&
           (!empty_only || e.file_size() == 0);
    return n;
  };
  fs_.fail({.op = Op::kFsync, .err = EIO, .path_has = "/segments", .times = 1});
  const std::vector<std::string> data = put_until_failed(Op::kFsync);
  ASSERT_EQ(fs_.failed(Op::kFsync), 1u) << "no new segment was made";
  ASSERT_TRUE(store_->flush_all().ok());  // the fault was once
  EXPECT_EQ(files_in_segments(true), 0u) << "the segment that failed to be made is left";
  EXPECT_EQ(store_->admin().stats().segments, files_in_segments(false));
  reopen();
  expect_files(data);
}

TEST_F(BackingFaultsTest, AColdReadThatFailsIsEioAndTheFileStaysForTheNextRead) {
  const std::string d = pattern(3 * kBlockSize, 4);
  put("f", d);
  reopen();
  fs_.fail({.op = Op::kPread, .err = EIO, .path_has = "/segments/"});
  Status st;
  EXPECT_EQ(get("f", &st), "<error>");
  EXPECT_EQ(st.code(), Status::Code::kIOError) << st.ToString();
  EXPECT_GT(fs_.failed(Op::kPread), 0u);
  EXPECT_GT(store_->admin().stats().io_errors, 0u);
  EXPECT_EQ(store_->admin().stats().checksum_errors, 0u);
  fs_.heal();
  EXPECT_EQ(get("f"), d) << "an I/O error is not damage: the file stays";
}

TEST_F(BackingFaultsTest, BytesTheDiskChangedAreNeverServed) {
  const std::string d = pattern(2 * kBlockSize, 5), other = pattern(5000, 6);
  put("victim", d);
  put("other", other);
  reopen();
  fs_.corrupt_reads("/segments/");
  Status st;
  EXPECT_EQ(get("victim", &st), "<error>");
  EXPECT_EQ(st.code(), Status::Code::kIOError) << st.ToString();
  EXPECT_EQ(store_->admin().stats().checksum_errors, 1u);
  EXPECT_FALSE(store_->lookup(kRootIno, "victim").ok()) << "a damaged file must become a miss";
  fs_.heal();
  EXPECT_EQ(get("other"), other);
}

TEST_F(BackingFaultsTest, ShortWritesAreCarriedOnToTheEnd) {
  const std::string d = pattern(5 * kBlockSize + 7, 7);
  fs_.short_writes(kAlign);
  put("f", d);
  ASSERT_TRUE(store_->flush_all().ok());
  EXPECT_GT(fs_.calls(Op::kPwrite), d.size() / kAlign) << "each write was taken whole";
  fs_.heal();
  reopen();
  EXPECT_EQ(get("f"), d);
}

TEST_F(BackingFaultsTest, WithoutFallocateSegmentsAreAppendedTo) {
  const std::string d = pattern(4 * kBlockSize, 8);
  fs_.fail({.op = Op::kFallocate, .err = EOPNOTSUPP, .path_has = "/segments/"});
  put("f", d);
  ASSERT_TRUE(store_->flush_all().ok());
  EXPECT_EQ(fs_.failed(Op::kFallocate), 1u) << "tried again after it said unsupported";
  reopen();
  EXPECT_EQ(get("f"), d);
}

TEST_F(BackingFaultsTest, AFallocateOutOfRoomIsNoSpace) {
  fs_.fail({.op = Op::kFallocate, .err = ENOSPC, .path_has = "/segments/"});
  put("f", pattern(kBlockSize, 9));
  EXPECT_EQ(store_->flush_all().code(), Status::Code::kNoSpace);
  fs_.heal();
  ASSERT_TRUE(flush_after_heal().ok());
  reopen();
  EXPECT_EQ(get("f"), pattern(kBlockSize, 9));
}

}  // namespace
}  // namespace kvfs
