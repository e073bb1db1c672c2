// SPDX-License-Identifier: Apache-2.0
#include "core/namespace/namespace.h"

#include <ctime>
#include <mutex>
#include <unordered_set>

namespace kvfs {

Namespace::Namespace(Journal* journal, const Clock* clock) : journal_(journal), clock_(clock) {}

namespace {

// Its removal must be journaled: the index knows it, or a flush captured it
// and its record may be in a segment the index has not applied, where a
// catch-up after a crash would find it again without a newer tombstone.
// Requires commit_mu_ exclusive (no capture or flush commit runs meanwhile)
// and in.mu.
bool needs_tombstone_locked(const Inode& in) {
  return in.committed || in.flush.logged();
}

// The same, taking in.mu.
bool needs_tombstone(Inode& in) {
  std::lock_guard g(in.mu);
  return needs_tombstone_locked(in);
}

}  // namespace

Status Namespace::check_name(std::string_view name) {
  if (name.size() > kNameMax) return Status::NameTooLong();
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string_view::npos ||
      name.find('\0') != std::string_view::npos)
    return Status::Invalid("bad name");
  return Status::OK();
}

std::string Namespace::path(uint64_t parent, const std::string& name) const {
  std::shared_lock l(mu_);
  std::string p = name;
  for (int depth = 0; parent != kRootIno && depth < 4096; ++depth) {
    auto it = table_.find(parent);
    if (it == table_.end()) return "<inode " + std::to_string(parent) + ">/" + p;
    p = it->second->name + "/" + p;
    parent = it->second->parent;
  }
  return "/" + p;
}

Status Namespace::peer_read_only(const Inode& in) {
  return Status::ReadOnly("a file of node " + in.peer->node + " (only its owner changes it)");
}

Result<std::string> Namespace::rel_path(uint64_t parent, std::string_view name) const {
  std::shared_lock l(mu_);
  std::string p(name);
  for (int depth = 0; parent != kRootIno; ++depth) {
    auto it = table_.find(parent);
    if (it == table_.end() || !it->second->linked || depth >= 4096) return Status::NotFound();
    p = it->second->name + "/" + p;
    parent = it->second->parent;
  }
  return p;
}

Result<InodeRef> Namespace::import(uint64_t parent, std::string_view name, InodeSnapshot&& s,
                                   PeerOrigin origin) {
  KVFS_RETURN_IF_ERROR(check_name(name));
  std::unique_lock c(commit_mu_);
  auto d = dir_locked(parent);
  if (!d.ok()) return d.status();
  std::string key(name);
  if ((*d)->dir->by_name.count(key)) return Status::Exists();
  s.ino = next_ino_.fetch_add(1);
  InodeRef in = make_loaded(std::move(s));
  in->committed.reset();  // the index never knows it
  in->peer = std::make_unique<const PeerOrigin>(std::move(origin));
  in->linked = true;
  std::unique_lock l(mu_);
  link_locked(*d, in, std::move(key));
  table_[in->ino] = in;
  return in;
}

InodeRef Namespace::get(uint64_t ino) const {
  std::shared_lock l(mu_);
  auto it = table_.find(ino);
  return it == table_.end() ? nullptr : it->second;
}

Result<InodeRef> Namespace::node(uint64_t ino) const {
  InodeRef in = get(ino);
  if (!in) return Status::NotFound("stale inode " + std::to_string(ino));
  return in;
}

Result<Inode*> Namespace::dir_locked(uint64_t ino) const {
  auto it = table_.find(ino);
  if (it == table_.end()) return Status::NotFound();
  Inode* d = it->second.get();
  if (!d->is_dir()) return Status::NotDir();
  if (!d->linked) return Status::NotFound("directory was removed");
  return d;
}

Result<InodeRef> Namespace::lookup(uint64_t parent, std::string_view name) const {
  if (name.size() > kNameMax) return Status::NameTooLong();
  std::shared_lock l(mu_);
  auto d = dir_locked(parent);
  if (!d.ok()) return d.status();
  auto it = (*d)->dir->by_name.find(std::string(name));
  if (it == (*d)->dir->by_name.end()) return Status::NotFound();
  return it->second;
}

