// SPDX-License-Identifier: Apache-2.0
// BlockReader: a client's read of an open file. For each block it decides
// where the bytes come from (FileData::source_locked names the candidates:
// the dirty buffer, else the block the open holds, else the RAM tier, else
// a cold read of the segment extent), hints the Prefetcher at a miss, holds
// a block read only in part for the rest (HeldBlocks), and counts hits and
// misses in bytes.
//
// Owns: its counters; writes ReadLoad (when a client last read). Reads: FileData, RamTier,
// HeldBlocks, Prefetcher; the inode under its mu (atime and the LRU time are the only fields it
// writes, as every reader does). Thread-safe: any number of reads at once, of one file or many;
// holds the store's reclaim mutex shared from choosing an extent until its bytes are read, and an
// inode's mu never across a backing read.
#pragma once

#include <atomic>
#include <cstdint>
#include <shared_mutex>

#include "core/data/open_file.h"
#include "core/util/status.h"

namespace kvfs {

class Clock;
class FileData;
class HeldBlocks;
class Prefetcher;
class RamTier;
class ReadLoad;

class BlockReader {
 public:
  struct Parts {
    FileData* data;
    RamTier* ram;
    HeldBlocks* held;
    Prefetcher* prefetch;
    std::shared_mutex* reclaim_mu;  // shared while an extent is read
    const Clock* clock;             // the inode's access time
    ReadLoad* reads;                // told of every read (nullptr: no one listens)
  };
  explicit BlockReader(const Parts& p) : p_(p) {}

  // Fills out with the bytes of [off, off + size) of f, zeros for holes,
  // short at the end of the file. A failed cold read returns its error as
  // it is: Corruption when a block's checksum did not match (the caller
  // drops the file: a cache may lose an entry, never serve wrong bytes).
  Status read(OpenFile* f, uint64_t off, size_t size, ReadResult* out);

  struct Stats {
    uint64_t ram_block_hits = 0;  // blocks served from RAM (dirty, held or cached)
    // Bytes handed to readers from RAM / read from the backing dir.
    uint64_t ram_hit_bytes = 0, ram_miss_bytes = 0;
    uint64_t peer_read_bytes = 0;  // bytes read of files another node owns
  };
  Stats stats() const;

 private:
  const Parts p_;
  std::atomic<uint64_t> ram_block_hits_{0}, ram_hit_bytes_{0}, ram_miss_bytes_{0};
  std::atomic<uint64_t> peer_read_bytes_{0};
};

}  // namespace kvfs
