// SPDX-License-Identifier: Apache-2.0
// RamTier: the RAM tier's byte budget and its cache of clean blocks.
//
// Two kinds of bytes share one capacity (ram_size):
//  - clean blocks, copies of extents already safe in a segment, kept in a
//    sharded segmented LRU keyed by extent (segment id, offset). They may be
//    dropped at any time: the segment still has them.
//  - dirty blocks, owned by their inode until a flusher writes them. They are
//    only accounted here (reserve_dirty/release_dirty) and are never dropped:
//    when the budget is full of dirty bytes, reserve_dirty() waits for the
//    flushers (backpressure) instead of growing.
//
// The clean cache is a segmented LRU per shard (as RocksDB's ShardedCache
// with a high-priority pool): written (flushed) and read-ahead blocks enter
// a probation list, a second hit promotes them to a protected list holding
// up to 80 % of the shard. Room comes from the least recently used
// probation tail of all shards, so a flood of writes or a one-time sweep
// cannot push out hot blocks.
//
// A block a client read from the backing dir (a miss, or a read-ahead it
// then took) was just handed to that client, which keeps what it loads
// (vLLM copies it to the GPU). It enters probation only if it came back in
// less than half the time the block it would push out has been lying
// unused (its reuse interval against that block's idle time, counted in
// uses of the tier; reuse_table.h remembers the last use of blocks out of
// RAM too: LIRS's rule, with a margin for the order of parallel loads,
// admit_locked()); otherwise, or when it was not seen lately, it goes to a
// third list, "once", evicted before the other two. So a load of more data
// than RAM holds (a long prefix loaded in the order it was stored) does not
// push out the written blocks not read yet, which the loads further on
// want; and a loop over more than RAM holds (every round of every user of
// a chat reloads its history) keeps a fixed part of it in RAM, where
// least-recently-used alone would push out each block just before its
// next use: a block of the loop comes back only after the whole loop,
// later than every block in RAM. A block no longer used (a finished chat)
// grows idle until a block that is being reused takes its place. A hit
// moves a block from once to probation. The newest once blocks (a 32nd of
// a shard) are spared a moment, so that the requests of one split read
// (unaligned, or parallel extents) find them.
//
// The newcomer is weighed against the block unused the longest of all
// shards' probation and protected tails. If that is a protected block, it
// goes to the tail of probation, to leave next: with probation alone, a
// finished chat's blocks stayed in the protected list for good while the
// next chat's blocks, never hit twice, churned through probation. And
// eviction takes the least recently used tail over all shards, not the
// next shard's in turn, which pushed out blocks used a moment ago while
// another shard held blocks of a finished chat (the multi-round QA figures
// before and after are in bench/README.md).
// Blocks read once leave first across all shards, not only within one
// (evict_locked()).
//
// A read ahead (Prefetcher) takes room only where a client's read would:
// free room, blocks read once, or a block that has been unused longer than
// the block read ahead (room_to_read_ahead()). Otherwise the block it pushed out (a written one, as
// likely to be read soon) would cross the link in its place.
//
// Thread-safe. Lock order: budget_mu_ before any shard mutex, one shard
// mutex at a time (the shards' tails are also published in atomics, read
// without the shard's lock; a demotion waits until the newcomer's shard
// lock is dropped); the tier never
// calls out while holding either, except the pressure callback, which is
// called with no lock held.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/util/buffer.h"
#include "core/util/status.h"

