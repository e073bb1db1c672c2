// SPDX-License-Identifier: Apache-2.0
// ReadLoad: when a client last read, for the parts that give way to reads
// (the FlushPacer slows the flush while clients read).
//
// Owned by the BlockStore; written by the BlockReader alone (note()), read by
// anyone. Thread-safe: one relaxed atomic.
#pragma once

#include <atomic>
#include <cstdint>

namespace kvfs {

class ReadLoad {
 public:
  // A client read was served at mono_ns (the store clock's monotonic time).
  void note(int64_t mono_ns) { last_ns_.store(mono_ns, std::memory_order_relaxed); }
  // Whether a client read within `quiet_ns` before now.
  bool active(int64_t now_ns, int64_t quiet_ns) const {
    const int64_t last = last_ns_.load(std::memory_order_relaxed);
    return last != 0 && now_ns - last < quiet_ns;
  }

 private:
  std::atomic<int64_t> last_ns_{0};
};

}  // namespace kvfs
