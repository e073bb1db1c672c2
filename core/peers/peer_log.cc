// SPDX-License-Identifier: Apache-2.0
#include "core/peers/peer_log.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <set>

#include "core/backing/backing_io.h"
#include "core/backing/disk_layout.h"
#include "core/peers/peer_scan.h"
#include "core/segments/segment_store.h"
#include "core/util/log.h"

namespace kvfs {

std::vector<std::string_view> split_path(std::string_view p) {
  std::vector<std::string_view> out;
  while (!p.empty()) {
    const size_t k = p.find('/');
    std::string_view c = p.substr(0, k);
    if (!c.empty()) out.push_back(c);
    if (k == std::string_view::npos) break;
    p.remove_prefix(k + 1);
  }
  return out;
}

namespace {

// A peer's root is inode 1, as every node's: paths resolve from it.
constexpr uint64_t kRootInoPeer = 1;

bool servable(uint32_t mode) {
  return S_ISREG(mode) || S_ISDIR(mode);
}

}  // namespace

PeerLog::PeerLog(std::string backing, std::string own_node, SegmentStore* segs, BackingIo* io,
                 const Clock* clock)
    : dir_(layout::segment_dir(backing)),
      own_(std::move(own_node)),
      segs_(segs),
      io_(io),
      clock_(clock),
      head_dir_(layout::head_dir(backing)) {}

PeerLog::~PeerLog() {
  stop();
}

void PeerLog::set_listener(ChangeFn fn) {
  std::lock_guard l(mu_);
  listener_ = std::move(fn);
}

void PeerLog::start(double interval_s) {
  th_ = std::thread([this, interval_s] { run(interval_s); });
}

void PeerLog::stop() {
  {
    std::lock_guard l(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (th_.joinable()) th_.join();
}

double PeerLog::follow_pause_s(double interval_s, double last_pass_s, uint64_t opens) {
  // A slow dir gets fewer passes: the thread spends at most about a third
  // of its time in them.
  const double slow = std::min(2 * last_pass_s, kMaxPauseS);
  const double busy = std::min(static_cast<double>(opens) / kOpenBudget, kMaxOpenPauseS);
  return std::max({interval_s, slow, busy});
}

void PeerLog::run(double interval_s) {
  std::chrono::duration<double> last{0};
  for (;;) {
    {
      const auto pause = std::chrono::duration<double>(
          follow_pause_s(interval_s, last.count(), last_opens_.load(std::memory_order_relaxed)));
      std::unique_lock l(stop_mu_);
      if (stop_cv_.wait_for(l, pause, [&] { return stop_; })) return;
    }
    static LogLimiter limit;
    uint64_t held = 0;
    const auto t0 = std::chrono::steady_clock::now();
    if (Status s = poll(Pass::kFollow); !s.ok() && limit.allow(&held))
      spdlog::warn("reading the peers' segment logs: {} ({} more like it)", s.ToString(), held);
    last = std::chrono::steady_clock::now() - t0;
  }
}

Status PeerLog::io(const std::string& what, std::function<Status()> fn) {
  // Under the backing dir's deadline: a stalled NFS server costs a pass,
  // never the thread (nor the unmount that stops it).
  return io_ ? io_->run(what, std::move(fn)) : fn();
}

void PeerLog::pass_done_locked(std::chrono::steady_clock::time_point began, bool listed, bool heads,
                               uint64_t opens, bool failed) {
  const int64_t ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - began)
          .count();
  ++passes_;
  if (failed) ++errors_;
  listings_ += listed ? 1 : 0;
  head_listings_ += heads ? 1 : 0;
  segment_opens_ += opens;
  pass_ns_ += ns;
  slowest_pass_ns_ = std::max(slowest_pass_ns_, ns);
}

Status PeerLog::poll(Pass kind) {
  std::lock_guard pass(pass_mu_);
  // The pass's cost as the server sees it (wall time, not this clock_:
  // a test's manual clock does not move while a pass waits on the dir).
  const auto began = std::chrono::steady_clock::now();
  uint64_t opens = 0;
  Status first;
  auto fail = [&](Status s) {
    if (first.ok()) first = std::move(s);
  };
  const uint64_t pass_no = pass_no_++;
  // A quiet peer's segments rest between looks (see Pass): in a fleet most
  // peers are idle at any time, and each look costs the server an open per
  // segment.
  const bool look_all = kind == Pass::kFull || pass_no % kRestEvery == 0;
  auto node_rests = [&](const std::string& node) {
    if (look_all) return false;
    auto q = quiet_.find(node);
    return q != quiet_.end() && q->second >= kQuietPasses;
  };
  // This node's own head, if a rename of it was held back or failed
  // (head_publisher.h): the passes are its timer.
  segs_->publish_pending_head();
  // A read that found a peer's segment gone: list the dir now.
  const bool missing = segs_->take_foreign_missing();
  bool awake = look_all || missing;  // some known peer does not rest
  for (auto& [node, q] : quiet_) awake |= !node_rests(node);
  // 0. The heads: one listing of a dir of one name per node. Skipped while
  // every known peer rests (also when none is known yet: a lone node); a
  // pass without it (or whose listing failed) goes by the heads last seen,
  // as if none had moved.
  std::set<std::string> moved;
  std::map<std::string, layout::NodeHead> before;  // heads_ as the last pass left them
  std::set<std::pair<std::string, uint64_t>> gone_before;
  bool heads_listed = false;
  if (awake) {
    auto fresh = std::make_shared<std::map<std::string, layout::NodeHead>>();
    if (Status s =
            io("listing of " + head_dir_, [fs = &segs_->fs(), dir = head_dir_,
                                           fresh] { return list_heads(*fs, dir, fresh.get()); });
        !s.ok()) {
      fail(std::move(s));
    } else {
      fresh->erase(own_);
      for (auto& [node, h] : *fresh) {
        auto was = heads_.find(node);
        if (was == heads_.end() || !(was->second == h)) moved.insert(node);
      }
      // A segment found gone while a head still named it is left alone
      // until that head moves on (a node killed and then retired).
      gone_before = gone_named_;
      std::erase_if(gone_named_, [&](const auto& k) {
        auto h = fresh->find(k.first);
        return h == fresh->end() ||
               std::none_of(h->second.open.begin(), h->second.open.end(),
                            [&](const auto& o) { return o.first == k.second; });
      });
      before = std::exchange(heads_, std::move(*fresh));
      heads_listed = true;
    }
  }
  heads_moved_ |= !moved.empty();
  // The peers followed by their head. A head older than a segment a
  // listing showed, that has not moved for kListEvery passes since, is
  // stale (its node's renames fail, or it runs a kvfs without heads now):
  // that node is followed as if it had none until its head catches up.
  auto head_of = [&](const std::string& node) -> const layout::NodeHead* {
    auto h = heads_.find(node);
    if (h == heads_.end() || !h->second.complete) return nullptr;
    auto st = stale_.find(node);
    return st != stale_.end() && st->second.gen == h->second.gen &&
                   pass_no >= st->second.pass + kListEvery
               ? nullptr
               : &h->second;
  };
  // 1. The listing: every peer segment there is now. Needed at once for a
  // segment some head names that was never listed, or for a peer without a
  // head that does not rest; now and then while heads move, for the
  // segments their nodes deleted; and on a full pass.
  bool listing = kind == Pass::kFull || missing;
  if (heads_moved_ && pass_no >= listed_pass_ + kListEvery) listing = true;
  // Peers without heads, or none known yet; and now and then (every
  // kDiscoverEvery passes, a minute) a node that joined without a head
  // while the others' heads rest.
  if (look_all && (heads_.empty() || pass_no >= listed_pass_ + kDiscoverEvery)) listing = true;
  for (auto& [k, sg] : seg_table_)
    listing |= sg.listed && !head_of(k.first) && !node_rests(k.first);
  for (auto& [node, h] : heads_) {
    auto f = listed_for_.find(node);
    listing |= h.complete && (f == listed_for_.end() || f->second < h.last_id);
  }
  auto names = std::make_shared<std::vector<std::string>>();
  if (listing) {
    if (Status s =
            io("listing of " + dir_, [fs = &segs_->fs(), dir = dir_,
                                      names] { return list_segments(*fs, dir, names.get()); });
        !s.ok()) {
      // The heads as before, so that the next pass sees what moved again.
      if (heads_listed) {
        heads_ = std::move(before);
        gone_named_ = std::move(gone_before);
      }
      std::lock_guard l(mu_);
      pass_done_locked(began, true, awake, 0, true);  // every peer's lag grows (last_full_ns stays)
      return s;
    }
    for (auto& [k, sg] : seg_table_) sg.listed = false;
    listed_pass_ = pass_no;
    heads_moved_ = false;
    for (auto& [node, h] : heads_) listed_for_[node] = h.last_id;
  }
  auto add = [&](const std::string& node, uint64_t id, const std::string& name) {
    Seg& s = seg_table_[{node, id}];
    if (s.path.empty()) {
      s.node = node;
      s.id = id;
      s.path = dir_ + "/" + name;
      s.alias = segs_->foreign_segment(s.path);
    }
    s.listed = true;
  };
  std::map<std::string, uint64_t> newest;  // node -> its newest segment id listed
  for (const std::string& name : *names) {
    auto n = layout::parse_segment_name(name);
    if (!n || n->node == own_) continue;
    add(n->node, n->id, name);
    uint64_t& m = newest[n->node];
    m = std::max(m, n->id);
  }
  // A listed segment newer than its node's head says: a new segment whose
  // first sync has not been published yet, or a head that stopped. Stale
  // once that head has not moved for kListEvery passes (head_of above).
  if (listing)
    for (auto& [node, h] : heads_) {
      auto m = newest.find(node);
      if (m == newest.end() || m->second <= h.last_id)
        stale_.erase(node);
      else if (auto st = stale_.find(node); st == stale_.end() || st->second.gen != h.gen)
        stale_[node] = {h.gen, pass_no};
    }
  // What a head names exists (it is named after its sync), listed or not
  // (a listing that lags the head on some clients).
  for (auto& [node, h] : heads_)
    for (auto& [id, valid] : h.open)
      if (!gone_named_.count({node, id})) add(node, id, layout::segment_name(node, id));
  // 2. New records of each, in segment order (seqs order them anyway).
  struct Read {
    Seg* seg;
    std::shared_ptr<ScanOut> out;
  };
  std::vector<Read> reads;
  std::vector<std::pair<std::string, uint64_t>> gone;
  // A sealed segment read to its end is never opened again (its owner
  // appends to it no more, disk_layout.h); most of a node's segments are.
  // Of the unsealed ones, a node appends only to its newest few (one per
  // flusher, the reclaim copy, the journal): without a head those are
  // reopened every pass, and any that grew at the last look. Older unsealed
  // ones (a dir written before seals, or a seal that failed) are checked in
  // turn, a few a pass (each at least every kOldCycle passes, or
  // kOldPerPass a pass where a node has more): a segment that fell out of
  // the newest while still open is caught, and a pass over a node with
  // thousands of segments stays a handful of opens.
  std::map<std::string, uint64_t> hot_from;             // node -> lowest id of its newest kHot
  std::set<std::pair<std::string, uint64_t>> old_turn;  // old segments checked this pass
  {
    std::map<std::string, std::vector<uint64_t>> ids;
    for (auto& [k, s] : seg_table_)
      if (s.listed && !s.sealed) ids[k.first].push_back(k.second);
    for (auto& [node, v] : ids) {
      const size_t hot = v.size() > kHot ? v.size() - kHot : 0;  // v[0, hot): old
      hot_from[node] = hot ? v[hot] : 0;
      if (!hot || node_rests(node)) continue;
      uint64_t& cursor = old_cursor_[node];
      const size_t turn = std::min<size_t>(kOldPerPass, (hot + kOldCycle - 1) / kOldCycle);
      size_t at = std::upper_bound(v.begin(), v.begin() + hot, cursor) - v.begin();
      for (size_t i = 0; i < turn; ++i, ++at) {
        if (at >= hot) at = 0;
        old_turn.insert({node, v[at]});
        cursor = v[at];
      }
    }
  }
  const bool stale_look = kind == Pass::kFull || pass_no % kStaleEvery == 0;
  std::set<std::string> failed;        // nodes whose log could not all be read
  std::map<std::string, bool> active;  // nodes looked at -> something changed
  for (const std::string& node : moved) active[node] = true;
  for (auto& [k, s] : seg_table_) {
    if (!s.listed) {
      gone.push_back(k);
      active[k.first] = true;
      continue;
    }
    uint64_t end = 0;    // where its records end, by its node's head (0: look)
    bool named = false;  // its node's head names it now
    if (const layout::NodeHead* h = head_of(k.first)) {
      // By the head: a segment it names whose end is not where this node
      // stopped, one that left it (closed since: once more, to the end),
      // and, as without a head, one never read and old unsealed ones in
      // turn.
      auto o = std::find_if(h->open.begin(), h->open.end(),
                            [&](const auto& p) { return p.first == k.second; });
      named = o != h->open.end();
      // An end the last read by the head could not reach (a damaged or cut
      // segment, or a read that raced a cache) is tried again every
      // kRestEvery passes, not every pass, until the end moves.
      const bool moved_on =
          named && o->second > s.pos && (o->second != s.short_of || pass_no % kRestEvery == 0);
      // Not named, not known sealed, among its node's newest: read before
      // the head named it (new and empty, or while its node had no head),
      // it may have been written and closed between two passes, so it
      // never showed in a head this node listed: a move of that head owes
      // it a look, until a read of it succeeds.
      // (Not one whose last read found records and nothing new: named
      // while open, it has closed and been read since; one whose seal
      // failed would be owed at every move.)
      if (!named && !s.sealed && k.second >= hot_from[k.first] && moved.count(k.first) &&
          (s.pos == 0 || s.grew))
        s.owed = true;
      bool look = !s.read || (named && (moved_on || s.partial || stale_look)) ||
                  (!named && (s.in_head || s.owed)) || (!named && !s.sealed && old_turn.count(k));
      if (!look) {
        active.try_emplace(k.first, false);
        continue;
      }
      // in_head changes only once the read succeeds: the last read of a
      // segment that left the head is tried again until it is done.
      // By the head's end while it moves on; a full look (the file's size,
      // seal and tail) when the head was looked past, or the segment is new
      // or left it.
      if (named && s.read && !stale_look && !s.partial) end = o->second;
    } else {
      // New in the listing, or grown at the last look: read now, and its
      // node is active.
      if (s.sealed) {  // its last look counted what it brought; nothing new since
        active.try_emplace(k.first, false);
        continue;
      }
      if (s.grew) active[k.first] = true;
      if (!s.grew && node_rests(k.first)) continue;
      if (!s.grew && k.second < hot_from[k.first] && !old_turn.count(k)) continue;
    }
    auto out = std::make_shared<ScanOut>();
    ++opens;
    Status st = io("read of peer segment " + s.path,
                   [fs = &segs_->fs(), path = s.path, id = s.id, pos = s.pos, end, out] {
                     return scan_peer_segment(*fs, path, id, pos, end, out.get());
                   });
    if (!st.ok()) {
      failed.insert(k.first);
      active[k.first] = true;
      fail(std::move(st));
      continue;
    }
    if (out->gone) {
      gone.push_back(k);
      active[k.first] = true;
      if (named) gone_named_.insert(k);
      continue;
    }
    // Grown, or new records inside the size it was preallocated to: reads
    // open it again too (close-to-open), so they see what was appended.
    s.read = true;
    s.owed = false;
    s.in_head = named;
    s.short_of = end && out->valid < end ? end : 0;
    s.grew = (!end && out->size != s.size) || out->valid != s.pos;
    active[k.first] |= s.grew || out->partial;
    if (s.grew) segs_->reopen_foreign(s.alias);
    if (!end) s.size = out->size;  // a read by the head leaves the file's size as last seen
    s.pos = out->valid;
    s.sealed = out->sealed;
    s.partial = out->partial && !out->sealed;  // a sealed tail never completes
    reads.push_back({&s, std::move(out)});
  }
  // A segment that left the listing (its owner reclaimed it, or a listing
  // missed it) or was found gone: the dir is listed again within
  // kListEvery passes, as while heads move, to see what else went.
  if (!gone.empty()) heads_moved_ = true;
  for (auto& [node, changed] : active) {
    uint32_t& q = quiet_[node];
    q = changed ? 0 : std::min(q + 1, kQuietPasses);
  }
  // 3. Apply, and tell the listener what changed.
  News news;
  std::vector<std::string>& changed = news.paths;
  ChangeFn listener;
  {
    std::lock_guard l(mu_);
    const int64_t now = clock_->now_ns();
    for (Read& r : reads) {
      View& v = views_[r.seg->node];
      v.aliases[r.seg->id] = r.seg->alias;
      records_ += r.out->records;
      entries_ += r.out->entries.size();
      if (!r.out->entries.empty()) v.last_news_ns = now;
      for (RecordEntry& e : r.out->entries) apply_locked(v, e, &news);
    }
    // Each node's segments as last looked at (this pass or, for old ones
    // not reopened, an earlier one).
    for (auto& v : views_)
      v.second.segments = v.second.segment_bytes = v.second.read_bytes = v.second.behind_bytes = 0;
    for (auto& [k, sg] : seg_table_) {
      if (!sg.listed) continue;
      View& v = views_[k.first];
      ++v.segments;
      v.segment_bytes += sg.size;
      v.read_bytes += sg.pos;
      if (sg.partial) v.behind_bytes += sg.size - sg.pos;
    }
    // A file with data in a segment that went is no longer servable (its
    // owner copied it forward, or it went by hand): its path changed.
    for (auto& k : gone) {
      auto v = views_.find(k.first);
      if (v == views_.end()) continue;
      v->second.aliases.erase(k.second);
      for (const auto& [ino, snap] : v->second.inodes)
        for (const BlockExtent& b : snap.extents)
          if (b.ext.seg == k.second) {
            changed.push_back(path_locked(v->second, ino));
            break;
          }
    }
    for (auto& v : views_)
      if (!failed.count(v.first)) v.second.last_full_ns = now;
    pass_done_locked(began, listing, awake, opens, !first.ok());
    listener = listener_;
    if (kind == Pass::kFollow) last_opens_.store(opens, std::memory_order_relaxed);
  }
  if (listener) {  // every pass: the owner also does its periodic work there
    std::sort(changed.begin(), changed.end());
    changed.erase(std::unique(changed.begin(), changed.end()), changed.end());
    listener(news);
  }
  // Only now: the listener moved the imports whose data was copied forward
  // out of these, so no read of one meets a forgotten segment meanwhile.
  for (auto& k : gone) {
    auto it = seg_table_.find(k);
    if (it == seg_table_.end()) continue;
    segs_->forget_foreign(it->second.alias);
    seg_table_.erase(it);
  }
  return first;
}

void PeerLog::apply_locked(View& v, RecordEntry& e, News* news) {
  std::vector<std::string>* changed = &news->paths;
  const uint64_t ino = e.snap.ino, seq = e.snap.seq;
  v.max_seq = std::max(v.max_seq, seq);
  if (e.kind == EntryKind::kPeerUnlink) {  // of another node's file
    if (e.snap.name == own_) {
      news->unlinks.emplace_back(ino, e.snap.mtime_ns);
    } else {
      std::string p = hide_locked(e.snap.name, ino, e.snap.mtime_ns);
      if (!p.empty()) changed->push_back(std::move(p));
    }
    return;
  }
  if (auto d = v.dead.find(ino); d != v.dead.end() && d->second >= seq) return;
  auto it = v.inodes.find(ino);
  if (it != v.inodes.end() && it->second.seq >= seq) return;
  if (it != v.inodes.end()) {  // the old name goes (rename, replace, tombstone)
    const InodeSnapshot& old = it->second;
    if (servable(old.mode)) changed->push_back(path_locked(v, ino));
    if (S_ISDIR(old.mode) &&
        (e.kind == EntryKind::kTombstone || old.parent != e.snap.parent || old.name != e.snap.name))
      news->moved_dirs.push_back(path_locked(v, ino));
    auto n = v.names.find({old.parent, old.name});
    if (n != v.names.end() && n->second == ino) v.names.erase(n);
  }
  if (e.kind == EntryKind::kTombstone) {
    v.dead[ino] = seq;
    if (it != v.inodes.end()) v.inodes.erase(it);
    return;
  }
  InodeSnapshot& s = v.inodes[ino];
  s = std::move(e.snap);
  // Records come segment by segment, not in seq order: a name goes to the
  // newer of two claims, whichever was read first.
  if (ino != kRootInoPeer) {
    uint64_t& holder = v.names[{s.parent, s.name}];
    auto h = holder && holder != ino ? v.inodes.find(holder) : v.inodes.end();
    if (h == v.inodes.end() || h->second.seq < s.seq) holder = ino;
  }
  if (servable(s.mode)) changed->push_back(path_locked(v, ino));
}

std::string PeerLog::hide(const std::string& node, uint64_t ino, int64_t mtime_ns) {
  std::lock_guard l(mu_);
  return hide_locked(node, ino, mtime_ns);
}

std::string PeerLog::hide_locked(const std::string& node, uint64_t ino, int64_t mtime_ns) {
  int64_t& m = hidden_.try_emplace({node, ino}, mtime_ns).first->second;
  m = std::max(m, mtime_ns);
  auto v = views_.find(node);
  return v == views_.end() ? "" : path_locked(v->second, ino);
}

bool PeerLog::settled(const std::string& node, uint64_t ino, int64_t mtime_ns) const {
  std::lock_guard l(mu_);
  auto v = views_.find(node);
  if (v == views_.end()) return false;
  if (v->second.dead.count(ino)) return true;
  auto it = v->second.inodes.find(ino);
  return it != v->second.inodes.end() && it->second.mtime_ns > mtime_ns;
}

bool PeerLog::hidden_locked(const std::string& node, uint64_t ino, int64_t mtime_ns) const {
  auto h = hidden_.find({node, ino});
  return h != hidden_.end() && mtime_ns <= h->second;
}

std::string PeerLog::path_locked(const View& v, uint64_t ino) const {
  std::vector<const std::string*> parts;
  for (int depth = 0; ino != kRootInoPeer && depth < 4096; ++depth) {
    auto it = v.inodes.find(ino);
    if (it == v.inodes.end()) return "";  // not reachable (yet): nothing to tell
    parts.push_back(&it->second.name);
    ino = it->second.parent;
  }
  std::string p;
  for (auto i = parts.rbegin(); i != parts.rend(); ++i) {
    if (!p.empty()) p += '/';
    p += **i;
  }
  return p;
}

const InodeSnapshot* PeerLog::resolve_locked(const View& v, std::string_view path,
                                             uint64_t* ino) const {
  uint64_t cur = kRootInoPeer;
  const InodeSnapshot* s = nullptr;
  for (std::string_view c : split_path(path)) {
    auto n = v.names.find({cur, std::string(c)});
    if (n == v.names.end()) return nullptr;
    auto it = v.inodes.find(n->second);
    if (it == v.inodes.end()) return nullptr;
    s = &it->second;
    cur = n->second;
  }
  *ino = cur;
  return s;
}

std::optional<PeerFile> PeerLog::find(std::string_view path) const {
  std::lock_guard l(mu_);
  std::optional<PeerFile> best;
  for (const auto& [node, v] : views_) {
    uint64_t ino = 0;
    const InodeSnapshot* s = resolve_locked(v, path, &ino);
    if (!s || !servable(s->mode)) continue;
    if (S_ISREG(s->mode) && hidden_locked(node, ino, s->mtime_ns)) continue;
    if (best) {
      const bool dir = S_ISDIR(s->mode), best_dir = S_ISDIR(best->snap.mode);
      // Views are walked in node order: a later one wins only if newer.
      if (best_dir || (!dir && s->mtime_ns <= best->snap.mtime_ns)) continue;
    }
    // Every extent must point into a segment listed now: one reclaimed since
    // held an older copy, superseded by a snapshot not read yet.
    PeerFile f{node, ino, *s};
    bool ok = true;
    for (BlockExtent& b : f.snap.extents) {
      auto a = v.aliases.find(b.ext.seg);
      if (a == v.aliases.end()) {
        ok = false;
        break;
      }
      b.ext.seg = a->second;
    }
    if (ok) best = std::move(f);
  }
  return best;
}

std::vector<std::pair<std::string, uint32_t>> PeerLog::children(std::string_view path) const {
  std::lock_guard l(mu_);
  std::map<std::string, uint32_t> out;
  for (const auto& [node, v] : views_) {
    uint64_t dir = 0;
    const InodeSnapshot* d = resolve_locked(v, path, &dir);
    if (!split_path(path).empty() && (!d || !S_ISDIR(d->mode))) continue;
    for (auto it = v.names.lower_bound({dir, std::string()});
         it != v.names.end() && it->first.first == dir; ++it) {
      auto s = v.inodes.find(it->second);
      if (s == v.inodes.end() || !servable(s->second.mode)) continue;
      if (S_ISREG(s->second.mode) && hidden_locked(node, it->second, s->second.mtime_ns)) continue;
      out.emplace(it->first.second, s->second.mode);
    }
  }
  return {out.begin(), out.end()};
}

std::vector<PeerNodeFile> PeerLog::files_of(const std::string& node) const {
  std::lock_guard l(mu_);
  std::vector<PeerNodeFile> out;
  auto v = views_.find(node);
  if (v == views_.end()) return out;
  for (const auto& [ino, s] : v->second.inodes) {
    if (!S_ISREG(s.mode) || hidden_locked(node, ino, s.mtime_ns)) continue;
    std::string p = path_locked(v->second, ino);
    uint64_t at = 0;
    if (p.empty() || resolve_locked(v->second, p, &at) == nullptr || at != ino) continue;
    out.push_back({std::move(p), s.size, s.atime_ns});
  }
  std::sort(out.begin(), out.end(),
            [](const PeerNodeFile& a, const PeerNodeFile& b) { return a.atime_ns < b.atime_ns; });
  return out;
}

int64_t PeerLog::last_news_ns(const std::string& node) const {
  std::lock_guard l(mu_);
  auto v = views_.find(node);
  return v == views_.end() ? 0 : v->second.last_news_ns;
}

PeerStats PeerLog::stats() const {
  std::lock_guard l(mu_);
  PeerStats st;
  st.passes = passes_;
  st.records = records_;
  st.entries = entries_;
  st.errors = errors_;
  st.listings = listings_;
  st.segment_opens = segment_opens_;
  st.head_listings = head_listings_;
  st.pass_seconds = static_cast<double>(pass_ns_) / 1e9;
  st.slowest_pass_seconds = static_cast<double>(slowest_pass_ns_) / 1e9;
  const int64_t now = clock_->now_ns();
  for (const auto& [node, v] : views_) {
    PeerNodeStats n;
    n.node = node;
    n.segments = v.segments;
    n.segment_bytes = v.segment_bytes;
    n.read_bytes = v.read_bytes;
    n.behind_bytes = v.behind_bytes;
    n.max_seq = v.max_seq;
    n.lag_s = v.last_full_ns ? double(now - v.last_full_ns) / 1e9 : 0;
    for (const auto& [ino, s] : v.inodes)
      if (S_ISREG(s.mode)) {
        ++n.files;
        n.bytes += s.size;
      }
    st.nodes.push_back(std::move(n));
  }
  return st;
}

}  // namespace kvfs