namespace kvfs {

struct ExtentKey {
  uint64_t seg = 0;
  uint64_t off = 0;
  bool operator==(const ExtentKey& o) const { return seg == o.seg && off == o.off; }
};

struct ExtentKeyHash {
  size_t operator()(const ExtentKey& k) const {
    uint64_t h = k.seg * 0x9E3779B97F4A7C15ull ^ (k.off + 0x632BE59BD9B4E019ull);
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    return static_cast<size_t>(h ^ (h >> 32));
  }
};

struct RamTierStats {
  uint64_t capacity = 0;
  uint64_t clean_bytes = 0;
  uint64_t dirty_bytes = 0;
  uint64_t entries = 0;
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t evictions = 0;
  uint64_t evicted_bytes = 0;
  uint64_t backpressure_waits = 0;
  // Blocks read ahead (Prefetcher): hit by a client before they left RAM,
  // or dropped before any hit.
  uint64_t prefetch_used = 0;
  uint64_t prefetch_wasted = 0;
  // Blocks read from the backing for a client and kept like written data:
  // they came back in less than half the time what they push out had lain
  // unused.
  uint64_t admitted = 0;
};

class RamTier {
 public:
  explicit RamTier(uint64_t capacity, unsigned shard_bits = 4);
  ~RamTier();
  RamTier(const RamTier&) = delete;
  RamTier& operator=(const RamTier&) = delete;

  // Clean cache. lookup() counts a hit or a miss; the returned reference keeps
  // the bytes alive even if the entry is evicted meanwhile.
  ConstBufRef lookup(const ExtentKey& key);
  // How a block enters (see above): written (flushed, or copied forward),
  // read ahead of any client (counted used at its first hit, wasted if it
  // leaves before one), or read from the backing dir for a client.
  enum class Admit { kWritten, kPrefetch, kRead };
  void insert(const ExtentKey& key, ConstBufRef buf, Admit how = Admit::kWritten);
  // A client took a prefetched block's bytes without a lookup (it waited
  // for the read in flight): counts it used.
  void claim_prefetched(const ExtentKey& key);
  void erase(const ExtentKey& key);
  // True if cached; counts nothing and changes no order (admin listings).
  bool contains(const ExtentKey& key);
  // Whether a block read ahead would find room now: free room, blocks read
  // once, or a block unused for longer than it (approximate: the locks are
  // dropped on return). Counts nothing.
  bool room_to_read_ahead(const ExtentKey& key);
  // The cached bytes, or null; counts nothing and changes no order (a
  // second look after a counted miss).
  ConstBufRef peek(const ExtentKey& key);

  // Dirty budget. reserve_dirty blocks while clean+dirty+bytes would pass the
  // capacity and there is dirty data that flushing will turn clean.
  // Fails when flushing itself is failing (set_flush_error) while the
  // writer waits: then the writer gets that error instead of hanging; and
  // with TimedOut once the give-up rule (set_give_up) says so.
  Status reserve_dirty(uint64_t bytes);
  // The same without waiting: false when the bytes do not fit now. For the
  // evictor's copies forward: the dirty data it would wait for may itself
  // be waiting for the room the copy is to make.
  bool try_reserve_dirty(uint64_t bytes);
  // Room for dirty data, clean data counted as free (it is dropped first).
  uint64_t dirty_room() const {
    const uint64_t cap = capacity_.load(), d = dirty_bytes_.load(std::memory_order_relaxed);
    return cap > d ? cap - d : 0;
  }
  void release_dirty(uint64_t bytes);
  // Charges dirty bytes without waiting, for the rare change made while an
  // inode lock is held (truncating into the middle of a block).
  void charge_dirty(uint64_t bytes);
  // Moves a flushed block from the dirty budget into the clean cache in one
  // step, so the bytes are never counted twice or not at all.
  void clean_dirty(const ExtentKey& key, ConstBufRef buf, uint64_t dirty_bytes);

  // Called (no lock held) when a writer has to wait: flushers should also
  // write out blocks of files that are still open.
  void set_pressure_callback(std::function<void()> cb);
  // Asked, while a writer waits, with the time it began waiting: true ends
  // the wait (the flushers are stuck on a stalled backing dir). Set before use.
  using GiveUpFn = std::function<bool(std::chrono::steady_clock::time_point)>;
  void set_give_up(GiveUpFn fn);
  bool under_pressure() const { return waiters_.load(std::memory_order_relaxed) > 0; }

  // Flushers report whether they can make progress; while they cannot,
  // writers that would wait fail with this status instead.
  void set_flush_error(Status s);

