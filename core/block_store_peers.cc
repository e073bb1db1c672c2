// SPDX-License-Identifier: Apache-2.0
// BlockStore and the other nodes of a shared backing dir (peer_log.h): a
// name that is not here but that a peer committed is imported on lookup (or
// readdir) as a read-only inode whose extents point into the peer's
// segments; a peer's newer version or removal drops the import, so the next
// lookup finds what the peer has now.
#include <sys/stat.h>

#include "core/block_store.h"
#include "core/file_data.h"
#include "core/index.h"
#include "core/log.h"
#include "core/peer_log.h"
#include "core/segment_store.h"

namespace kvfs {

Status BlockStore::open_peers() {
  if (!segs_->shared()) return Status::OK();
  peers_ =
      std::make_unique<PeerLog>(cfg_.backing_dir, segs_->node(), segs_.get(), io_.get(), clock_);
  // Peers' files unlinked here before: hidden from the first pass on.
  std::vector<RecordEntry> mine;
  if (Status s = index_->peer_unlinks([&](RecordEntry&& e) { mine.push_back(std::move(e)); });
      !s.ok())
    return s;
  for (const RecordEntry& e : mine) (void)peers_->hide(e.snap.name, e.snap.ino, e.snap.mtime_ns);
  // Set first: the first pass may bring unlinks of this node's files that
  // peers made while it was down, to apply before the mount is ready.
  peers_->set_listener([this](const PeerLog::News& n) {
    apply_peer_unlinks(n.unlinks);
    peers_changed(n.paths);
    peer_dirs_moved(n.moved_dirs);
    release_listed(clock_->now_ns());
  });
  // What the peers had at mount is there before the mount is ready.
  if (Status s = peers_->poll(); !s.ok())
    spdlog::warn("reading the other nodes' segment logs at mount: {}", s.ToString());
  // An unlink whose owner has removed (or rewritten) the file since needs
  // no keeping: the owner's log says so now.
  IndexBatch done;
  for (const RecordEntry& e : mine)
    if (peers_->settled(e.snap.name, e.snap.ino, e.snap.mtime_ns))
      done.peer_unlinks_done.push_back(e.snap.seq);
  if (!done.empty() && !cfg_.read_only)
    if (Status s = index_->commit(done, false); !s.ok())
      spdlog::warn("index: dropping settled unlinks of peers' files: {}", s.ToString());
  PeerLog* peers = peers_.get();
  evictor_->set_unlink_settled([peers](const RecordEntry& e) {
    return peers->settled(e.snap.name, e.snap.ino, e.snap.mtime_ns);
  });
  peers_->start(cfg_.peer_poll_s);
  return Status::OK();
}

Status BlockStore::poll_peers() {
  if (!peers_) return Status::OK();
  return peers_->poll();
}

PeerStats BlockStore::peer_stats() const {
  return peers_ ? peers_->stats() : PeerStats{};
}

namespace {

// Whether an imported file still holds the bytes of the peer's version now,
// block for block (each extent's length and hash): then only where they lie
// changed (the owner copied them forward, or touched the file's times), and
// the import takes the new extents in place of being dropped. Requires in.mu.
bool refresh_locked(Inode& in, const PeerFile& now) {
  if (!now.snap.extents.empty() && now.snap.extents.back().idx >= in.blocks.size()) return false;
  if (now.snap.size != in.size) return false;
  std::vector<Extent> exts(in.blocks.size());
  for (const BlockExtent& b : now.snap.extents) exts[b.idx] = b.ext;
  for (size_t i = 0; i < exts.size(); ++i) {
    const Extent& o = in.blocks[i].ext;
    if (o.valid() != exts[i].valid() || o.len != exts[i].len || o.hash != exts[i].hash)
      return false;
  }
  for (size_t i = 0; i < exts.size(); ++i) in.blocks[i].ext = exts[i];
  return true;
}

bool same_file(const Inode& in, const PeerFile& now) {
  return now.node == in.peer->node && now.ino == in.peer->ino && S_ISREG(now.snap.mode);
}

}  // namespace

Result<InodeRef> BlockStore::import_peer(uint64_t parent, std::string_view name) {
  if (!peers_) return Status::NotFound();
  auto path = ns_->rel_path(parent, name);
  if (!path.ok()) return Status::NotFound();
  std::optional<PeerFile> f = peers_->find(*path);
  if (!f) return Status::NotFound();
  if (S_ISDIR(f->snap.mode)) {
    // Made here, and journaled: local files written under it outlive a
    // restart whatever the peer does with its own directory.
    if (cfg_.read_only) return Status::NotFound();
    bool created = false;
    auto d = ns_->create(parent, name, {f->snap.mode, f->snap.uid, f->snap.gid, {}, 0},
                         /*excl=*/false, &created);
    if (d.ok() && created) peer_dirs_.fetch_add(1, std::memory_order_relaxed);
    return d;
  }
  PeerOrigin o{f->node, f->ino};
  auto in = ns_->import(parent, name, std::move(f->snap), o);
  if (in.ok()) {
    peer_imports_.fetch_add(1, std::memory_order_relaxed);
    // A pass that applied a newer version between find() and the import
    // told its listener before the import was linked, so it dropped
    // nothing: look again now that it is, and leave no stale copy.
    std::optional<PeerFile> again = peers_->find(*path);
    bool current = again && same_file(**in, *again);
    if (current) {
      std::lock_guard g((*in)->mu);
      current = refresh_locked(**in, *again);
    }
    if (!current) {
      if (ns_->drop(*in).ok()) peer_drops_.fetch_add(1, std::memory_order_relaxed);
      ns_->reap_if_unused(*in);  // nobody had it yet
      return Status::NotFound("changed on node " + o.node + " meanwhile");
    }
    return in;
  }
  if (in.status().code() == Status::Code::kExists) return ns_->lookup(parent, name);  // raced
  return in.status();
}

void BlockStore::import_peer_children(uint64_t dir) {
  if (!peers_) return;
  auto path = ns_->rel_path(dir, "");
  if (!path.ok()) return;
  std::string p = *path;
  if (!p.empty() && p.back() == '/') p.pop_back();
  // Those of a minute ago go first; this listing imports what it shows again.
  const int64_t now = clock_->now_ns();
  release_listed(now);
  std::vector<InodeRef> listed;
  for (auto& [name, mode] : peers_->children(p)) {
    if (ns_->lookup(dir, name).ok()) continue;
    auto in = import_peer(dir, name);
    if (in.ok() && (*in)->peer) listed.push_back(std::move(*in));
  }
  std::lock_guard l(listed_mu_);
  for (InodeRef& in : listed) listed_.emplace_back(now, std::move(in));
}

void BlockStore::release_listed(int64_t now) {
  // A listing's imports that nobody looked up within a minute (a listing
  // that takes longer misses them on its later pages).
  constexpr int64_t kListedKeepNs = 60'000'000'000;
  std::vector<InodeRef> old;
  {
    std::lock_guard l(listed_mu_);
    while (!listed_.empty() && listed_.front().first < now - kListedKeepNs) {
      old.push_back(std::move(listed_.front().second));
      listed_.pop_front();
    }
  }
  for (const InodeRef& in : old) (void)ns_->release_import(in);
}

Result<InodeRef> BlockStore::import_peer_file(uint64_t parent, std::string_view name) {
  if (!peers_) return Status::NotFound();
  auto path = ns_->rel_path(parent, name);
  if (!path.ok()) return Status::NotFound();
  std::optional<PeerFile> f = peers_->find(*path);
  if (!f || !S_ISREG(f->snap.mode)) return Status::NotFound();
  return import_peer(parent, name);
}

bool BlockStore::drop_and_forget(const InodeRef& in) {
  uint64_t parent;
  std::string name;
  {
    std::shared_lock ns(ns_->mu());
    parent = in->parent;
    name = in->name;
  }
  if (!ns_->drop(in).ok()) return false;
  {
    std::lock_guard g(in->mu);
    if (FileData::unused_locked(*in)) data_->free_locked(*in);  // its cached blocks too
  }
  ns_->reap_if_unused(in);                  // else forget() or the last close does
  evictor_->notify(parent, name, in->ino);  // the kernel forgets it too
  return true;
}

void BlockStore::recheck_import(const InodeRef& in, const std::string& path) {
  std::optional<PeerFile> now = peers_->find(path);
  if (now && same_file(*in, *now)) {
    std::lock_guard g(in->mu);
    if (!in->evicted && refresh_locked(*in, *now)) return;
  }
  if (drop_and_forget(in)) peer_drops_.fetch_add(1, std::memory_order_relaxed);
}

void BlockStore::peers_changed(const std::vector<std::string>& paths) {
  for (const std::string& p : paths) {
    auto r = ns_->resolve(p);
    if (r.ok() && (*r)->peer) recheck_import(*r, p);  // else not imported, or ours: ours wins here
  }
}

void BlockStore::peer_dirs_moved(const std::vector<std::string>& paths) {
  for (const std::string& p : paths) {
    if (p.empty()) continue;  // not reachable in the peer's tree: nothing was found under it
    auto d = ns_->resolve(p);
    if (!d.ok() || !(*d)->is_dir()) continue;
    for (const InodeRef& in : ns_->imports_under((*d)->ino)) {
      uint64_t parent;
      std::string name;
      {
        std::shared_lock l(ns_->mu());
        if (!in->linked.load()) continue;
        parent = in->parent;
        name = in->name;
      }
      if (auto r = ns_->rel_path(parent, name); r.ok()) recheck_import(in, *r);
    }
  }
}

void BlockStore::hide_peer_file(const PeerOrigin& o, int64_t mtime_ns) {
  peer_unlinks_.fetch_add(1, std::memory_order_relaxed);
  std::string path = peers_ ? peers_->hide(o.node, o.ino, mtime_ns) : "";
  if (!path.empty()) peers_changed({path});
}

void BlockStore::apply_peer_unlinks(const std::vector<std::pair<uint64_t, int64_t>>& unlinks) {
  for (const auto& [ino, mtime] : unlinks) {
    InodeRef in = ns_->get(ino);
    if (!in || in->peer || !in->linked.load()) continue;
    {
      // Written (or being written) again after the peer's look: the newer
      // version stays, as a store after an unlink does anywhere.
      std::lock_guard g(in->mu);
      if (!in->is_reg() || in->mtime_ns > mtime || in->dirty()) continue;
    }
    if (!drop_and_forget(in)) continue;
    peer_unlinks_applied_.fetch_add(1, std::memory_order_relaxed);
    spdlog::debug("removed inode {}: unlinked on another node", ino);
  }
}

}  // namespace kvfs
