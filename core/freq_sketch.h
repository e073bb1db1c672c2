// FreqSketch: how often each key was used lately, approximately, in little
// memory (as TinyLFU's frequency sketch, and Caffeine's): a count-min sketch
// of four rows of small saturating counters. Every `sample` additions all
// counters are halved, so what was used long ago fades and a key that was
// hot once does not stay "frequent" for good.
//
// The RAM tier asks it whether a block just read from the backing dir has
// been used more often than the block it would push out (ram_tier.h): with
// that rule, a loop over more data than RAM holds keeps a fixed part of it
// in RAM instead of pushing out every block just before its next use, as
// least-recently-used alone does.
//
// Not thread-safe: its owner's lock guards it (one per RamTier shard).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvfs {

class FreqSketch {
 public:
  // entries: about how many distinct keys the owner holds at once.
  explicit FreqSketch(size_t entries);

  void add(uint64_t hash);
  // The smallest of the key's four counters: at least its uses since the
  // last halvings (other keys may add to it, never take away).
  unsigned estimate(uint64_t hash) const;

  static constexpr unsigned kMax = 15;

 private:
  size_t index(uint64_t hash, unsigned row) const;
  void halve();

  std::vector<uint8_t> rows_[4];
  size_t mask_;
  uint64_t sample_;
  uint64_t added_ = 0;
};

}  // namespace kvfs
