// SPDX-License-Identifier: Apache-2.0
// ReuseTable: when each key was last used, for keys in RAM and out of it, in
// little memory, so that the RAM tier can tell how long a block went unused
// before it was wanted again (its reuse interval) even after it left RAM.
//
// The RAM tier asks it when a block read from the backing dir would push
// another one out (ram_tier.h): the newcomer stays only if it came back in
// less than half the time the block it would push out has been lying
// unused. In a loop
// over more than RAM holds (every round of a chat reloads its history) each
// block comes back after the whole loop, later than any block in RAM will
// be wanted, so a fixed part of the loop stays in RAM instead of each block
// being pushed out just before its next use (LIRS's rule: S. Jiang and
// X. Zhang, SIGMETRICS 2002).
//
// Time is counted in uses (the tier's own counter), not in seconds: a
// reuse interval and an idle time are then compared on the same scale
// whatever the load. Direct-mapped: a key whose slot another key took is
// forgotten (unknown), which the tier treats as "not seen lately".
//
// Not thread-safe: its owner's lock guards it (one per RamTier shard).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvfs {

class ReuseTable {
 public:
  static constexpr uint64_t kUnknown = UINT64_MAX;

  // slots: rounded up to a power of two (at least 64).
  explicit ReuseTable(size_t slots);

  // Records a use of the key at `now` and returns the uses since its
  // previous one, or kUnknown if that was not recorded (its first use, or
  // a key with the same slot came in between).
  uint64_t use(uint64_t hash, uint64_t now);
  // When the key was last used, or kUnknown.
  uint64_t last_use(uint64_t hash) const;

 private:
  struct Slot {
    uint64_t tag = 0;  // the key's hash with its low bit set; 0: empty
    uint64_t last = 0;
  };
  std::vector<Slot> slots_;
  size_t mask_;
};

}  // namespace kvfs
