// SPDX-License-Identifier: Apache-2.0
// Evictor: keeps the backing dir under its capacity, without ever hurting a
// reader, and does the housekeeping the offloaders never do.
//
// Capacity: the bytes of all segment files. Above high_watermark * capacity a
// pass evicts least recently used files (whole files: their names go, ENOENT
// afterwards) until the live data fits under low_watermark * capacity, then
// reclaims segments: an empty one is deleted; one whose live fraction is under
// reclaim_ratio has its remaining files copied forward (made dirty again and
// rewritten by the flushers into the current segment) while there is room,
// or evicted with it when there is none. If a pass frees and evicts nothing
// while the live data fits (dead space in fuller segments, next to files the
// LRU may not take), the sparsest segments up to 50 % live are compacted:
// their files copied forward, never evicted (the copy may pass the cap by up
// to half a segment until the old segment is deleted). When the backing
// filesystem itself is full (its ENOSPC before the cap) nothing is copied or
// compacted: sparse segments go with their files. Segments are deleted
// only once nothing points into them and every snapshot they held for a live
// inode was written again elsewhere (so an index rebuild still finds every
// file).
//
// Never evicted: open files, files looked up / stat'ed / read / touched within
// evict_grace (plus the kernel's cache timeouts), and dirty files. The
// kernel's caches of an evicted name are invalidated through NameNotices.
// When nothing can be evicted, flushes wait briefly (SpaceBudget's
// protocol: as long as each pass frees space or evicts files) and then
// fail with ENOSPC instead of growing past capacity plus one segment. The
// evictor's thread runs a pass when the budget asks for one (next_pass) and
// at least every second; it never calls the budget's waits itself.
//
// Thread-safe. One pass runs at a time (pass_mu_). Lock order: pass_mu_ ->
// Namespace::commit_mu_ -> Namespace::mu_ or reclaim_mu -> Inode::mu
// (block_store.h has core/'s).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/inode/inode.h"
#include "core/namespace/name_notices.h"
#include "core/util/clock.h"
#include "core/util/log.h"
#include "core/util/status.h"

namespace kvfs {

class BackingIo;
struct RecordEntry;
class FileData;
class Flusher;
class IndexWriter;
class Namespace;
class RamTier;
class SegmentStore;
class SpaceBudget;
struct StoreConfig;

struct EvictRequest {
  enum class Kind { kPath, kPrefix, kAll, kToSize, kOlderThan };
  Kind kind = Kind::kAll;
  uint64_t ino = 0;           // kPath: a file; kPrefix: a directory (its subtree)
  uint64_t target_bytes = 0;  // kToSize: live data to go down to
  double older_than_s = 0;    // kOlderThan: not accessed for this long
  bool force = false;         // also open files and files in their grace period
  bool dry_run = false;       // report what would go, remove nothing
};

struct EvictResult {
  uint64_t files = 0;
  uint64_t bytes = 0;
  uint64_t skipped = 0;  // matched but protected (open, in grace, dirty)
};

struct EvictorStats {
  uint64_t capacity = 0;
  uint64_t evicted_capacity = 0, evicted_admin = 0, evicted_tmp = 0, evicted_reclaim = 0;
  uint64_t evicted_bytes = 0;
  uint64_t dirs_removed = 0;
  uint64_t segments_deleted = 0;
  // Reclaimed segments of a shared dir in their grace (renamed, not yet
  // deleted; counted in the capacity).
  uint64_t segments_retiring = 0, retiring_bytes = 0;
  uint64_t reclaim_copied_bytes = 0;  // write amplification of reclamation
  uint64_t passes = 0;
  uint64_t enospc = 0;  // flushes refused for lack of room
};

class Evictor {
 public:
  // What the evictor uses; every part outlives it (BlockStore owns them all).
  struct Parts {
    const StoreConfig* cfg;
    const Clock* clock;             // grace periods, LRU order, housekeeping ages
    Namespace* ns;                  // candidates and removals
    RamTier* ram;                   // cached blocks, dirty budget of copies
    SegmentStore* segs;             // usage, scans, deletion
    IndexWriter* index;             // segment drops
    BackingIo* io;                  // no reclaim while the dir is stalled
    SpaceBudget* budget;            // the cap, room and pass requests
    FileData* data;                 // slots: freed, copied forward, cold reads
    Flusher* flusher;               // writes copies forward and carried entries
    NameNotices* notices;           // the kernel forgets each name removed
    std::shared_mutex* reclaim_mu;  // readers of extents shared, deletion exclusive
    // Raised while a deletion waits for reclaim_mu: read-ahead starts no
    // read then (shared holders may otherwise keep it waiting for good).
    std::atomic<int>* forgetting = nullptr;
  };
  explicit Evictor(const Parts& parts);
  ~Evictor();

