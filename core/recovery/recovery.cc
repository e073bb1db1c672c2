// SPDX-License-Identifier: Apache-2.0
#include "core/recovery/recovery.h"

#include <chrono>
#include <map>

#include "core/index/index.h"
#include "core/segments/segment_store.h"
#include "core/util/log.h"

namespace kvfs {

void LogFold::add(std::vector<RecordEntry>& entries) {
  for (auto& e : entries) {
    max_seq_ = std::max(max_seq_, e.snap.seq);
    // Names another node's inode, not one here: the peers act on it.
    if (e.kind == EntryKind::kPeerUnlink) {
      peer_unlinks_.push_back(std::move(e));
      continue;
    }
    max_ino_ = std::max(max_ino_, e.snap.ino);
    Latest& l = latest_[e.snap.ino];
    // Equal seqs are the same entry written twice (a journal entry logged
    // again after a crash, a tombstone carried forward): either copy will do.
    if (e.snap.seq < l.seq) continue;
    l.seq = e.snap.seq;
    l.tomb = e.kind == EntryKind::kTombstone;
    if (l.tomb)
      l.snap = InodeSnapshot{};
    else
      l.snap = std::move(e.snap);
  }
}

std::vector<InodeSnapshot> LogFold::snapshots() const {
  std::vector<InodeSnapshot> v;
  for (const auto& [ino, l] : latest_)
    if (!l.tomb) v.push_back(l.snap);
  return v;
}

Result<SegmentScan> scan_segment(SegmentStore& segs, uint64_t id, uint64_t from, LogFold* fold) {
  SegmentScan sc;
  SegmentLogState seqs;
  Status s = segs.scan(
      id,
      [&](uint64_t, const RecordHeader&, std::vector<RecordEntry>& entries) {
        ++sc.records;
        for (const auto& e : entries) seqs.add_seq(e.snap.seq);
        if (fold) fold->add(entries);
      },
      &sc.end, from, SegmentStore::Check::kBlocks, &sc.damaged);
  if (!s.ok()) return s;
  sc.min_seq = seqs.min_seq;
  sc.max_seq = seqs.max_seq;
  return sc;
}

namespace {

constexpr const char* kLogFormatKey = "log_format";

uint64_t meta_u64(Index& index, const char* key) {
  auto v = index.get_meta(key);
  return v.ok() ? std::strtoull(v->c_str(), nullptr, 10) : 0;
}

// Writes the folded entries that are newer than what the index holds.
Status apply(SegmentStore& segs, Index& index, bool fresh, LogFold& fold, CatchUpStats* st) {
  IndexBatch b;
  auto flush = [&](bool all) -> Status {
    if (b.empty() || (!all && b.puts.size() + b.deletes.size() < 10000)) return Status::OK();
    Status s = index.commit(b, false);
    b = IndexBatch{};
    return s;
  };
  for (auto& [ino, l] : fold.latest()) {
    uint64_t snap_seq = 0, tomb_seq = 0;
    if (!fresh) KVFS_RETURN_IF_ERROR(index.seqs(ino, &snap_seq, &tomb_seq));
    if (l.seq <= std::max(snap_seq, tomb_seq)) continue;  // the index knows better
    ++st->applied;
    if (l.tomb) {
      ++st->tombstones;
      // A rebuild keeps no T key: its next mount drops them all anyway.
      if (!fresh) b.deletes.push_back({ino, l.seq});
    } else {
      // A snapshot is only as good as its extents: drop it if a segment is gone.
      bool ok = true;
      for (auto& be : l.snap.extents) ok &= segs.has_segment(be.ext.seg);
      if (!ok) {
        spdlog::warn("inode {} ({}) points into a missing segment; dropped", ino, l.snap.name);
        ++st->dropped;
        if (snap_seq) b.deletes.push_back({ino, 0});
        continue;
      }
      ++st->inodes;
      b.puts.push_back(&l.snap);
      if (tomb_seq) b.untombs.push_back(ino);
    }
    KVFS_RETURN_IF_ERROR(flush(false));
  }
  // Kept again, so this node goes on hiding those files (a U key already
  // there is the same key; one settled since goes again at the mount).
  for (const RecordEntry& e : fold.peer_unlinks()) b.peer_unlinks.push_back(&e);
  return flush(true);
}

}  // namespace

bool keeps_log_positions(Index& index) {
  return index.get_meta(kLogFormatKey).ok();
}

Status catch_up(SegmentStore& segs, Index& index, CatchUpMode mode, CatchUpStats* st,
                const std::function<void(uint64_t, uint64_t)>& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  const bool fresh = mode == CatchUpMode::kFresh;
  const bool adopt = mode == CatchUpMode::kAdopt;
  std::map<uint64_t, SegmentLogState> known;
  if (!fresh) {
    auto k = index.segment_states();
    if (!k.ok()) return k.status();
    known = std::move(*k);
    if (!known.empty()) segs.reserve_ids_through(known.rbegin()->first);
  }
  LogFold fold;
  IndexBatch fin;
  std::vector<std::pair<uint64_t, SegmentLogState>> states;
  auto list = segs.list();
  uint64_t done = 0;
  for (const SegmentInfo& seg : list) {
    auto it = known.find(seg.id);
    SegmentLogState state = it == known.end() ? SegmentLogState{} : it->second;
    const bool seen = it != known.end();
    if (seen) known.erase(it);
    if (seg.bytes < state.end) {
      // Truncated under us, or not the segment the index saw: apply it again
      // from its start (applying is idempotent) rather than skip what it holds.
      spdlog::warn(
          "segment {} is {} bytes, shorter than the {} bytes the index has applied: applying "
          "it again from its start",
          seg.path, seg.bytes, state.end);
      state = SegmentLogState{};
    }
    if (seg.bytes > state.end) {
      // The index has not applied this far (or the tail is a crash's
      // preallocated zeros, which one header read tells).
      auto scan = scan_segment(segs, seg.id, state.end, adopt ? nullptr : &fold);
      if (!scan.ok()) return scan.status();
      state.add_seq(scan->min_seq);
      state.add_seq(scan->max_seq);
      const uint64_t records = scan->records, valid = scan->end;
      if (scan->damaged > 0)
        spdlog::warn(
            "segment {}: {} records not applied: a block in them fails its checksum (a write "
            "a crash left half done, or damage)",
            seg.path, scan->damaged);
      if (records > 0 && !adopt) {
        ++st->segments;
        if (!seen) ++st->new_segments;
        st->records += records;
        st->bytes += valid - state.end;
        state.records += records;
      }
      if (valid < seg.bytes) {
        ++st->torn_tails;
        if (!seen || valid > state.end || fresh)
          spdlog::warn("segment {}: {} bytes after the last complete record ignored", seg.path,
                       seg.bytes - valid);
      }
      state.end = valid;
    }
    segs.set_log_state(seg.id, state.end, state);
    states.emplace_back(seg.id, state);
    if (progress) progress(++done, list.size());
  }
  for (auto& [id, state] : known) {
    ++st->gone_segments;
    spdlog::warn(
        "segment {} ({} records) is no longer in the backing dir; the files in it are "
        "dropped",
        id, state.records);
    fin.segment_drops.push_back(id);
  }
  KVFS_RETURN_IF_ERROR(apply(segs, index, fresh, fold, st));
  // The positions last, in the final batch: a crash before it applies the
  // same records again at the next mount (applying is idempotent).
  fin.segments = std::move(states);
  st->max_seq = std::max(st->max_seq, fold.max_seq());
  st->max_ino = std::max(st->max_ino, fold.max_ino());
  const uint64_t next_seq = fresh ? 0 : meta_u64(index, "next_seq");
  const uint64_t next_ino = fresh ? 0 : meta_u64(index, "next_ino");
  if (fold.max_seq() + 1 > next_seq) fin.next_seq = fold.max_seq() + 1;
  if (fold.max_ino() + 1 > next_ino) fin.next_ino = fold.max_ino() + 1;
  KVFS_RETURN_IF_ERROR(index.commit(fin, true));
  KVFS_RETURN_IF_ERROR(index.put_meta(kLogFormatKey, "1"));
  st->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return Status::OK();
}

Status rebuild_index(SegmentStore& segs, Index& index, CatchUpStats* st,
                     const std::function<void(uint64_t, uint64_t)>& progress) {
  KVFS_RETURN_IF_ERROR(catch_up(segs, index, CatchUpMode::kFresh, st, progress));
  if (segs.shared()) KVFS_RETURN_IF_ERROR(index.put_meta("node", segs.node()));
  return index.put_meta("backing_id", segs.backing_id());
}

Status claim_index_for_node(Index& index, const std::string& node, const std::string& dir) {
  auto owner = index.get_meta("node");
  if (owner.ok() && *owner != node)
    return Status::Invalid("the index in " + dir + " belongs to node '" + *owner +
                           "' of this backing directory, not to '" + node +
                           "': give each node its own index_dir");
  if (owner.ok()) return Status::OK();
  if (owner.status().code() != Status::Code::kNotFound) return owner.status();
  return index.put_meta("node", node);
}

}  // namespace kvfs
