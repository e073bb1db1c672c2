// SPDX-License-Identifier: Apache-2.0
// MemIndex: an in-memory IndexWriter for the policy tests of the flusher, the
// journal and the evictor (no RocksDB). It applies a batch as index.cc does
// for the keys the tests read back (snapshots, deletions and their T keys,
// P keys) and can be told to fail the next commits, as a full or
// failing index volume would. Thread-safe: one mutex.
#pragma once

#include <map>
#include <mutex>

#include "core/index/index.h"

namespace kvfs {

class MemIndex final : public IndexWriter {
 public:
  Status commit(const IndexBatch& b, bool sync) override {
    std::lock_guard l(mu_);
    ++commits_;
    if (fail_ > 0) {
      --fail_;
      ++failed_;
      return fail_with_;
    }
    for (const InodeSnapshot* s : b.puts) snaps_[s->ino] = *s;
    for (const auto& d : b.deletes) {
      snaps_.erase(d.ino);
      if (d.tomb_seq != 0) tombs_[d.ino] = d.tomb_seq;
    }
    for (uint64_t ino : b.untombs) tombs_.erase(ino);
    for (const RecordEntry* e : b.pending) pending_[e->snap.seq] = *e;
    for (uint64_t seq : b.logged) pending_.erase(seq);
    return Status::OK();
  }

  // The next n commits fail with st and change nothing.
  void fail_next(int n, Status st) {
    std::lock_guard l(mu_);
    fail_ = n;
    fail_with_ = std::move(st);
  }

  std::map<uint64_t, InodeSnapshot> snapshots() const {
    std::lock_guard l(mu_);
    return snaps_;
  }
  uint64_t snap_seq(uint64_t ino) const {
    std::lock_guard l(mu_);
    auto it = snaps_.find(ino);
    return it == snaps_.end() ? 0 : it->second.seq;
  }
  uint64_t tomb_seq(uint64_t ino) const {
    std::lock_guard l(mu_);
    auto it = tombs_.find(ino);
    return it == tombs_.end() ? 0 : it->second;
  }
  size_t pending() const {
    std::lock_guard l(mu_);
    return pending_.size();
  }
  uint64_t commits() const {
    std::lock_guard l(mu_);
    return commits_;
  }
  uint64_t failed() const {
    std::lock_guard l(mu_);
    return failed_;
  }

 private:
  mutable std::mutex mu_;
  std::map<uint64_t, InodeSnapshot> snaps_;  // guarded by mu_
  std::map<uint64_t, uint64_t> tombs_;       // guarded by mu_
  std::map<uint64_t, RecordEntry> pending_;
  uint64_t commits_ = 0, failed_ = 0;
  int fail_ = 0;
  Status fail_with_;
};

}  // namespace kvfs
