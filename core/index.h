// Index: the RocksDB database that maps every inode to its latest committed
// snapshot (record.h), plus a few meta keys. It is a cache of what the
// segments hold: missing, from another backing dir, or unreadable, it is
// rebuilt from them (recovery.cc).
//
// Keys: "I" + big-endian ino -> encoded InodeSnapshot
//       "M:backing_id", "M:next_ino", "M:next_seq" -> decimal strings
//
// Thread-safe: RocksDB is; a shared_mutex lets a reopen (after a write error
// RocksDB will not clear itself) wait for calls in flight. No other header
// sees RocksDB.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/record.h"
#include "core/status.h"

namespace kvfs {

struct IndexBatch {
  std::vector<const InodeSnapshot*> puts;
  std::vector<uint64_t> deletes;
  uint64_t next_ino = 0;  // written when non-zero
  uint64_t next_seq = 0;
  bool empty() const { return puts.empty() && deletes.empty(); }
};

class Index {
 public:
  // Opens (creating if missing) the database in dir.
  static Result<std::unique_ptr<Index>> Open(const std::string& dir);
  // Removes the database at dir (before a rebuild).
  static Status Destroy(const std::string& dir);
  ~Index();
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

  // One atomic WriteBatch. sync=true also syncs the WAL (fsync callers).
  Status commit(const IndexBatch& b, bool sync);

 private:
  Index() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvfs
