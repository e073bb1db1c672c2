// Recovery: rebuilding the index from the segments, and checking them.
//
// Every committed snapshot and tombstone is in some segment record, each with
// a global seq, so the index is "the highest-seq entry per inode, minus
// tombstones". Torn or corrupt record tails (a crash mid-write) end a
// segment's scan; they were never committed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/status.h"

namespace kvfs {

class Index;
class SegmentStore;

struct RebuildStats {
  uint64_t segments = 0;
  uint64_t records = 0;
  uint64_t inodes = 0;
  uint64_t tombstones = 0;
  uint64_t torn_tails = 0;  // segments whose last record was incomplete
  uint64_t max_seq = 0;
  uint64_t max_ino = 0;
};

// Fills an empty index from the segments and marks it as belonging to the
// backing dir. progress(done, total) is called after each segment.
Status rebuild_index(SegmentStore& segs, Index& index, RebuildStats* st,
                     const std::function<void(uint64_t, uint64_t)>& progress = {});

}  // namespace kvfs
