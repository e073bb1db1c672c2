// SPDX-License-Identifier: Apache-2.0
#include "core/inode/flush_state.h"

#include <cstdio>
#include <cstdlib>

namespace kvfs {

namespace {

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "kvfs: FlushState invariant broken: %s\n", what);
  std::abort();
}

}  // namespace

// Compiled in where KVFS_CHECKS is defined (the test and sanitizer builds):
// the packaged daemon does not pay for it.
void FlushState::check() const {
#ifdef KVFS_CHECKS
  if (durable_ > version_) broken("durable version ahead of the version");
  if ((requeue_ || recommit_) && !in_flush_) broken("requeue or recommit outside a flush");
  if (error_attempt_ > attempts_) broken("an error from an attempt not yet made");
  if (reclaiming_ && !dirty() && !in_flush_) broken("reclaiming a clean file");
#endif
}

void FlushState::end_fsync() {
  if (fsync_waiters_ == 0) broken("end_fsync without begin_fsync");
  --fsync_waiters_;
}

bool FlushState::enqueue(FlushKey) {
  if (in_flush_) {
    requeue_ = true;
    return false;
  }
  if (queued_) return false;
  queued_ = true;
  return true;
}

bool FlushState::may_capture_now(FlushKey) {
  if (!in_flush_) return true;
  requeue_ = true;
  return false;
}

bool FlushState::set_tracked(FlushKey, bool tracked) {
  if (tracked_ == tracked) return false;
  tracked_ = tracked;
  return true;
}

void FlushState::begin(FlushKey, bool snapshot) {
  if (in_flush_) broken("a second flush captured a file in flight");
  in_flush_ = true;
  ++attempts_;
  if (snapshot) logged_ = true;
  check();
}

void FlushState::abandon(FlushKey) {
  if (!in_flush_) broken("abandon outside a flush");
  in_flush_ = false;
  requeue_ = recommit_ = false;
  check();
}

void FlushState::recommit(FlushKey) {
  if (!in_flush_) broken("recommit outside a flush");
  recommit_ = true;
}

bool FlushState::committed(FlushKey, uint64_t version, bool linked) {
  if (!in_flush_) broken("a commit outside a flush");
  if (version != 0) {
    if (version > version_) broken("a commit of a version never made");
    if (version > durable_) durable_ = version;
    if (!dirty()) reclaiming_ = false;
  }
  in_flush_ = false;
  error_ = Status::OK();
  // Committed again after a rename even if clean: a version of its own, so
  // that the next capture is not skipped as clean.
  if (recommit_ && linked && !dirty()) ++version_;
  const bool again = requeue_ || recommit_;
  requeue_ = recommit_ = false;
  check();
  return again;
}

void FlushState::failed(FlushKey, const Status& st) {
  if (!in_flush_) broken("a failure outside a flush");
  in_flush_ = false;
  error_ = st;
  error_attempt_ = attempts_;
  requeue_ = recommit_ = false;
  check();
}

}  // namespace kvfs
