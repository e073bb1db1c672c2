// SPDX-License-Identifier: Apache-2.0
#include "core/ram/ram_tier.h"

#include <algorithm>
#include <chrono>

#include "core/ram/reuse_table.h"

namespace kvfs {

struct RamTier::Entry {
  ExtentKey key;
  ConstBufRef buf;
  uint64_t charge = 0;
  List list = kProbation;
  bool prefetched = false;  // read ahead, not yet asked for
  bool read_once = false;   // came in for one client read, no hit since
  uint64_t last_use = 0;    // RamTier::uses_ at its last use (or read-ahead)
};

struct RamTier::Shard {
  std::mutex mu;
  // front = most recent; evicted in this order: once, probation, protect.
  std::list<Entry> lists[3];                                                     // guarded by mu
  std::unordered_map<ExtentKey, std::list<Entry>::iterator, ExtentKeyHash> map;  // guarded by mu
  // When each key was last used, in RAM or not: a block read from the
  // backing dir comes back after that long (admit_locked()).
  ReuseTable seen;  // guarded by mu
  // last_use of the probation and protected tails (kNoTail: empty), for
  // oldest_tail(), which reads them without this lock.
  static constexpr uint64_t kNoTail = UINT64_MAX;
  std::atomic<uint64_t> tail_use[2] = {kNoTail, kNoTail};         // written under mu
  uint64_t protected_bytes = 0;                                   // guarded by mu
  uint64_t once_bytes = 0;                                        // guarded by mu
  uint64_t charge = 0;                                            // guarded by mu
  uint64_t prefetch_used = 0, prefetch_wasted = 0, admitted = 0;  // guarded by mu
  std::atomic<uint64_t>* prefetched_total = nullptr;              // RamTier's, set once

