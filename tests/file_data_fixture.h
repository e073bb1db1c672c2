// SPDX-License-Identifier: Apache-2.0
// Shared by the tests of FileData and of the Prefetcher.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/data/file_data.h"
#include "core/ram/ram_tier.h"
#include "core/segments/segment_store.h"
#include "tests/flush_state_testing.h"

namespace kvfs {

// A real segment store on a temporary backing dir, a RAM tier and the
// FileData over them; write() and flush() change a file as BlockStore and the
// flusher do.
class FileDataFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    char t[] = "/tmp/kvfs-filedata-XXXXXX";
    root_ = ::mkdtemp(t);
    cfg_.backing_dir = root_;
    cfg_.segment_size = 8 << 20;
    auto s = SegmentStore::Open(cfg_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    segs_ = std::move(*s);
    data_ = std::make_unique<FileData>(&ram_, segs_.get());
  }
  void TearDown() override {
    data_.reset();
    segs_.reset();
    std::filesystem::remove_all(root_);
  }

  // Writes n bytes of c at off through FileData, reserving as BlockStore does.
  void write(Inode& in, uint64_t off, uint32_t n, char c, const ConstBufRef& old = nullptr) {
    const std::string bytes(n, c);
    const uint32_t idx = uint32_t(off / kBlockSize), bo = uint32_t(off % kBlockSize);
    ASSERT_TRUE(ram_.reserve_dirty(kBlockSize).ok());
    std::lock_guard g(in.mu);
    const uint64_t used = data_->write_locked(in, idx, bo, bytes.data(), n, old);
    ram_.release_dirty(kBlockSize - used);
    in.size = std::max<uint64_t>(in.size, off + n);
    in.flush.client_wrote();
  }
  // Flushes every dirty slot into one segment record, as the flusher does.
  void flush(Inode& in) {
    auto w = segs_->new_writer();
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    std::lock_guard g(in.mu);
    std::vector<SegmentWriter::Block> bs;
    std::vector<std::pair<uint32_t, BufRef>> dirty;
    RecordEntry e;
    e.snap = FileData::snapshot_locked(in, kRootIno, "f");
    e.snap.seq = ++seq_;
    for (uint32_t i = 0; i < in.blocks.size(); ++i) {
      if (!in.blocks[i].buf) continue;
      bs.push_back({in.blocks[i].buf, in.blocks[i].len});
      dirty.emplace_back(i, in.blocks[i].buf);
      e.snap.extents.push_back({i,
                                {(*w)->id(), 0, in.blocks[i].len,
                                 hash_bytes(in.blocks[i].buf->data(), in.blocks[i].len)}});
    }
    std::vector<RecordEntry> es{e};
    std::vector<Extent> exts;
    ASSERT_TRUE((*w)->append(RecordType::kFile, es, bs,
                             [&](const std::vector<uint64_t>& o) {
                               for (size_t i = 0; i < o.size(); ++i)
                                 es[0].snap.extents[i].ext.off = o[i];
                             })
                    .ok());
    ASSERT_TRUE((*w)->sync().ok());
    for (size_t i = 0; i < dirty.size(); ++i)
      data_->flushed_locked(in, dirty[i].first, es[0].snap.extents[i].ext, dirty[i].second);
    FlushStateTestAccess::commit(in);
  }
  std::string bytes_of(const ConstBufRef& b, uint32_t off, uint32_t n) {
    return std::string(b->data() + off, n);
  }

  std::string root_;
  StoreConfig cfg_;
  std::unique_ptr<SegmentStore> segs_;
  RamTier ram_{64 << 20};
  std::unique_ptr<FileData> data_;
  uint64_t seq_ = 0;
};

}  // namespace kvfs
