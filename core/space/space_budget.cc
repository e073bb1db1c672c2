// SPDX-License-Identifier: Apache-2.0
#include "core/space/space_budget.h"

#include <algorithm>
#include <cassert>
#include <string>

#include "core/config/config.h"
#include "core/util/log.h"

namespace kvfs {

SpaceBudget::SpaceBudget(const Limits& limits, const SpaceUsage* usage)
    : limits_(limits), usage_(usage), capacity_(limits.capacity) {}

void SpaceBudget::set_capacity(uint64_t bytes) {
  capacity_ = bytes;
  wake();
}

void SpaceBudget::wake() {
  {
    std::lock_guard l(mu_);
    asked_ = true;
  }
  pass_cv_.notify_one();
}

void SpaceBudget::backing_full() {
  {
    std::lock_guard l(mu_);
    full_ = asked_ = true;
  }
  pass_cv_.notify_one();
}

void SpaceBudget::flushed() {
  no_space_ = false;
  wake();
}

bool SpaceBudget::try_grant(uint64_t bytes) {
  // Two flushers may ask at once: a grant is held in inflight_ until the
  // batch is on disk (and counted in the segment sizes).
  uint64_t cur = inflight_.load();
  while (usage_->used_bytes() + cur + bytes <= capacity_.load() + limits_.slack)
    if (inflight_.compare_exchange_weak(cur, cur + bytes)) return true;
  return false;
}

bool SpaceBudget::roomy(uint64_t bytes) const {
  const double used =
      static_cast<double>(usage_->used_bytes() + inflight_.load() + wanted_.load() + bytes);
  return used <= static_cast<double>(capacity_.load()) * limits_.high_watermark;
}

SpaceBudget::RoomWait::~RoomWait() {
  if (wanted_) budget_->wanted_ -= bytes_;
}

void SpaceBudget::ask_room(uint64_t bytes, RoomWait* w) {
  assert(w->over() && !w->budget_);
  w->budget_ = this;
  w->bytes_ = bytes;
  if (usage_->used_bytes() + bytes > capacity_.load() * limits_.high_watermark) wake();
  if (try_grant(bytes)) {
    w->granted_ = true;
    return;
  }
  // Tell the passes how much room is wanted beyond what is granted, and wait
  // while they make progress (each full pass frees something); give up once
  // whole passes free nothing, or after give_up.
  wanted_ += bytes;
  w->wanted_ = true;
  std::lock_guard l(mu_);
  w->deadline_ = limits_.clock->mono() + limits_.give_up;
  if (stop_)
    finish(*w, false);
  else
    begin_round(*w);
}

void SpaceBudget::ask_backing_room(RoomWait* w) {
  assert(w->over() && !w->budget_);
  w->budget_ = this;
  w->backing_ = true;
  w->phase_ = RoomWait::Phase::kBackingFull;
  w->used_before_ = usage_->used_bytes();
  std::lock_guard l(mu_);
  w->passes_ = passes_;
  w->progress_ = progress_passes_;
  full_ = asked_ = true;
  pass_cv_.notify_one();
  // Two passes: one may already be running with the old target.
  w->deadline_ = w->phase_end_ = limits_.clock->mono() + std::chrono::seconds(10);
}

bool SpaceBudget::step(RoomWait& w) {
  if (w.over()) return true;
  std::unique_lock l(mu_);
  if (!phase_done(w) && limits_.clock->mono() < w.phase_end_) {
    room_cv_.wait_for(l, kStep);
    if (!phase_done(w) && limits_.clock->mono() < w.phase_end_) return false;
  }
  end_phase(w);
  return w.over();
}

void SpaceBudget::begin_round(RoomWait& w) {
  w.phase_ = RoomWait::Phase::kRound;
  w.passes_ = passes_;
  w.progress_ = progress_passes_;
  w.releases_ = releases_;
  w.phase_end_ = limits_.clock->mono() + limits_.round;
  asked_ = true;
  pass_cv_.notify_one();
}

bool SpaceBudget::phase_done(RoomWait& w) {
  if (w.phase_ != RoomWait::Phase::kBackingFull && !w.granted_) w.granted_ = try_grant(w.bytes_);
  if (w.granted_ || stop_) return true;
  switch (w.phase_) {
    case RoomWait::Phase::kRound:
    case RoomWait::Phase::kBackingFull:
      // passes_ + 2: at least one pass that began after the ask ended.
      return passes_ >= w.passes_ + 2;
    case RoomWait::Phase::kInFlight: return releases_ != w.releases_;
    case RoomWait::Phase::kOver: break;
  }
  return true;
}

void SpaceBudget::end_phase(RoomWait& w) {
  const auto now = limits_.clock->mono();
  switch (w.phase_) {
    case RoomWait::Phase::kBackingFull: {
      // Freed: what the passes report (another flusher's writes may have
      // taken the room already, and its own retry will tell).
      const bool freed = progress_passes_ != w.progress_ || usage_->used_bytes() < w.used_before_;
      return finish(w, freed);
    }
    case RoomWait::Phase::kRound:
      if (w.granted_) return finish(w, true);
      // The evictor is stuck (no two passes in a round), or stopping.
      if (stop_ || passes_ < w.passes_ + 2) return finish(w, false);
      // Progress is what the passes evicted, copied or deleted, as they
      // report it: evicted files' segments empty out over the next passes.
      // (Not the bytes used: another flusher's writes meanwhile would hide
      // what a pass freed, and refuse room eviction was making.)
      if (progress_passes_ != w.progress_ || releases_ != w.releases_) {
        if (now >= w.deadline_) return finish(w, false);
        return begin_round(w);
      }
      // Whole passes freed nothing. Another flush's batch still being
      // written may change that: once on disk, its files may be evicted (a
      // small grace), and its grant's padding is given back. Wait for it
      // (its writes are bounded by io_timeout, this wait by give_up) before
      // giving up; with nothing in flight, give up.
      if (inflight_.load() == 0) return finish(w, false);
      w.phase_ = RoomWait::Phase::kInFlight;
      w.phase_end_ = std::min(w.deadline_, now + limits_.round);
      return;
    case RoomWait::Phase::kInFlight:
      if (w.granted_) return finish(w, true);
      if (stop_ || now >= w.deadline_) return finish(w, false);
      return begin_round(w);
    case RoomWait::Phase::kOver: return;
  }
}

void SpaceBudget::finish(RoomWait& w, bool room) {
  if (w.wanted_) wanted_ -= w.bytes_;
  w.wanted_ = false;
  w.phase_ = RoomWait::Phase::kOver;
  if (room) {
    w.result_ = Status::OK();
  } else if (w.backing_) {
    w.result_ = Status::NoSpace("backing filesystem full and nothing can be evicted");
  } else {
    refusals_.fetch_add(1);
    w.result_ = Status::AtCapacity(
        "backing dir is at its capacity (" + format_size(capacity_.load()) +
        ") and nothing can be evicted (segments " + std::to_string(usage_->used_bytes()) +
        " B, live " + std::to_string(usage_->live_bytes()) + " B, in flight " +
        std::to_string(inflight_.load()) + " B, asking " + std::to_string(w.bytes_) + " B)");
  }
}

void SpaceBudget::release(uint64_t bytes) {
  inflight_.fetch_sub(bytes);
  {
    std::lock_guard l(mu_);
    ++releases_;
  }
  room_cv_.notify_all();
}

SpaceBudget::Demand SpaceBudget::next_pass(std::chrono::milliseconds period) {
  std::unique_lock l(mu_);
  pass_cv_.wait_for(l, period, [&] { return stop_ || asked_; });
  Demand d;
  d.stop = stop_;
  if (stop_) return d;
  asked_ = false;
  d.backing_full = full_;
  full_ = false;
  return d;
}

bool SpaceBudget::stopping() const {
  std::lock_guard l(mu_);
  return stop_;
}

void SpaceBudget::pass_done(bool progress) {
  {
    std::lock_guard l(mu_);
    ++passes_;
    if (progress) ++progress_passes_;
  }
  room_cv_.notify_all();
}

void SpaceBudget::stop() {
  {
    std::lock_guard l(mu_);
    stop_ = true;
  }
  pass_cv_.notify_all();
  room_cv_.notify_all();
}

}  // namespace kvfs
