// SPDX-License-Identifier: Apache-2.0
// BlockReader: where a read's bytes come from, over a real segment store, a
// RAM tier and FileData, without a BlockStore or an index. Dirty bytes and
// holes as written; a flushed block in RAM is a hit, out of RAM a read of
// its segment; a block read in part is held for the rest of it; a block
// whose bytes do not match their checksum is Corruption, never bytes.
#include "core/data/block_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <shared_mutex>

#include "core/data/prefetcher.h"
#include "core/ram/held_blocks.h"
#include "core/util/clock.h"
#include "tests/file_data_fixture.h"

namespace kvfs {
namespace {

class BlockReaderTest : public FileDataFixture {
 protected:
  void SetUp() override {
    FileDataFixture::SetUp();
    // Budget 0: no read-ahead, so every backing read counted is the reader's.
    prefetch_ = std::make_unique<Prefetcher>(
        Prefetcher::Parts{data_.get(), &ram_, &reclaim_mu_, nullptr}, 0);
    reader_ = std::make_unique<BlockReader>(BlockReader::Parts{
        data_.get(), &ram_, &held_, prefetch_.get(), &reclaim_mu_, &clock_, nullptr});
    in_ = std::make_shared<Inode>(2);
    in_->mode = S_IFREG | 0644;
    file_.in = in_;
  }
  void TearDown() override {
    reader_.reset();
    prefetch_.reset();
    FileDataFixture::TearDown();
  }
  // The bytes a read returns, as a client would see them.
  std::string read(uint64_t off, size_t n, Status* st = nullptr) {
    ReadResult r;
    Status s = reader_->read(&file_, off, n, &r);
    if (st) *st = s;
    std::string out;
    for (const iovec& v : r.iov) out.append(static_cast<const char*>(v.iov_base), v.iov_len);
    EXPECT_EQ(out.size(), r.bytes);
    return out;
  }

  std::shared_mutex reclaim_mu_;
  ManualClock clock_;
  HeldBlocks held_{[this] { return ram_.capacity(); }};
  std::unique_ptr<Prefetcher> prefetch_;
  std::unique_ptr<BlockReader> reader_;
  InodeRef in_;
  OpenFile file_;
};

TEST_F(BlockReaderTest, DirtyBytesAndHolesReadAsWrittenAndPastTheEndNothing) {
  write(*in_, 0, 100, 'a');
  write(*in_, 2 * kBlockSize + 10, 20, 'b');
  const std::string all = read(0, 4 * kBlockSize);
  ASSERT_EQ(all.size(), 2 * kBlockSize + 30);
  EXPECT_EQ(all.substr(0, 100), std::string(100, 'a'));
  EXPECT_EQ(all.substr(100, 2 * kBlockSize + 10 - 100), std::string(2 * kBlockSize - 90, '\0'));
  EXPECT_EQ(all.substr(2 * kBlockSize + 10), std::string(20, 'b'));
  EXPECT_EQ(read(2 * kBlockSize + 30, 10), "");
  const BlockReader::Stats s = reader_->stats();
  // The bytes of the two slots (block 2's starts at 0: 10 zeros, then the
  // 20 written); the hole of block 1 is neither a hit nor a miss.
  EXPECT_EQ(s.ram_hit_bytes, 130u);
  EXPECT_EQ(s.ram_miss_bytes, 0u);
  EXPECT_EQ(data_->backing_reads(), 0u);
  EXPECT_EQ(in_->last_access_ns.load(), clock_.now_ns());
}

TEST_F(BlockReaderTest, AFlushedBlockIsAHitInRamAndAReadOfItsSegmentOutOfIt) {
  write(*in_, 0, kBlockSize, 'c');
  write(*in_, kBlockSize, 1000, 'd');
  flush(*in_);
  EXPECT_EQ(read(0, kBlockSize + 1000), std::string(kBlockSize, 'c') + std::string(1000, 'd'));
  EXPECT_EQ(reader_->stats().ram_miss_bytes, 0u);
  EXPECT_EQ(data_->backing_reads(), 0u);

  ram_.drop_clean();
  EXPECT_EQ(read(0, kBlockSize + 1000), std::string(kBlockSize, 'c') + std::string(1000, 'd'));
  EXPECT_EQ(reader_->stats().ram_miss_bytes, kBlockSize + 1000u);
  EXPECT_EQ(data_->backing_reads(), 2u);
  // Read from the segment into RAM: the next read is a hit again.
  EXPECT_EQ(read(0, 10), std::string(10, 'c'));
  EXPECT_EQ(data_->backing_reads(), 2u);
}

TEST_F(BlockReaderTest, ABlockReadInPartIsHeldForTheRestOfIt) {
  write(*in_, 0, kBlockSize, 'e');
  flush(*in_);
  ram_.drop_clean();
  EXPECT_EQ(read(0, 4096), std::string(4096, 'e'));
  EXPECT_EQ(data_->backing_reads(), 1u);
  ram_.drop_clean();  // RAM lets it go; the open still holds it
  EXPECT_EQ(read(4096, kBlockSize - 4096), std::string(kBlockSize - 4096, 'e'));
  EXPECT_EQ(data_->backing_reads(), 1u);
  EXPECT_EQ(held_.hits(), 1u);
}

TEST_F(BlockReaderTest, ABlockThatFailsItsChecksumIsCorruptionNotBytes) {
  write(*in_, 0, 8192, 'f');
  flush(*in_);
  ram_.drop_clean();
  Extent ext;
  {
    std::lock_guard g(in_->mu);
    ext = in_->blocks[0].ext;
  }
  // One byte of the block's payload changed on disk behind kvfs's back.
  std::string path;
  for (const SegmentInfo& si : segs_->list())
    if (si.id == ext.seg) path = si.path;
  const int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(::pwrite(fd, "X", 1, static_cast<off_t>(ext.off + 100)), 1);
  ::close(fd);
  Status st;
  const std::string got = read(0, 8192, &st);
  EXPECT_EQ(st.code(), Status::Code::kCorruption) << st.ToString();
  EXPECT_EQ(got.find('X'), std::string::npos);
  EXPECT_EQ(reader_->stats().ram_hit_bytes + reader_->stats().ram_miss_bytes, 0u);
}

}  // namespace
}  // namespace kvfs
