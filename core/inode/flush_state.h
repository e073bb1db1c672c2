// SPDX-License-Identifier: Apache-2.0
// FlushState: where one file stands with the flush (owned by the flush part,
// flusher.h). Every field is private; a change happens through a named
// transition, and the Flusher's own transitions take a FlushKey that only the
// Flusher can make, so no other part can move a file in or out of a flush.
//
// What the rest of kvfs may do: say that the file changed (a write, a
// truncate, a copy forward by the evictor, a rename), wait for a version to
// be durable (fsync, the evictor's reclaim) and read where the file stands.
//
// Versions: every change a flush must capture bumps version(); a flush
// captures a version and, when its commit lands, makes it durable. A file is
// dirty while the two differ.
//
// Not thread-safe: it lives in an Inode and every call requires Inode::mu.
// In builds with KVFS_CHECKS (tests and sanitizers) each transition checks
// the invariants below and aborts with a message when one breaks.
#pragma once

#include <cstdint>

#include "core/util/status.h"

namespace kvfs {

class Flusher;
struct FlushStateTestAccess;

// Made only by the Flusher (and, acting as one, tests): the argument that
// marks a transition as the flush part's own.
class FlushKey {
  friend class Flusher;
  friend struct FlushStateTestAccess;
  FlushKey() = default;
};

// What a waiter waits for: this version durable, and only the failures of
// flush attempts after `attempts` count (one in flight when a fault clears
// may still fail, and must not fail a wait that began after it).
struct FlushMark {
  uint64_t version = 0;
  uint64_t attempts = 0;
};

class FlushState {
 public:
  // --- reads (Inode::mu) ---
  bool dirty() const { return version_ != durable_; }
  uint64_t version() const { return version_; }
  bool in_flight() const { return in_flush_; }
  // A flush wrote a snapshot of it: that record may sit in a segment past
  // what the index applied, so removing it needs a tombstone.
  bool logged() const { return logged_; }
  bool syncing() const { return fsync_waiters_ > 0; }
  // Dirty only because the evictor copies it forward: the flush gate (room
  // under the cap) does not apply to it.
  bool reclaiming() const { return reclaiming_; }
  const Status& error() const { return error_; }
  FlushMark mark() const { return {version_, attempts_}; }
  bool durable(const FlushMark& m) const { return durable_ >= m.version; }
  bool failed_since(const FlushMark& m) const {
    return !error_.ok() && error_attempt_ > m.attempts;
  }

  // --- changes any part may report (Inode::mu) ---
  // Something the next flush must capture (metadata, a truncate, a create).
  void changed() {
    ++version_;
    check();
  }
  // A client's data: the flush gate applies to the file again.
  void client_wrote() {
    reclaiming_ = false;
    changed();
  }
  // The evictor copied a block forward out of a segment it reclaims.
  void copied_forward() {
    reclaiming_ = true;
    changed();
  }
  // Renamed (and journaled): a flush in flight wrote the old name, so the
  // file is committed again after it, even if clean.
  void renamed() {
    if (in_flush_) recommit_ = true;
    check();
  }
  // Only the atime changed (a read, utimensat): not worth a flush of its
  // own; saved by the next flush_all (take_atime).
  void atime_changed() { atime_ = true; }
  // An fsync waits for what is there now; a failure before it does not count.
  FlushMark begin_fsync() {
    error_ = Status::OK();
    ++fsync_waiters_;
    return mark();
  }
  void end_fsync();

  // --- the Flusher's transitions ---
  // Put in the queue: false if it is there already or in flight (then it is
  // queued again once that flush ends).
  bool enqueue(FlushKey);
  // For a queue without the flag (the evictor's copies): false if in flight,
  // which marks it to go again after that flush.
  bool may_capture_now(FlushKey);
  void dequeued(FlushKey) { queued_ = false; }
  // flush_all: whether the atime changed alone since the last one (cleared).
  bool take_atime(FlushKey) {
    const bool a = atime_;
    atime_ = false;
    return a;
  }
  // In the flusher's set of files written while open: false if no change.
  bool set_tracked(FlushKey, bool tracked);
  // A flusher captured it; `snapshot`: with its metadata (not blocks only).
  void begin(FlushKey, bool snapshot);
  // Captured, then given back uncommitted (its data must wait for room).
  void abandon(FlushKey);
  // The flush's record has an old name or seq: commit it again after.
  void recommit(FlushKey);
  // The commit landed. `version`: what the capture saw, or 0 for blocks
  // only. Says whether the file must be queued again (a change or a rename
  // while in flight); `linked`: the file still has a name.
  bool committed(FlushKey, uint64_t version, bool linked);
  void failed(FlushKey, const Status& st);

 private:
  void check() const;

  uint64_t version_ = 0;
  uint64_t durable_ = 0;        // version of the last commit
  uint64_t attempts_ = 0;       // flushes that captured it
  uint64_t error_attempt_ = 0;  // the attempt error_ came from
  Status error_;                // last flush failure, reported to fsync
  uint32_t fsync_waiters_ = 0;
  bool queued_ = false;    // in the flush queue
  bool in_flush_ = false;  // captured by a flusher, not yet committed
  bool logged_ = false;
  bool requeue_ = false;  // changed while in flight: queue it after the flush
  // Renamed, or its seq overtaken by the journal, while in flight. Apart
  // from requeue: a flush_all or a second queueing of a file in flight must
  // not cost it a commit of its own.
  bool recommit_ = false;
  bool reclaiming_ = false;
  bool tracked_ = false;  // in the flusher's set of files written while open
  bool atime_ = false;    // the atime changed alone since the last flush_all
};

}  // namespace kvfs
