// SPDX-License-Identifier: Apache-2.0
// Flusher, the callers' side: queueing inodes and journal entries for the
// flusher threads, waiting for durability, and flush_all (fsync of a
// directory, unmount). The threads' side is in flusher.cc.
#include <algorithm>
#include <iterator>

#include "core/backing/backing_io.h"
#include "core/flush/flusher.h"
#include "core/namespace/namespace.h"
#include "core/space/space_budget.h"

namespace kvfs {

void Flusher::enqueue_locked(const InodeRef& in, bool urgent) {
  // A peer's file (Inode::peer) is its owner's to write: never into this
  // node's segments or index, whatever marked it.
  if (in->peer) return;
  if (!in->flush.enqueue({})) return;
  {
    std::lock_guard l(q_mu_);
    if (urgent)
      queue_.push_front(in);
    else
      queue_.push_back(in);
    if (urgent) retry_at_ns_ = 0;
  }
  q_cv_.notify_one();
}

void Flusher::enqueue_ungated_locked(const InodeRef& in) {
  if (!in->flush.may_capture_now({})) return;
  {
    std::lock_guard l(q_mu_);
    ungated_.push_back(in);
  }
  q_cv_.notify_one();
}

void Flusher::track_locked(const InodeRef& in) {
  if (!in->flush.set_tracked({}, true)) return;
  std::lock_guard l(q_mu_);
  writing_.insert(in);
}

void Flusher::untrack_locked(const InodeRef& in) {
  if (!in->flush.set_tracked({}, false)) return;
  std::lock_guard l(q_mu_);
  writing_.erase(in);
}

void Flusher::add_meta(std::vector<RecordEntry> entries) {
  {
    std::lock_guard l(q_mu_);
    for (auto& e : entries) meta_.push_back(std::move(e));
  }
  q_cv_.notify_one();
}

Status Flusher::log_meta(std::vector<RecordEntry> entries, std::chrono::milliseconds timeout) {
  std::vector<uint64_t> seqs;  // each once: an entry logged twice is logged
  for (const auto& e : entries) seqs.push_back(e.snap.seq);
  std::sort(seqs.begin(), seqs.end());
  seqs.erase(std::unique(seqs.begin(), seqs.end()), seqs.end());
  std::unique_lock l(q_mu_);
  for (uint64_t s : seqs) tracked_.insert(s);
  for (auto& e : entries) meta_.push_back(std::move(e));
  q_cv_.notify_one();
  // A failed metadata write ends the wait (the entries are retried): the
  // caller, the evictor in a pass, is better off keeping its segment now
  // than waiting out a full or failing backing dir.
  const uint64_t failures = meta_failures_;
  const bool done = meta_cv_.wait_for(l, timeout, [&] {
    if (stopping_ || meta_failures_ != failures) return true;
    for (uint64_t s : seqs)
      if (!logged_.count(s)) return false;
    return true;
  });
  bool all = true;
  for (uint64_t s : seqs) {
    all &= logged_.erase(s) > 0;
    tracked_.erase(s);
  }
  if (done && all) return Status::OK();
  return Status::Busy("journal entries not written to a segment in time");
}

void Flusher::retry_now() {
  {
    std::lock_guard l(q_mu_);
    retry_at_ns_ = 0;
  }
  q_cv_.notify_all();
}

void Flusher::on_pressure() {
  {
    std::lock_guard l(q_mu_);
    pressure_ = true;
  }
  q_cv_.notify_all();
}

bool Flusher::writes_refused() {
  if (!p_.budget->no_space()) return false;
  std::lock_guard l(q_mu_);
  std::erase_if(refused_, [](const InodeRef& in) { return !in->linked.load(); });
  if (!refused_.empty()) return true;
  p_.budget->clear_no_space();
  return false;
}

uint64_t Flusher::queued() const {
  std::lock_guard l(q_mu_);
  return queue_.size() + retry_.size();
}

void Flusher::wait_durable_for(std::unique_lock<std::mutex>& l, std::chrono::milliseconds d) {
  durable_cv_.wait_for(l, d);
}

Status Flusher::sync(const InodeRef& in) {
  std::unique_lock l(in->mu);
  if (!in->dirty() || !in->linked.load()) return Status::OK();
  // A flush in flight now may fail for a fault that has cleared since: only
  // a later attempt's failure counts (FlushMark).
  const FlushMark mark = in->flush.begin_fsync();
  const FlushPacer::Hurry hurry(&pacer_);  // no give-way to reads while it waits
  enqueue_locked(in, true);
  auto done = [&] {
    return in->flush.durable(mark) || !in->linked.load() || in->flush.failed_since(mark);
  };
  // Bounded: a flusher stuck on a stalled backing dir makes this TimedOut
  // after io_timeout (the data stays dirty and is flushed once it answers).
  const auto since = std::chrono::steady_clock::now();
  bool gave_up = false;
  while (!done() && !(gave_up = p_.io->gave_up(since)))
    durable_cv_.wait_for(l, std::chrono::milliseconds(100));
  in->flush.end_fsync();
  if (in->flush.durable(mark) || !in->linked.load()) return Status::OK();
  if (gave_up) {
    p_.io->count_timeout();
    return Status::TimedOut("fsync: the backing dir is stalled");
  }
  return in->flush.error();
}

Status Flusher::flush_all(bool include_open) {
  // Bounded like every client wait: TimedOut once the backing dir has been
  // stalled for io_timeout (what is dirty stays queued).
  const auto since = std::chrono::steady_clock::now();
  const FlushPacer::Hurry hurry(&pacer_);  // no give-way to reads while it waits
  Status result;
  std::vector<InodeRef> failed;
  for (int round = 0; round < 3; ++round) {
    bool any = false;
    uint64_t meta_failures;
    {
      std::lock_guard l(q_mu_);
      meta_failures = meta_failures_;
      force_all_ = include_open;
      sync_all_ = true;
      for (auto& in : retry_) queue_.push_back(std::move(in));
      retry_.clear();
      retry_at_ns_ = 0;
    }
    for (auto& in : p_.ns->all()) {
      std::lock_guard g(in->mu);
      if (in->flush.take_atime({}) && !in->dirty() && in->linked.load()) in->flush.changed();
      // A file still open for writing is incomplete: committing it would
      // let a crash bring it back partial. Only unmount takes it as it is.
      if (in->opens.active_writers() > 0 && !include_open) continue;
      if ((in->dirty() && in->linked.load()) || in->flush.in_flight()) {
        enqueue_locked(in, false);
        any = true;
      }
    }
    {
      std::unique_lock l(q_mu_);
      any |= !meta_.empty();
      q_cv_.notify_all();
      // A file unlinked since its flush failed is queued again only to give
      // back its RAM: its data is gone, so it neither ends the wait nor
      // fails the flush (the file written after it must still be waited for).
      auto failed_linked = [&] {
        return std::any_of(retry_.begin(), retry_.end(),
                           [](const InodeRef& in) { return in->linked.load(); });
      };
      auto idle = [&] {
        return (queue_.empty() && ungated_.empty() && meta_.empty() && active_ == 0) ||
               failed_linked() || meta_failures_ != meta_failures || stopping_;
      };
      bool gave_up = false;
      while (!idle() && !(gave_up = p_.io->gave_up(since)))
        idle_cv_.wait_for(l, std::chrono::milliseconds(100));
      force_all_ = sync_all_ = false;
      if (gave_up) {
        p_.io->count_timeout();
        return Status::TimedOut("flush: the backing dir is stalled");
      }
      failed.clear();
      std::copy_if(retry_.begin(), retry_.end(), std::back_inserter(failed),
                   [](const InodeRef& in) { return in->linked.load(); });
      if (failed.empty() && meta_failures_ != meta_failures) {
        // Journal entries are committed to the index before they are
        // queued for a segment: nothing is lost, the next mount writes them.
        result = meta_error_.Prefixed(
            "journal entries not written to a segment (kept in the index for the next mount)");
        break;
      }
    }
    if (!failed.empty()) {
      // The caller gets the cause (ENOSPC under the cap, EIO), not a generic error.
      result = Status::IOError("some files could not be flushed");
      for (auto& in : failed) {
        std::lock_guard g(in->mu);
        if (!in->flush.error().ok()) {
          result = in->flush.error();
          break;
        }
      }
      break;
    }
    if (!any) break;
  }
  if (result.ok()) {
    for (auto& in : p_.ns->all()) {
      std::lock_guard g(in->mu);
      if (in->dirty() && in->linked.load() && !in->flush.error().ok() &&
          (include_open || in->opens.active_writers() == 0))
        return in->flush.error();
    }
  }
  return result;
}

}  // namespace kvfs
