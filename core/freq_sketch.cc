#include "core/freq_sketch.h"

#include <algorithm>

namespace kvfs {

FreqSketch::FreqSketch(size_t entries) {
  size_t width = 64;
  while (width < entries * 2) width <<= 1;
  for (auto& r : rows_) r.assign(width, 0);
  mask_ = width - 1;
  // Ten uses per key held, as TinyLFU's sample: long enough to tell a key
  // used every round of a loop from one used once.
  sample_ = 10 * std::max<uint64_t>(entries, 32);
}

size_t FreqSketch::index(uint64_t hash, unsigned row) const {
  static constexpr uint64_t kSeeds[4] = {0x9E3779B97F4A7C15ull, 0xC2B2AE3D27D4EB4Full,
                                         0x165667B19E3779F9ull, 0xD6E8FEB86659FD93ull};
  uint64_t h = (hash + row) * kSeeds[row];
  h ^= h >> 31;
  return static_cast<size_t>(h) & mask_;
}

void FreqSketch::add(uint64_t hash) {
  for (unsigned r = 0; r < 4; ++r) {
    uint8_t& c = rows_[r][index(hash, r)];
    if (c < kMax) ++c;
  }
  if (++added_ >= sample_) halve();
}

unsigned FreqSketch::estimate(uint64_t hash) const {
  unsigned m = kMax;
  for (unsigned r = 0; r < 4; ++r) m = std::min<unsigned>(m, rows_[r][index(hash, r)]);
  return m;
}

void FreqSketch::halve() {
  for (auto& r : rows_)
    for (uint8_t& c : r) c >>= 1;
  added_ /= 2;
}

}  // namespace kvfs
