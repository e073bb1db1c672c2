// SPDX-License-Identifier: Apache-2.0
#include "core/segments/segment_windows.h"

#include <algorithm>
#include <cstring>

#include "core/segments/segment_store.h"

namespace kvfs {

namespace {
// Segments whose last read end is remembered (clients loading at once).
constexpr size_t kTails = 64;
}  // namespace

uint64_t SegmentWindows::max_bytes_for(uint64_t prefetch_bytes, uint64_t ram_size) {
  return std::min({prefetch_bytes, ram_size / 8, uint64_t(32) << 20});
}

SegmentWindows::SegmentWindows(SegmentStore* segs, uint64_t readahead, uint64_t max_bytes)
    : segs_(segs), max_bytes_(max_bytes), readahead_(readahead) {}

SegmentWindows::~SegmentWindows() {
  stop();
}

void SegmentWindows::start() {
  for (unsigned i = 0; i < kThreads; ++i) threads_.emplace_back([this] { run(); });
}

void SegmentWindows::stop() {
  {
    std::lock_guard l(mu_);
    stop_ = true;
    for (WindowRef& w : queue_) w->failed = true;
    queue_.clear();
  }
  work_cv_.notify_all();
  ready_cv_.notify_all();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
  std::lock_guard l(mu_);
  windows_.clear();
}

void SegmentWindows::set_max_bytes(uint64_t bytes) {
  std::lock_guard l(mu_);
  max_bytes_ = bytes;
}

void SegmentWindows::set_readahead(uint64_t bytes) {
  std::lock_guard l(mu_);
  readahead_ = bytes;
}

uint64_t SegmentWindows::readahead() const {
  std::lock_guard l(mu_);
  return readahead_;
}

SegmentWindows::WindowRef SegmentWindows::find_locked(uint64_t seg, uint64_t off) const {
  for (const WindowRef& w : windows_)
    if (w->seg == seg && w->off <= off && off < w->off + kWindow) return w;
  return nullptr;
}

bool SegmentWindows::room_locked() {
  while (!windows_.empty() && (windows_.size() + 1) * kWindow > max_bytes_) {
    // A window reads took from goes before one nobody took yet (reads
    // ahead of several walks would push out each other's windows before
    // they were used), and the oldest first.
    auto oldest = windows_.end();
    auto before = [](const WindowRef& a, const WindowRef& b) {
      if ((a->taken > 0) != (b->taken > 0)) return a->taken > 0;
      return a->stamp < b->stamp;
    };
    for (auto it = windows_.begin(); it != windows_.end(); ++it)
      if ((*it)->ready && (oldest == windows_.end() || before(*it, *oldest))) oldest = it;
    if (oldest == windows_.end()) return false;  // all being read
    if ((*oldest)->taken == 0) ++stats_.unused;
    windows_.erase(oldest);
  }
  return kWindow <= max_bytes_;
}

bool SegmentWindows::take(const Extent& ext, char* dst, bool* timed_out) {
  *timed_out = false;
  // A block (at most 1 MiB) lies in one window or runs into the next.
  WindowRef w[2];
  {
    std::unique_lock l(mu_);
    if (windows_.empty()) return false;
    w[0] = find_locked(ext.seg, ext.off);
    if (!w[0]) return false;
    if (ext.off + ext.len > w[0]->off + kWindow) {
      w[1] = find_locked(ext.seg, w[0]->off + kWindow);
      if (!w[1]) return false;
    }
    // Only a read under way is waited for: it ends by the backing dir's
    // deadline (one, not one per window queued before it), or stop().
    for (const WindowRef& x : w)
      if (x && !x->started && !x->failed) return false;
    ready_cv_.wait(l, [&] {
      for (const WindowRef& x : w)
        if (x && !x->ready && !x->failed) return false;
      return true;
    });
    for (const WindowRef& x : w) {
      if (x && x->timed_out) *timed_out = true;
      if (x && x->failed) return false;
    }
    const WindowRef& last = w[1] ? w[1] : w[0];
    if (ext.off + ext.len > last->off + last->len) return false;  // past the file's end
    if (w[1] && w[0]->len < kWindow) return false;
  }
  // Ready windows are never written again: no lock for the copy.
  const uint64_t first = std::min<uint64_t>(ext.len, w[0]->off + kWindow - ext.off);
  std::memcpy(dst, w[0]->buf->data() + (ext.off - w[0]->off), first);
  if (first < ext.len) std::memcpy(dst + first, w[1]->buf->data(), ext.len - first);
  const bool ok = hash_bytes(dst, ext.len) == ext.hash;
  std::lock_guard l(mu_);
  if (!ok) {
    ++stats_.mismatches;
    return false;
  }
  for (const WindowRef& x : w)
    if (x) ++x->taken;
  for (Tail& t : tails_)
    if (t.seg == ext.seg) t.taken = true;
  ++stats_.hits;
  stats_.hit_bytes += ext.len;
  return true;
}

void SegmentWindows::after_read(const Extent& ext) {
  const uint64_t end = ext.off + ext.len;
  bool queued = false;
  {
    std::lock_guard l(mu_);
    // Windows past the one the read ended in; with that one, no more than
    // the threads read at once: a window still queued when the client
    // comes is no use to it (take() waits only for one being read), and
    // each walk that queues more than the threads read lags further
    // behind (the cliff this avoided is in bench/README.md).
    const unsigned depth = std::min(static_cast<unsigned>(readahead_ / kWindow), kThreads - 1);
    if (stop_ || max_bytes_ < kWindow || depth == 0) return;
    // Forward through the segment: starts at most kSeqGap past the end of
    // the last read in it (record headers and other files' blocks between).
    auto t =
        std::find_if(tails_.begin(), tails_.end(), [&](const Tail& x) { return x.seg == ext.seg; });
    const bool forward = t != tails_.end() && ext.off >= t->end && ext.off - t->end <= kSeqGap;
    if (t == tails_.end()) {
      if (tails_.size() >= kTails) tails_.erase(tails_.begin());
      tails_.push_back(Tail{ext.seg, end});
    } else {
      t->end = std::max(t->end, end);
    }
    // Only at a file's end (its last block is short): the file's own
    // blocks are read ahead by the prefetcher, from its lookup; what comes
    // after is the next file the client stored, looked up only later.
    if (!forward || ext.len >= kBlockSize) return;
    t->ahead = t->taken ? std::min(std::max(t->ahead, 1u) * 2, depth) : 1;
    t->taken = false;
    const uint64_t first = end / kWindow * kWindow;
    for (unsigned k = 0; k <= t->ahead; ++k) {
      const uint64_t off = first + k * kWindow;
      if (find_locked(ext.seg, off)) continue;
      if (!room_locked()) break;
      auto w = std::make_shared<Window>();
      w->seg = ext.seg;
      w->off = off;
      w->stamp = ++stamp_;
      windows_.push_back(w);
      queue_.push_back(std::move(w));
      queued = true;
    }
  }
  if (queued) work_cv_.notify_all();
}

void SegmentWindows::run() {
  for (;;) {
    WindowRef w;
    {
      std::unique_lock l(mu_);
      work_cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      w = std::move(queue_.front());
      queue_.pop_front();
      w->started = true;
    }
    BufRef buf = BufferPool::allocate(kWindow);
    size_t got = 0;
    // A failed read (a segment deleted since) only means the client reads
    // its extents itself; one past the deadline (a stalled dir) is reported
    // to a client waiting for it (take()).
    const Status st = segs_->read_range(w->seg, w->off, kWindow, buf, &got);
    const bool ok = st.ok();
    {
      std::lock_guard l(mu_);
      if (ok) {
        w->buf = std::move(buf);
        w->len = got;
        w->ready = true;
        ++stats_.reads;
        stats_.read_bytes += got;
      } else {
        w->failed = true;
        w->timed_out = st.code() == Status::Code::kTimedOut;
        windows_.erase(std::remove(windows_.begin(), windows_.end(), w), windows_.end());
      }
    }
    ready_cv_.notify_all();
  }
}

bool SegmentWindows::wait_idle(std::chrono::milliseconds max) {
  std::unique_lock l(mu_);
  return ready_cv_.wait_for(l, max, [&] {
    for (const WindowRef& w : windows_)
      if (!w->ready && !w->failed) return false;
    return true;
  });
}

SegmentWindowStats SegmentWindows::stats() const {
  std::lock_guard l(mu_);
  return stats_;
}

}  // namespace kvfs
