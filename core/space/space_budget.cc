// SPDX-License-Identifier: Apache-2.0
#include "core/space/space_budget.h"

#include <algorithm>
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

Status SpaceBudget::backing_full_wait(const std::function<void()>& serve) {
  const uint64_t before = usage_->used_bytes();
  std::unique_lock l(mu_);
  const uint64_t start = passes_, progress = progress_passes_;
  full_ = asked_ = true;
  pass_cv_.notify_one();
  // Two passes: one may already be running with the old target. Meanwhile
  // serve: the pass may be waiting for the snapshots it re-logs.
  wait_serving(
      l, limits_.clock->mono() + std::chrono::seconds(10),
      [&] { return stop_ || passes_ >= start + 2; }, serve);
  // Freed: what the passes report (another flusher's writes may have taken
  // the room already, and its own retry will tell).
  const bool freed = progress_passes_ != progress || usage_->used_bytes() < before;
  l.unlock();
  if (freed) return Status::OK();
  return Status::NoSpace("backing filesystem full and nothing can be evicted");
}

void SpaceBudget::wait_serving(std::unique_lock<std::mutex>& l,
                               std::chrono::steady_clock::time_point until,
                               const std::function<bool()>& done,
                               const std::function<void()>& serve) {
  while (!done() && limits_.clock->mono() < until) {
    room_cv_.wait_for(l, std::chrono::milliseconds(100));
    l.unlock();
    serve();
    l.lock();
  }
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

Status SpaceBudget::wait_for_room(uint64_t bytes, const std::function<void()>& serve) {
  if (usage_->used_bytes() + bytes > capacity_.load() * limits_.high_watermark) wake();
  if (try_grant(bytes)) return Status::OK();
  // Tell the passes how much room is wanted beyond what is granted, and wait
  // while they make progress (each full pass frees something); give up once
  // a pass frees nothing, or after give_up.
  wanted_ += bytes;
  std::unique_lock l(mu_);
  bool granted = false;
  const auto deadline = limits_.clock->mono() + limits_.give_up;
  while (!stop_ && limits_.clock->mono() < deadline) {
    const uint64_t start = passes_;
    const uint64_t progress = progress_passes_;
    asked_ = true;
    pass_cv_.notify_one();
    // start + 2: at least one pass that began after this request ended.
    const auto round_end = limits_.clock->mono() + limits_.round;
    auto done = [&] {
      granted = granted || try_grant(bytes);
      return granted || stop_ || passes_ >= start + 2;
    };
    const uint64_t released = releases_;
    wait_serving(l, round_end, done, serve);
    if (granted || passes_ < start + 2) break;  // room, or the evictor is stuck
    // Progress is what the passes evicted, copied or deleted, as they report
    // it: evicted files' segments empty out over the next passes. (Not the
    // bytes used: another flusher's writes meanwhile would hide what a pass
    // freed, and refuse room eviction was making.)
    if (progress_passes_ != progress || releases_ != released) continue;
    // Whole passes freed nothing. Another flush's batch still being written
    // may change that: once on disk, its files may be evicted (a small
    // grace), and its grant's padding is given back. Wait for it (its
    // writes are bounded by io_timeout, this wait by give_up) before giving
    // up; with nothing in flight, give up.
    if (inflight_.load() == 0) break;
    wait_serving(
        l, std::min(deadline, limits_.clock->mono() + limits_.round),
        [&] {
          granted = granted || try_grant(bytes);
          return granted || stop_ || releases_ != released;
        },
        serve);
    if (granted) break;
  }
  l.unlock();
  wanted_ -= bytes;
  if (granted) return Status::OK();
  refusals_.fetch_add(1);
  return Status::AtCapacity(
      "backing dir is at its capacity (" + format_size(capacity_.load()) +
      ") and nothing can be evicted (segments " + std::to_string(usage_->used_bytes()) +
      " B, live " + std::to_string(usage_->live_bytes()) + " B, in flight " +
      std::to_string(inflight_.load()) + " B, asking " + std::to_string(bytes) + " B)");
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
