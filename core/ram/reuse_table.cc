// SPDX-License-Identifier: Apache-2.0
#include "core/ram/reuse_table.h"

namespace kvfs {

ReuseTable::ReuseTable(size_t slots) {
  size_t n = 64;
  while (n < slots) n <<= 1;
  slots_.resize(n);
  mask_ = n - 1;
}

uint64_t ReuseTable::use(uint64_t hash, uint64_t now) {
  // The slot comes from the high bits: RamTier picks its shard from the
  // low ones, so every key of a shard would share those.
  Slot& s = slots_[(hash >> 20) & mask_];
  const uint64_t tag = hash | 1;
  const uint64_t gap = s.tag == tag && now >= s.last ? now - s.last : kUnknown;
  s.tag = tag;
  s.last = now;
  return gap;
}

uint64_t ReuseTable::last_use(uint64_t hash) const {
  const Slot& s = slots_[(hash >> 20) & mask_];
  return s.tag == (hash | 1) ? s.last : kUnknown;
}

}  // namespace kvfs
