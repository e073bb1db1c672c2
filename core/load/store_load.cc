// SPDX-License-Identifier: Apache-2.0
// The mount's load (store_load.h).
#include "core/load/store_load.h"

#include <unistd.h>

#include <chrono>
#include <system_error>
#include <thread>

#include "core/config/config.h"
#include "core/flush/meta_journal.h"
#include "core/index/index.h"
#include "core/namespace/namespace.h"
#include "core/recovery/recovery.h"
#include "core/segments/segment_store.h"
#include "core/util/log.h"
#include "core/util/seq_counter.h"

namespace kvfs {
namespace {
// Below this many inodes a startup scan takes a few tens of milliseconds:
// not worth threads (StoreConfig::load_threads = 0).
constexpr uint64_t kParallelLoadMin = 100000;

// Reads every inode of the index into the namespace (not yet linked); the
// inodes whose data points into a missing segment go to drop.
Status scan_index(const LoadParts& p, Index& index, IndexBatch* drop, uint64_t* max_seq) {
  // Decoding snapshots and building inodes is most of a large startup and
  // needs no lock: ranges of inode numbers (allocated in order, so the
  // ranges are about even) go to one thread each; the table inserts stay on
  // this one.
  struct Part {
    std::vector<InodeRef> inodes;
    std::vector<uint64_t> missing;
    uint64_t max_seq = 0;
    Status st;
  };
  const uint64_t estimate = index.estimate_inodes();
  uint64_t top = 0;
  if (auto ni = index.get_meta("next_ino"); ni.ok()) top = std::strtoull(ni->c_str(), nullptr, 10);
  unsigned n = p.cfg->load_threads;
  if (n == 0)
    n = estimate < kParallelLoadMin
            ? 1
            : std::min(std::max(1u, std::thread::hardware_concurrency()), 8u);
  if (top < n) n = 1;  // no next_ino yet (a new or rebuilt index): one range
  std::vector<Part> parts(n);
  auto run = [&](unsigned i) {
    Part& part = parts[i];
    part.inodes.reserve(estimate / n + 1);
    const uint64_t lo = top / n * i;
    const uint64_t hi = i + 1 == n ? UINT64_MAX : top / n * (i + 1);
    part.st = index.load_all(
        [&](InodeSnapshot&& s) {
          part.max_seq = std::max(part.max_seq, s.seq);
          for (auto& be : s.extents) {
            if (p.segs->has_segment(be.ext.seg)) continue;
            spdlog::warn("inode {} ({}) points into a missing segment; dropped", s.ino, s.name);
            part.missing.push_back(s.ino);
            return;
          }
          part.inodes.push_back(Namespace::make_loaded(std::move(s)));
        },
        lo, hi);
  };
  std::vector<std::thread> threads;
  for (unsigned i = 1; i < n; ++i) {
    try {
      threads.emplace_back(run, i);
    } catch (const std::system_error&) {
      run(i);  // no thread to be had: this one does the part
    }
  }
  run(0);
  for (auto& t : threads) t.join();
  size_t total = 0;
  for (Part& part : parts) {
    KVFS_RETURN_IF_ERROR(part.st);
    total += part.inodes.size();
  }
  p.ns->load_reserve(total);
  for (Part& part : parts) {
    for (InodeRef& in : part.inodes) p.ns->load_add(std::move(in));
    for (uint64_t ino : part.missing) drop->deletes.push_back({ino, 0});
    *max_seq = std::max(*max_seq, part.max_seq);
  }
  return Status::OK();
}
}  // namespace

Result<LoadedStore> load_store(const LoadParts& p) {
  LoadedStore out;
  std::unique_ptr<Index>& index = out.index;
  SegmentStore* const segs = p.segs;
  Namespace* const ns = p.ns;
  bool caught_up = false;  // the catch-up applied entries
  const std::string& dir = p.cfg->index_dir;
  auto open_index = [&]() -> Status {
    auto idx = Index::Open(dir);
    if (!idx.ok()) return idx.status();
    index = std::move(*idx);
    return Status::OK();
  };
  auto rebuild = [&](const std::string& why) -> Status {
    spdlog::warn("rebuilding the index in {} from the segments: {}", dir, why);
    index.reset();
    KVFS_RETURN_IF_ERROR(Index::Destroy(dir));
    KVFS_RETURN_IF_ERROR(open_index());
    CatchUpStats st;
    KVFS_RETURN_IF_ERROR(rebuild_index(*segs, *index, &st));
    spdlog::info(
        "index rebuilt in {:.2f} s: {} segments, {} records, {} inodes, {} tombstones, {} torn "
        "tails",
        st.seconds, segs->list().size(), st.records, st.inodes, st.tombstones, st.torn_tails);
    out.rebuilt = true;
    return Status::OK();
  };

  bool fresh = false;
  if (Status s = open_index(); s.code() == Status::Code::kBusy) {
    return s;  // another kvfs's: never rebuilt from here
  } else if (!s.ok()) {
    KVFS_RETURN_IF_ERROR(rebuild("cannot open it (" + s.ToString() + ")"));
  } else {
    auto id = index->get_meta("backing_id");
    if (!id.ok()) {
      if (id.status().code() != Status::Code::kNotFound) {
        KVFS_RETURN_IF_ERROR(rebuild(id.status().ToString()));
      } else if (segs->list().empty()) {
        KVFS_RETURN_IF_ERROR(index->put_meta("backing_id", segs->backing_id()));
        fresh = true;
      } else {
        KVFS_RETURN_IF_ERROR(rebuild("the index is new but the backing dir has segments"));
      }
    } else if (*id != segs->backing_id()) {
      KVFS_RETURN_IF_ERROR(rebuild("it belongs to another backing directory"));
    }
  }
  // A node's index follows that node's segments: another node's index here
  // would lose that node's files to this one's catch-up.
  if (segs->shared()) KVFS_RETURN_IF_ERROR(claim_index_for_node(*index, segs->node(), dir));
  if (!out.rebuilt) {
    // The index follows the segment log: apply what it has not seen yet
    // (recovery.h) before anything is served or removed on its view.
    CatchUpStats& cu = out.catch_up;
    const CatchUpMode mode = fresh                         ? CatchUpMode::kFresh
                             : keeps_log_positions(*index) ? CatchUpMode::kFollow
                                                           : CatchUpMode::kAdopt;
    if (mode == CatchUpMode::kAdopt)
      spdlog::warn(
          "the index in {} was written by a kvfs that kept no segment positions: taking "
          "the segments as applied (a one-time scan)",
          dir);
    if (Status s = catch_up(*segs, *index, mode, &cu); !s.ok()) {
      KVFS_RETURN_IF_ERROR(rebuild("catching up with the segments failed: " + s.ToString()));
    } else if (cu.records > 0 || cu.gone_segments > 0) {
      spdlog::warn(
          "index caught up with the segments in {:.2f} s: {} segments ({} new to it), {} records, "
          "{} bytes, {} entries applied ({} snapshots, {} deletions), {} segments gone",
          cu.seconds, cu.segments, cu.new_segments, cu.records, cu.bytes, cu.applied, cu.inodes,
          cu.tombstones, cu.gone_segments);
      caught_up = cu.applied > 0;
    } else {
      spdlog::info("index caught up with the segments in {:.2f} s: nothing new in {} segments",
                   cu.seconds, segs->list().size());
    }
  }
  // Every record of every segment is applied now and later ones are newer:
  // no deletion's seq needs keeping (index.h, T keys).
  if (auto dropped = index->drop_tombstones(); !dropped.ok()) return dropped.status();
  // Journal entries the index holds that never reached a segment (a crash
  // before the flushers wrote them): queued for the segments again.
  std::vector<RecordEntry> unlogged;
  KVFS_RETURN_IF_ERROR(index->pending([&](RecordEntry&& e) { unlogged.push_back(std::move(e)); }));
  if (!unlogged.empty()) {
    spdlog::info("{} journal entries not yet in a segment are written there again",
                 unlogged.size());
    p.journal->add_unlogged(std::move(unlogged));
  }

  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  const Clock::time_point t0 = Clock::now();
  uint64_t max_seq = 0;
  // An inode whose data points into a missing segment cannot be served.
  IndexBatch drop;
  if (Status ls = scan_index(p, *index, &drop, &max_seq); !ls.ok()) {
    ns->load_clear();
    drop.deletes.clear();
    KVFS_RETURN_IF_ERROR(rebuild("unreadable: " + ls.ToString()));
    KVFS_RETURN_IF_ERROR(scan_index(p, *index, &drop, &max_seq));
  }
  const double scan_s = since(t0);
  const Clock::time_point t1 = Clock::now();
  std::vector<uint64_t> orphans;
  // A rebuilt or caught-up index may hold shapes the journal never writes
  // (two names for one entry, cycles): the full checks.
  ns->load_finish(out.rebuilt || caught_up, &orphans);
  const double tree_s = since(t1);
  const Clock::time_point t2 = Clock::now();
  ns->for_each([segs](Inode& in) {
    for (auto& b : in.blocks)
      if (b.ext.valid()) segs->add_live(b.ext);
  });
  for (uint64_t o : orphans) drop.deletes.push_back({o, 0});
  if (!orphans.empty())
    spdlog::warn("{} inodes without a parent directory dropped", orphans.size());
  if (!drop.empty()) KVFS_RETURN_IF_ERROR(index->commit(drop, true));
  if (auto ni = index->get_meta("next_ino"); ni.ok())
    ns->reserve_inos_below(std::strtoull(ni->c_str(), nullptr, 10));
  if (auto next = index->get_meta("next_seq"); next.ok())
    max_seq = std::max<uint64_t>(max_seq, std::strtoull(next->c_str(), nullptr, 10));
  p.seqs->start_at(max_seq + 1);
  spdlog::info("index loaded: {} inodes in {:.2f} s (scan {:.2f} s, tree {:.2f} s, usage {:.2f} s)",
               ns->count(), since(t0), scan_s, tree_s, since(t2));
  p.journal->use_index(index.get());  // the one the mount settled on
  KVFS_RETURN_IF_ERROR(ns->ensure_root(::geteuid(), ::getegid()));
  return out;
}

}  // namespace kvfs