  // A read-ahead block leaves, or a client takes it.
  void unprefetch(Entry& e, bool used) {
    e.prefetched = false;
    prefetched_total->fetch_sub(e.charge, std::memory_order_relaxed);
    ++(used ? prefetch_used : prefetch_wasted);
  }
  void remove(std::list<Entry>::iterator it) {
    charge -= it->charge;
    if (it->prefetched) unprefetch(*it, false);
    if (it->list == kProtected) protected_bytes -= it->charge;
    if (it->list == kOnce) once_bytes -= it->charge;
    lists[it->list].erase(it);
  }
  void move(std::list<Entry>::iterator it, List to) {
    if (it->list == kProtected) protected_bytes -= it->charge;
    if (it->list == kOnce) once_bytes -= it->charge;
    if (to == kProtected) protected_bytes += it->charge;
    if (to == kOnce) once_bytes += it->charge;
    lists[to].splice(lists[to].begin(), lists[it->list], it);
    it->list = to;
  }
  const Entry* next_victim() const {
    for (List c : {kProbation, kProtected})
      if (!lists[c].empty()) return &lists[c].back();
    return nullptr;
  }
  // After a change to the lists: publishes their tails.
  void note_tails() {
    for (List c : {kProbation, kProtected})
      tail_use[c - kProbation].store(lists[c].empty() ? kNoTail : lists[c].back().last_use,
                                     std::memory_order_relaxed);
  }
  // A block read from the backing dir beat the protected tail, last used
  // at `last`: that block goes to the tail of probation, to leave next (if
  // it is still that block).
  void demote_tail(uint64_t last) {
    if (lists[kProtected].empty() || lists[kProtected].back().last_use != last) return;
    auto it = std::prev(lists[kProtected].end());
    protected_bytes -= it->charge;
    lists[kProbation].splice(lists[kProbation].end(), lists[kProtected], it);
    it->list = kProbation;
    note_tails();
  }
  explicit Shard(size_t slots) : seen(slots) {}
};

RamTier::RamTier(uint64_t capacity, unsigned shard_bits)
    : capacity_(capacity), shard_mask_((1u << shard_bits) - 1) {
  // Keys a shard holds at most (blocks of 512 KiB or more); its reuse table
  // remembers 32 times as many, a loop over 8 times RAM with few collisions
  // (16 bytes a slot: 0.1 % of the blocks' bytes), at most 4 MiB a shard.
  const uint64_t entries = std::max<uint64_t>(64, capacity / (shard_mask_ + 1) >> 19);
  for (unsigned i = 0; i <= shard_mask_; ++i) {
    shards_.push_back(std::make_unique<Shard>(std::min<uint64_t>(entries * 32, 1u << 18)));
    shards_.back()->prefetched_total = &prefetched_bytes_;
  }
}

RamTier::~RamTier() = default;

RamTier::Shard& RamTier::shard_for(const ExtentKey& k) {
  return *shards_[ExtentKeyHash{}(k)&shard_mask_];
}

bool RamTier::full() const {
  return clean_bytes_ + dirty_bytes_ + kBlockSize > capacity_.load(std::memory_order_relaxed);
}

int RamTier::oldest_tail(unsigned list, uint64_t* last) const {
  int best = -1;
  uint64_t oldest = Shard::kNoTail;
  for (unsigned i = 0; i <= shard_mask_; ++i) {
    const uint64_t u = shards_[i]->tail_use[list].load(std::memory_order_relaxed);
    if (u < oldest) oldest = u, best = static_cast<int>(i);
  }
  *last = oldest;
  return best;
}

int RamTier::victim_shard(uint64_t* last) const {
  const int p = oldest_tail(0, last);
  return p >= 0 ? p : oldest_tail(1, last);
}

RamTier::List RamTier::admit_locked(Shard& s, uint64_t gap, uint64_t now, bool full, Demote* d) {
  if (!full) return kProbation;
  // Weighed against the block unused the longest of the probation and
  // protected tails: probation's alone kept a finished chat's blocks in
  // the protected list for good while the next chat's blocks, never hit
  // twice, churned through probation.
  uint64_t p_last = 0, q_last = 0;
  const int p = oldest_tail(0, &p_last), q = oldest_tail(1, &q_last);
  if (p < 0 && q < 0) return kProbation;
  const bool beat_protected = q >= 0 && (p < 0 || q_last < p_last);
  const uint64_t victim_last = beat_protected ? q_last : p_last;
  // Kept if it came back in less than half the time the block it would
  // push out has lain unused. Not merely sooner: a load reads a prefix's
  // blocks in parallel, in a new order each round, so in a loop the
  // newcomer and the block used just before it last round differ by a few
  // uses either way, and "sooner" swapped them back and forth (measured
  // with multi-round QA: bench/README.md).
  const uint64_t idle = now > victim_last ? now - victim_last : 0;
  if (gap == ReuseTable::kUnknown || gap >= idle / 2) return kOnce;
  ++s.admitted;
  if (beat_protected) *d = Demote{q, q_last};
  return kProbation;
}

void RamTier::demote(const Demote& d) {
  if (d.shard < 0) return;
  Shard& s = *shards_[d.shard];
  std::lock_guard g(s.mu);
  s.demote_tail(d.last);
}

ConstBufRef RamTier::lookup(const ExtentKey& key) {
  Shard& s = shard_for(key);
  Demote d;
  ConstBufRef buf = lookup_shard(s, key, &d);
  demote(d);  // with s.mu dropped: one shard lock at a time
  return buf;
}

ConstBufRef RamTier::lookup_shard(Shard& s, const ExtentKey& key, Demote* d) {
  std::lock_guard g(s.mu);
  auto f = s.map.find(key);
  if (f == s.map.end()) {
    // Not a use yet: the read from the backing dir that follows is one
    // (once for all the requests that join it), see insert().
    misses_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  hits_.fetch_add(1, std::memory_order_relaxed);
  const uint64_t now = tick();
  const uint64_t gap = s.seen.use(ExtentKeyHash{}(key), now);
  auto it = f->second;
  it->last_use = now;
  if (it->prefetched) {
    // Its first real touch: used, and a client's read of the backing from
    // now on (reading ahead is not a use, or a scan of prefetches would
    // fill the protected list).
    s.unprefetch(*it, true);
    s.move(it, admit_locked(s, gap, now, full(), d));
    it->read_once = true;
  } else {
    it->read_once = false;
    if (it->list == kOnce) {
      s.move(it, kProbation);  // read twice: now it competes with written data
    } else if (it->list == kProbation) {
      // Second touch: promote. Keep protected within 80 % of the shard's share.
      s.move(it, kProtected);
      uint64_t limit = capacity_.load(std::memory_order_relaxed) / shards_.size() * 4 / 5;
      while (s.protected_bytes > limit && s.lists[kProtected].size() > 1)
        s.move(std::prev(s.lists[kProtected].end()), kProbation);
    } else {
      s.move(it, kProtected);
    }
  }
  s.note_tails();
  return it->buf;
}

void RamTier::insert(const ExtentKey& key, ConstBufRef buf, Admit how) {
  std::lock_guard b(budget_mu_);
  Shard& s = shard_for(key);
  uint64_t charge = buf->capacity();
  Demote d;
  {
    std::lock_guard g(s.mu);
    if (auto f = s.map.find(key); f != s.map.end()) {
      clean_bytes_ -= f->second->charge;
      s.remove(f->second);
      s.map.erase(f);
    }
    // Written or read for a client: a use. Read ahead: not one (yet).
    const uint64_t now = how == Admit::kPrefetch ? uses_.load() : tick();
    const uint64_t gap =
        how == Admit::kPrefetch ? ReuseTable::kUnknown : s.seen.use(ExtentKeyHash{}(key), now);
    const bool room = clean_bytes_ + dirty_bytes_ + charge <= capacity_.load();
    const List to = how == Admit::kRead ? admit_locked(s, gap, now, !room, &d) : kProbation;
    s.lists[to].push_front(
        Entry{key, std::move(buf), charge, to, how == Admit::kPrefetch, how == Admit::kRead, now});
    s.map.emplace(key, s.lists[to].begin());
    s.charge += charge;
    if (to == kOnce) s.once_bytes += charge;
    if (how == Admit::kPrefetch) prefetched_bytes_.fetch_add(charge, std::memory_order_relaxed);
    s.note_tails();
  }
  demote(d);
  clean_bytes_ += charge;
  evict_locked(0);
}

void RamTier::claim_prefetched(const ExtentKey& key) {
  Shard& s = shard_for(key);
  Demote d;
  {
    std::lock_guard g(s.mu);
    if (auto f = s.map.find(key); f != s.map.end() && f->second->prefetched) {
      const uint64_t now = tick();
      const uint64_t gap = s.seen.use(ExtentKeyHash{}(key), now);
      s.unprefetch(*f->second, true);
      f->second->last_use = now;
      s.move(f->second, admit_locked(s, gap, now, full(), &d));
      f->second->read_once = true;
      s.note_tails();
    }
  }
  demote(d);
}

bool RamTier::room_to_read_ahead(const ExtentKey& key) {
  // Under the budget lock: insert() adds a block read once and evicts the
  // excess under it, so an excess seen here is one a read ahead can take.
  std::lock_guard b(budget_mu_);
  if (!full()) return true;
  const uint64_t window = once_window(capacity_.load(std::memory_order_relaxed));
  for (auto& sp : shards_) {
    std::lock_guard g(sp->mu);
    if (sp->once_bytes > window) return true;
  }
  // It would push out the block evict_locked() takes next. A block read
  // once by a client (it went in while there was room) may go; a block
  // written or kept only if it has lain unused longer than this one since
  // its last use: the block pushed out is as likely to be read soon, and
  // its read would then cross the link.
  uint64_t victim_last = 0;
  const int vs = victim_shard(&victim_last);
  if (vs < 0) return true;
  {
    Shard& v = *shards_[vs];
    std::lock_guard g(v.mu);
    const Entry* e = v.next_victim();
    if (!e || e->read_once) return true;
    victim_last = e->last_use;
  }
  Shard& s = shard_for(key);
  std::lock_guard g(s.mu);
  const uint64_t last = s.seen.last_use(ExtentKeyHash{}(key));
  return last != ReuseTable::kUnknown && last > victim_last;
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
    s.note_tails();
  }
}

void RamTier::evict_locked(uint64_t extra) {
  const uint64_t cap = capacity_.load();
  const uint64_t window = once_window(cap);
  unsigned empty_in_a_row = 0;
  while (clean_bytes_ + dirty_bytes_ + extra > cap && clean_bytes_ > 0 &&
         empty_in_a_row <= shard_mask_) {
    ConstBufRef victim;  // freed after the shard lock is dropped
    bool found = false;
    // Blocks read once go first, from any shard: taking the next shard's
    // probation tail while another shard holds blocks read once pushed out
    // written blocks still to be read (a load of more than RAM holds hit 45
    // of 64 such blocks across 16 shards, 64 with one shard).
    for (unsigned i = 0; i <= shard_mask_ && !found; ++i) {
      Shard& s = *shards_[(evict_cursor_ + i) & shard_mask_];
      std::lock_guard g(s.mu);
      if (s.once_bytes > window) {
        victim = evict_tail_locked(s, kOnce);
        evict_cursor_ += i + 1;
        found = true;
      }
    }
    if (!found) {
      // The least recently used probation tail of all shards, else
      // protected tail (a block used twice outlasts a flood of writes);
      // with neither (only blocks read once, within their window), the
      // shards in turn.
      uint64_t last = 0;
      const int vs = victim_shard(&last);
      Shard& s = *shards_[vs >= 0 ? static_cast<unsigned>(vs) : evict_cursor_++ & shard_mask_];
      std::lock_guard g(s.mu);
      for (List c : {kProbation, kProtected, kOnce})
        if (!s.lists[c].empty()) {
          victim = evict_tail_locked(s, c);
          found = true;
          break;
        }
    }
    if (!found) {
      ++empty_in_a_row;
      continue;
    }
    empty_in_a_row = 0;
    evictions_.fetch_add(1, std::memory_order_relaxed);
  }
  const uint64_t idle = idle_buffers(cap, clean_bytes_ + dirty_bytes_ + extra);
  BufferPool::set_limit(idle);
  BufferPool::trim(idle);
}

ConstBufRef RamTier::evict_tail_locked(Shard& s, List from) {
  auto it = std::prev(s.lists[from].end());
  ConstBufRef victim = std::move(it->buf);
  clean_bytes_ -= it->charge;
  evicted_bytes_ += it->charge;
  s.map.erase(it->key);
  s.remove(it);
  s.note_tails();
  return victim;
}

uint64_t RamTier::once_window(uint64_t cap) const {
  // The newest blocks read once stay a moment (a 32nd of the shard): a read
  // split into requests that reach the block one after another
  // (unaligned, or parallel extents of one load) finds it.
  return cap / shards_.size() / 32;
}

uint64_t RamTier::idle_buffers(uint64_t cap, uint64_t used) {
  // Idle recycled buffers live in the same memory: they may fill what the
  // clean and dirty bytes leave of the capacity, and a small reserve past
  // it. Without the reserve a full tier gave each evicted buffer back to
  // the system just before the next block read from the backing dir
  // faulted in a fresh one: the kernel zeroing pages was half of kvfs's
  // CPU time when loads read more than RAM holds. 16 MiB covers the blocks
  // of the reads in flight at once (32 readers of 512 KiB chunks).
  return (cap > used ? cap - used : 0) +
         std::min<uint64_t>(kIdleReserveMax, std::max<uint64_t>(kIdleReserveMin, cap / 32));
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
    BufferPool::set_limit(idle_buffers(capacity_.load(), clean_bytes_ + dirty_bytes_));
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
    std::list<Entry> gone[3];
    {
      std::lock_guard g(sp->mu);
      for (int i = 0; i < 3; ++i) {
        gone[i].swap(sp->lists[i]);
        for (Entry& e : gone[i])
          if (e.prefetched) sp->unprefetch(e, false);
      }
      sp->map.clear();
      clean_bytes_ -= sp->charge;
      sp->charge = 0;
      sp->protected_bytes = 0;
      sp->once_bytes = 0;
      sp->note_tails();
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
    st.admitted += sp->admitted;
  }
  st.hits = hits_.load();
  st.misses = misses_.load();
  st.evictions = evictions_.load();
  st.evicted_bytes = evicted_bytes_.load();
  st.backpressure_waits = waits_.load();
  return st;
}

}  // namespace kvfs