void Namespace::add_entry_locked(Inode* dir, Inode* child) {
  child->dir_cookie = dir->dir->next_cookie++;
  child->linked = true;
  // Cookies only grow: the new one goes at the end.
  dir->dir->by_cookie.emplace_hint(dir->dir->by_cookie.end(), child->dir_cookie, child);
  if (child->dir) ++dir->dir->subdirs;
}

void Namespace::remove_entry_locked(Inode* dir, Inode* child) {
  dir->dir->by_cookie.erase(child->dir_cookie);
  if (child->dir) --dir->dir->subdirs;
}

void Namespace::link_locked(Inode* dir, const InodeRef& child, std::string name) {
  child->parent = dir->ino;
  child->name = std::move(name);
  add_entry_locked(dir, child.get());
  dir->dir->by_name[child->name] = child;
}

void Namespace::unlink_locked(Inode* dir, const InodeRef& child) {
  remove_entry_locked(dir, child.get());
  dir->dir->by_name.erase(child->name);
}

Result<InodeRef> Namespace::create(uint64_t parent, std::string_view name, const NewNode& n,
                                   bool excl, bool* created) {
  KVFS_RETURN_IF_ERROR(check_name(name));
  *created = false;
  std::unique_lock c(commit_mu_);
  auto d = dir_locked(parent);
  if (!d.ok()) return d.status();
  Inode* dir = *d;
  std::string key(name);
  if (auto it = dir->dir->by_name.find(key); it != dir->dir->by_name.end()) {
    if (excl) return Status::Exists();
    return it->second;
  }
  auto in = std::make_shared<Inode>(next_ino_.fetch_add(1));
  const int64_t t = clock_->now_ns();
  in->mode = n.mode;
  in->uid = n.uid;
  in->gid = n.gid;
  {
    // A set-group-ID directory gives its group to what is made in it, and
    // the bit to subdirectories (the kernel leaves both to the filesystem;
    // it only strips S_ISGID from a new file the creator may not have).
    std::lock_guard g(dir->mu);
    if (dir->mode & S_ISGID) {
      in->gid = dir->gid;
      if (S_ISDIR(n.mode)) in->mode |= S_ISGID;
    }
  }
  in->atime_ns = in->mtime_ns = in->ctime_ns = t;
  in->touch(t);
  // A new file is dirty until its first commit: the evictor must not take it
  // in the moment between its creation and its opening.
  if (in->is_reg()) in->flush.changed();
  in->symlink = n.symlink;
  in->rdev = n.rdev;
  in->size = in->is_symlink() ? n.symlink.size() : 0;
  if (in->is_dir()) in->dir = std::make_unique<DirData>();
  if (!in->is_reg())
    KVFS_RETURN_IF_ERROR(journal_->journal({{in.get(), parent, name}}, {}, next_ino_.load()));
  std::unique_lock l(mu_);
  link_locked(dir, in, std::move(key));
  table_[in->ino] = in;
  {
    std::lock_guard g(dir->mu);
    dir->mtime_ns = dir->ctime_ns = t;
  }
  *created = true;
  return in;
}

Result<InodeRef> Namespace::remove(uint64_t parent, std::string_view name, bool want_dir) {
  if (name.size() > kNameMax) return Status::NameTooLong();
  std::unique_lock c(commit_mu_);
  auto d = dir_locked(parent);
  if (!d.ok()) return d.status();
  Inode* dir = *d;
  auto it = dir->dir->by_name.find(std::string(name));
  if (it == dir->dir->by_name.end()) return Status::NotFound();
  InodeRef victim = it->second;
  if (victim->peer) {
    if (want_dir) return Status::NotDir();
    int64_t mtime;
    {
      std::lock_guard g(victim->mu);
      mtime = victim->mtime_ns;
    }
    KVFS_RETURN_IF_ERROR(journal_->journal_peer_unlink(*victim->peer, mtime));
  }
  if (want_dir) {
    if (!victim->dir) return Status::NotDir();
    if (!victim->dir->by_name.empty()) return Status::NotEmpty();
  } else if (victim->dir) {
    return Status::IsDir();
  }
  if (needs_tombstone(*victim))
    KVFS_RETURN_IF_ERROR(journal_->journal({}, {victim.get()}, next_ino_.load()));
  std::unique_lock l(mu_);
  unlink_locked(dir, victim);
  const int64_t t = clock_->now_ns();
  {
    std::lock_guard g(dir->mu);
    dir->mtime_ns = dir->ctime_ns = t;
  }
  {
    std::lock_guard g(victim->mu);
    unlink_for_client_locked(*victim);
    victim->ctime_ns = t;
  }
  if (unused_locked(*victim)) table_.erase(victim->ino);
  return victim;
}

