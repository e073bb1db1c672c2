#include "core/evictor.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <shared_mutex>
#include <unordered_set>

#include "core/block_store.h"
#include "core/flusher.h"
#include "core/index.h"
#include "core/log.h"
#include "core/segment_store.h"

namespace kvfs {
namespace {

constexpr int64_t kSec = 1000000000;
constexpr uint64_t kMetaReserve = 1 << 20;
// Compaction rewrites a segment's live part to free the rest: never more than
// it frees.
constexpr double kCompactMaxLive = 0.5;
// A kept segment is tried again at every pass: one warning per interval.
LogLimiter g_kept_log;

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

Evictor::Evictor(BlockStore* store, const Clock* clock) : store_(store), clock_(clock) {
  capacity_ = store->cfg_.capacity;
  grace_ns_ = static_cast<int64_t>(store->cfg_.evict_grace_s * kSec);
}

Evictor::~Evictor() {
  stop();
}

void Evictor::start() {
  thread_ = std::thread([this] { run(); });
}

void Evictor::stop() {
  {
    std::lock_guard l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  room_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  static const char* const kWhy[] = {"over the capacity", "", "orphaned tmp files",
                                     "in a reclaimed segment"};
  for (int r = 0; r < 4; ++r)  // what the rate limit held back
    if (uint64_t f = tally_[r].files.exchange(0))
      spdlog::info("evicted {} files ({} bytes) {}", f, tally_[r].bytes.exchange(0), kWhy[r]);
}

void Evictor::kick() {
  {
    std::lock_guard l(mu_);
    kicked_ = true;
  }
  cv_.notify_one();
}

void Evictor::backing_full() {
  {
    std::lock_guard l(mu_);
    full_ = true;
    kicked_ = true;
  }
  cv_.notify_one();
}

Status Evictor::free_space_now() {
  const uint64_t before = store_->segs_->used_bytes();
  std::unique_lock l(mu_);
  const uint64_t start = pass_count_;
  full_ = kicked_ = true;
  cv_.notify_one();
  // Two passes: one may already be running with the old target.
  room_cv_.wait_for(l, std::chrono::seconds(10), [&] { return stop_ || pass_count_ >= start + 2; });
  if (store_->segs_->used_bytes() < before) return Status::OK();
  return Status::NoSpace("backing filesystem full and nothing can be evicted");
}

void Evictor::set_capacity(uint64_t bytes) {
  capacity_ = bytes;
  kick();
}

double Evictor::grace_s() const {
  return double(grace_ns_.load()) / kSec;
}
void Evictor::set_grace_s(double s) {
  grace_ns_ = static_cast<int64_t>(s * kSec);
}

EvictorStats Evictor::stats() const {
  EvictorStats s;
  s.capacity = capacity_.load();
  s.evicted_capacity = ev_cap_.load();
  s.evicted_admin = ev_admin_.load();
  s.evicted_tmp = ev_tmp_.load();
  s.evicted_reclaim = ev_reclaim_.load();
  s.evicted_bytes = ev_bytes_.load();
  s.dirs_removed = dirs_removed_.load();
  s.segments_deleted = segs_deleted_.load();
  s.reclaim_copied_bytes = copied_.load();
  s.enospc = enospc_.load();
  return s;
}

void Evictor::run() {
  for (;;) {
    bool force;
    {
      std::unique_lock l(mu_);
      // A periodic check as well as kicks: housekeeping has no other trigger.
      cv_.wait_for(l, std::chrono::seconds(1), [&] { return stop_ || kicked_; });
      if (stop_) return;
      kicked_ = false;
      force = full_;
      full_ = false;
    }
    pass(force);
    {
      std::lock_guard l(mu_);
      ++pass_count_;
    }
    room_cv_.notify_all();
  }
}

Status Evictor::wait_for_room(uint64_t bytes, const std::function<void()>& serve) {
  // Data may fill the cap plus one segment, less a reserve that keeps room
  // for metadata records (which never wait here).
  const uint64_t slack = store_->cfg_.segment_size - kMetaReserve;
  // Two flushers may ask at once: a grant is held in inflight_ until the
  // batch is on disk (and counted in the segment sizes).
  auto fits = [&] {
    uint64_t cur = inflight_.load();
    while (store_->segs_->used_bytes() + cur + bytes <= capacity_.load() + slack)
      if (inflight_.compare_exchange_weak(cur, cur + bytes)) return true;
    return false;
  };
  if (store_->segs_->used_bytes() + bytes > capacity_.load() * store_->cfg_.high_watermark) kick();
  if (fits()) return Status::OK();
  // Tell the passes how much room is wanted beyond what is granted, and wait
  // while they make progress (each full pass frees something); give up once
  // a pass frees nothing, or after a minute.
  wanted_ += bytes;
  std::unique_lock l(mu_);
  bool granted = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  uint64_t last_used = store_->segs_->used_bytes();
  uint64_t last_live = store_->segs_->live_bytes();
  while (!stop_ && std::chrono::steady_clock::now() < deadline) {
    const uint64_t start = pass_count_;
    kicked_ = true;
    cv_.notify_one();
    // start + 2: at least one pass that began after this request ended.
    const auto round_end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    auto done = [&] {
      granted = granted || fits();
      return granted || stop_ || pass_count_ >= start + 2;
    };
    while (!done() && std::chrono::steady_clock::now() < round_end) {
      room_cv_.wait_for(l, std::chrono::milliseconds(100));
      l.unlock();
      serve();
      l.lock();
    }
    if (granted || pass_count_ < start + 2) break;  // room, or the evictor is stuck
    // Progress is space freed, or files evicted: their segments empty out
    // over the next passes.
    const uint64_t used = store_->segs_->used_bytes();
    const uint64_t live = store_->segs_->live_bytes();
    if (used >= last_used && live >= last_live) break;  // a whole pass freed nothing
    last_used = std::min(used, last_used);
    last_live = std::min(live, last_live);
  }
  wanted_ -= bytes;
  if (granted) return Status::OK();
  enospc_.fetch_add(1);
  return Status::AtCapacity(
      "backing dir is at its capacity (" + format_size(capacity_.load()) +
      ") and nothing can be evicted (segments " + std::to_string(store_->segs_->used_bytes()) +
      " B, live " + std::to_string(store_->segs_->live_bytes()) + " B, in flight " +
      std::to_string(inflight_.load()) + " B, asking " + std::to_string(bytes) + " B)");
}

void Evictor::release_room(uint64_t bytes) {
  inflight_.fetch_sub(bytes);
}

bool Evictor::evictable_locked(Inode& in, bool force, int64_t now) const {
  if (!in.is_reg() || in.evicted) return false;
  if (force) return true;
  const int64_t protect = grace_ns_.load() + int64_t(store_->cfg_.kernel_cache_s * kSec);
  return in.open_count == 0 && !in.dirty() && !in.in_flush &&
         now - in.last_access_ns.load(std::memory_order_relaxed) >= protect;
}

std::vector<Evictor::Cand> Evictor::candidates(const std::function<bool(Inode&)>& want) {
  std::vector<Cand> v;
  for (InodeRef& in : store_->ns_->all()) {
    if (in->dir) continue;
    std::lock_guard g(in->mu);
    if (!in->is_reg() || !want(*in)) continue;
    v.push_back({in, in->last_access_ns.load(std::memory_order_relaxed), live_bytes_locked(*in)});
  }
  return v;
}

uint64_t Evictor::remove(const std::vector<InodeRef>& victims, bool force, Reason why,
                         EvictResult* res, const std::function<bool(Inode&)>& extra) {
  const int64_t now = clock_->now_ns();
  std::vector<Namespace::Removed> out;
  Status s = store_->ns_->remove_many(
      victims,
      [&](Inode& in) {
        bool ok = (why == Reason::kTmp ? in.is_reg() && in.open_count == 0
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
      if (r.in->open_count == 0) store_->free_data_locked(*r.in);
    }
    parents.push_back(r.parent);
    if (store_->on_evict_) store_->on_evict_(r.parent, r.name, r.in->ino);
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
  if (store_->cfg_.clean_empty_dirs) remove_empty_dirs(std::move(parents), now);
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
  const int64_t protect = grace_ns_.load() + int64_t(store_->cfg_.kernel_cache_s * kSec);
  while (!dirs.empty()) {
    uint64_t ino = dirs.back();
    dirs.pop_back();
    if (ino == kRootIno) continue;
    InodeRef d = store_->ns_->get(ino);
    // A directory made or walked moments ago may be about to receive a file
    // (mkdir -p, then create): only idle ones go. (Its mtime is no guide: the
    // eviction that emptied it just set it.)
    if (!d || now - d->last_access_ns.load() < protect) continue;
    auto parent = store_->ns_->remove_empty_dir(d);
    if (!parent.ok()) continue;
    dirs_removed_.fetch_add(1);
    if (store_->on_evict_) store_->on_evict_(*parent, d->name, d->ino);
    dirs.push_back(*parent);
  }
}

uint64_t Evictor::housekeep_now() {
  std::lock_guard p(pass_mu_);
  return housekeeping(clock_->now_ns());
}

uint64_t Evictor::housekeeping(int64_t now) {
  if (!store_->cfg_.clean_tmp) return 0;
  const int64_t age = int64_t(store_->cfg_.tmp_max_age_s * kSec);
  std::vector<InodeRef> v;
  for (auto& c : candidates([&](Inode& in) {
         return in.open_count == 0 && now - in.mtime_ns >= age &&
                now - in.last_access_ns.load(std::memory_order_relaxed) >= age;
       })) {
    std::shared_lock ns(store_->ns_->mu());
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

bool Evictor::reclaim_segment(uint64_t seg, bool copy, int64_t now) {
  BlockStore& st = *store_;
  struct Wait {
    InodeRef in;
    uint64_t version;
  };
  std::vector<Wait> waits;
  bool blocked = false;
  // 1. Files with data in the segment: copy forward, or evict with it.
  std::vector<InodeRef> holders;
  for (InodeRef& in : st.ns_->all()) {
    if (in->dir) continue;
    std::lock_guard g(in->mu);
    for (const BlockSlot& s : in->blocks)
      if (s.ext.seg == seg) {
        holders.push_back(in);
        break;
      }
  }
  std::vector<InodeRef> evict;
  for (InodeRef& in : holders) {
    if (!copy) {
      evict.push_back(in);
      continue;
    }
    uint64_t copied = 0;
    for (uint32_t idx = 0;; ++idx) {
      if (!st.ram_->reserve_dirty(kBlockSize).ok()) {
        blocked = true;
        break;
      }
      uint64_t used = 0;
      bool done = false;
      {
        std::shared_lock rl(st.reclaim_mu_);
        std::lock_guard g(in->mu);
        if (in->open_writers > 0 || !in->linked.load() || in->evicted) {
          blocked |= in->linked.load();
          done = true;
        } else if (idx >= in->blocks.size()) {
          done = true;
        } else if (BlockSlot& s = in->blocks[idx]; s.ext.seg == seg && !s.buf) {
          ConstBufRef src = st.ram_->lookup(ExtentKey{s.ext.seg, s.ext.off});
          Status rs = src ? Status::OK() : st.read_block(*in, idx, s.ext, &src);
          if (rs.ok()) {
            BufRef nb = BufferPool::allocate(s.len);
            std::memcpy(nb->data(), src->data(), align_up(s.len));
            used = nb->capacity();
            s.buf = std::move(nb);
            s.charge = static_cast<uint32_t>(used);
            in->dirty_charge += used;
            ++in->version;
            in->reclaiming = true;
            copied += s.len;
          } else {
            blocked = true;
          }
        }
      }
      st.ram_->release_dirty(kBlockSize - used);
      if (done) break;
    }
    if (copied) {
      std::lock_guard g(in->mu);
      waits.push_back({in, in->version});
      st.flusher_->enqueue_ungated_locked(in);
      copied_ += copied;
    }
  }
  if (!evict.empty()) {
    EvictResult r;
    remove(evict, false, Reason::kReclaim, &r);
    blocked |= r.skipped > 0;
  }
  // 2. Snapshots of live inodes held only by this segment: write them again.
  // Tombstones whose inode may still have an older record in another
  // segment are carried forward (below), or a rebuild would bring it back.
  const uint64_t oldest_elsewhere = st.segs_->min_seq_except(seg);
  std::vector<RecordEntry> carry;
  std::unordered_set<uint64_t> carried;  // seqs in carry
  uint64_t scanned = 0;
  Status ss = st.segs_->scan(
      seg,
      [&](uint64_t, const RecordHeader&, std::vector<RecordEntry>& es) {
        for (auto& e : es) {
          if (e.kind == EntryKind::kTombstone) {
            // The same tombstone may sit here more than once (logged again
            // after a crash, carried in before): one copy is enough.
            if (oldest_elsewhere < e.snap.seq && carried.insert(e.snap.seq).second)
              carry.push_back(std::move(e));
            continue;
          }
          InodeRef in = st.ns_->get(e.snap.ino);
          if (!in) continue;
          std::shared_lock ns(st.ns_->mu());
          // committed is written under the shared lock plus mu (the
          // flusher): read it under both.
          std::lock_guard g(in->mu);
          if (!in->linked.load() || !in->committed || in->committed->seq != e.snap.seq) continue;
          ++in->version;
          waits.push_back({in, in->version});
          st.flusher_->enqueue_ungated_locked(in);
        }
      },
      &scanned);
  // Records that could not be read are not known to be dead.
  SegmentInfo info;
  for (auto& i : st.segs_->list())
    if (i.id == seg) info = i;
  if (!ss.ok() || scanned < info.valid) {
    if (uint64_t held = 0; g_kept_log.allow(&held))
      spdlog::warn("segment {} kept: its records could not all be read ({}; {} similar not shown)",
                   seg, ss.ok() ? "a damaged record at " + std::to_string(scanned) : ss.ToString(),
                   held);
    blocked = true;
  }
  // 3. Wait until the flushers have written all of it elsewhere.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (auto& w : waits) {
    std::unique_lock l(w.in->mu);
    while (w.in->durable_version < w.version && w.in->linked.load() && w.in->active_writers == 0 &&
           std::chrono::steady_clock::now() < deadline)
      st.flusher_->wait_durable_for(l, std::chrono::seconds(1));
    if (w.in->durable_version < w.version && w.in->linked.load()) blocked = true;
  }
  if (!blocked && !carry.empty()) {
    const size_t n = carry.size();
    if (Status c = st.flusher_->log_meta(std::move(carry), std::chrono::seconds(10)); !c.ok()) {
      if (uint64_t held = 0; g_kept_log.allow(&held))
        spdlog::warn(
            "segment {} kept: {} tombstones could not be carried forward: {} ({} similar "
            "not shown)",
            seg, n, c.ToString(), held);
      blocked = true;
    }
  }
  // 4. Delete it if nothing points into it any more and the index has
  // applied every record in it (a gap left by a failed commit waits for the
  // next mount's catch-up).
  for (auto& i : st.segs_->list())
    if (i.id == seg && (i.live != 0 || i.open || i.applied < i.valid)) blocked = true;
  if (blocked) return false;
  std::string path;
  {
    // Readers that chose an extent in it hold this shared until their read
    // completes; once forgotten, none can choose one. The unlink itself (a
    // round trip on NFS, unbounded when it stalls) runs after, so that RAM
    // hits, which take reclaim_mu_ shared too, never wait for it.
    std::unique_lock rl(st.reclaim_mu_);
    path = st.segs_->forget_segment(seg);
  }
  if (Status s = st.segs_->unlink_segment(path); !s.ok()) {
    spdlog::error("cannot delete segment {}: {}", seg, s.ToString());
    return false;
  }
  // The index forgets the segment too; if this is lost in a crash, the next
  // mount logs it as gone (with nothing in it).
  IndexBatch drop;
  drop.segment_drops.push_back(seg);
  if (Status s = st.index_->commit(drop, false); !s.ok())
    spdlog::warn("segment {} deleted, its index entry stays: {}", seg, s.ToString());
  segs_deleted_.fetch_add(1);
  return true;
}

void Evictor::reclaim(uint64_t target_used, int64_t now, bool compact) {
  BlockStore& st = *store_;
  auto list = st.segs_->list();
  std::vector<SegmentInfo> v;
  for (auto& s : list)
    if (!s.open && s.bytes > 0) v.push_back(s);
  auto ratio = [](const SegmentInfo& s) { return double(s.live) / double(s.bytes); };
  std::sort(v.begin(), v.end(), [&](auto& a, auto& b) { return ratio(a) < ratio(b); });
  for (auto& s : v) {
    // Reclaiming reads and deletes segment files: not while they hang.
    if (st.io_->stalled()) break;
    const uint64_t used = st.segs_->used_bytes();
    if (used <= target_used) break;
    const bool sparse = s.live == 0 || ratio(s) <= st.cfg_.reclaim_ratio;
    if (!sparse && (!compact || ratio(s) > kCompactMaxLive)) break;
    // Copying needs room under the flush gate (capacity plus one segment,
    // less the metadata reserve); without it a sparse segment goes whole,
    // with the files in it that may be evicted. A fuller one being compacted
    // is always copied, never evicted: sparsity is not recency, and its
    // files may be the newest (a tmp file between its close and its
    // rename). The copy may pass the gate by up to half a segment until
    // the old segment is deleted.
    const bool room = used + inflight_.load() + s.live + 2 * kMetaReserve <=
                      capacity_.load() + st.cfg_.segment_size;
    const bool copy = room || !sparse;
    // The copies bypass the flush gate: hold their room until they are written.
    if (copy) inflight_ += s.live;
    reclaim_segment(s.id, copy, now);
    if (copy) inflight_ -= s.live;
  }
}

void Evictor::pass(bool backing_full) {
  std::lock_guard p(pass_mu_);
  const int64_t now = clock_->now_ns();
  const int64_t hk_every = std::max<int64_t>(kSec, int64_t(store_->cfg_.tmp_max_age_s * kSec) / 10);
  if (now - last_housekeeping_ >= std::min<int64_t>(hk_every, 60 * kSec)) {
    last_housekeeping_ = now;
    housekeeping(now);
  }
  SegmentStore& segs = *store_->segs_;
  uint64_t cap = capacity_.load();
  const uint64_t used = segs.used_bytes();
  if (backing_full) cap = std::min(cap, used);  // the filesystem is smaller than the cap
  // Room granted to flushes in progress, and asked for by waiting ones,
  // counts as used: the pass must make room for it too.
  const uint64_t pending = inflight_.load() + wanted_.load();
  if (used + pending <= cap * store_->cfg_.high_watermark && !backing_full) return;
  const uint64_t low = static_cast<uint64_t>(cap * store_->cfg_.low_watermark);
  const uint64_t target = low > pending ? low - pending : 0;
  // Space, not live data, is what must fit: each round evicts the least
  // recently used files worth the excess, then reclaims the segments they
  // leave empty or sparse, until the segments fit under the low watermark.
  uint64_t lru_evicted = 0;
  for (int round = 0; round < 4; ++round) {
    const uint64_t now_used = segs.used_bytes();
    if (now_used <= target) break;
    lru_evicted += evict_lru(now_used - target, now);
    reclaim(target, now, false);
    if (segs.used_bytes() >= now_used) break;  // no progress: all protected
  }
  // A pass that freed nothing and could evict nothing, with the live data
  // under the target: the excess is dead space in segments too full to be
  // reclaimed, each holding a few live files the LRU may not take (open, in
  // their grace period). Compact the sparsest (copy their files forward)
  // rather than refuse writes while much of the disk is holes. Only then:
  // while the LRU can evict, its passes free segments by themselves, and
  // copies cost writes, RAM and flush room.
  if (lru_evicted == 0 && segs.used_bytes() >= used && segs.live_bytes() <= target)
    reclaim(target, now, true);
  if (segs.used_bytes() < used) {
    // Room was made: writers refused for lack of it may go again.
    store_->no_space_ = false;
    store_->ram_->set_flush_error(Status::OK());
    store_->flusher_->retry_now();
  }
}

Result<EvictResult> Evictor::evict(const EvictRequest& r) {
  std::lock_guard p(pass_mu_);
  const int64_t now = clock_->now_ns();
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
    InodeRef in = store_->ns_->get(r.ino);
    if (!in) return Status::NotFound();
    if (in->dir) return Status::IsDir("use a prefix to evict a directory's files");
    std::vector<Cand> c{{in, 0, 0}};
    take(c);
  } else if (r.kind == K::kPrefix) {
    InodeRef d = store_->ns_->get(r.ino);
    if (!d) return Status::NotFound();
    if (!d->dir) return Status::NotDir();
    std::vector<Cand> c;
    for (InodeRef& in : store_->ns_->all())
      if (!in->dir && store_->ns_->is_under(*in, r.ino)) c.push_back({in, 0, 0});
    take(c);
  } else if (r.kind == K::kAll) {
    auto c = candidates([](Inode&) { return true; });
    take(c);
  } else if (r.kind == K::kOlderThan) {
    const int64_t limit = now - int64_t(r.older_than_s * kSec);
    auto c = candidates([&](Inode& in) { return in.last_access_ns.load() <= limit; });
    take(c);
  } else {  // kToSize
    const uint64_t live = store_->segs_->live_bytes();
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
    for (InodeRef& in : store_->ns_->all())
      if (in->dir && in->ino != r.ino && store_->ns_->is_under(*in, r.ino)) dirs.push_back(in);
    for (bool progress = true; progress;) {  // deepest first, one level per round
      progress = false;
      for (InodeRef& d : dirs) {
        if (!d) continue;
        auto parent = store_->ns_->remove_empty_dir(d);
        if (!parent.ok()) continue;
        dirs_removed_.fetch_add(1);
        if (store_->on_evict_) store_->on_evict_(*parent, d->name, d->ino);
        d.reset();
        progress = true;
      }
    }
  }
  if (!r.dry_run) kick();  // reclaim what was freed
  return res;
}

}  // namespace kvfs
