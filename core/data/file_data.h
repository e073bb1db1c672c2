// SPDX-License-Identifier: Apache-2.0
// FileData: a regular file's data as the tiers see it: its block slots and
// their accounting (dirty bytes charged to the RAM tier, clean blocks cached
// in it by extent, the segments' live bytes), the cold read of one block's
// extent, and the one rule for "ready to flush".
//
// A slot's life: written (dirty buffer, charged) -> flushed (the live bytes
// move to its new extent; the buffer becomes a clean cache entry, uncharged)
// -> cut by a truncate or freed with the file (charge released, live bytes
// and cache entry dropped). Every change of a slot's charge or extent goes
// through here, so the RAM tier's dirty total and the segments' live bytes
// always agree with the slots.
//
// Thread-safe. The _locked methods require the inode's mu; read_block takes
// only flight_mu_ (then the RAM tier's shard mutexes), never across the read,
// and the windows' mutex (a leaf) with neither held.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_map>

#include "core/inode/inode.h"
#include "core/ram/ram_tier.h"
#include "core/records/record.h"
#include "core/util/status.h"

namespace kvfs {

class SegmentStore;
class SegmentWindows;

// Keeps the bytes between len and the next 4 KiB boundary zero, so a block
// can be written to a segment as whole pages without leaking stale memory.
void zero_tail(Buffer& b, uint32_t len);

class FileData {
 public:
  // windows: read-ahead along the segments, or null.
  FileData(RamTier* ram, SegmentStore* segs, SegmentWindows* windows = nullptr)
      : ram_(ram), segs_(segs), windows_(windows) {}

  // The inode's metadata and the extents of its clean blocks.
  static InodeSnapshot snapshot_locked(const Inode& in, uint64_t parent, std::string_view name);
  // Dirty, linked, and complete: no client writes it any more (its last
  // writable descriptor was closed) or an fsync asks for it.
  static bool ready_to_flush_locked(const Inode& in);
  // An unlinked file's data may go: nobody has it open and, when a client
  // removed it, the kernel holds no inode it could still open.
  static bool unused_locked(const Inode& in);

  // Where a reader finds block idx now: its dirty buffer, lent to the reader
  // (a later write copies the block instead of changing the bytes under the
  // reply), or the extent of its latest written copy, to look up in the RAM
  // tier or read. Neither for a hole or a block past the slots; len: the
  // valid bytes.
  struct Source {
    ConstBufRef dirty;
    Extent ext;
    uint32_t len = 0;
  };
  static Source source_locked(Inode& in, uint32_t idx);
  // An import (a peer's file) whose owner moved its bytes: if `now` holds
  // the same bytes as the slots (size, and each block's length and hash),
  // the slots take its extents and it returns true; else nothing changes.
  // Peers' segments count no live bytes here, so no accounting moves.
  static bool move_extents_locked(Inode& in, const InodeSnapshot& now);

  // Frees every slot; a late open by inode number must then be a miss.
  void free_locked(Inode& in);
  // Cuts the slots from `keep` on (a truncate).
  void cut_locked(Inode& in, size_t keep);
  // Puts buf (len bytes, a dirty copy of a block) into slot s, in place of
  // what it held: charges its capacity; the caller already reserved it
  // from the RAM tier, and the old buffer's charge is released.
  void set_dirty_locked(Inode& in, BlockSlot& s, BufRef buf);
  // Slot idx was written to ext by a flush of buf: the live bytes move to
  // ext; if the slot still holds buf, it becomes a clean cache entry.
  void flushed_locked(Inode& in, uint32_t idx, const Extent& ext, const BufRef& buf);

  // A write of n bytes at offset bo of block idx, and a truncate to size,
  // may have to keep bytes of a block that is only in a segment: these name
  // its extent (and set *idx), or return an invalid one. The caller reads it
  // with no lock held (cold bytes take as long as the backing dir does) and
  // passes the bytes as old, after checking the extent is still the one
  // named.
  static Extent kept_by_write_locked(const Inode& in, uint32_t idx, uint32_t bo, uint32_t n);
  static Extent kept_by_truncate_locked(const Inode& in, uint64_t size, uint32_t* idx);
  // Locks in.mu into g, with *old holding the bytes of the extent kept(in)
  // names (null if none). A cold read of them runs with g released; the
  // extent is checked again once g is taken back, and read again if the
  // block moved. The caller holds the reclaim lock shared, which keeps a
  // chosen extent readable.
  using KeptFn = std::function<Extent(const Inode&, uint32_t* idx)>;
  Status lock_with_kept(Inode& in, std::unique_lock<std::mutex>* g, const KeptFn& kept,
                        ConstBufRef* old);
  // Writes the bytes into slot idx (old: see above); returns the buffer
  // capacity now charged as dirty, which the caller reserved.
  uint64_t write_locked(Inode& in, uint32_t idx, uint32_t bo, const char* data, uint32_t n,
                        const ConstBufRef& old);
  // Cuts or extends the file to size; a shortened block written before
  // becomes dirty again (its extent's hash covers the old length).
  void truncate_locked(Inode& in, uint64_t size, const ConstBufRef& old);

  // Reads one block's extent from the backing dir, checks its hash and
  // caches it in the RAM tier. Corruption (counted, logged) on a mismatch.
  // One read per extent at a time: a caller that finds the extent being
  // read waits for that read (bounded by the backing dir's deadline) and
  // shares its result. prefetch: the block enters the RAM tier marked as
  // read ahead; a prefetch that finds a read in flight returns at once
  // (OK, *out null).
  Status read_block(uint64_t ino, uint32_t idx, const Extent& ext, ConstBufRef* out,
                    bool prefetch = false);

  uint64_t backing_reads() const { return backing_reads_.load(); }
  uint64_t backing_read_bytes() const { return backing_read_bytes_.load(); }
  uint64_t checksum_errors() const { return checksum_errors_.load(); }
  uint64_t read_errors() const { return read_errors_.load(); }
  // Reads that waited for another caller's read of the same extent.
  uint64_t joined_reads() const { return joined_reads_.load(); }

 private:
  RamTier* const ram_;
  SegmentStore* const segs_;
  SegmentWindows* const windows_;
  std::atomic<uint64_t> backing_reads_{0}, backing_read_bytes_{0};
  std::atomic<uint64_t> checksum_errors_{0}, read_errors_{0}, joined_reads_{0};
  // Extents being read now. Lock order: flight_mu_ -> RamTier's shard
  // mutexes (nothing else is taken under it).
  struct Flight {
    uint64_t ino = 0;
    bool prefetch = false;
    bool done = false;
    bool joined = false;  // a client waited for it
    Status st;
    ConstBufRef buf;
  };
  std::mutex flight_mu_;
  std::condition_variable flight_cv_;
  std::unordered_map<ExtentKey, std::shared_ptr<Flight>, ExtentKeyHash> flights_;  // flight_mu_
};

}  // namespace kvfs
