// SPDX-License-Identifier: Apache-2.0
// FileData: a file's block slots and their accounting against a real RAM
// tier and a real segment store on a temporary backing dir: what a write, a
// flush, a truncate and a free charge and release, which extent a partial
// write or a truncate must keep (read by the caller with no lock held), the
// checksummed cold read, and the one "ready to flush" rule.
#include "core/data/file_data.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "file_data_fixture.h"

namespace kvfs {
namespace {

using FileDataTest = FileDataFixture;

TEST_F(FileDataTest, AWriteIsChargedAndAFlushMovesItToTheCleanCache) {
  Inode in(2);
  in.mode = S_IFREG | 0644;
  write(in, 0, 100000, 'a');
  EXPECT_GT(ram_.dirty_bytes(), 0u);
  EXPECT_EQ(in.dirty_charge, ram_.dirty_bytes());
  // A second write into the same private buffer changes it in place.
  write(in, 50000, 10, 'b');
  EXPECT_EQ(in.dirty_charge, ram_.dirty_bytes());
  EXPECT_EQ(in.blocks[0].len, 100000u);
  flush(in);
  EXPECT_EQ(ram_.dirty_bytes(), 0u);
  EXPECT_EQ(in.dirty_charge, 0u);
  ASSERT_TRUE(in.blocks[0].ext.valid());
  EXPECT_FALSE(in.blocks[0].buf);
  EXPECT_EQ(segs_->live_bytes(), align_up(100000));  // whole pages in the segment
  ConstBufRef c = ram_.lookup(ExtentKey{in.blocks[0].ext.seg, in.blocks[0].ext.off});
  ASSERT_TRUE(c);
  EXPECT_EQ(bytes_of(c, 49999, 12), "a" + std::string(10, 'b') + "a");
  std::lock_guard g(in.mu);
  data_->free_locked(in);
  EXPECT_EQ(segs_->live_bytes(), 0u);
  EXPECT_TRUE(in.blocks.empty());
  EXPECT_TRUE(in.evicted);
}

// A reader is told where each block is: a dirty buffer is lent (a later
// write copies instead of changing the bytes under the reply), a flushed one
// is its extent, a hole is neither.
TEST_F(FileDataTest, ASourceLendsADirtyBufferAndNamesAFlushedExtent) {
  Inode in(2);
  in.mode = S_IFREG | 0644;
  write(in, 0, 4096, 'a');
  write(in, 2 * kBlockSize, 4096, 'c');
  flush(in);
  write(in, kBlockSize, 4096, 'b');
  std::unique_lock g(in.mu);
  const FileData::Source dirty = FileData::source_locked(in, 1);
  ASSERT_TRUE(dirty.dirty);
  EXPECT_EQ(dirty.len, 4096u);
  EXPECT_TRUE(in.blocks[1].lent);
  const FileData::Source clean = FileData::source_locked(in, 0);
  EXPECT_FALSE(clean.dirty);
  EXPECT_EQ(clean.ext.seg, in.blocks[0].ext.seg);
  EXPECT_EQ(clean.ext.off, in.blocks[0].ext.off);
  EXPECT_FALSE(FileData::source_locked(in, 7).ext.valid());
  g.unlock();
  // The lent buffer keeps the bytes the reader got; the write goes elsewhere.
  write(in, kBlockSize, 10, 'z');
  EXPECT_EQ(bytes_of(dirty.dirty, 0, 10), std::string(10, 'b'));
  std::lock_guard g2(in.mu);
  EXPECT_EQ(bytes_of(in.blocks[1].buf, 0, 10), std::string(10, 'z'));
}

// An import whose owner copied its bytes elsewhere takes the new extents;
// other bytes (a hash, a length, the size) change nothing.
TEST_F(FileDataTest, MovedExtentsAreTakenOnlyForTheSameBytes) {
  Inode in(2);
  in.mode = S_IFREG | 0644;
  write(in, 0, 8192, 'a');
  write(in, kBlockSize, 100, 'b');
  flush(in);
  std::lock_guard g(in.mu);
  InodeSnapshot now = FileData::snapshot_locked(in, kRootIno, "f");
  ASSERT_EQ(now.extents.size(), 2u);
  for (BlockExtent& b : now.extents) b.ext.off += 1 << 20;  // moved along the segment
  InodeSnapshot other = now;
  other.extents[1].ext.hash ^= 1;
  EXPECT_FALSE(FileData::move_extents_locked(in, other));
  other = now;
  other.size += 1;
  EXPECT_FALSE(FileData::move_extents_locked(in, other));
  EXPECT_NE(in.blocks[0].ext.off, now.extents[0].ext.off) << "a refusal changed nothing";
  EXPECT_TRUE(FileData::move_extents_locked(in, now));
  EXPECT_EQ(in.blocks[0].ext.off, now.extents[0].ext.off);
  EXPECT_EQ(in.blocks[1].ext.off, now.extents[1].ext.off);
}

TEST_F(FileDataTest, APartialWriteOfAColdBlockNamesTheExtentToKeep) {
  Inode in(2);
  in.mode = S_IFREG | 0644;
  write(in, 0, 8192, 'a');
  flush(in);
  const Extent ext = in.blocks[0].ext;
  {
    std::lock_guard g(in.mu);
    // A whole-block overwrite keeps nothing; a partial one keeps the extent.
    EXPECT_FALSE(FileData::kept_by_write_locked(in, 0, 0, 8192).valid());
    EXPECT_TRUE(FileData::kept_by_write_locked(in, 0, 100, 10) == ext);
    EXPECT_FALSE(FileData::kept_by_write_locked(in, 5, 100, 10).valid());  // a hole
  }
  ram_.erase(ExtentKey{ext.seg, ext.off});
  ConstBufRef old;
  ASSERT_TRUE(data_->read_block(in.ino, 0, ext, &old).ok());
  EXPECT_EQ(data_->backing_reads(), 1u);
  EXPECT_TRUE(ram_.contains(ExtentKey{ext.seg, ext.off}));  // cached for the next reader
  write(in, 100, 10, 'z', old);
  std::lock_guard g(in.mu);
  ASSERT_TRUE(in.blocks[0].buf);
  EXPECT_EQ(in.blocks[0].len, 8192u);
  EXPECT_EQ(bytes_of(in.blocks[0].buf, 98, 14), "aa" + std::string(10, 'z') + "aa");
  // Once dirty, the slot's own buffer is the old bytes: nothing to read.
  EXPECT_FALSE(FileData::kept_by_write_locked(in, 0, 0, 10).valid());
}

TEST_F(FileDataTest, ATruncateKeepsTheHeadOfItsLastBlockAndReleasesTheRest) {
  Inode in(2);
  in.mode = S_IFREG | 0644;
  for (uint64_t b = 0; b < 3; ++b) write(in, b * kBlockSize, kBlockSize, char('a' + b));
  flush(in);
  EXPECT_EQ(segs_->live_bytes(), 3 * kBlockSize);
  const uint64_t size = kBlockSize + 4096 + 7;
  uint32_t idx = 99;
  Extent e;
  {
    std::lock_guard g(in.mu);
    e = FileData::kept_by_truncate_locked(in, size, &idx);
    EXPECT_FALSE(FileData::kept_by_truncate_locked(in, 2 * kBlockSize, &idx).valid());
    EXPECT_FALSE(FileData::kept_by_truncate_locked(in, 4 * kBlockSize, &idx).valid());
  }
  ASSERT_TRUE(e.valid());
  EXPECT_EQ(idx, 1u);
  ConstBufRef old;
  ASSERT_TRUE(data_->read_block(in.ino, idx, e, &old).ok());
  std::lock_guard g(in.mu);
  data_->truncate_locked(in, size, old);
  EXPECT_EQ(in.size, size);
  ASSERT_EQ(in.blocks.size(), 2u);
  EXPECT_EQ(in.blocks[1].len, 4096u + 7);
  ASSERT_TRUE(in.blocks[1].buf);  // dirty again: its extent's hash covers more
  EXPECT_EQ(bytes_of(in.blocks[1].buf, 0, 4103), std::string(4103, 'b'));
  EXPECT_EQ(in.blocks[1].buf->data()[4103], 0);  // the tail reads as zeros
  EXPECT_EQ(in.dirty_charge, ram_.dirty_bytes());
  EXPECT_EQ(segs_->live_bytes(), 2 * kBlockSize);  // block 2 is gone, 1 until flushed
  data_->truncate_locked(in, 0, nullptr);
  EXPECT_EQ(ram_.dirty_bytes(), 0u);
  EXPECT_EQ(segs_->live_bytes(), 0u);
}

TEST_F(FileDataTest, ADamagedExtentIsCorruptionAndIsCounted) {
  Inode in(2);
  in.mode = S_IFREG | 0644;
  write(in, 0, 8192, 'a');
  flush(in);
  const Extent ext = in.blocks[0].ext;
  ram_.erase(ExtentKey{ext.seg, ext.off});
  const std::string path = segs_->list()[0].path;
  const int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, "y", 1, off_t(ext.off + 10)), 1);
  ::close(fd);
  ConstBufRef out;
  EXPECT_EQ(data_->read_block(in.ino, 0, ext, &out).code(), Status::Code::kCorruption);
  EXPECT_FALSE(out);
  EXPECT_EQ(data_->checksum_errors(), 1u);
  EXPECT_FALSE(ram_.contains(ExtentKey{ext.seg, ext.off}));
}

TEST_F(FileDataTest, ReadyToFlushMeansDirtyLinkedAndComplete) {
  Inode in(2);
  in.mode = S_IFREG | 0644;
  std::lock_guard g(in.mu);
  in.flush.changed();
  in.opens.opened(/*writable=*/true);
  EXPECT_FALSE(FileData::ready_to_flush_locked(in));  // still being written
  (void)in.flush.begin_fsync();
  EXPECT_TRUE(FileData::ready_to_flush_locked(in));  // unless an fsync asks
  in.flush.end_fsync();
  in.opens.sealed();
  EXPECT_TRUE(FileData::ready_to_flush_locked(in));
  in.linked = false;
  EXPECT_FALSE(FileData::ready_to_flush_locked(in));
  in.linked = true;
  FlushStateTestAccess::commit(in);
  EXPECT_FALSE(FileData::ready_to_flush_locked(in));  // nothing new
}

}  // namespace
}  // namespace kvfs
