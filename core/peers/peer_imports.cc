// SPDX-License-Identifier: Apache-2.0
// PeerImports (peer_imports.h): the other nodes' files made visible here.
#include "core/peers/peer_imports.h"

#include <sys/stat.h>

#include "core/config/config.h"
#include "core/data/file_data.h"
#include "core/evict/evictor.h"
#include "core/index/index.h"
#include "core/namespace/name_notices.h"
#include "core/segments/segment_store.h"
#include "core/util/log.h"

namespace kvfs {

Result<std::unique_ptr<PeerImports>> PeerImports::Open(const Parts& p) {
  if (!p.segs->shared()) return std::unique_ptr<PeerImports>();
  auto log = std::make_unique<PeerLog>(p.cfg->backing_dir, p.segs->node(), p.segs, p.io, p.clock);
  std::unique_ptr<PeerImports> pi(new PeerImports(p, std::move(log)));
  KVFS_RETURN_IF_ERROR(pi->start());
  return pi;
}

PeerImports::PeerImports(const Parts& p, std::unique_ptr<PeerLog> log)
    : p_(p), log_(std::move(log)) {}

PeerImports::~PeerImports() {
  stop();
}

void PeerImports::stop() {
  log_->stop();
}

Status PeerImports::start() {
  // Peers' files unlinked here before: hidden from the first pass on.
  std::vector<RecordEntry> mine;
  if (Status s = p_.index->peer_unlinks([&](RecordEntry&& e) { mine.push_back(std::move(e)); });
      !s.ok())
    return s;
  for (const RecordEntry& e : mine) (void)log_->hide(e.snap.name, e.snap.ino, e.snap.mtime_ns);
  // Set first: the first pass may bring unlinks of this node's files that
  // peers made while it was down, to apply before the mount is ready.
  log_->set_listener([this](const PeerLog::News& n) { on_news(n); });
  // What the peers had at mount is there before the mount is ready.
  if (Status s = log_->poll(); !s.ok())
    spdlog::warn("reading the other nodes' segment logs at mount: {}", s.ToString());
  // An unlink whose owner has removed (or rewritten) the file since needs
  // no keeping: the owner's log says so now.
  IndexBatch done;
  for (const RecordEntry& e : mine)
    if (log_->settled(e.snap.name, e.snap.ino, e.snap.mtime_ns))
      done.peer_unlinks_done.push_back(e.snap.seq);
  if (!done.empty() && !p_.cfg->read_only)
    if (Status s = p_.index->commit(done, false); !s.ok())
      spdlog::warn("index: dropping settled unlinks of peers' files: {}", s.ToString());
  PeerLog* peers = log_.get();
  p_.evictor->set_unlink_settled([peers](const RecordEntry& e) {
    return peers->settled(e.snap.name, e.snap.ino, e.snap.mtime_ns);
  });
  log_->start(p_.cfg->peer_poll_s);
  return Status::OK();
}

void PeerImports::on_news(const PeerLog::News& n) {
  apply_unlinks(n.unlinks);
  paths_changed(n.paths);
  dirs_moved(n.moved_dirs);
  release_listed(p_.clock->now_ns());
}

Status PeerImports::poll() {
  return log_->poll();
}

PeerStats PeerImports::stats() const {
  PeerStats st = log_->stats();
  st.head_renames = p_.segs->head_renames();  // the other side of what the passes read
  return st;
}

PeerImports::Counters PeerImports::counters() const {
  return {imports_.load(), drops_.load(), dirs_.load(), unlinks_.load(), unlinks_applied_.load()};
}

namespace {

bool same_file(const Inode& in, const PeerFile& now) {
  return now.node == in.peer->node && now.ino == in.peer->ino && S_ISREG(now.snap.mode);
}

}  // namespace

Result<InodeRef> PeerImports::import(uint64_t parent, std::string_view name) {
  auto path = p_.ns->rel_path(parent, name);
  if (!path.ok()) return Status::NotFound();
  std::optional<PeerFile> f = log_->find(*path);
  if (!f) return Status::NotFound();
  if (S_ISDIR(f->snap.mode)) {
    // Made here, and journaled: local files written under it outlive a
    // restart whatever the peer does with its own directory.
    if (p_.cfg->read_only) return Status::NotFound();
    bool created = false;
    auto d = p_.ns->create(parent, name, {f->snap.mode, f->snap.uid, f->snap.gid, {}, 0},
                           /*excl=*/false, &created);
    if (d.ok() && created) dirs_.fetch_add(1, std::memory_order_relaxed);
    return d;
  }
  PeerOrigin o{f->node, f->ino};
  auto in = p_.ns->import(parent, name, std::move(f->snap), o);
  if (in.ok()) {
    imports_.fetch_add(1, std::memory_order_relaxed);
    // A pass that applied a newer version between find() and the import
    // told its listener before the import was linked, so it dropped
    // nothing: look again now that it is, and leave no stale copy.
    std::optional<PeerFile> again = log_->find(*path);
    bool current = again && same_file(**in, *again);
    if (current) {
      std::lock_guard g((*in)->mu);
      current = FileData::move_extents_locked(**in, again->snap);
    }
    if (!current) {
      if (p_.ns->drop(*in).ok()) drops_.fetch_add(1, std::memory_order_relaxed);
      p_.ns->reap_if_unused(*in);  // nobody had it yet
      return Status::NotFound("changed on node " + o.node + " meanwhile");
    }
    return in;
  }
  if (in.status().code() == Status::Code::kExists) return p_.ns->lookup(parent, name);  // raced
  return in.status();
}

void PeerImports::import_children(uint64_t dir) {
  auto path = p_.ns->rel_path(dir, "");
  if (!path.ok()) return;
  std::string p = *path;
  if (!p.empty() && p.back() == '/') p.pop_back();
  // Those of a minute ago go first; this listing imports what it shows again.
  const int64_t now = p_.clock->now_ns();
  release_listed(now);
  std::vector<InodeRef> listed;
  for (auto& [name, mode] : log_->children(p)) {
    if (p_.ns->lookup(dir, name).ok()) continue;
    auto in = import(dir, name);
    if (in.ok() && (*in)->peer) listed.push_back(std::move(*in));
  }
  std::lock_guard l(listed_mu_);
  for (InodeRef& in : listed) listed_.emplace_back(now, std::move(in));
}

void PeerImports::release_listed(int64_t now) {
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
  for (const InodeRef& in : old) (void)p_.ns->release_import(in);
}

Result<InodeRef> PeerImports::import_file(uint64_t parent, std::string_view name) {
  auto path = p_.ns->rel_path(parent, name);
  if (!path.ok()) return Status::NotFound();
  std::optional<PeerFile> f = log_->find(*path);
  if (!f || !S_ISREG(f->snap.mode)) return Status::NotFound();
  return import(parent, name);
}

bool PeerImports::drop_and_forget(const InodeRef& in) {
  uint64_t parent;
  std::string name;
  {
    std::shared_lock ns(p_.ns->mu());
    parent = in->parent;
    name = in->name;
  }
  if (!p_.ns->drop(in).ok()) return false;
  {
    std::lock_guard g(in->mu);
    if (FileData::unused_locked(*in)) p_.data->free_locked(*in);  // its cached blocks too
  }
  p_.ns->reap_if_unused(in);                // else forget() or the last close does
  p_.notices->gone(parent, name, in->ino);  // the kernel forgets it too
  return true;
}

void PeerImports::recheck(const InodeRef& in, const std::string& path) {
  std::optional<PeerFile> now = log_->find(path);
  if (now && same_file(*in, *now)) {
    std::lock_guard g(in->mu);
    if (!in->evicted && FileData::move_extents_locked(*in, now->snap)) return;
  }
  if (drop_and_forget(in)) drops_.fetch_add(1, std::memory_order_relaxed);
}

void PeerImports::paths_changed(const std::vector<std::string>& paths) {
  for (const std::string& p : paths) {
    auto r = p_.ns->resolve(p);
    if (r.ok() && (*r)->peer) recheck(*r, p);  // else not imported, or ours: ours wins here
  }
}

void PeerImports::dirs_moved(const std::vector<std::string>& paths) {
  for (const std::string& p : paths) {
    if (p.empty()) continue;  // not reachable in the peer's tree: nothing was found under it
    auto d = p_.ns->resolve(p);
    if (!d.ok() || !(*d)->is_dir()) continue;
    for (const InodeRef& in : p_.ns->imports_under((*d)->ino)) {
      uint64_t parent;
      std::string name;
      {
        std::shared_lock l(p_.ns->mu());
        if (!in->linked.load()) continue;
        parent = in->parent;
        name = in->name;
      }
      if (auto r = p_.ns->rel_path(parent, name); r.ok()) recheck(in, *r);
    }
  }
}

void PeerImports::unlinked(const PeerOrigin& o, int64_t mtime_ns) {
  unlinks_.fetch_add(1, std::memory_order_relaxed);
  std::string path = log_->hide(o.node, o.ino, mtime_ns);
  if (!path.empty()) paths_changed({path});
}

void PeerImports::apply_unlinks(const std::vector<std::pair<uint64_t, int64_t>>& unlinks) {
  for (const auto& [ino, mtime] : unlinks) {
    InodeRef in = p_.ns->get(ino);
    if (!in || in->peer || !in->linked.load()) continue;
    {
      // Written (or being written) again after the peer's look: the newer
      // version stays, as a store after an unlink does anywhere.
      std::lock_guard g(in->mu);
      if (!in->is_reg() || in->mtime_ns > mtime || in->dirty()) continue;
    }
    if (!drop_and_forget(in)) continue;
    unlinks_applied_.fetch_add(1, std::memory_order_relaxed);
    spdlog::debug("removed inode {}: unlinked on another node", ino);
  }
}

}  // namespace kvfs
