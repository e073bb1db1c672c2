// SPDX-License-Identifier: Apache-2.0
// SegmentWindows: read-ahead along a segment, across files.
//
// The flushers write the files a client stores one after another next to
// each other in a segment, and a client (vLLM, llm-d) loads a prefix in the
// order it stored it: chunk after chunk, each looked up only once the one
// before is loaded. Read-ahead within a file (prefetcher.h) cannot start the
// next chunk before its lookup, so with chunks of a few MiB or less every
// chunk waits for a round trip of its own and a network link runs half
// idle. Here, when a read of a file's last block (a short one: a file whose
// size is a multiple of 1 MiB never starts this) continues a forward walk
// through a segment (it starts at most kSeqGap past where the last read in
// that segment ended), the next windows of the segment (kWindow bytes each,
// on a grid of kWindow) are read on these threads, so that several large
// requests are in flight: one window ahead at first, doubling up to
// `readahead` while reads keep finding their bytes in windows.
//
// The caller (FileData) starts this only for a client that waited for a
// cold block while no other read-ahead was in flight: a client that looked
// its whole prefix up first already keeps the link busy with the
// prefetcher's reads of exactly its files, and windows past its prefix
// would take bandwidth from them.
//
// A window holds raw segment bytes. Nothing is trusted because of where it
// came from: take() hands out an extent's bytes only if they hash to the
// extent's XXH3 (the index's word for what the block holds); anything else
// (a record header, a block since cut by a failed batch, a torn peer tail)
// is a miss here and the caller reads the extent itself. Windows are few
// and bounded (max_bytes, outside the RAM tier's blocks: at most an eighth
// of ram_size, see BlockStore), the oldest ready one goes first.
//
// Thread-safe. mu_ is a leaf; no lock is held across a read or a copy.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/records/record.h"
#include "core/util/buffer.h"

namespace kvfs {

class SegmentStore;

struct SegmentWindowStats {
  uint64_t reads = 0, read_bytes = 0;  // windows read from the backing dir
  uint64_t hits = 0, hit_bytes = 0;    // extents served from a window
  uint64_t mismatches = 0;             // an extent's bytes in a window did not hash to it
  uint64_t unused = 0;                 // windows dropped with nothing taken from them
};

class SegmentWindows {
 public:
  // One block buffer, one large request; a block spans two at most.
  static constexpr uint64_t kWindow = kBlockSize;
  static constexpr uint64_t kSeqGap = 2ull << 20;
  // Window reads in flight at most (the threads reading them).
  static constexpr unsigned kThreads = 8;
  // What the windows may hold: none without read-ahead (prefetch 0), else
  // at most the read-ahead budget, an eighth of the RAM tier and 32 MiB.
  static uint64_t max_bytes_for(uint64_t prefetch_bytes, uint64_t ram_size);

  // readahead: bytes read ahead of a forward read at most, in whole
  // windows (below one: off); max_bytes: what the windows may hold in all
  // (0: off).
  SegmentWindows(SegmentStore* segs, uint64_t readahead, uint64_t max_bytes);
  ~SegmentWindows();
  SegmentWindows(const SegmentWindows&) = delete;
  SegmentWindows& operator=(const SegmentWindows&) = delete;

  void start();
  // Drops the windows and joins the threads (a read in flight ends by the
  // backing dir's deadline). Idempotent.
  void stop();
  void set_max_bytes(uint64_t bytes);
  void set_readahead(uint64_t bytes);
  uint64_t readahead() const;

  // ext's bytes into dst (capacity >= ext.len) from a window, waiting for
  // one a thread is reading that covers them (never for one still queued);
  // false if none has them or they do not hash to ext.hash (then the caller
  // reads ext itself), or if the read it waited for ran past the backing
  // dir's deadline: then *timed_out is set and the caller reports that
  // rather than wait a second deadline.
  bool take(const Extent& ext, char* dst, bool* timed_out);
  // ext was just read from the backing dir, or taken from a window: if
  // reads walk forward through its segment, read the windows after it. How
  // far ahead grows while reads take from the windows read for them, and
  // starts small again when they do not (a client that loads a few chunks
  // and then jumps elsewhere wastes little).
  void after_read(const Extent& ext);

  // Waits until no window is queued or being read, at most `max` (tests).
  bool wait_idle(std::chrono::milliseconds max);
  SegmentWindowStats stats() const;

 private:
  struct Window {
    uint64_t seg = 0, off = 0;
    BufRef buf;
    size_t len = 0;        // bytes read (less than kWindow at the segment's end)
    bool started = false;  // a thread is reading it
    bool ready = false, failed = false;
    bool timed_out = false;  // failed: the backing dir gave no answer in time
    uint64_t taken = 0;      // extents served from it
    uint64_t stamp = 0;      // creation order
  };
  using WindowRef = std::shared_ptr<Window>;
  struct Tail {
    uint64_t seg = 0, end = 0;
    unsigned ahead = 0;  // windows read past the one a read ends in
    bool taken = false;  // a read took from a window since they were queued
  };
  void run();
  WindowRef find_locked(uint64_t seg, uint64_t off) const;
  // Makes room for one more window: drops the oldest ready one if needed.
  bool room_locked();

  SegmentStore* const segs_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;   // a window queued, or stop
  std::condition_variable ready_cv_;  // a window read (or failed)
  uint64_t max_bytes_;                // guarded by mu_
  uint64_t readahead_;                // guarded by mu_
  std::vector<WindowRef> windows_;    // guarded by mu_
  std::deque<WindowRef> queue_;       // guarded by mu_: of windows_, not read yet
  std::vector<Tail> tails_;           // guarded by mu_: where recent reads ended
  uint64_t stamp_ = 0;                // guarded by mu_
  bool stop_ = false;                 // guarded by mu_
  SegmentWindowStats stats_;          // guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace kvfs
