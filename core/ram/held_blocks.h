// SPDX-License-Identifier: Apache-2.0
// HeldBlocks: the one block an open file may keep for the rest of a read in
// pieces. One load that reads a block in parts (parallel extents, a header
// then the payload, unaligned reads) finds the rest here even if the RAM
// tier let the block go between the pieces (a small tier, many loads at
// once); else each piece could cross the link again.
//
// Owns the count of held bytes and its limit: a few blocks per reader
// thread of a busy client, and never more than a quarter of the RAM tier,
// since held blocks are memory outside its budget. Each open's HeldBlock is
// its own (a member of BlockStore's OpenFile), written only through here.
//
// Thread-safe: the counts are atomic; the _locked methods require the lock
// that guards the HeldBlock (BlockStore: its inode's mu).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>

#include "core/ram/ram_tier.h"
#include "core/util/buffer.h"

namespace kvfs {

// What one open file holds: a block's bytes and the extent they are of.
struct HeldBlock {
  ConstBufRef buf;
  ExtentKey key{};
};

class HeldBlocks {
 public:
  // ram_capacity: the RAM tier's byte budget now (it may change at run time).
  explicit HeldBlocks(std::function<uint64_t()> ram_capacity)
      : ram_capacity_(std::move(ram_capacity)) {}

  // h's bytes if they are the extent at key (a hit, counted), else null.
  ConstBufRef find_locked(const HeldBlock& h, const ExtentKey& key);
  // h holds buf (the extent at key) in place of what it held, if all held
  // bytes stay within limit(); else it keeps what it held.
  void hold_locked(HeldBlock* h, const ExtentKey& key, ConstBufRef buf);
  // h holds nothing (the open is released).
  void unhold_locked(HeldBlock* h);

  uint64_t limit() const;
  uint64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }
  uint64_t hits() const { return hits_.load(std::memory_order_relaxed); }

 private:
  const std::function<uint64_t()> ram_capacity_;
  std::atomic<uint64_t> bytes_{0}, hits_{0};
};

}  // namespace kvfs
