// SPDX-License-Identifier: Apache-2.0
// SeqCounter: hands out the seqs that order every snapshot and tombstone of
// an inode (the newest wins in the index and in a catch-up). The journal and
// the flushers take them; the mount starts it above every seq it loaded.
//
// Thread-safe (one atomic).
#pragma once

#include <atomic>
#include <cstdint>

namespace kvfs {

class SeqCounter {
 public:
  uint64_t take() { return next_.fetch_add(1); }
  uint64_t next() const { return next_.load(); }
  void start_at(uint64_t v) { next_ = v; }

 private:
  std::atomic<uint64_t> next_{1};
};

}  // namespace kvfs
