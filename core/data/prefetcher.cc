// SPDX-License-Identifier: Apache-2.0
#include "core/data/prefetcher.h"

#include <algorithm>

#include "core/data/file_data.h"

namespace kvfs {

Prefetcher::Prefetcher(Parts p, uint64_t budget) : p_(p), budget_(budget) {}

void Prefetcher::start(unsigned threads) {
  for (unsigned i = 0; i < std::max(threads, 1u); ++i) threads_.emplace_back([this] { run(); });
}

bool Prefetcher::wait_idle(std::chrono::milliseconds max) {
  std::unique_lock l(mu_);
  return idle_cv_.wait_for(l, max, [&] { return pending_.empty(); });
}

Prefetcher::~Prefetcher() {
  stop();
}

void Prefetcher::stop() {
  {
    std::lock_guard l(mu_);
    stop_ = true;
    for (const Job& j : q_) {
      pending_.erase(ExtentKey{j.ext.seg, j.ext.off});
      pending_bytes_ -= j.ext.len;
    }
    q_.clear();
    taken_.clear();
  }
  cv_.notify_all();
  idle_cv_.notify_all();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

void Prefetcher::want(const InodeRef& in, uint32_t from, uint32_t max_blocks) {
  const uint64_t budget = std::min(budget_.load(std::memory_order_relaxed), p_.ram->capacity() / 4);
  if (budget == 0) return;
  std::vector<Job> jobs;
  {
    std::lock_guard g(in->mu);
    if (!in->is_reg() || in->evicted) return;
    const uint64_t end = std::min<uint64_t>(in->blocks.size(), uint64_t(from) + max_blocks);
    for (uint64_t i = from; i < end; ++i) {
      const BlockSlot& s = in->blocks[i];
      if (!s.buf && s.ext.valid()) jobs.push_back({in, uint32_t(i), s.ext});
    }
  }
  // The RAM check needs no inode lock (the shard mutexes are leaves).
  std::vector<Job> cold;
  for (Job& j : jobs)
    if (!p_.ram->contains(ExtentKey{j.ext.seg, j.ext.off})) cold.push_back(std::move(j));
  if (cold.empty()) return;
  size_t added = 0;
  {
    std::lock_guard l(mu_);
    if (stop_) return;
    uint64_t over = 0;
    const uint64_t in_ram = p_.ram->prefetched_bytes();
    for (Job& j : cold) {
      const ExtentKey k{j.ext.seg, j.ext.off};
      if (pending_.count(k)) continue;
      if (over || in_ram + pending_bytes_ + j.ext.len > budget) {
        ++over;  // and every block after it: queued in order or not at all
        continue;
      }
      pending_.insert(k);
      pending_bytes_ += j.ext.len;
      q_.push_back(std::move(j));
      ++added;
    }
    if (over) over_budget_.fetch_add(over, std::memory_order_relaxed);
  }
  if (added == 0) return;
  queued_.fetch_add(added, std::memory_order_relaxed);
  if (added == 1)
    cv_.notify_one();
  else
    cv_.notify_all();
}

void Prefetcher::taken(const ExtentKey& k) {
  std::lock_guard l(mu_);
  if (pending_.count(k)) taken_.insert(k);
}

void Prefetcher::run() {
  for (;;) {
    Job j;
    bool skip;
    {
      std::unique_lock l(mu_);
      cv_.wait(l, [&] { return stop_ || !q_.empty(); });
      if (stop_) return;
      j = std::move(q_.front());
      q_.pop_front();
      skip = taken_.erase(ExtentKey{j.ext.seg, j.ext.off}) != 0;
    }
    if (skip)
      cancelled_.fetch_add(1, std::memory_order_relaxed);
    else
      read_one(j);
    std::lock_guard l(mu_);
    const ExtentKey k{j.ext.seg, j.ext.off};
    pending_.erase(k);
    taken_.erase(k);
    pending_bytes_ -= j.ext.len;
    if (pending_.empty()) idle_cv_.notify_all();
  }
}

void Prefetcher::read_one(const Job& j) {
  const ExtentKey k{j.ext.seg, j.ext.off};
  if (p_.forgetting && p_.forgetting->load() > 0) {
    cancelled_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  std::shared_lock rl(*p_.reclaim_mu);  // the extent stays readable while we read it
  {
    std::lock_guard g(j.in->mu);
    const bool still = !j.in->evicted && j.idx < j.in->blocks.size() && !j.in->blocks[j.idx].buf &&
                       j.in->blocks[j.idx].ext == j.ext;
    if (!still) {
      cancelled_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
  if (p_.ram->contains(k)) {  // a client read it meanwhile
    cancelled_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (!p_.ram->room_to_read_ahead(k)) {
    no_room_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  ConstBufRef b;
  // Errors are counted and logged there; a client read of the block meets
  // them again and answers for them (EIO, and a corrupt file is dropped).
  if (p_.data->read_block(j.in->ino, j.idx, j.ext, &b, /*prefetch=*/true).ok() && b) {
    reads_.fetch_add(1, std::memory_order_relaxed);
    read_bytes_.fetch_add(j.ext.len, std::memory_order_relaxed);
  }
}

PrefetchStats Prefetcher::stats() const {
  PrefetchStats s;
  s.budget_bytes = budget();
  {
    std::lock_guard l(mu_);
    s.pending_bytes = pending_bytes_;
  }
  s.queued = queued_.load();
  s.reads = reads_.load();
  s.read_bytes = read_bytes_.load();
  s.cancelled = cancelled_.load();
  s.over_budget = over_budget_.load();
  s.no_room = no_room_.load();
  return s;
}

}  // namespace kvfs
