// SPDX-License-Identifier: Apache-2.0
// Namespace: the inode table and the directory tree, all in memory.
//
// Names map to inodes; data belongs to the inode, so rename never moves data.
// Every inode has exactly one name (no hard links), which keeps snapshots
// self-describing: an inode's snapshot carries its (parent, name).
//
// Directories, symlinks and special files (FIFOs, sockets, device nodes) are
// committed to the index when created; regular files when a flusher has
// written their data. Changes to inodes the index already knows (rename,
// unlink, rmdir) go through the Journal before they are applied in memory:
// if the index write fails, nothing changes and the caller gets the error.
//
// Thread-safe. Two locks, so that a lookup never waits for RocksDB:
// - commit_mu_ orders changes and their index commits. Every change of the
//   tree takes it exclusively for its whole length (check, journal, apply);
//   a flusher takes it shared around its commit (flusher.cc), so a flush
//   commit and a rename are ordered.
// - mu_ guards the table and the tree for readers (lookup, readdir, get,
//   path). A change takes it exclusively only to apply what it committed.
// The tree (table_, names, parents, directories' entries) is written with
// both held, so it may be read under either. Lock order: commit_mu_ -> mu_
// -> Inode::mu.
#pragma once

#include <functional>
#include <memory>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/inode/inode.h"
#include "core/records/record.h"
#include "core/util/clock.h"
#include "core/util/status.h"

namespace kvfs {

class Journal {
 public:
  virtual ~Journal() = default;
  struct Put {
    Inode* in;
    uint64_t parent;
    std::string_view name;
  };
  // Called with Namespace::commit_mu_ held exclusively (mu_ is not held:
  // lookups go on meanwhile), before the change is applied; next_ino: the
  // next inode number the namespace hands out.
  virtual Status journal(const std::vector<Put>& puts, const std::vector<Inode*>& deletes,
                         uint64_t next_ino) = 0;
  // An unlink of a file another node owns (Inode::peer; record.h
  // kPeerUnlink): the version with that mtime. Same lock as journal(). A
  // journal that cannot carry it to the owner refuses it.
  virtual Status journal_peer_unlink(const PeerOrigin& origin, int64_t mtime_ns) {
    (void)origin;
    (void)mtime_ns;
    return Status::ReadOnly("unlink of a file another node owns");
  }
};

struct NewNode {
  uint32_t mode = 0;  // with the file type bits
  uint32_t uid = 0, gid = 0;
  std::string symlink;
  uint32_t rdev = 0;
};

inline constexpr size_t kNameMax = 255;
inline constexpr unsigned kRenameNoReplace = 1;  // RENAME_NOREPLACE
inline constexpr unsigned kRenameExchange = 2;   // RENAME_EXCHANGE

class Namespace {
 public:
  Namespace(Journal* journal, const Clock* clock);

  // Shared: the tree does not change (lookups, readers of names).
  std::shared_mutex& mu() const { return mu_; }
  // Shared: no change of the tree and no journal commit runs, and
  // Inode::committed changes only under it plus the inode's mu (flushers).
  std::shared_mutex& commit_mu() const { return commit_mu_; }

  // Startup only, before the namespace is shared: make_loaded() builds the
  // inode of each snapshot the index holds (any thread, no lock: the costly
  // part), load_add() puts it in the table, then load_finish() links the
  // tree. An inode whose parent is missing or not a
  // directory is dropped with everything under it (returned in orphans).
  // check_cycles (after an index rebuild) also drops directories the root
  // cannot reach. load_clear() forgets what was added (the scan failed).
  void load_reserve(size_t inodes);
  static InodeRef make_loaded(InodeSnapshot&& s);
  void load_add(InodeRef in);
  void load_finish(bool check_cycles, std::vector<uint64_t>* orphans);
  void load_clear();
  // Calls fn for every inode, with mu_ held shared (fn must not call back).
  void for_each(const std::function<void(Inode&)>& fn) const;
  // Startup only: makes a root directory if the load found none.
  Status ensure_root(uint32_t uid, uint32_t gid);

  InodeRef get(uint64_t ino) const;
  // get() for an inode number the kernel gave: NotFound when it is stale.
  Result<InodeRef> node(uint64_t ino) const;
  Result<InodeRef> lookup(uint64_t parent, std::string_view name) const;

  // Makes a new inode, or with excl=false returns the existing one
  // (*created=false). Everything but regular files (directories, symlinks,
  // FIFOs, sockets, device nodes: no data to wait for) is journaled at once.
  // In a set-group-ID directory it takes the directory's group (a new
  // directory also the bit), as on a local filesystem.
  Result<InodeRef> create(uint64_t parent, std::string_view name, const NewNode& n, bool excl,
                          bool* created);

  // unlink (dir=false) or rmdir (dir=true); returns the removed inode,
  // kept for the kernel (Inode::kept_for_kernel).
  Result<InodeRef> remove(uint64_t parent, std::string_view name, bool dir);

  // Returns the inode that the rename replaced (unlinked, kept for the
  // kernel), or null.
  Result<InodeRef> rename(uint64_t parent, std::string_view name, uint64_t new_parent,
                          std::string_view new_name, unsigned flags);

