#include "core/recovery.h"

#include <unordered_map>

#include "core/index.h"
#include "core/log.h"
#include "core/segment_store.h"

namespace kvfs {

Status rebuild_index(SegmentStore& segs, Index& index, RebuildStats* st,
                     const std::function<void(uint64_t, uint64_t)>& progress) {
  struct Latest {
    uint64_t seq = 0;
    bool tomb = false;
    InodeSnapshot snap;
  };
  std::unordered_map<uint64_t, Latest> latest;
  auto list = segs.list();
  uint64_t done = 0;
  for (const auto& seg : list) {
    uint64_t valid = 0;
    Status s = segs.scan(
        seg.id,
        [&](uint64_t, const RecordHeader&, std::vector<RecordEntry>& entries) {
          ++st->records;
          for (auto& e : entries) {
            st->max_seq = std::max(st->max_seq, e.snap.seq);
            st->max_ino = std::max(st->max_ino, e.snap.ino);
            Latest& l = latest[e.snap.ino];
            if (e.snap.seq < l.seq) continue;
            l.seq = e.snap.seq;
            l.tomb = e.kind == EntryKind::kTombstone;
            if (!l.tomb) l.snap = std::move(e.snap);
          }
        },
        &valid);
    if (!s.ok()) return s;
    if (valid < seg.bytes) {
      ++st->torn_tails;
      spdlog::warn("segment {}: {} bytes after the last complete record ignored", seg.path,
                   seg.bytes - valid);
    }
    ++st->segments;
    if (progress) progress(++done, list.size());
  }
  IndexBatch b;
  for (auto& [ino, l] : latest) {
    if (l.tomb) {
      ++st->tombstones;
      continue;
    }
    // A snapshot is only as good as its extents: drop it if a segment is gone.
    bool ok = true;
    for (auto& be : l.snap.extents) ok &= segs.has_segment(be.ext.seg);
    if (!ok) {
      spdlog::warn("inode {} ({}) points into a missing segment; dropped", ino, l.snap.name);
      continue;
    }
    b.puts.push_back(&l.snap);
    ++st->inodes;
    if (b.puts.size() >= 10000) {
      KVFS_RETURN_IF_ERROR(index.commit(b, false));
      b.puts.clear();
    }
  }
  b.next_seq = st->max_seq + 1;
  b.next_ino = st->max_ino + 1;
  KVFS_RETURN_IF_ERROR(index.commit(b, true));
  return index.put_meta("backing_id", segs.backing_id());
}

}  // namespace kvfs
