// SPDX-License-Identifier: Apache-2.0
// SegmentWindows over a real segment store: files stored one after another
// and read back in that order are served from windows read ahead along the
// segment; a window's bytes are handed out only when they hash to the
// extent asked for (bytes rewritten in the segment since the window was
// read are read again from the segment); reads that do not walk forward,
// a zero budget, and a read while another file is being read ahead (a
// client that looked its prefix up whole) read no window; a client that
// waited for a window read the backing dir never answered gets the
// timeout, not a second wait.
#include "core/segments/segment_windows.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "core/backing/backing_io.h"
#include "file_data_fixture.h"

namespace kvfs {
namespace {

constexpr uint32_t kChunk = 512 << 10;  // a file of one short block

class SegmentWindowsTest : public FileDataFixture {
 protected:
  void SetUp() override {
    FileDataFixture::SetUp();
    // Room for every file of a test in one segment; reads go through one
    // backing I/O thread, which a test may hold.
    data_.reset();
    segs_.reset();
    cfg_.segment_size = 64 << 20;
    auto s = SegmentStore::Open(cfg_, &io_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    segs_ = std::move(*s);
    data_ = std::make_unique<FileData>(&ram_, segs_.get());
  }
  void TearDown() override {
    data_.reset();
    if (win_) win_->stop();
    FileDataFixture::TearDown();
  }
  void use_windows(uint64_t max_bytes) {
    win_ = std::make_unique<SegmentWindows>(segs_.get(), 6u << 20, max_bytes);
    win_->start();
    data_ = std::make_unique<FileData>(&ram_, segs_.get(), win_.get());
  }
  // n files of one kChunk block each, file i filled with 'a' + i, written
  // one record after another into one segment, none left in RAM.
  std::vector<InodeRef> stored_in_order(uint32_t n) {
    std::vector<InodeRef> files;
    auto w = segs_->new_writer();
    EXPECT_TRUE(w.ok());
    for (uint32_t i = 0; i < n; ++i) {
      auto in = std::make_shared<Inode>(100 + i);
      in->mode = S_IFREG | 0644;
      write(*in, 0, kChunk, char('a' + i));
      std::lock_guard g(in->mu);
      RecordEntry e;
      e.snap = FileData::snapshot_locked(*in, kRootIno, "f" + std::to_string(i));
      e.snap.seq = ++seq_;
      BufRef buf = in->blocks[0].buf;
      e.snap.extents.push_back({0, {(*w)->id(), 0, kChunk, hash_bytes(buf->data(), kChunk)}});
      std::vector<RecordEntry> es{e};
      std::vector<SegmentWriter::Block> bs{{buf, kChunk}};
      EXPECT_TRUE((*w)->append(RecordType::kFile, es, bs,
                               [&](const std::vector<uint64_t>& o) {
                                 es[0].snap.extents[0].ext.off = o[0];
                               })
                      .ok());
      EXPECT_TRUE((*w)->sync().ok());
      data_->flushed_locked(*in, 0, es[0].snap.extents[0].ext, buf);
      FlushStateTestAccess::commit(*in);
      files.push_back(in);
    }
    ram_.drop_clean();
    return files;
  }
  // A client's read of a file's block: its bytes, checked.
  void expect_reads(const InodeRef& in, char c) {
    ConstBufRef out;
    ASSERT_TRUE(data_->read_block(in->ino, 0, in->blocks[0].ext, &out).ok());
    EXPECT_EQ(bytes_of(out, 0, kChunk), std::string(kChunk, c));
  }

  // Holds the one backing I/O thread until release_io(): the backing dir
  // stops answering, and every call queues behind the held one.
  void hold_io() {
    auto holding = std::make_shared<std::promise<void>>();
    release_ = std::promise<void>();
    std::shared_future<void> held = release_.get_future().share();
    blocker_ = std::async(std::launch::async, [this, holding, held] {
      return io_.run("held", [holding, held]() -> Status {
        holding->set_value();
        held.wait();
        return Status::OK();
      });
    });
    holding->get_future().wait();
  }
  // The held call's status (TimedOut if it outlived io_timeout).
  Status release_io() {
    release_.set_value();
    return blocker_.get();
  }
  // Until the backing dir has n calls open (queued or running); false
  // after 20 s.
  bool wait_for_calls(uint64_t n) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (io_.stats().in_flight < n) {
      if (std::chrono::steady_clock::now() > until) return false;
      std::this_thread::yield();
    }
    return true;
  }