  // Whether the owner of a peer's file that this node unlinked (record.h
  // kPeerUnlink) has removed or rewritten that version: then reclamation
  // may drop the entry; until then it is carried forward, or an owner down
  // meanwhile would never learn of the unlink. Set once the peers' logs are
  // read; unset, every such entry is carried.
  using UnlinkSettled = std::function<bool(const RecordEntry&)>;
  void set_unlink_settled(UnlinkSettled fn);
  void start();
  // Stops the budget's waits too (a flush then fails at once for lack of
  // room instead of waiting for passes that will not come).
  void stop();

  Result<EvictResult> evict(const EvictRequest& r);
  // Runs the housekeeping pass now; returns how many files it removed.
  uint64_t housekeep_now();
  // Logs the evictions the log's rate limit held back: all of them now (a
  // capacity change, unmount), else those whose interval has passed.
  void log_held(bool now);
  // Runs one capacity pass (evict, reclaim) on the caller's thread.
  void pass_now() { pass(false); }

  double grace_s() const;
  void set_grace_s(double s);
  EvictorStats stats() const;

 private:
  enum class Reason { kCapacity, kAdmin, kTmp, kReclaim };
  struct Cand {
    InodeRef in;
    int64_t last;
    uint64_t bytes;
  };
  void run();
  void pass(bool backing_full);
  uint64_t housekeeping(int64_t now);
  std::vector<Cand> candidates(const std::function<bool(Inode&)>& want);
  bool evictable_locked(Inode& in, bool force, int64_t now) const;
  uint64_t remove(const std::vector<InodeRef>& victims, bool force, Reason why, EvictResult* res,
                  const std::function<bool(Inode&)>& extra = {});
  void remove_empty_dirs(std::vector<uint64_t> dirs, int64_t now);
  // Info lines for evictions: each admin command; the others at most every
  // 10 s, with the files and bytes since the last line.
  void log_removed(Reason why, uint64_t files, uint64_t bytes, const EvictResult* res);
  uint64_t evict_lru(uint64_t need, int64_t now);  // files evicted
  // Copies forward (or evicts with their files) segments under reclaim_ratio,
  // sparsest first, until the segments fit under target_used; compact goes
  // on with fuller ones, up to kCompactMaxLive, copying only. With the
  // backing filesystem full (disk_full) nothing is copied, there being no
  // room to copy into: sparse segments go with their files. The pass stops
  // at the first segment whose copies or snapshots could not be written.
  void reclaim(uint64_t target_used, int64_t now, bool compact, bool disk_full);
  enum class Reclaimed { kDeleted, kKept, kWritesFailed };
  Reclaimed reclaim_segment(uint64_t seg, bool copy, int64_t now);

  const Parts p_;
  std::atomic<int64_t> grace_ns_{0};
  std::mutex settled_mu_;
  UnlinkSettled unlink_settled_;  // guarded by settled_mu_

  std::mutex pass_mu_;  // one pass at a time
  std::thread thread_;
  int64_t last_housekeeping_ = 0;  // run() thread only
  // Emptied directories used too recently to go yet; guarded by pass_mu_.
  static constexpr size_t kMaxLaterDirs = 1 << 16;
  std::vector<uint64_t> later_dirs_;
  const int64_t started_ns_;  // files changed before it are a previous daemon's

  struct LogTally {
    std::atomic<uint64_t> files{0}, bytes{0};
    LogLimiter limiter;
  };
  LogTally tally_[4];  // by Reason
  std::atomic<uint64_t> ev_cap_{0}, ev_admin_{0}, ev_tmp_{0}, ev_reclaim_{0}, ev_bytes_{0};
  std::atomic<uint64_t> dirs_removed_{0}, segs_deleted_{0}, copied_{0};
};

}  // namespace kvfs
