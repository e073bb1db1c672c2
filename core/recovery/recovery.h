// SPDX-License-Identifier: Apache-2.0
// Recovery: the index as a follower of the segment log.
//
// Every committed snapshot and tombstone is in some segment record, each with
// a global seq, so the index is "the highest-seq entry per inode, minus
// tombstones", and it remembers per segment how far it has applied the log
// (index.h, S keys). catch_up() applies whatever the segments hold past that:
// records of a crash between a segment sync and its index commit, a segment
// the index never saw, everything after the copy an index was restored from.
// A rebuild is the same catch-up from an empty index. Torn or corrupt record
// tails (a crash mid-write) end a segment's scan; they were never committed.
//
// Not thread-safe: runs before the store serves anything (or offline).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/records/record.h"
#include "core/util/status.h"

namespace kvfs {

class Index;
class SegmentStore;

// The newest entry per inode of some stretch of the log: what a rebuild, a
// catch-up and fsck fold the segments into. Not thread-safe (one scan fills it).
class LogFold {
 public:
  struct Latest {
    uint64_t seq = 0;
    bool tomb = false;
    InodeSnapshot snap;  // empty for a tombstone
  };
  // Folds one record's entries in (they are consumed).
  void add(std::vector<RecordEntry>& entries);
  std::unordered_map<uint64_t, Latest>& latest() { return latest_; }
  // The newest snapshot of every inode whose newest entry is not a
  // tombstone: the namespace the folded log describes (copies; in no order).
  std::vector<InodeSnapshot> snapshots() const;
  uint64_t max_seq() const { return max_seq_; }
  uint64_t max_ino() const { return max_ino_; }
  // This node's unlinks of peers' files (record.h kPeerUnlink), which the
  // index keeps as U keys: a rebuild writes them again.
  const std::vector<RecordEntry>& peer_unlinks() const { return peer_unlinks_; }

 private:
  std::unordered_map<uint64_t, Latest> latest_;
  std::vector<RecordEntry> peer_unlinks_;
  uint64_t max_seq_ = 0, max_ino_ = 0;
};

// A segment's complete records from some offset on.
struct SegmentScan {
  uint64_t records = 0;               // complete records read
  uint64_t damaged = 0;               // skipped: a block fails its checksum
  uint64_t end = 0;                   // where the last one ends (the start, if none)
  uint64_t min_seq = 0, max_seq = 0;  // of their entries (0: none)
};

// Reads segment id's complete records from offset `from` to the first torn
// or corrupt one (blocks included: SegmentStore::Check::kBlocks), folding
// their entries into fold when one is given. The one
// reading of the log that a catch-up and fsck share, so that they agree on
// where a segment's valid records end and which entries are newest.
Result<SegmentScan> scan_segment(SegmentStore& segs, uint64_t id, uint64_t from, LogFold* fold);

struct CatchUpStats {
  uint64_t segments = 0;       // segments with records the index had not applied
  uint64_t new_segments = 0;   // of those, segments the index had never seen
  uint64_t gone_segments = 0;  // segments the index knew that are gone
  uint64_t records = 0;        // records read
  uint64_t bytes = 0;          // bytes of records read
  uint64_t applied = 0;        // entries newer than the index's, applied
  uint64_t inodes = 0;         // snapshots written
  uint64_t tombstones = 0;     // inodes deleted (or kept deleted)
  uint64_t dropped = 0;        // snapshots pointing into a missing segment
  uint64_t torn_tails = 0;     // segments whose last record was incomplete
  uint64_t max_seq = 0, max_ino = 0;
  double seconds = 0;
};

// How catch_up treats the index.
enum class CatchUpMode {
  kFollow,  // apply what the segments hold past each applied position
  kFresh,   // the index is empty (a rebuild): apply all, nothing to compare
  // An index written by a kvfs that kept no positions: it is trusted, as
  // that kvfs did, and the segments as they are become its positions
  // (applying them could bring back files whose deletion records that kvfs
  // lost to reclamation). Scans every segment once.
  kAdopt,
};

// Applies every record the index has not applied yet, from each segment's
// applied position to its last complete record, and records the new
// positions (the segment store learns them too, set_log_state), and the
// meta key "log_format" that says the index keeps them. progress(done,
// total) after each segment scanned.
Status catch_up(SegmentStore& segs, Index& index, CatchUpMode mode, CatchUpStats* st,
                const std::function<void(uint64_t, uint64_t)>& progress = {});

// The index keeps applied positions (it was written by this kvfs)?
bool keeps_log_positions(Index& index);

// Fills an empty index from the segments (a catch-up from nothing) and marks
// it as belonging to the backing dir (and to the node, when shared).
Status rebuild_index(SegmentStore& segs, Index& index, CatchUpStats* st,
                     const std::function<void(uint64_t, uint64_t)>& progress = {});

// A node's index follows that node's segments only ("M:node"): Invalid if
// it is another node's (its catch-up here would lose that node's files);
// an index without an owner becomes node's.
Status claim_index_for_node(Index& index, const std::string& node, const std::string& dir);

}  // namespace kvfs
