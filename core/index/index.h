// SPDX-License-Identifier: Apache-2.0
// Index: the RocksDB database that maps every inode to its latest committed
// snapshot (record.h), plus a few meta keys. It is a cache of what the
// segments hold: missing, from another backing dir, or unreadable, it is
// rebuilt from them (recovery.cc).
//
// The index follows the segment log: it knows, per segment, up to which
// offset it has applied the records (S keys), so that whatever a segment
// holds beyond that (a crash between a segment sync and its commit, an index
// restored from an older copy, a segment it never saw) is applied at the
// next mount (recovery.h: catch_up). Applying is idempotent: the newest seq
// per inode wins, and the T keys keep the seq of a deletion so that an older
// record of the same inode cannot bring it back.
//
// Keys: "I" + big-endian ino -> encoded InodeSnapshot
//       "T" + big-endian ino -> seq of the inode's tombstone (see below)
//       "S" + big-endian segment id -> SegmentLogState (what was applied)
//       "P" + big-endian seq -> one encoded RecordEntry: a journal entry
//           committed here first that is not yet in a segment
//       "U" + big-endian seq -> one encoded kPeerUnlink RecordEntry: this
//           node's unlink of a file another node owns (record.h), kept so
//           that the file stays hidden here across a restart whatever the
//           segment log holds, until the owner has removed it
//       "M:backing_id", "M:next_ino", "M:next_seq" -> decimal strings
//       "M:node" -> the node whose segments it follows
//
// T keys: a deletion's seq, kept until no record of that inode older than
// it can still be applied, which is the case once a catch-up has applied
// every segment to its end: BlockStore drops them all after the mount's
// catch-up (with one writer per backing dir, every later record is newer).
// P keys: journal entries (renames, unlinks, evictions, mkdir) are committed
// here at once and appended to a segment by the flushers shortly after; the
// commit that follows the append removes the P key. Those left at a mount
// (a crash in between) are queued for the segments again, so that a rebuild
// from the segments still sees them.
//
// Thread-safe: RocksDB is; a shared_mutex lets a reopen (after a write error
// RocksDB will not clear itself) wait for calls in flight, and commits are
// serialised (a leaf mutex, taken before it; see index.cc). No other header
// sees RocksDB.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/records/record.h"
#include "core/util/status.h"

namespace kvfs {

// How much of one segment's log the index has applied.
struct SegmentLogState {
  uint64_t end = 0;      // every record before this offset is applied
  uint64_t records = 0;  // complete records before end
  uint64_t min_seq = 0;  // lowest and highest seq of their entries (0: none)
  uint64_t max_seq = 0;
  void add_seq(uint64_t seq) {
    if (seq == 0) return;
    min_seq = min_seq == 0 ? seq : std::min(min_seq, seq);
    max_seq = std::max(max_seq, seq);
  }
};

struct IndexBatch {
  std::vector<const InodeSnapshot*> puts;
  struct Delete {
    uint64_t ino = 0;
    uint64_t tomb_seq = 0;  // non-zero: kept as the inode's T key
  };
  std::vector<Delete> deletes;
  std::vector<uint64_t> untombs;  // T keys removed (a newer snapshot applied)
  std::vector<std::pair<uint64_t, SegmentLogState>> segments;  // S keys written
  std::vector<uint64_t> segment_drops;                         // S keys removed
  std::vector<const RecordEntry*> pending;                     // P keys written
  std::vector<uint64_t> logged;                  // P keys removed (seqs now in a segment)
  std::vector<const RecordEntry*> peer_unlinks;  // U keys written
  std::vector<uint64_t> peer_unlinks_done;       // U keys removed (by seq)
  uint64_t next_ino = 0;                         // written when non-zero
  uint64_t next_seq = 0;
  bool empty() const {
    return puts.empty() && deletes.empty() && untombs.empty() && segments.empty() &&
           segment_drops.empty() && pending.empty() && logged.empty() && peer_unlinks.empty() &&
           peer_unlinks_done.empty();
  }
};

// What the flushers, the evictor and the journal ask of the index: one
// atomic commit. A seam: their policy tests give them an in-memory index
// that can be made to fail (tests/mem_index.h) instead of RocksDB.
class IndexWriter {
 public:
  virtual ~IndexWriter() = default;
  // One atomic batch; sync=true also makes it durable (fsync callers).
  [[nodiscard]] virtual Status commit(const IndexBatch& b, bool sync) = 0;
};

class Index final : public IndexWriter {
 public:
  // Opens (creating if missing) the database in dir, and flock()s
  // dir/kvfs.lock while open: Busy if another process has it open.
  static Result<std::unique_ptr<Index>> Open(const std::string& dir);
  // Removes the database at dir (before a rebuild).
  static Status Destroy(const std::string& dir);
  ~Index() override;
  // Closes the database; every later call fails with "index unavailable".
  void close();

  Result<std::string> get_meta(const std::string& key);
  Status put_meta(const std::string& key, const std::string& value);

  // RocksDB's estimate of the number of inodes (to size tables); may be off.
  uint64_t estimate_inodes();
  // Calls fn for every stored snapshot of an inode numbered in [lo, hi); a
  // value that does not decode is a Corruption (the caller rebuilds).
  // Thread-safe: several ranges may be scanned at once.
  Status load_all(const std::function<void(InodeSnapshot&&)>& fn, uint64_t lo = 0,
                  uint64_t hi = UINT64_MAX);

  // The seqs the index holds for an inode: of its snapshot and of its
  // tombstone (T key); 0 where there is none.
  Status seqs(uint64_t ino, uint64_t* snap_seq, uint64_t* tomb_seq);
  // Every S key: segment id -> what was applied of it.
  Result<std::map<uint64_t, SegmentLogState>> segment_states();
  // Every P key's entry, in seq order.
  Status pending(const std::function<void(RecordEntry&&)>& fn);
  // Every U key's entry, in seq order.
  Status peer_unlinks(const std::function<void(RecordEntry&&)>& fn);
  // Removes every T key (see above for when that is safe); returns how many.
  Result<uint64_t> drop_tombstones();

  // One atomic WriteBatch. sync=true also syncs the WAL (fsync callers).
  Status commit(const IndexBatch& b, bool sync) override;

 private:
  Index() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvfs
