// SPDX-License-Identifier: Apache-2.0
// Evictor, reclaiming segments: a sparse or empty segment's files are copied
// forward (or evicted with it when there is no room), the snapshots and
// tombstones only it holds are written again elsewhere, and the file is
// deleted once nothing points into it and the index has applied all of it.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <shared_mutex>
#include <unordered_set>

#include "core/backing/backing_io.h"
#include "core/data/file_data.h"
#include "core/evict/evictor.h"
#include "core/flush/flusher.h"
#include "core/index/index.h"
#include "core/namespace/namespace.h"
#include "core/ram/ram_tier.h"
#include "core/segments/segment_store.h"
#include "core/space/space_budget.h"
#include "core/util/log.h"

namespace kvfs {
namespace {

constexpr uint64_t kMetaReserve = SpaceBudget::kMetaReserve;
// Compaction rewrites a segment's live part to free the rest: never more than
// it frees.
constexpr double kCompactMaxLive = 0.5;
// A kept segment is tried again at every pass: one warning per interval.
LogLimiter g_kept_log;

}  // namespace

Evictor::Reclaimed Evictor::reclaim_segment(uint64_t seg, bool copy, int64_t now) {
  struct Wait {
    InodeRef in;
    FlushMark mark;  // the version it waits for, and the attempts before
  };
  std::vector<Wait> waits;
  bool blocked = false;
  // 1. Files with data in the segment: copy forward, or evict with it.
  std::vector<InodeRef> holders;
  for (InodeRef& in : p_.ns->all()) {
    if (in->dir) continue;
    std::lock_guard g(in->mu);
    for (const BlockSlot& s : in->blocks)
      if (s.ext.seg == seg) {
        holders.push_back(in);
        break;
      }
  }
  std::vector<InodeRef> evict;
  for (InodeRef& in : holders) {
    if (!copy) {
      evict.push_back(in);
      continue;
    }
    uint64_t copied = 0;
    for (uint32_t idx = 0;; ++idx) {
      // Never waits for RAM: the dirty data it would wait for may be
      // waiting for the room this copy is to make. The segment stays.
      if (!p_.ram->try_reserve_dirty(kBlockSize)) {
        blocked = true;
        break;
      }
      uint64_t used = 0;
      bool done = false;
      {
        std::shared_lock rl(*p_.reclaim_mu);
        // A block not in RAM is read with the inode unlocked: a client's
        // RAM hit on this file must not wait for the backing dir.
        std::unique_lock<std::mutex> g;
        ConstBufRef old;
        Status rs = p_.data->lock_with_kept(
            *in, &g,
            [&](const Inode& i, uint32_t* at) {
              *at = idx;
              const bool mine = idx < i.blocks.size() && i.blocks[idx].ext.seg == seg &&
                                !i.blocks[idx].buf && i.opens.writers() == 0 && i.linked.load() &&
                                !i.evicted;
              return mine ? i.blocks[idx].ext : Extent{};
            },
            &old);
        if (!rs.ok()) {
          blocked = true;  // this block stays; the others may still move
        } else if (in->opens.writers() > 0 || !in->linked.load() || in->evicted) {
          blocked |= in->linked.load();
          done = true;
        } else if (idx >= in->blocks.size()) {
          done = true;
        } else if (BlockSlot& s = in->blocks[idx]; s.ext.seg == seg && !s.buf) {
          const ConstBufRef& src = old;
          if (src) {
            BufRef nb = BufferPool::allocate(s.len);
            std::memcpy(nb->data(), src->data(), align_up(s.len));
            used = nb->capacity();
            p_.data->set_dirty_locked(*in, s, std::move(nb));
            in->flush.copied_forward();
            copied += s.len;
          } else {
            blocked = true;
          }
        }
      }
      p_.ram->release_dirty(kBlockSize - used);
      if (done) break;
    }
    if (copied) {
      std::lock_guard g(in->mu);
      waits.push_back({in, in->flush.mark()});
      p_.flusher->enqueue_ungated_locked(in);
      copied_ += copied;
    }
  }
  if (!evict.empty()) {
    EvictResult r;
    remove(evict, false, Reason::kReclaim, &r);
    blocked |= r.skipped > 0;
  }
  // 2. Snapshots of live inodes held only by this segment: write them again.
  // Tombstones whose inode may still have an older record in another
  // segment are carried forward (below), or a rebuild would bring it back.
  const uint64_t oldest_elsewhere = p_.segs->min_seq_except(seg);
  std::vector<RecordEntry> carry, unlinks;
  std::unordered_set<uint64_t> carried;  // seqs in carry and unlinks
  uint64_t scanned = 0;
  Status ss = p_.segs->scan(
      seg,
      [&](uint64_t, const RecordHeader&, std::vector<RecordEntry>& es) {
        for (auto& e : es) {
          // An unlink of a peer's file: kept while its owner has not acted
          // on it (decided below, outside the scan: the peers' log has its
          // own lock).
          if (e.kind == EntryKind::kPeerUnlink) {
            if (carried.insert(e.snap.seq).second) unlinks.push_back(std::move(e));
            continue;
          }
          if (e.kind == EntryKind::kTombstone) {
            // The same tombstone may sit here more than once (logged again
            // after a crash, carried in before): one copy is enough.
            if (oldest_elsewhere < e.snap.seq && carried.insert(e.snap.seq).second)
              carry.push_back(std::move(e));
            continue;
          }
          InodeRef in = p_.ns->get(e.snap.ino);
          if (!in) continue;
          // committed is written under the commit lock (shared) plus mu
          // (the flusher): read it under both (inode.h).
          std::shared_lock cl(p_.ns->commit_mu());
          std::lock_guard g(in->mu);
          if (!in->linked.load() || !in->committed || in->committed->seq != e.snap.seq) continue;
          in->flush.changed();
          waits.push_back({in, in->flush.mark()});
          p_.flusher->enqueue_ungated_locked(in);
        }
      },
      &scanned);
  // Records that could not be read are not known to be dead.
  SegmentInfo info;
  for (auto& i : p_.segs->list())
    if (i.id == seg) info = i;
  if (!ss.ok() || scanned < info.valid) {
    if (uint64_t held = 0; g_kept_log.allow(&held))
      spdlog::warn("segment {} kept: its records could not all be read ({}; {} similar not shown)",
                   seg, ss.ok() ? "a damaged record at " + std::to_string(scanned) : ss.ToString(),
                   held);
    blocked = true;
  }
  if (!unlinks.empty()) {
    UnlinkSettled settled;
    {
      std::lock_guard l(settled_mu_);
      settled = unlink_settled_;
    }
    for (auto& e : unlinks)
      if (!settled || !settled(e)) carry.push_back(std::move(e));
  }
  // 3. Wait until the flushers have written all of it elsewhere. A write
  // that failed ends the wait (it is retried later): the disk is full or
  // failing, and the pass had better evict than wait on it. So does client
  // data in the file (what the flushers write next of it): it waits for
  // room under the cap, which this pass is making; the segment stays.
  const auto deadline = p_.clock->mono() + std::chrono::seconds(10);
  bool failed = false;
  for (auto& w : waits) {
    std::unique_lock l(w.in->mu);
    auto write_failed = [&] { return w.in->flush.failed_since(w.mark); };
    auto behind_gate = [&] { return w.in->dirty_charge > 0 && !w.in->flush.reclaiming(); };
    while (!w.in->flush.durable(w.mark) && w.in->linked.load() &&
           w.in->opens.active_writers() == 0 && !behind_gate() && !(failed |= write_failed()) &&
           !p_.budget->stopping() && p_.clock->mono() < deadline)
      p_.flusher->wait_durable_for(l, std::chrono::milliseconds(100));
    if (!w.in->flush.durable(w.mark) && w.in->linked.load()) blocked = true;
    if (failed) break;
  }
  if (failed) return Reclaimed::kWritesFailed;
  if (!blocked && !carry.empty()) {
    const size_t n = carry.size();
    if (Status c = p_.flusher->log_meta(std::move(carry), std::chrono::seconds(10)); !c.ok()) {
      if (uint64_t held = 0; g_kept_log.allow(&held))
        spdlog::warn(
            "segment {} kept: {} tombstones or unlinks could not be carried forward: {} "
            "({} similar not shown)",
            seg, n, c.ToString(), held);
      blocked = true;
    }
  }
  // 4. Delete it if nothing points into it any more and the index has
  // applied every record in it (a gap left by a failed commit waits for the
  // next mount's catch-up).
  for (auto& i : p_.segs->list())
    if (i.id == seg && (i.live != 0 || i.open || i.applied < i.valid)) blocked = true;
  if (blocked) return Reclaimed::kKept;
  std::string path;
  {
    // Readers that chose an extent in it hold this shared until their read
    // completes; once forgotten, none can choose one. The unlink itself (a
    // round trip on NFS, unbounded when it stalls) runs after, so that RAM
    // hits, which take reclaim_mu_ shared too, never wait for it.
    if (p_.forgetting) p_.forgetting->fetch_add(1);
    std::unique_lock rl(*p_.reclaim_mu);
    if (p_.forgetting) p_.forgetting->fetch_sub(1);
    path = p_.segs->forget_segment(seg);
  }
  // Shared: peers may be reading it, or about to (until their next pass
  // shows the copies); renamed, it leaves their listings, and it is deleted
  // after the grace. Renamed or not, it is no longer this node's segment.
  if (p_.segs->shared() && p_.cfg->segment_grace_s > 0) {
    auto r = p_.segs->retire_segment(path);
    if (r.ok()) {
      p_.segs->retire_later(std::move(*r), info.bytes,
                            now + int64_t(p_.cfg->segment_grace_s * 1e9));
      path.clear();
    } else {
      spdlog::warn("segment {} deleted without its grace: {}", seg, r.status().ToString());
    }
  }
  if (Status s = p_.segs->unlink_segment(path); !s.ok()) {
    spdlog::error("cannot delete segment {}: {}", seg, s.ToString());
    return Reclaimed::kKept;
  }
  if (!path.empty()) segs_deleted_.fetch_add(1);
  // The index forgets the segment too; if this is lost in a crash, the next
  // mount logs it as gone (with nothing in it).
  IndexBatch drop;
  drop.segment_drops.push_back(seg);
  if (Status s = p_.index->commit(drop, false); !s.ok())
    spdlog::warn("segment {} deleted, its index entry stays: {}", seg, s.ToString());
  return Reclaimed::kDeleted;
}

void Evictor::reclaim(uint64_t target_used, int64_t now, bool compact, bool disk_full) {
  auto list = p_.segs->list();
  std::vector<SegmentInfo> v;
  for (auto& s : list)
    if (!s.open && s.bytes > 0) v.push_back(s);
  auto ratio = [](const SegmentInfo& s) { return double(s.live) / double(s.bytes); };
  std::sort(v.begin(), v.end(), [&](auto& a, auto& b) { return ratio(a) < ratio(b); });
  for (auto& s : v) {
    // Reclaiming reads and deletes segment files: not while they hang.
    if (p_.io->stalled() || p_.budget->stopping()) break;
    if (p_.segs->segment_bytes() <= target_used) break;
    const uint64_t used = p_.segs->used_bytes();  // the retired ones take room too
    const bool sparse = s.live == 0 || ratio(s) <= p_.cfg->reclaim_ratio;
    if (!sparse && (!compact || disk_full || ratio(s) > kCompactMaxLive)) break;
    // Copying needs room under the flush gate (capacity plus one segment,
    // less the metadata reserve) and in RAM for the copies' dirty blocks;
    // without it a sparse segment goes whole, with the files in it that may
    // be evicted. A fuller one being compacted
    // is always copied, never evicted: sparsity is not recency, and its
    // files may be the newest (a tmp file between its close and its
    // rename). The copy may pass the gate by up to half a segment until
    // the old segment is deleted.
    const uint64_t limit = p_.budget->capacity() + p_.cfg->segment_size;
    const uint64_t want = used + p_.budget->inflight() + s.live + 2 * kMetaReserve;
    // Retired segments in their grace give way to the copy: an evicted
    // file is a miss for everyone, a grace cut short only maybe for a peer.
    if (want > limit) segs_deleted_ += p_.segs->delete_retired(now, want - limit);
    // The copies take RAM too, which they never wait for (reclaim_segment).
    const bool room =
        !disk_full &&
        p_.segs->used_bytes() + p_.budget->inflight() + s.live + 2 * kMetaReserve <= limit &&
        p_.ram->dirty_room() >= s.live + kBlockSize;
    const bool copy = room || !sparse;
    // The copies bypass the flush gate: hold their room until they are written.
    if (copy) p_.budget->hold(s.live);
    const Reclaimed r = reclaim_segment(s.id, copy, now);
    if (copy) p_.budget->release(s.live);
    if (r == Reclaimed::kWritesFailed) break;  // the next would fail too
  }
}

}  // namespace kvfs
