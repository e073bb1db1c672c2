#include "core/ram_tier.h"

#include <chrono>

namespace kvfs {

struct RamTier::Entry {
  ExtentKey key;
  ConstBufRef buf;
  uint64_t charge = 0;
  bool prot = false;        // in the protected list
  bool prefetched = false;  // read ahead, not yet asked for
};

struct RamTier::Shard {
  std::mutex mu;
  std::list<Entry> probation;  // guarded by mu; front = most recent
  std::list<Entry> protect;    // guarded by mu
  std::unordered_map<ExtentKey, std::list<Entry>::iterator, ExtentKeyHash> map;  // guarded by mu
  uint64_t protected_bytes = 0;                                                  // guarded by mu
  uint64_t charge = 0;                                                           // guarded by mu
  uint64_t prefetch_used = 0, prefetch_wasted = 0;                               // guarded by mu

  void remove(std::list<Entry>::iterator it) {
    charge -= it->charge;
    if (it->prefetched) ++prefetch_wasted;
    if (it->prot) {
      protected_bytes -= it->charge;
      protect.erase(it);
    } else {
      probation.erase(it);
    }
  }
};

RamTier::RamTier(uint64_t capacity, unsigned shard_bits)
    : capacity_(capacity), shard_mask_((1u << shard_bits) - 1) {
  for (unsigned i = 0; i <= shard_mask_; ++i) shards_.push_back(std::make_unique<Shard>());
}

RamTier::~RamTier() = default;

RamTier::Shard& RamTier::shard_for(const ExtentKey& k) {
  return *shards_[ExtentKeyHash{}(k)&shard_mask_];
}

ConstBufRef RamTier::lookup(const ExtentKey& key) {
  Shard& s = shard_for(key);
  std::lock_guard g(s.mu);
  auto f = s.map.find(key);
  if (f == s.map.end()) {
    misses_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  hits_.fetch_add(1, std::memory_order_relaxed);
  auto it = f->second;
  if (it->prefetched) {
    // Its first real touch: used, and still on probation (reading ahead is
    // not a use, or a scan of prefetches would fill the protected list).
    it->prefetched = false;
    ++s.prefetch_used;
    s.probation.splice(s.probation.begin(), s.probation, it);
  } else if (!it->prot) {
    // Second touch: promote. Keep protected within 80 % of the shard's share.
    it->prot = true;
    s.protected_bytes += it->charge;
    s.protect.splice(s.protect.begin(), s.probation, it);
    uint64_t limit = capacity_.load(std::memory_order_relaxed) / shards_.size() * 4 / 5;
    while (s.protected_bytes > limit && s.protect.size() > 1) {
      auto last = std::prev(s.protect.end());
      last->prot = false;
      s.protected_bytes -= last->charge;
      s.probation.splice(s.probation.begin(), s.protect, last);
    }
  } else {
    s.protect.splice(s.protect.begin(), s.protect, it);
  }
  return it->buf;
}

void RamTier::insert(const ExtentKey& key, ConstBufRef buf, bool prefetched) {
  std::lock_guard b(budget_mu_);
  Shard& s = shard_for(key);
  uint64_t charge = buf->capacity();
  {
    std::lock_guard g(s.mu);
    if (auto f = s.map.find(key); f != s.map.end()) {
      clean_bytes_ -= f->second->charge;
      s.remove(f->second);
      s.map.erase(f);
    }
    s.probation.push_front(Entry{key, std::move(buf), charge, false, prefetched});
    s.map.emplace(key, s.probation.begin());
    s.charge += charge;
  }
  clean_bytes_ += charge;
  evict_locked(0);
}

void RamTier::claim_prefetched(const ExtentKey& key) {
  Shard& s = shard_for(key);
  std::lock_guard g(s.mu);
  if (auto f = s.map.find(key); f != s.map.end() && f->second->prefetched) {
    f->second->prefetched = false;
    ++s.prefetch_used;
  }
}

ConstBufRef RamTier::peek(const ExtentKey& key) {
  Shard& s = shard_for(key);
  std::lock_guard g(s.mu);
  auto f = s.map.find(key);
  return f == s.map.end() ? nullptr : f->second->buf;
}

bool RamTier::contains(const ExtentKey& key) {
  Shard& s = shard_for(key);
  std::lock_guard g(s.mu);
  return s.map.count(key) != 0;
}

void RamTier::erase(const ExtentKey& key) {
  Shard& s = shard_for(key);
  std::lock_guard g(s.mu);
  if (auto f = s.map.find(key); f != s.map.end()) {
    clean_bytes_ -= f->second->charge;
    s.remove(f->second);
    s.map.erase(f);
  }
}

void RamTier::evict_locked(uint64_t extra) {
  const uint64_t cap = capacity_.load();
  unsigned empty_in_a_row = 0;
  while (clean_bytes_ + dirty_bytes_ + extra > cap && clean_bytes_ > 0 &&
         empty_in_a_row <= shard_mask_) {
    Shard& s = *shards_[evict_cursor_++ & shard_mask_];
    ConstBufRef victim;  // freed after the shard lock is dropped
    {
      std::lock_guard g(s.mu);
      std::list<Entry>* l = !s.probation.empty() ? &s.probation : &s.protect;
      if (l->empty()) {
        ++empty_in_a_row;
        continue;
      }
      empty_in_a_row = 0;
      auto it = std::prev(l->end());
      victim = std::move(it->buf);
      clean_bytes_ -= it->charge;
      evicted_bytes_ += it->charge;
      s.map.erase(it->key);
      s.remove(it);
    }
    evictions_.fetch_add(1, std::memory_order_relaxed);
  }
  // Idle recycled buffers live in the same memory: they may only fill what
  // the clean and dirty bytes leave of the capacity.
  const uint64_t used = clean_bytes_ + dirty_bytes_ + extra;
  BufferPool::set_limit(cap > used ? cap - used : 0);
  BufferPool::trim(cap > used ? cap - used : 0);
}

bool RamTier::admit_dirty_locked(uint64_t bytes) {
  evict_locked(bytes);
  // With nothing dirty, waiting cannot help: admit (one block over at most).
  if (clean_bytes_ + dirty_bytes_ + bytes > capacity_.load() && dirty_bytes_ != 0) return false;
  dirty_bytes_ += bytes;
  return true;
}

bool RamTier::try_reserve_dirty(uint64_t bytes) {
  std::lock_guard l(budget_mu_);
  return admit_dirty_locked(bytes);
}

Status RamTier::reserve_dirty(uint64_t bytes) {
  std::unique_lock l(budget_mu_);
  bool counted = false;
  const auto since = std::chrono::steady_clock::now();
  for (;;) {
    if (admit_dirty_locked(bytes)) return Status::OK();
    if (!flush_error_.ok()) return flush_error_;
    if (give_up_ && give_up_(since))
      return Status::TimedOut("no room for dirty data: the flushers wait on a stalled backing dir");
    if (!counted) {
      waits_.fetch_add(1, std::memory_order_relaxed);
      counted = true;
    }
    waiters_.fetch_add(1);
    auto cb = pressure_cb_;
    l.unlock();
    if (cb) cb();
    l.lock();
    // The timeout is a safety net against a lost wake-up, not a sync device:
    // release_dirty/clean_dirty notify.
    budget_cv_.wait_for(l, std::chrono::milliseconds(200));
    waiters_.fetch_sub(1);
  }
}

void RamTier::release_dirty(uint64_t bytes) {
  {
    std::lock_guard l(budget_mu_);
    dirty_bytes_ -= bytes;
    const uint64_t used = clean_bytes_ + dirty_bytes_, cap = capacity_.load();
    BufferPool::set_limit(cap > used ? cap - used : 0);
  }
  budget_cv_.notify_all();
}

void RamTier::charge_dirty(uint64_t bytes) {
  std::lock_guard l(budget_mu_);
  dirty_bytes_ += bytes;
  evict_locked(0);
}

void RamTier::clean_dirty(const ExtentKey& key, ConstBufRef buf, uint64_t dirty) {
  {
    std::lock_guard b(budget_mu_);
    dirty_bytes_ -= dirty;
  }
  insert(key, std::move(buf));
  budget_cv_.notify_all();
}

void RamTier::set_pressure_callback(std::function<void()> cb) {
  std::lock_guard l(budget_mu_);
  pressure_cb_ = std::move(cb);
}

void RamTier::set_give_up(GiveUpFn fn) {
  std::lock_guard l(budget_mu_);
  give_up_ = std::move(fn);
}

void RamTier::set_flush_error(Status s) {
  {
    std::lock_guard l(budget_mu_);
    flush_error_ = std::move(s);
  }
  budget_cv_.notify_all();
}

void RamTier::set_capacity(uint64_t capacity) {
  std::lock_guard l(budget_mu_);
  capacity_ = capacity;
  evict_locked(0);
  budget_cv_.notify_all();
}

void RamTier::drop_clean() {
  std::lock_guard l(budget_mu_);
  for (auto& sp : shards_) {
    std::list<Entry> a, b;
    {
      std::lock_guard g(sp->mu);
      a.swap(sp->probation);
      b.swap(sp->protect);
      for (auto* l : {&a, &b})
        for (const Entry& e : *l) sp->prefetch_wasted += e.prefetched;
      sp->map.clear();
      clean_bytes_ -= sp->charge;
      sp->charge = 0;
      sp->protected_bytes = 0;
    }
  }
  budget_cv_.notify_all();
}

RamTierStats RamTier::stats() const {
  RamTierStats st;
  st.capacity = capacity_.load();
  st.clean_bytes = clean_bytes_.load();
  st.dirty_bytes = dirty_bytes_.load();
  for (auto& sp : shards_) {
    std::lock_guard g(sp->mu);
    st.entries += sp->map.size();
    st.prefetch_used += sp->prefetch_used;
    st.prefetch_wasted += sp->prefetch_wasted;
  }
  st.hits = hits_.load();
  st.misses = misses_.load();
  st.evictions = evictions_.load();
  st.evicted_bytes = evicted_bytes_.load();
  st.backpressure_waits = waits_.load();
  return st;
}

}  // namespace kvfs