  BackingIo io_{30, 1};
  std::unique_ptr<SegmentWindows> win_;
  // Declared first, destroyed last: a test that stops early breaks release_,
  // which lets the held call end before blocker_ waits for it.
  std::future<Status> blocker_;
  std::promise<void> release_;
};

TEST_F(SegmentWindowsTest, FilesReadInTheOrderTheyWereStoredComeFromWindows) {
  use_windows(32 << 20);
  auto files = stored_in_order(16);
  for (uint32_t i = 0; i < files.size(); ++i) expect_reads(files[i], char('a' + i));
  const SegmentWindowStats s = win_->stats();
  // The first two reads show the walk; most of the rest come from windows
  // (one whose block runs into a window not read yet is read itself).
  EXPECT_GE(s.hits, 10u);
  EXPECT_GE(s.reads, 2u);
  EXPECT_EQ(s.mismatches, 0u);
  EXPECT_EQ(data_->backing_reads(), files.size());  // each block came from the backing dir
  EXPECT_EQ(data_->checksum_errors(), 0u);
}

TEST_F(SegmentWindowsTest, BytesRewrittenAfterTheWindowWasReadAreReadAgainFromTheSegment) {
  use_windows(32 << 20);
  auto files = stored_in_order(8);
  expect_reads(files[0], 'a');
  expect_reads(files[1], 'b');  // windows now hold what follows
  ASSERT_TRUE(win_->wait_idle(std::chrono::seconds(30)));
  ASSERT_GE(win_->stats().reads, 1u);
  // The segment's bytes of file 2 change under the window (as a failed batch
  // cut from a segment and written again): the extent now names the new
  // bytes, which the window does not have.
  const Extent old = files[2]->blocks[0].ext;
  const std::string fresh(kChunk, 'Z');
  auto list = segs_->list();
  ASSERT_EQ(list.size(), 1u);
  const int fd = ::open(list[0].path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, fresh.data(), kChunk, off_t(old.off)), ssize_t(kChunk));
  ::close(fd);
  Extent now = old;
  now.hash = hash_bytes(fresh.data(), kChunk);
  ConstBufRef out;
  ASSERT_TRUE(data_->read_block(files[2]->ino, 0, now, &out).ok());
  EXPECT_EQ(bytes_of(out, 0, kChunk), fresh);
  EXPECT_EQ(win_->stats().mismatches, 1u);
  // And an extent whose hash nothing matches is an error, never the
  // window's bytes.
  Extent bad = files[3]->blocks[0].ext;
  bad.hash ^= 1;
  ConstBufRef none;
  EXPECT_FALSE(data_->read_block(files[3]->ino, 0, bad, &none).ok());
  EXPECT_EQ(data_->checksum_errors(), 1u);
}

TEST_F(SegmentWindowsTest, ReadsThatDoNotWalkForwardReadNoWindow) {
  use_windows(32 << 20);
  auto files = stored_in_order(12);
  for (uint32_t i : {9u, 2u, 7u, 0u, 5u, 3u}) expect_reads(files[i], char('a' + i));
  EXPECT_EQ(win_->stats().reads, 0u);
}

TEST_F(SegmentWindowsTest, NoWindowWhileAnotherFileIsBeingReadAhead) {
  use_windows(32 << 20);
  auto files = stored_in_order(24);
  expect_reads(files[0], 'a');
  expect_reads(files[1], 'b');  // a forward walk: windows hold files 2 and on
  ASSERT_TRUE(win_->wait_idle(std::chrono::seconds(30)));
  const uint64_t before = win_->stats().reads;
  ASSERT_GE(before, 1u);
  // The one backing I/O thread is held, and a read ahead of file 20 (as
  // from a lookup of the client's whole prefix) waits behind it.
  hold_io();
  auto ahead = std::async(std::launch::async, [&] {
    ConstBufRef out;
    return data_->read_block(files[20]->ino, 0, files[20]->blocks[0].ext, &out,
                             /*prefetch=*/true);
  });
  // It is in flight (its call queued behind the held one) once the backing
  // dir has two calls open.
  ASSERT_TRUE(wait_for_calls(2)) << "the read ahead never started";
  // File 2 comes from a window, which would read further ahead; not while
  // file 20 is being read ahead.
  expect_reads(files[2], 'c');
  EXPECT_TRUE(release_io().ok());
  EXPECT_TRUE(ahead.get().ok());
  // (Window reads wait for the I/O thread too.)
  ASSERT_TRUE(win_->wait_idle(std::chrono::seconds(30)));
  EXPECT_EQ(win_->stats().reads, before);
  // Nothing else in flight: the walk goes on.
  expect_reads(files[3], 'd');
  ASSERT_TRUE(win_->wait_idle(std::chrono::seconds(30)));
  EXPECT_GT(win_->stats().reads, before);
}

TEST_F(SegmentWindowsTest, AWindowReadPastTheDeadlineFailsTheReadWaitingForIt) {
  use_windows(32 << 20);
  auto files = stored_in_order(12);
  expect_reads(files[0], 'a');
  expect_reads(files[1], 'b');  // windows at 1 and 2 MiB
  ASSERT_TRUE(win_->wait_idle(std::chrono::seconds(30)));
  io_.set_timeout(0.5);
  // The backing dir stops answering: its one I/O thread is held.
  hold_io();
  // File 2 comes from a window; the walk goes on with the window at 3 MiB,
  // whose read now waits for the held thread.
  expect_reads(files[2], 'c');
  ASSERT_TRUE(wait_for_calls(2)) << "no window read started";
  // File 6 lies in that window: its reader waits for the window's read,
  // which gives up at the deadline, and gets that error.
  ConstBufRef out;
  const Status st = data_->read_block(files[6]->ino, 0, files[6]->blocks[0].ext, &out);
  EXPECT_EQ(st.code(), Status::Code::kTimedOut) << st.ToString();
  EXPECT_FALSE(out);
  EXPECT_EQ(data_->read_errors(), 1u);
  // The held call and the window's read: no read of the extent of its own
  // went on to wait out a second deadline.
  EXPECT_EQ(io_.stats().in_flight, 2u);
  (void)release_io();  // (it may have given up waiting itself)
  // Answering again, the block reads back right.
  io_.set_timeout(30);
  expect_reads(files[6], 'g');
}

TEST_F(SegmentWindowsTest, WithoutABudgetNothingIsReadAhead) {
  use_windows(0);
  auto files = stored_in_order(8);
  for (uint32_t i = 0; i < files.size(); ++i) expect_reads(files[i], char('a' + i));
  EXPECT_EQ(win_->stats().reads, 0u);
  EXPECT_EQ(win_->stats().hits, 0u);
}

TEST_F(SegmentWindowsTest, TheBudgetBoundsWhatWindowsHold) {
  EXPECT_EQ(SegmentWindows::max_bytes_for(0, 1ull << 30), 0u);
  EXPECT_EQ(SegmentWindows::max_bytes_for(256 << 20, 64 << 20), 8u << 20);
  EXPECT_EQ(SegmentWindows::max_bytes_for(256 << 20, 4ull << 30), 32u << 20);
  use_windows(3 << 20);  // three windows at most
  auto files = stored_in_order(24);
  for (uint32_t i = 0; i < files.size(); ++i) expect_reads(files[i], char('a' + i));
  const SegmentWindowStats s = win_->stats();
  EXPECT_GT(s.hits, 0u);
  EXPECT_EQ(s.mismatches, 0u);
}

}  // namespace
}  // namespace kvfs