  // Links a file another node committed (s: its snapshot, extents already
  // naming foreign segments) as (parent, name) under a new inode number:
  // never journaled, the peer's log is its record. Exists if the name was
  // taken meanwhile.
  Result<InodeRef> import(uint64_t parent, std::string_view name, InodeSnapshot&& s,
                          PeerOrigin origin);

  // Removes a file by identity (its name may have changed meanwhile), e.g.
  // when its data turned out to be corrupt. NotFound if already unlinked.
  Status drop(const InodeRef& in);

  // Removes many inodes in one index batch (the evictor). ok() is called with
  // commit_mu_ held exclusively and the inode's mu held, and decides for each.
  struct Removed {
    InodeRef in;
    uint64_t parent;
    std::string name;
  };
  Status remove_many(const std::vector<InodeRef>& cands, const std::function<bool(Inode&)>& ok,
                     std::vector<Removed>* out);
  // Removes a directory if it is still linked and empty; returns its parent.
  Result<uint64_t> remove_empty_dir(const InodeRef& dir);

  // Entries after cookie, in a stable order; fn returns false when full.
  using DirFn =
      std::function<bool(std::string_view name, uint64_t ino, uint32_t mode, uint64_t next_cookie)>;
  Status readdir(uint64_t ino, uint64_t cookie, const DirFn& fn) const;

  // Drops n kernel references; removes the inode from the table when it is
  // unlinked, unreferenced and not open (a peer's file also when linked:
  // release_import). Returns it if it was removed while unlinked.
  InodeRef forget(uint64_t ino, uint64_t n);
  // After the last close: removes an unlinked inode nobody references.
  void reap_if_unused(const InodeRef& in);
  // Unlinks and forgets a peer's file (Inode::peer) that the kernel holds
  // no reference to and nobody has open: a lookup imports it again, and its
  // blocks stay cached by extent, so imports do not pile up in memory for
  // good. forget() does this when the kernel's last reference goes; this is
  // for imports the kernel never referenced (listed by readdir). False if
  // it is referenced or already gone.
  bool release_import(const InodeRef& in);
  // The peers' files imported anywhere below directory dir (a peer renamed
  // or removed a directory: each must be checked again).
  std::vector<InodeRef> imports_under(uint64_t dir) const;
  uint64_t released_imports() const { return released_imports_.load(); }

  // True if in lies somewhere below directory dir.
  bool is_under(const Inode& in, uint64_t dir) const;
  // The path of a name relative to the root, for log lines ("a/b/c"); a
  // parent no longer in the table shows as "<inode N>". Takes mu_ shared.
  std::string path(uint64_t parent, const std::string& name) const;
  // The path of (parent, name) relative to the root ("a/b/c", as resolve()
  // and the peers' logs take it); NotFound if parent is not in the tree.
  Result<std::string> rel_path(uint64_t parent, std::string_view name) const;
  // Resolves a path relative to the root ("a/b/c"); "" is the root.
  Result<InodeRef> resolve(std::string_view path) const;

  uint64_t count() const;
  std::vector<InodeRef> all() const;
  // Allocates inode numbers above every loaded one.
  uint64_t next_ino() const;
  // Startup: never hand out a number the index once used (its tombstone may
  // still be in a segment).
  void reserve_inos_below(uint64_t v);

  static Status check_name(std::string_view name);
  // ReadOnly for a change of a file another node owns (Inode::peer): rename
  // refuses it; renaming over it is allowed (this node's version then wins
  // here). remove journals an unlink for its owner (journal_peer_unlink).
  static Status peer_read_only(const Inode& in);

 private:
  Result<Inode*> dir_locked(uint64_t ino) const;
  void link_locked(Inode* dir, const InodeRef& child, std::string name);
  void unlink_locked(Inode* dir, const InodeRef& child);
  // The directory's readdir entry and counts of a child; by_name is the
  // caller's (the loader inserts the name itself).
  void add_entry_locked(Inode* dir, Inode* child);
  void remove_entry_locked(Inode* dir, Inode* child);
  bool unused_locked(Inode& in);
  bool release_import_locked(const InodeRef& in);
  // Unlinks `in` from dir and marks it gone (both locks held exclusively).
  void detach_locked(Inode* dir, const InodeRef& in);
  // A client's unlink or rename over it: no longer linked, its data kept
  // while the kernel holds it (Inode::kept_for_kernel). Requires mu_ and
  // in.mu.
  void unlink_for_client_locked(Inode& in);
  void drop_subtree_locked(Inode& in, std::vector<uint64_t>* orphans);

  Journal* const journal_;
  const Clock* const clock_;
  mutable std::shared_mutex commit_mu_;
  mutable std::shared_mutex mu_;
  std::unordered_map<uint64_t, InodeRef> table_;  // written under commit_mu_ and mu_
  std::atomic<uint64_t> next_ino_{kRootIno + 1};
  std::atomic<uint64_t> released_imports_{0};
};

}  // namespace kvfs
