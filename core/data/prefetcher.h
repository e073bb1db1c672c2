// SPDX-License-Identifier: Apache-2.0
// Prefetcher: reads a file's cold blocks (in a segment, not in RAM) into the
// RAM tier ahead of the client. vLLM and llm-d check that a file exists and
// load it right after; on a backing dir a round trip away (NFS), one client
// read at a time leaves the link idle, so the lookup, the open and a cold
// read start reading the rest of the file on these threads, several requests
// in flight (the backing dir's I/O threads carry them, under its deadline).
//
// Bounded: at most `budget` bytes, and a quarter of the RAM tier, queued,
// being read, or read ahead and in RAM with no client having taken them yet
// (RamTier::prefetched_bytes): what does not fit is not read ahead
// (counted), so read-ahead never pushes more than that out of RAM. A block a client reads itself
// meanwhile (taken()) is not read ahead again. A queued block is read only if it is still the
// file's (an eviction, a truncate or a rewrite since cancels it) and not in
// RAM already, and only if the RAM tier has room it may take
// (RamTier::room_to_read_ahead; else counted no_room, not read). Prefetched blocks enter the RAM
// tier marked, like any clean block that eviction may take back: a client hit counts them used, an
// eviction before any hit wasted (RamTierStats). A client read of a block
// being prefetched waits for that read instead of making a second one
// (FileData::read_block).
//
// Thread-safe. Lock order: want() takes the inode's mu, releases it, then
// mu_ (a leaf); a worker holds the reclaim lock shared (which keeps the
// extent readable) around the inode's mu and the read.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <unordered_set>
#include <vector>

#include "core/inode/inode.h"
#include "core/ram/ram_tier.h"

namespace kvfs {

class FileData;

struct PrefetchStats {
  uint64_t budget_bytes = 0;
  uint64_t pending_bytes = 0;  // queued or being read now
  uint64_t queued = 0;         // blocks queued
  uint64_t reads = 0, read_bytes = 0;
  uint64_t cancelled = 0;    // no longer the file's, in RAM, or a deletion waited
  uint64_t over_budget = 0;  // blocks not queued: the budget was full
  uint64_t no_room = 0;      // not read: RAM had no room it could take (RamTier)
};

class Prefetcher {
 public:
  struct Parts {
    FileData* data;
    RamTier* ram;
    std::shared_mutex* reclaim_mu;  // BlockStore's: shared while reading
    // Non-zero while a segment deletion waits for reclaim_mu: no read starts
    // (read-ahead must not keep the reclaimer waiting).
    const std::atomic<int>* forgetting = nullptr;
  };
  // budget 0: nothing is read ahead. Queued blocks wait for start().
  Prefetcher(Parts p, uint64_t budget);
  // threads: requests in flight at most.
  void start(unsigned threads);
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // Queues the cold blocks of a regular file from block `from` on, in
  // order, at most max_blocks of them. Called with no lock held.
  void want(const InodeRef& in, uint32_t from = 0, uint32_t max_blocks = UINT32_MAX);
  // A client read this extent from the backing dir: a queued read ahead of
  // it is dropped (it would read the block a second time, for nobody).
  void taken(const ExtentKey& k);
  // Drops what is queued and joins the threads (a read in flight ends by
  // the backing dir's deadline). Idempotent.
  void stop();

  // Waits until nothing is queued or being read, at most `max` (tests,
  // admin); true if it got there.
  bool wait_idle(std::chrono::milliseconds max);

  void set_budget(uint64_t bytes) { budget_.store(bytes); }
  uint64_t budget() const { return budget_.load(); }
  PrefetchStats stats() const;

 private:
  struct Job {
    InodeRef in;
    uint32_t idx = 0;
    Extent ext;
  };
  void run();
  void read_one(const Job& j);

  const Parts p_;
  std::atomic<uint64_t> budget_;
  mutable std::mutex mu_;
  std::condition_variable cv_;                            // work queued, or stop
  std::condition_variable idle_cv_;                       // pending_ became empty
  std::deque<Job> q_;                                     // guarded by mu_
  std::unordered_set<ExtentKey, ExtentKeyHash> pending_;  // guarded by mu_: queued or reading
  std::unordered_set<ExtentKey, ExtentKeyHash> taken_;    // guarded by mu_: of pending_
  uint64_t pending_bytes_ = 0;                            // guarded by mu_
  bool stop_ = false;                                     // guarded by mu_
  std::vector<std::thread> threads_;
  std::atomic<uint64_t> queued_{0}, reads_{0}, read_bytes_{0}, cancelled_{0}, over_budget_{0},
      no_room_{0};
};

}  // namespace kvfs