  void set_capacity(uint64_t capacity);
  uint64_t capacity() const { return capacity_.load(); }
  uint64_t dirty_bytes() const { return dirty_bytes_.load(std::memory_order_relaxed); }
  // Bytes read ahead and cached that no client has taken yet.
  uint64_t prefetched_bytes() const { return prefetched_bytes_.load(std::memory_order_relaxed); }
  // Drops every clean block (admin "drop caches"; tests).
  void drop_clean();
  RamTierStats stats() const;

 private:
  enum List : uint8_t { kOnce, kProbation, kProtected };
  struct Entry;
  struct Shard;
  Shard& shard_for(const ExtentKey& k);
  // The next use's number (the tier's clock for reuse intervals).
  uint64_t tick() { return uses_.fetch_add(1, std::memory_order_relaxed) + 1; }
  // The shard with the least recently used tail of probation (list 0) or
  // protected (1) over all shards, -1 if none; *last gets that block's last
  // use. Reads the shards' published tails only (no lock): approximate.
  int oldest_tail(unsigned list, uint64_t* last) const;
  // The shard whose block evict_locked() takes once no block read once is
  // left: oldest_tail() of probation, else of protected.
  int victim_shard(uint64_t* last) const;
  // A protected tail (shard, last use) that a block read from the backing
  // dir beat; demote() moves it to probation's tail, to leave next.
  struct Demote {
    int shard = -1;
    uint64_t last = 0;
  };
  void demote(const Demote& d);
  // lookup() in shard s (takes s.mu); *d as admit_locked()'s.
  ConstBufRef lookup_shard(Shard& s, const ExtentKey& key, Demote* d);
  // Where a block read from the backing dir for a client goes (see above),
  // `gap` uses after its previous one, at use `now`; full: keeping it means
  // another block leaves. *d: the protected tail it beat, for demote()
  // once s.mu is dropped. Requires s.mu.
  List admit_locked(Shard& s, uint64_t gap, uint64_t now, bool full, Demote* d);
  // Another block would push one out now (approximate: no lock taken).
  bool full() const;
  // Evicts clean entries until usage + extra <= capacity or nothing is left.
  // Requires budget_mu_.
  void evict_locked(uint64_t extra);
  // Drops the last entry of `from` (not empty) and returns its bytes, to be
  // freed once the shard's lock is dropped. Requires budget_mu_ and s.mu.
  ConstBufRef evict_tail_locked(Shard& s, List from);
  // Drops clean data for `bytes` more and charges them if they fit (budget_mu_ held).
  bool admit_dirty_locked(uint64_t bytes);
  // How many bytes of idle buffers BufferPool may keep with `used` in use.
  static uint64_t idle_buffers(uint64_t cap, uint64_t used);
  // Bytes of the newest blocks read once that each shard spares.
  uint64_t once_window(uint64_t cap) const;
  static constexpr uint64_t kIdleReserveMin = 16ull << 20, kIdleReserveMax = 32ull << 20;

  std::atomic<uint64_t> capacity_;
  std::vector<std::unique_ptr<Shard>> shards_;
  unsigned shard_mask_;

  mutable std::mutex budget_mu_;
  std::condition_variable budget_cv_;          // guarded by budget_mu_
  std::atomic<uint64_t> clean_bytes_{0};       // sum of shard charges
  std::atomic<uint64_t> dirty_bytes_{0};       // written under budget_mu_
  std::atomic<uint64_t> prefetched_bytes_{0};  // written under a shard's mu
  std::atomic<int> waiters_{0};
  std::function<void()> pressure_cb_;  // set before use
  GiveUpFn give_up_;                   // set before use
  unsigned evict_cursor_ = 0;          // guarded by budget_mu_
  std::atomic<uint64_t> uses_{0};      // lookups that hit, and blocks written or read in
  Status flush_error_;                 // guarded by budget_mu_

  std::atomic<uint64_t> hits_{0}, misses_{0}, evictions_{0}, evicted_bytes_{0}, waits_{0};
};

}  // namespace kvfs