Result<InodeRef> Namespace::rename(uint64_t parent, std::string_view name, uint64_t new_parent,
                                   std::string_view new_name, unsigned flags) {
  if (flags & ~kRenameNoReplace) return Status::Invalid("unsupported rename flags");
  if (name.size() > kNameMax) return Status::NameTooLong();
  KVFS_RETURN_IF_ERROR(check_name(new_name));
  std::unique_lock c(commit_mu_);
  auto sd = dir_locked(parent);
  if (!sd.ok()) return sd.status();
  auto nd = dir_locked(new_parent);
  if (!nd.ok()) return nd.status();
  Inode* src_dir = *sd;
  Inode* dst_dir = *nd;
  auto sit = src_dir->dir->by_name.find(std::string(name));
  if (sit == src_dir->dir->by_name.end()) return Status::NotFound();
  InodeRef src = sit->second;
  // Checked here, under commit_mu_: the name may have been re-imported
  // since the caller looked. Renaming over a peer's file is fine.
  if (src->peer) return peer_read_only(*src);
  InodeRef dst;
  if (auto dit = dst_dir->dir->by_name.find(std::string(new_name));
      dit != dst_dir->dir->by_name.end())
    dst = dit->second;
  if (dst == src) return InodeRef();  // same file: POSIX says do nothing
  if (src->dir) {
    // A directory may not move into its own subtree.
    for (uint64_t a = new_parent;;) {
      if (a == src->ino) return Status::Invalid("rename into own subtree");
      if (a == kRootIno) break;
      auto p = table_.find(a);
      if (p == table_.end()) break;
      a = p->second->parent;
    }
  }
  if (dst) {
    if (flags & kRenameNoReplace) return Status::Exists();
    if (dst->dir && !src->dir) return Status::IsDir();
    if (!dst->dir && src->dir) return Status::NotDir();
    if (dst->dir && !dst->dir->by_name.empty()) return Status::NotEmpty();
  }
  std::vector<Journal::Put> puts;
  std::vector<Inode*> dels;
  if (src->committed) puts.push_back({src.get(), new_parent, new_name});
  if (dst && needs_tombstone(*dst)) dels.push_back(dst.get());
  if (!puts.empty() || !dels.empty())
    KVFS_RETURN_IF_ERROR(journal_->journal(puts, dels, next_ino_.load()));

  std::unique_lock l(mu_);
  if (dst) {
    unlink_locked(dst_dir, dst);
    std::lock_guard g(dst->mu);
    unlink_for_client_locked(*dst);
  }
  unlink_locked(src_dir, src);
  link_locked(dst_dir, src, std::string(new_name));
  const int64_t t = clock_->now_ns();
  for (Inode* i : {src_dir, dst_dir, src.get()}) {
    std::lock_guard g(i->mu);
    i->ctime_ns = t;
    if (i != src.get()) i->mtime_ns = t;
  }
  {
    // A flusher may be committing it under its old name right now: make sure
    // a flush captures the new one.
    std::lock_guard g(src->mu);
    if (!src->committed) src->flush.changed();
    src->flush.renamed();
  }
  if (dst && unused_locked(*dst)) table_.erase(dst->ino);
  return dst;
}

