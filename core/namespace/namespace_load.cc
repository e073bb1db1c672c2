// SPDX-License-Identifier: Apache-2.0
// Namespace at startup: the inodes the index holds are built, added and
// linked into a tree (with the checks a rebuilt index needs), and a root is
// made when there is none. The running namespace is in namespace.cc.
#include <sys/stat.h>

#include <mutex>
#include <unordered_set>

#include "core/namespace/namespace.h"

namespace kvfs {

void Namespace::load_reserve(size_t inodes) {
  std::unique_lock c(commit_mu_);
  std::unique_lock l(mu_);
  table_.reserve(inodes);
}

InodeRef Namespace::make_loaded(InodeSnapshot&& s) {
  auto in = std::make_shared<Inode>(s.ino);
  in->parent = s.parent;
  // The inode's own (parent, name) are authoritative; the journal writes them
  // into every snapshot it re-logs, so the committed copy need not keep the
  // name (one string less per inode, in time and memory).
  in->name = std::move(s.name);
  s.name.clear();
  in->mode = s.mode;
  in->uid = s.uid;
  in->gid = s.gid;
  in->size = s.size;
  in->atime_ns = s.atime_ns;
  in->mtime_ns = s.mtime_ns;
  in->ctime_ns = s.ctime_ns;
  in->symlink = s.symlink;
  in->rdev = s.rdev;
  in->xattrs = s.xattrs;
  in->touch(std::max(s.atime_ns, s.mtime_ns));
  if (in->is_dir()) in->dir = std::make_unique<DirData>();
  if (!s.extents.empty()) in->blocks.resize(s.extents.back().idx + 1);
  for (const auto& be : s.extents) {
    in->blocks[be.idx].ext = be.ext;
    in->blocks[be.idx].len = be.ext.len;
  }
  in->committed = std::make_unique<InodeSnapshot>(std::move(s));
  in->linked = false;
  return in;
}

void Namespace::load_add(InodeRef in) {
  std::unique_lock c(commit_mu_);
  std::unique_lock l(mu_);
  if (in->ino >= next_ino_) next_ino_ = in->ino + 1;
  table_[in->ino] = std::move(in);
}

void Namespace::load_clear() {
  std::unique_lock c(commit_mu_);
  std::unique_lock l(mu_);
  table_.clear();
  next_ino_ = kRootIno + 1;
}

void Namespace::drop_subtree_locked(Inode& in, std::vector<uint64_t>* orphans) {
  // Iterative: a deep tree must not overflow the stack.
  std::vector<Inode*> todo{&in};
  while (!todo.empty()) {
    Inode* n = todo.back();
    todo.pop_back();
    n->linked = false;
    if (orphans) orphans->push_back(n->ino);
    if (!n->dir) continue;
    for (auto& [name, child] : n->dir->by_name) todo.push_back(child.get());
    n->dir->by_name.clear();
    n->dir->by_cookie.clear();
  }
}

void Namespace::load_finish(bool check_cycles, std::vector<uint64_t>* orphans) {
  std::unique_lock c(commit_mu_);
  std::unique_lock l(mu_);
  auto root = table_.find(kRootIno);
  // A root that is not a directory stays: ensure_root() reports it.
  if (root != table_.end()) root->second->linked = true;
  // One pass links every inode into its parent. An inode that cannot be
  // linked is dropped after the pass together with whatever got linked under
  // it, so the order of the table does not matter.
  std::vector<Inode*> bad;
  for (auto& [ino, in] : table_) {
    if (ino == kRootIno) continue;
    auto p = table_.find(in->parent);
    if (p == table_.end() || !p->second->is_dir() || p->second == in ||
        !check_name(in->name).ok()) {
      bad.push_back(in.get());
      continue;
    }
    Inode* dir = p->second.get();
    auto [it, fresh] = dir->dir->by_name.try_emplace(in->name, in);
    if (!fresh) {
      // Two inodes claim one name (only after a rebuild): keep the newer.
      if (it->second->committed->seq > in->committed->seq) {
        bad.push_back(in.get());
        continue;
      }
      remove_entry_locked(dir, it->second.get());
      bad.push_back(it->second.get());
      it->second = in;
    }
    // The name is already the inode's own: linked without link_locked()'s copy.
    add_entry_locked(dir, in.get());
  }
  // The loser of a name clash may have been linked first: what went under
  // it goes with it.
  for (Inode* b : bad) drop_subtree_locked(*b, orphans);
  // A directory below itself can only come from a rebuild that mixed
  // snapshots of different times (the journal never writes one): it links
  // but the root does not reach it. Walking the tree costs about as much as
  // loading it, so only a rebuilt index is walked.
  if (check_cycles) {
    std::unordered_set<const Inode*> seen;
    std::vector<Inode*> todo;
    if (root != table_.end()) todo.push_back(root->second.get());
    while (!todo.empty()) {
      Inode* n = todo.back();
      todo.pop_back();
      seen.insert(n);
      if (n->dir)
        for (auto& [name, child] : n->dir->by_name) todo.push_back(child.get());
    }
    for (auto& [ino, in] : table_) {
      if (!in->linked || seen.count(in.get())) continue;
      bad.push_back(in.get());
      in->linked = false;
      if (orphans) orphans->push_back(ino);
      if (in->dir) {  // break the cycle of references
        in->dir->by_name.clear();
        in->dir->by_cookie.clear();
      }
    }
  }
  if (bad.empty()) return;
  for (auto it = table_.begin(); it != table_.end();)
    it = it->second->linked ? std::next(it) : table_.erase(it);
}

void Namespace::for_each(const std::function<void(Inode&)>& fn) const {
  std::shared_lock l(mu_);
  for (auto& [ino, in] : table_) fn(*in);
}

Status Namespace::ensure_root(uint32_t uid, uint32_t gid) {
  std::unique_lock c(commit_mu_);
  auto it = table_.find(kRootIno);
  if (it != table_.end()) {
    if (!it->second->is_dir()) return Status::Corruption("root inode is not a directory");
    return Status::OK();
  }
  auto root = std::make_shared<Inode>(kRootIno);
  root->parent = kRootIno;
  root->mode = S_IFDIR | 0755;
  root->uid = uid;
  root->gid = gid;
  root->atime_ns = root->mtime_ns = root->ctime_ns = clock_->now_ns();
  root->dir = std::make_unique<DirData>();
  KVFS_RETURN_IF_ERROR(journal_->journal({{root.get(), kRootIno, ""}}, {}, next_ino_.load()));
  std::unique_lock l(mu_);
  table_[kRootIno] = std::move(root);
  return Status::OK();
}

}  // namespace kvfs
