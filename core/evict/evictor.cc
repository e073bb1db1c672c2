// SPDX-License-Identifier: Apache-2.0
// Evictor: the passes, LRU and admin eviction, housekeeping. Reclaiming
// segments (copy forward, delete) is in evictor_reclaim.cc.
#include "core/evict/evictor.h"

#include <algorithm>
#include <chrono>
#include <shared_mutex>

#include "core/backing/backing_io.h"
#include "core/data/file_data.h"
#include "core/flush/flusher.h"
#include "core/index/index.h"
#include "core/namespace/namespace.h"
#include "core/ram/ram_tier.h"
#include "core/segments/segment_store.h"
#include "core/space/space_budget.h"
#include "core/util/log.h"

namespace kvfs {
namespace {

constexpr int64_t kSec = 1000000000;

bool is_tmp_name(const std::string& n) {
  return (n.size() > 4 && n.compare(n.size() - 4, 4, ".tmp") == 0) ||
         n.rfind(".o_direct_probe_", 0) == 0;
}

uint64_t live_bytes_locked(const Inode& in) {
  uint64_t n = 0;
  for (const BlockSlot& s : in.blocks)
    if (s.ext.valid()) n += align_up(s.ext.len);
  return n;
}

}  // namespace

Evictor::Evictor(const Parts& parts) : p_(parts), started_ns_(parts.clock->now_ns()) {
  grace_ns_ = static_cast<int64_t>(p_.cfg->evict_grace_s * kSec);
}

Evictor::~Evictor() {
  stop();
}

void Evictor::set_unlink_settled(UnlinkSettled fn) {
  std::lock_guard l(settled_mu_);
  unlink_settled_ = std::move(fn);
}

void Evictor::start() {
  thread_ = std::thread([this] { run(); });
}

void Evictor::stop() {
  p_.budget->stop();
  if (thread_.joinable()) thread_.join();
  log_held(true);
}

void Evictor::log_held(bool now) {
  static const char* const kWhy[] = {"over the capacity", "", "orphaned tmp files",
                                     "in a reclaimed segment"};
  for (int r = 0; r < 4; ++r) {  // what the rate limit held back
    LogTally& t = tally_[r];
    uint64_t held = 0;
    if (t.files.load() == 0 || !(now || t.limiter.allow(&held))) continue;
    if (uint64_t f = t.files.exchange(0))
      spdlog::info("evicted {} files ({} bytes) {}", f, t.bytes.exchange(0), kWhy[r]);
  }
}

double Evictor::grace_s() const {
  return double(grace_ns_.load()) / kSec;
}
void Evictor::set_grace_s(double s) {
  grace_ns_ = static_cast<int64_t>(s * kSec);
}

EvictorStats Evictor::stats() const {
  EvictorStats s;
  s.capacity = p_.budget->capacity();
  s.evicted_capacity = ev_cap_.load();
  s.evicted_admin = ev_admin_.load();
  s.evicted_tmp = ev_tmp_.load();
  s.evicted_reclaim = ev_reclaim_.load();
  s.evicted_bytes = ev_bytes_.load();
  s.dirs_removed = dirs_removed_.load();
  s.segments_deleted = segs_deleted_.load();
  const SegmentStore::RetiringStats r = p_.segs->retiring();
  s.segments_retiring = r.files;
  s.retiring_bytes = r.bytes;
  s.reclaim_copied_bytes = copied_.load();
  s.enospc = p_.budget->refusals();
  return s;
}

void Evictor::run() {
  for (;;) {
    // A periodic pass as well as the asked-for ones: housekeeping has no
    // other trigger.
    const SpaceBudget::Demand d = p_.budget->next_pass(std::chrono::seconds(1));
    if (d.stop) return;
    // Progress is anything evicted, copied or deleted, whatever the flushes
    // add meanwhile: a waiting flush compares passes by it.
    auto mark = [&] {
      return ev_cap_.load() + ev_admin_.load() + ev_tmp_.load() + ev_reclaim_.load() +
             segs_deleted_.load() + copied_.load();
    };
    const uint64_t before = mark();
    pass(d.backing_full);
    p_.budget->pass_done(mark() != before);
  }
}

bool Evictor::evictable_locked(Inode& in, bool force, int64_t now) const {
  // A peer's file is its owner's to evict; here it holds only RAM, which
  // the RAM tier takes back on its own.
  if (!in.is_reg() || in.evicted || in.peer) return false;
  if (force) return true;
  const int64_t protect = grace_ns_.load() + int64_t(p_.cfg->kernel_cache_s * kSec);
  return in.opens.handles() == 0 && !in.dirty() && !in.flush.in_flight() &&
         now - in.last_access_ns.load(std::memory_order_relaxed) >= protect;
}

std::vector<Evictor::Cand> Evictor::candidates(const std::function<bool(Inode&)>& want) {
  std::vector<Cand> v;
  for (InodeRef& in : p_.ns->all()) {
    if (in->dir) continue;
    std::lock_guard g(in->mu);
    if (!in->is_reg() || !want(*in)) continue;
    v.push_back({in, in->last_access_ns.load(std::memory_order_relaxed), live_bytes_locked(*in)});
  }
  return v;
}

uint64_t Evictor::remove(const std::vector<InodeRef>& victims, bool force, Reason why,
                         EvictResult* res, const std::function<bool(Inode&)>& extra) {
  const int64_t now = p_.clock->now_ns();
  std::vector<Namespace::Removed> out;
  Status s = p_.ns->remove_many(
      victims,
      [&](Inode& in) {
        bool ok = (why == Reason::kTmp ? in.is_reg() && !in.peer && in.opens.handles() == 0
                                       : evictable_locked(in, force, now)) &&
                  (!extra || extra(in));
        if (!ok && res) ++res->skipped;
        return ok;
      },
      &out);
  if (!s.ok()) {
    spdlog::error("eviction of {} files failed: {}", victims.size(), s.ToString());
    return 0;
  }
  uint64_t bytes = 0;
  std::vector<uint64_t> parents;
  for (auto& r : out) {
    {
      std::lock_guard g(r.in->mu);
      bytes += r.in->size;
      if (r.in->opens.handles() == 0) p_.data->free_locked(*r.in);
    }
    parents.push_back(r.parent);
    p_.notices->gone(r.parent, r.name, r.in->ino);
  }
  if (res) {
    res->files += out.size();
    res->bytes += bytes;
  }
  ev_bytes_ += bytes;
  log_removed(why, out.size(), bytes, res);
  switch (why) {
    case Reason::kCapacity: ev_cap_ += out.size(); break;
    case Reason::kAdmin: ev_admin_ += out.size(); break;
    case Reason::kTmp: ev_tmp_ += out.size(); break;
    case Reason::kReclaim: ev_reclaim_ += out.size(); break;
  }
  if (p_.cfg->clean_empty_dirs) remove_empty_dirs(std::move(parents), now);
  return out.size();
}

void Evictor::log_removed(Reason why, uint64_t files, uint64_t bytes, const EvictResult* res) {
  static const char* const kWhy[] = {"over the capacity (least recently used)",
                                     "asked by kvfs-admin", "orphaned tmp files",
                                     "in a reclaimed segment"};
  if (why == Reason::kAdmin) {  // one per command: always
    spdlog::info("evicted {} files ({} bytes) {}{}", files, bytes, kWhy[int(why)],
                 res && res->skipped ? ", " + std::to_string(res->skipped) + " protected ones kept"
                                     : std::string());
    return;
  }
  if (files == 0) return;
  // Capacity eviction runs in every pass: one line per interval, with what
  // went since the last one.
  LogTally& t = tally_[int(why)];
  t.files += files;
  t.bytes += bytes;
  uint64_t held = 0;
  if (!t.limiter.allow(&held)) return;
  spdlog::info("evicted {} files ({} bytes) {}", t.files.exchange(0), t.bytes.exchange(0),
               kWhy[int(why)]);
}

void Evictor::remove_empty_dirs(std::vector<uint64_t> dirs, int64_t now) {
  std::sort(dirs.begin(), dirs.end());
  dirs.erase(std::unique(dirs.begin(), dirs.end()), dirs.end());
  const int64_t protect = grace_ns_.load() + int64_t(p_.cfg->kernel_cache_s * kSec);
  while (!dirs.empty()) {
    uint64_t ino = dirs.back();
    dirs.pop_back();
    if (ino == kRootIno) continue;
    InodeRef d = p_.ns->get(ino);
    // A directory made or walked moments ago may be about to receive a file
    // (mkdir -p, then create): only idle ones go. (Its mtime is no guide: the
    // eviction that emptied it just set it.)
    if (!d) continue;
    if (now - d->last_access_ns.load() < protect) {
      // Tried again by later passes once idle: no further eviction may come
      // to this directory, and clean_empty_dirs promises it goes.
      if (later_dirs_.size() < kMaxLaterDirs) later_dirs_.push_back(ino);
      continue;
    }
    auto parent = p_.ns->remove_empty_dir(d);
    if (!parent.ok()) continue;
    dirs_removed_.fetch_add(1);
    p_.notices->gone(*parent, d->name, d->ino);
    dirs.push_back(*parent);
  }
}

uint64_t Evictor::housekeep_now() {
  std::lock_guard p(pass_mu_);
  return housekeeping(p_.clock->now_ns());
}

uint64_t Evictor::housekeeping(int64_t now) {
  if (!p_.cfg->clean_tmp) return 0;
  const int64_t age = int64_t(p_.cfg->tmp_max_age_s * kSec);
  std::vector<InodeRef> v;
  for (auto& c : candidates([&](Inode& in) {
         if (in.opens.handles() != 0) return false;
         // Last changed before this daemon started: its writer's handle died
         // with the previous one (a crash, or an unmount before the rename),
         // so nobody can finish it, whatever its age. vLLM keeps one tmp name
         // per I/O thread and creates it O_EXCL: a tmp a crash left would
         // refuse that thread's stores of the block until tmp_max_age.
         if (in.ctime_ns < started_ns_) return true;
         return now - in.mtime_ns >= age &&
                now - in.last_access_ns.load(std::memory_order_relaxed) >= age;
       })) {
    std::shared_lock ns(p_.ns->mu());
    if (c.in->linked.load() && is_tmp_name(c.in->name)) v.push_back(c.in);
  }
  return v.empty() ? 0 : remove(v, false, Reason::kTmp, nullptr);
}

uint64_t Evictor::evict_lru(uint64_t need, int64_t now) {
  auto c = candidates([&](Inode& in) { return evictable_locked(in, false, now); });
  std::sort(c.begin(), c.end(), [](const Cand& a, const Cand& b) { return a.last < b.last; });
  std::vector<InodeRef> v;
  uint64_t got = 0;
  for (auto& x : c) {
    if (got >= need) break;
    got += x.bytes;
    v.push_back(std::move(x.in));
  }
  if (v.empty()) return 0;
  return remove(v, false, Reason::kCapacity, nullptr);
}

void Evictor::pass(bool backing_full) {
  std::lock_guard p(pass_mu_);
  const int64_t now = p_.clock->now_ns();
  const int64_t hk_every = std::max<int64_t>(kSec, int64_t(p_.cfg->tmp_max_age_s * kSec) / 10);
  if (now - last_housekeeping_ >= std::min<int64_t>(hk_every, 60 * kSec)) {
    last_housekeeping_ = now;
    housekeeping(now);
  }
  if (!later_dirs_.empty() && p_.cfg->clean_empty_dirs) {
    std::vector<uint64_t> dirs;
    dirs.swap(later_dirs_);
    remove_empty_dirs(std::move(dirs), now);
  }
  // What the rate limit held back is said within its interval, not only by
  // the next eviction (or at unmount, when none comes).
  log_held(false);
  SegmentStore& segs = *p_.segs;
  // Retired segments past their grace; all of them when the disk is full.
  segs_deleted_ += segs.delete_retired(now, backing_full ? UINT64_MAX : 0);
  uint64_t cap = p_.budget->capacity();
  const uint64_t disk = segs.used_bytes();  // with the retired ones, as the flush gate counts
  // Room granted to flushes in progress, and asked for by waiting ones,
  // counts as used: the pass must make room for it too.
  const uint64_t pending = p_.budget->pending();
  // Retired segments in their grace live in the room between the low
  // watermark and the cap: they never make a live file go. When the
  // flushes need that room, the oldest go first, before any live file.
  if (disk + pending > cap) segs_deleted_ += segs.delete_retired(now, disk + pending - cap);
  const uint64_t used = segs.segment_bytes();
  if (backing_full) cap = std::min(cap, used);  // the filesystem is smaller than the cap
  // Room was made: writers refused for lack of it may go again.
  auto room_made = [&] {
    if (segs.used_bytes() >= disk) return;
    p_.budget->room_made();
    p_.ram->set_flush_error(Status::OK());
    p_.flusher->retry_now();
  };
  if (used + pending <= cap * p_.cfg->high_watermark && !backing_full) return room_made();
  const uint64_t low = static_cast<uint64_t>(cap * p_.cfg->low_watermark);
  const uint64_t target = low > pending ? low - pending : 0;
  // Space, not live data, is what must fit: each round evicts the least
  // recently used files worth the excess, then reclaims the segments they
  // leave empty or sparse, until the segments fit under the low watermark.
  uint64_t lru_evicted = 0;
  for (int round = 0; round < 4; ++round) {
    const uint64_t now_used = segs.segment_bytes();
    if (now_used <= target) break;
    lru_evicted += evict_lru(now_used - target, now);
    reclaim(target, now, false, backing_full);
    if (segs.segment_bytes() >= now_used) break;  // no progress: all protected
  }
  // A pass that freed nothing and could evict nothing, with the live data
  // small enough that the waiting flushes fit beside it: the excess is dead
  // space in segments too full to be reclaimed, each holding a few live
  // files the LRU may not take (open, in their grace period). Compact the
  // sparsest (copy their files forward) rather than refuse writes while much
  // of the disk is holes. Only then: while the LRU can evict, its passes
  // free segments by themselves, and copies cost writes, RAM and flush room.
  // (The live data need not fit under the target, which the waiting flushes
  // lower: readers holding a few files open under a small cap would
  // otherwise see writes refused with most of the cap dead space.)
  if (lru_evicted == 0 && segs.segment_bytes() >= used && segs.live_bytes() + pending <= cap &&
      !backing_full)
    reclaim(target, now, true, false);
  // The segments reclaimed in this pass may be retired, on the disk still:
  // make room for the waiting flushes now rather than at the next pass.
  if (const uint64_t d = segs.used_bytes(); d + pending > p_.budget->capacity())
    segs_deleted_ += segs.delete_retired(now, d + pending - p_.budget->capacity());
  room_made();
}

Result<EvictResult> Evictor::evict(const EvictRequest& r) {
  std::lock_guard p(pass_mu_);
  const int64_t now = p_.clock->now_ns();
  EvictResult res;
  std::vector<InodeRef> v;
  auto take = [&](std::vector<Cand>& c) {
    for (auto& x : c) {
      if (r.dry_run) {
        std::lock_guard g(x.in->mu);
        if (evictable_locked(*x.in, r.force, now)) {
          ++res.files;
          res.bytes += x.in->size;
        } else {
          ++res.skipped;
        }
      } else {
        v.push_back(std::move(x.in));
      }
    }
  };
  using K = EvictRequest::Kind;
  if (r.kind == K::kPath) {
    InodeRef in = p_.ns->get(r.ino);
    if (!in) return Status::NotFound();
    if (in->dir) return Status::IsDir("use a prefix to evict a directory's files");
    std::vector<Cand> c{{in, 0, 0}};
    take(c);
  } else if (r.kind == K::kPrefix) {
    InodeRef d = p_.ns->get(r.ino);
    if (!d) return Status::NotFound();
    if (!d->dir) return Status::NotDir();
    std::vector<Cand> c;
    for (InodeRef& in : p_.ns->all())
      if (!in->dir && p_.ns->is_under(*in, r.ino)) c.push_back({in, 0, 0});
    take(c);
  } else if (r.kind == K::kAll) {
    auto c = candidates([](Inode&) { return true; });
    take(c);
  } else if (r.kind == K::kOlderThan) {
    const int64_t limit = now - int64_t(r.older_than_s * kSec);
    auto c = candidates([&](Inode& in) { return in.last_access_ns.load() <= limit; });
    take(c);
  } else {  // kToSize
    const uint64_t live = p_.segs->live_bytes();
    if (live <= r.target_bytes) return res;
    auto c = candidates([&](Inode& in) { return evictable_locked(in, r.force, now); });
    std::sort(c.begin(), c.end(), [](const Cand& a, const Cand& b) { return a.last < b.last; });
    uint64_t got = 0;
    std::vector<Cand> pick;
    for (auto& x : c) {
      if (got >= live - r.target_bytes) break;
      got += x.bytes;
      pick.push_back(std::move(x));
    }
    take(pick);
  }
  if (!r.dry_run && !v.empty()) remove(v, r.force, Reason::kAdmin, &res);
  // The user asked for the whole subtree: the directories it leaves empty
  // below the prefix go too, recently used or not (the prefix stays: a
  // client may be about to write into it).
  if (!r.dry_run && r.kind == K::kPrefix) {
    std::vector<InodeRef> dirs;
    for (InodeRef& in : p_.ns->all())
      if (in->dir && in->ino != r.ino && p_.ns->is_under(*in, r.ino)) dirs.push_back(in);
    for (bool progress = true; progress;) {  // deepest first, one level per round
      progress = false;
      for (InodeRef& d : dirs) {
        if (!d) continue;
        auto parent = p_.ns->remove_empty_dir(d);
        if (!parent.ok()) continue;
        dirs_removed_.fetch_add(1);
        p_.notices->gone(*parent, d->name, d->ino);
        d.reset();
        progress = true;
      }
    }
  }
  if (!r.dry_run) p_.budget->wake();  // reclaim what was freed
  return res;
}

}  // namespace kvfs