Status Namespace::drop(const InodeRef& in) {
  std::unique_lock c(commit_mu_);
  if (!in->linked.load()) return Status::NotFound();
  auto d = dir_locked(in->parent);
  if (!d.ok()) return d.status();
  auto it = (*d)->dir->by_name.find(in->name);
  if (it == (*d)->dir->by_name.end() || it->second != in) return Status::NotFound();
  if (needs_tombstone(*in))
    KVFS_RETURN_IF_ERROR(journal_->journal({}, {in.get()}, next_ino_.load()));
  std::unique_lock l(mu_);
  detach_locked(*d, in);
  return Status::OK();
}

void Namespace::unlink_for_client_locked(Inode& in) {
  // Together under the inode's lock: a flush committing it right now frees
  // the data of an unused unlinked inode, and must not take what the
  // kernel may still open.
  in.kept_for_kernel = true;
  in.linked = false;
}

void Namespace::detach_locked(Inode* dir, const InodeRef& in) {
  unlink_locked(dir, in);
  in->linked = false;
  std::lock_guard g(in->mu);
  in->evicted = true;  // a later open by inode number is a miss
}

Status Namespace::remove_many(const std::vector<InodeRef>& cands,
                              const std::function<bool(Inode&)>& ok, std::vector<Removed>* out) {
  std::unique_lock c(commit_mu_);
  std::vector<InodeRef> chosen;
  std::vector<Inode*> dels;
  for (const InodeRef& in : cands) {
    if (!in->linked.load() || in->dir || in->ino == kRootIno) continue;
    {
      std::lock_guard g(in->mu);
      if (!ok(*in)) continue;
      in->evicted = true;
      if (needs_tombstone_locked(*in)) dels.push_back(in.get());
    }
    chosen.push_back(in);
  }
  if (!dels.empty()) {
    Status s = journal_->journal({}, dels, next_ino_.load());
    if (!s.ok()) {
      for (auto& in : chosen) {
        std::lock_guard g(in->mu);
        in->evicted = false;
      }
      return s;
    }
  }
  const int64_t t = clock_->now_ns();
  std::unique_lock l(mu_);
  for (InodeRef& in : chosen) {
    auto p = table_.find(in->parent);
    if (p == table_.end()) continue;
    Inode* dir = p->second.get();
    out->push_back({in, in->parent, in->name});
    unlink_locked(dir, in);
    in->linked = false;
    std::lock_guard g(dir->mu);
    dir->mtime_ns = dir->ctime_ns = t;
  }
  for (auto& r : *out)
    if (unused_locked(*r.in)) table_.erase(r.in->ino);
  return Status::OK();
}

Result<uint64_t> Namespace::remove_empty_dir(const InodeRef& dir) {
  std::unique_lock c(commit_mu_);
  if (!dir->linked.load() || !dir->dir || dir->ino == kRootIno || !dir->dir->by_name.empty())
    return Status::Busy();
  auto p = table_.find(dir->parent);
  if (p == table_.end()) return Status::NotFound();
  if (dir->committed) KVFS_RETURN_IF_ERROR(journal_->journal({}, {dir.get()}, next_ino_.load()));
  std::unique_lock l(mu_);
  unlink_locked(p->second.get(), dir);
  dir->linked = false;
  {
    // A name the kernel still caches is a miss at its next getattr.
    std::lock_guard g(dir->mu);
    dir->evicted = true;
  }
  if (unused_locked(*dir)) table_.erase(dir->ino);
  return p->second->ino;
}

Status Namespace::readdir(uint64_t ino, uint64_t cookie, const DirFn& fn) const {
  std::shared_lock l(mu_);
  auto it = table_.find(ino);
  if (it == table_.end()) return Status::NotFound();
  Inode* d = it->second.get();
  if (!d->dir) return Status::NotDir();
  if (cookie < 1 && !fn(".", d->ino, S_IFDIR, 1)) return Status::OK();
  if (cookie < 2) {
    auto p = table_.find(d->parent);
    uint64_t pino = p == table_.end() ? d->ino : d->parent;
    if (!fn("..", pino, S_IFDIR, 2)) return Status::OK();
  }
  for (auto e = d->dir->by_cookie.upper_bound(std::max<uint64_t>(cookie, 2));
       e != d->dir->by_cookie.end(); ++e) {
    if (!fn(e->second->name, e->second->ino, e->second->mode & S_IFMT, e->first)) break;
  }
  return Status::OK();
}

