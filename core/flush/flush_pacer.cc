// SPDX-License-Identifier: Apache-2.0
// FlushPacer (flush_pacer.h): the link model and the give-way to reads.
#include "core/flush/flush_pacer.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/data/read_load.h"
#include "core/ram/ram_tier.h"
#include "core/util/clock.h"

namespace kvfs {

namespace {
// How often a wait looks again at what does not notify it: reads that
// stopped, a writer that began waiting for RAM, a clock a test moves.
constexpr std::chrono::milliseconds kRecheck{2};
// The share of the measured rate the flush keeps while giving way.
constexpr double kGiveWayShare = 0.5;
// The longest a batch is held back for reads: on a slow link, half its rate
// would hold a large batch (and an fsync that comes while it waits) for
// seconds.
constexpr int64_t kMaxSpacingNs = 100'000'000;
}  // namespace

FlushPacer::FlushPacer(const Parts& p) : p_(p), limit_(std::max(1u, p.max_batches)) {}

void FlushPacer::Slot::take(uint64_t bytes, bool urgent) {
  release(false);
  t_ = p_->admit(bytes, urgent);
  held_ = true;
}

void FlushPacer::Slot::pause_for_reads() {
  if (held_) p_->pause(&t_);
}

void FlushPacer::Slot::written() {
  if (held_) p_->written(&t_);
}

void FlushPacer::Slot::release(bool ok) {
  if (!held_) return;
  held_ = false;
  p_->done(t_, ok);
}

bool FlushPacer::Slot::may_give_way() const {
  return held_ && p_->has_slack(t_.urgent);
}

bool FlushPacer::has_slack(bool urgent) const {
  if (!p_.enabled || urgent || p_.reads == nullptr) return false;
  if (hurried_.load(std::memory_order_relaxed) > 0) return false;
  // A writer waiting for RAM, or dirty data past half of it (writers would
  // soon wait), needs the flush at full speed.
  return p_.ram == nullptr ||
         !(p_.ram->under_pressure() || p_.ram->dirty_room() < p_.ram->capacity() / 2);
}

bool FlushPacer::giving_way_locked(int64_t now, bool urgent) const {
  return has_slack(urgent) && p_.reads->active(now, kReadQuiet);
}

FlushPacer::Ticket FlushPacer::admit(uint64_t bytes, bool urgent) {
  std::unique_lock l(mu_);
  bool counted_limit = false, counted_way = false;
  int64_t way_since = 0;
  for (;;) {
    const int64_t now = p_.clock->mono_ns();
    const bool way = giving_way_locked(now, urgent);
    const unsigned limit = way ? 1u : (p_.enabled ? limit_ : std::max(1u, p_.max_batches));
    const bool spaced = !way || now >= next_start_ns_;
    if (stopping_ || (writing_ < limit && spaced)) {
      if (counted_way) gave_way_ns_ += uint64_t(std::max<int64_t>(0, now - way_since));
      if (way && rate_ > 0)  // the next one starts once this one's bytes had their share
        next_start_ns_ =
            now + std::min(kMaxSpacingNs, int64_t(double(bytes) / (rate_ * kGiveWayShare)));
      break;
    }
    if (way && !counted_way) {
      counted_way = true;
      way_since = now;
      ++gave_way_;
    } else if (!way && !counted_limit) {
      counted_limit = true;
      ++limited_;
    }
    cv_.wait_for(l, kRecheck);
  }
  Ticket t;
  t.start_ns = p_.clock->mono_ns();
  t.bytes = bytes;
  t.urgent = urgent;
  if (carrying_++ == 0) {
    busy_since_ns_ = t.start_ns;
    busy_bytes_ = 0;
  }
  ++writing_;
  return t;
}

void FlushPacer::pause(Ticket* t) {
  std::unique_lock l(mu_);
  int64_t since = 0;
  for (;;) {
    const int64_t now = p_.clock->mono_ns();
    const int64_t paused = t->paused_ns + (since != 0 ? now - since : 0);
    if (stopping_ || paused >= kMaxPause || !giving_way_locked(now, t->urgent)) {
      if (since != 0) {
        t->paused_ns = paused;
        gave_way_ns_ += uint64_t(now - since);
      }
      return;
    }
    if (since == 0) {
      since = now;
      ++gave_way_;
    }
    cv_.wait_for(l, kRecheck);
  }
}

void FlushPacer::written(Ticket* t) {
  std::lock_guard l(mu_);
  if (t->written_ns != 0) return;
  t->written_ns = std::max<int64_t>(p_.clock->mono_ns(), t->start_ns + 1);
  --carrying_;
  busy_bytes_ += t->bytes;
  t->rate = double(busy_bytes_) / double(std::max<int64_t>(1, t->written_ns - busy_since_ns_));
}

void FlushPacer::done(const Ticket& t, bool ok) {
  {
    std::lock_guard l(mu_);
    --writing_;
    if (t.written_ns == 0) --carrying_;
    // A batch that paused for reads carried its bytes slower than the link
    // would have: no sample.
    if (ok && t.bytes > 0 && t.written_ns != 0 && t.paused_ns == 0)
      update_model_locked(t, p_.clock->mono_ns());
  }
  cv_.notify_all();
}

void FlushPacer::update_model_locked(const Ticket& t, int64_t now) {
  const unsigned i = samples_ % kWindow;
  rate_samples_[i] = t.rate;
  fixed_samples_[i] = double(std::max<int64_t>(0, now - t.written_ns));
  ++samples_;
  const unsigned n = unsigned(std::min<uint64_t>(samples_, kWindow));
  rate_ = *std::max_element(rate_samples_.begin(), rate_samples_.begin() + n);
  fixed_ns_ = *std::min_element(fixed_samples_.begin(), fixed_samples_.begin() + n);
  mean_batch_ = mean_batch_ == 0 ? double(t.bytes) : mean_batch_ * 0.875 + double(t.bytes) * 0.125;
  if (samples_ < kWarmup) return;
  const double need = std::ceil(rate_ * fixed_ns_ / std::max(1.0, mean_batch_)) + 2;
  limit_ = unsigned(std::clamp(need, 1.0, double(std::max(1u, p_.max_batches))));
}

void FlushPacer::stop() {
  {
    std::lock_guard l(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
}

FlushPacer::Hurry::Hurry(FlushPacer* p) : p_(p) {
  p_->hurried_.fetch_add(1, std::memory_order_relaxed);
  p_->cv_.notify_all();
}

FlushPacer::Hurry::~Hurry() {
  p_->hurried_.fetch_sub(1, std::memory_order_relaxed);
}

FlushPacer::Stats FlushPacer::stats() const {
  std::lock_guard l(mu_);
  Stats s;
  s.limit = p_.enabled ? limit_ : std::max(1u, p_.max_batches);
  s.writing = writing_;
  s.rate_gbps = rate_;  // bytes per ns is GB/s
  s.fixed_ms = fixed_ns_ / 1e6;
  s.gave_way = gave_way_;
  s.gave_way_ns = gave_way_ns_;
  s.limited = limited_;
  return s;
}

}  // namespace kvfs