bool Namespace::unused_locked(Inode& in) {
  if (in.linked || in.nlookup.load() != 0) return false;
  std::lock_guard g(in.mu);
  return in.opens.handles() == 0;
}

InodeRef Namespace::forget(uint64_t ino, uint64_t n) {
  std::unique_lock c(commit_mu_);
  std::unique_lock l(mu_);
  auto it = table_.find(ino);
  if (it == table_.end()) return nullptr;
  InodeRef in = it->second;
  uint64_t cur = in->nlookup.load();
  in->nlookup = cur > n ? cur - n : 0;
  if (ino != kRootIno && unused_locked(*in)) {
    table_.erase(it);
    return in;
  }
  if (in->peer && in->linked && in->nlookup.load() == 0) release_import_locked(in);
  return nullptr;
}

bool Namespace::release_import_locked(const InodeRef& in) {
  {
    std::lock_guard g(in->mu);
    if (in->opens.handles() != 0) return false;
  }
  auto d = dir_locked(in->parent);
  if (!d.ok()) return false;
  detach_locked(*d, in);
  table_.erase(in->ino);
  released_imports_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool Namespace::release_import(const InodeRef& in) {
  std::unique_lock c(commit_mu_);
  std::unique_lock l(mu_);
  if (!in->peer || !in->linked || in->nlookup.load() != 0) return false;
  return release_import_locked(in);
}

std::vector<InodeRef> Namespace::imports_under(uint64_t dir) const {
  std::shared_lock l(mu_);
  std::vector<InodeRef> out;
  std::vector<uint64_t> todo{dir};
  while (!todo.empty()) {
    auto it = table_.find(todo.back());
    todo.pop_back();
    if (it == table_.end() || !it->second->dir) continue;
    for (const auto& [name, child] : it->second->dir->by_name) {
      if (child->peer) out.push_back(child);
      if (child->dir) todo.push_back(child->ino);
    }
  }
  return out;
}

void Namespace::reap_if_unused(const InodeRef& in) {
  std::unique_lock c(commit_mu_);
  std::unique_lock l(mu_);
  if (unused_locked(*in)) table_.erase(in->ino);
}

bool Namespace::is_under(const Inode& in, uint64_t dir) const {
  std::shared_lock l(mu_);
  if (!in.linked.load()) return false;
  for (uint64_t a = in.parent, hops = 0; hops < 100000; ++hops) {
    if (a == dir) return true;
    if (a == kRootIno) return false;
    auto it = table_.find(a);
    if (it == table_.end()) return false;
    a = it->second->parent;
  }
  return false;
}

Result<InodeRef> Namespace::resolve(std::string_view path) const {
  std::shared_lock l(mu_);
  auto it = table_.find(kRootIno);
  if (it == table_.end()) return Status::NotFound();
  InodeRef cur = it->second;
  while (!path.empty()) {
    size_t slash = path.find('/');
    std::string_view part = path.substr(0, slash);
    path = slash == std::string_view::npos ? std::string_view() : path.substr(slash + 1);
    if (part.empty() || part == ".") continue;
    if (!cur->dir) return Status::NotDir();
    if (part == "..") {
      cur = table_.at(cur->parent);
      continue;
    }
    auto c = cur->dir->by_name.find(std::string(part));
    if (c == cur->dir->by_name.end()) return Status::NotFound();
    cur = c->second;
  }
  return cur;
}

uint64_t Namespace::count() const {
  std::shared_lock l(mu_);
  return table_.size();
}

std::vector<InodeRef> Namespace::all() const {
  std::shared_lock l(mu_);
  std::vector<InodeRef> v;
  v.reserve(table_.size());
  for (auto& [ino, in] : table_) v.push_back(in);
  return v;
}

uint64_t Namespace::next_ino() const {
  return next_ino_.load();
}

void Namespace::reserve_inos_below(uint64_t v) {
  uint64_t cur = next_ino_.load();
  while (cur < v && !next_ino_.compare_exchange_weak(cur, v)) {
  }
}

}  // namespace kvfs
