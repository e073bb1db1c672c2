// SPDX-License-Identifier: Apache-2.0
#include "core/store/name_ops.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#include <cassert>

#include "core/data/file_data.h"
#include "core/data/prefetcher.h"
#include "core/flush/flusher.h"
#include "core/peers/peer_imports.h"
#include "core/store/lookup_counters.h"
#include "core/util/clock.h"

namespace kvfs {

static void fix_nlink(const InodeRef& in, Attr* a) {
  // Directory link counts come from the tree (Namespace::mu_ held shared).
  if (in->dir && in->linked.load()) a->nlink = 2 + in->dir->subdirs;
}

Result<Attr> NameOps::lookup(uint64_t parent, std::string_view name) {
  InodeRef in;
  Attr a;
  for (int tries = 0;; ++tries) {
    auto r = p_.ns->lookup(parent, name);
    if (!r.ok() && r.status().code() == Status::Code::kNotFound && p_.peers)
      r = p_.peers->import(parent, name);
    if (!r.ok()) {
      if (r.status().code() == Status::Code::kNotFound)
        p_.counts->negative.fetch_add(1, std::memory_order_relaxed);
      return r.status();
    }
    in = std::move(*r);
    std::shared_lock ns(p_.ns->mu());
    std::lock_guard g(in->mu);
    // A peer's file released (or dropped) between the two looks: the
    // kernel must not get an inode number that is gone; import it again.
    if (in->peer && !in->linked.load()) {
      if (tries < 3) continue;
      return Status::NotFound("changing on its owner meanwhile");
    }
    a = attr_locked(*in);
    fix_nlink(in, &a);
    in->nlookup.fetch_add(1);
    in->touch(p_.clock->now_ns());
    break;
  }
  if (S_ISREG(a.mode)) {
    p_.counts->files.fetch_add(1, std::memory_order_relaxed);
    if (in->peer) p_.counts->peer.fetch_add(1, std::memory_order_relaxed);
    // A hit is loaded right after it is looked up (vLLM, llm-d): start
    // reading what is only in the backing dir.
    if (a.size > 0) p_.prefetch->want(in);
  }
  return a;
}

Result<Attr> NameOps::getattr(uint64_t ino) {
  auto r = p_.ns->node(ino);
  if (!r.ok()) return r.status();
  InodeRef& in = *r;
  in->touch(p_.clock->now_ns());
  std::shared_lock ns(p_.ns->mu());
  std::lock_guard g(in->mu);
  // Evicted or dropped: the kernel's cached name is stale, make it a miss.
  if (in->evicted && !in->linked.load() && in->opens.handles() == 0)
    return Status::NotFound("evicted");
  Attr a = attr_locked(*in);
  fix_nlink(in, &a);
  return a;
}

Result<Attr> NameOps::setattr(uint64_t ino, const SetAttrRequest& r, OpenFile* fh) {
  KVFS_RETURN_IF_ERROR(p_.cfg->check_writable());
  auto rn = p_.ns->node(ino);
  if (!rn.ok()) return rn.status();
  InodeRef& in = *rn;
  if (in->peer) {
    // Only a touch (llm-d marks the hits it skips): kept in memory here.
    if (r.set_size || r.set_mode || r.set_uid || r.set_gid || r.set_mtime)
      return Namespace::peer_read_only(*in);
    std::lock_guard g(in->mu);
    if (r.set_atime) in->atime_ns = r.atime_now ? p_.clock->now_ns() : r.atime_ns;
    in->touch(p_.clock->now_ns());
    return attr_locked(*in);
  }
  if (r.set_size && r.size > p_.cfg->max_file_size) return Status::FileTooBig();
  // No namespace lock: a truncate may read the block it shortens from the
  // backing dir (FileData::lock_with_kept), and only a directory's link count needs
  // the tree, read after.
  std::shared_lock rl(*p_.reclaim_mu);
  std::unique_lock<std::mutex> g;
  ConstBufRef old;
  KVFS_RETURN_IF_ERROR(p_.data->lock_with_kept(
      *in, &g,
      [&](const Inode& i, uint32_t* idx) {
        return r.set_size && i.is_reg() ? FileData::kept_by_truncate_locked(i, r.size, idx)
                                        : Extent{};
      },
      &old));
  const int64_t t = p_.clock->now_ns();
  bool meta = false;
  if (r.set_size) {
    if (!in->is_reg()) return in->is_dir() ? Status::IsDir() : Status::Invalid("not a file");
    p_.files->truncate_locked(*in, r.size, old);
    in->mtime_ns = t;
    meta = true;
    if (fh) {  // an ftruncate after a close()
      assert(fh->in == in);
      p_.files->written_locked(fh);
    }
  }
  if (r.set_mode) in->mode = (in->mode & S_IFMT) | (r.mode & 07777);
  if (r.set_uid) in->uid = r.uid;
  if (r.set_gid) in->gid = r.gid;
  if (r.set_atime) {
    in->atime_ns = r.atime_now ? t : r.atime_ns;
    in->flush.atime_changed();
    in->touch(t);  // llm-d marks the hits it skips: they are in use
  }
  if (r.set_mtime) in->mtime_ns = r.mtime_now ? t : r.mtime_ns;
  // Nothing to set is chown(path, -1, -1): a local filesystem marks ctime
  // for it, and FUSE does not pass the ctime mark itself.
  const bool only_ctime =
      !r.set_size && !r.set_mode && !r.set_uid && !r.set_gid && !r.set_atime && !r.set_mtime;
  meta |= r.set_mode || r.set_uid || r.set_gid || r.set_mtime || only_ctime;
  if (meta || r.set_atime) in->ctime_ns = t;
  // An atime-only touch (llm-d marking a hit) is kept in RAM and written with
  // the next flush of the file: it does not deserve a segment record.
  if (meta) {
    in->flush.changed();
    if (FileData::ready_to_flush_locked(*in)) p_.flusher->enqueue_locked(in, false);
  }
  Attr a = attr_locked(*in);
  g.unlock();
  rl.unlock();
  if (S_ISDIR(a.mode)) {
    std::shared_lock ns(p_.ns->mu());
    fix_nlink(in, &a);
  }
  return a;
}

Result<Attr> NameOps::mknod(uint64_t parent, std::string_view name, uint32_t mode, uint32_t rdev,
                            const Caller& c) {
  KVFS_RETURN_IF_ERROR(p_.cfg->check_writable());
  if (S_ISREG(mode)) {
    Attr a;
    auto f = p_.files->create(parent, name, mode, O_CREAT | O_EXCL, c, &a);
    if (!f.ok()) return f.status();
    p_.files->release(*f);
    return a;
  }
  // The kernel serves FIFOs and sockets itself and device nodes go to their
  // driver: kvfs keeps only the inode, like a directory without entries.
  if (!S_ISFIFO(mode) && !S_ISSOCK(mode) && !S_ISCHR(mode) && !S_ISBLK(mode))
    return Status::Invalid("unknown file type");
  const bool dev = S_ISCHR(mode) || S_ISBLK(mode);
  return make_node(parent, name,
                   {(mode & S_IFMT) | (mode & 07777), c.uid, c.gid, {}, dev ? rdev : 0});
}

Result<Attr> NameOps::make_node(uint64_t parent, std::string_view name, const NewNode& n) {
  bool created;
  auto r = p_.ns->create(parent, name, n, true, &created);
  if (!r.ok()) return r.status();
  InodeRef& in = *r;
  std::lock_guard g(in->mu);
  in->nlookup.fetch_add(1);
  return attr_locked(*in);
}

Result<Attr> NameOps::mkdir(uint64_t parent, std::string_view name, uint32_t mode,
                            const Caller& c) {
  KVFS_RETURN_IF_ERROR(p_.cfg->check_writable());
  bool created;
  auto r =
      p_.ns->create(parent, name, {S_IFDIR | (mode & 07777), c.uid, c.gid, {}}, true, &created);
  if (!r.ok()) return r.status();
  InodeRef& in = *r;
  std::shared_lock ns(p_.ns->mu());
  std::lock_guard g(in->mu);
  in->nlookup.fetch_add(1);
  Attr a = attr_locked(*in);
  fix_nlink(in, &a);
  return a;
}

Result<Attr> NameOps::symlink(uint64_t parent, std::string_view name, std::string_view target,
                              const Caller& c) {
  KVFS_RETURN_IF_ERROR(p_.cfg->check_writable());
  if (target.empty() || target.size() > 4095) return Status::NameTooLong("symlink target");
  return make_node(parent, name, {S_IFLNK | 0777, c.uid, c.gid, std::string(target)});
}

Result<std::string> NameOps::readlink(uint64_t ino) {
  auto r = p_.ns->node(ino);
  if (!r.ok()) return r.status();
  std::lock_guard g((*r)->mu);
  if (!(*r)->is_symlink()) return Status::Invalid("not a symlink");
  return (*r)->symlink;
}

Status NameOps::unlink(uint64_t parent, std::string_view name) {
  KVFS_RETURN_IF_ERROR(p_.cfg->check_writable());
  auto r = p_.ns->remove(parent, name, false);
  if (!r.ok() && r.status().code() == Status::Code::kNotFound) {
    if (auto imp =
            p_.peers ? p_.peers->import_file(parent, name) : Result<InodeRef>(Status::NotFound());
        imp.ok()) {
      r = p_.ns->remove(parent, name, false);
      if (!r.ok()) (void)p_.ns->release_import(*imp);
    }
  }
  if (!r.ok()) return r.status();
  int64_t mtime;
  {
    std::lock_guard g((*r)->mu);
    if (FileData::unused_locked(**r)) p_.data->free_locked(**r);
    mtime = (*r)->mtime_ns;
  }
  if ((*r)->peer && p_.peers) p_.peers->unlinked(*(*r)->peer, mtime);
  return Status::OK();
}

Status NameOps::rmdir(uint64_t parent, std::string_view name) {
  KVFS_RETURN_IF_ERROR(p_.cfg->check_writable());
  return p_.ns->remove(parent, name, true).status();
}

Status NameOps::rename(uint64_t parent, std::string_view name, uint64_t new_parent,
                       std::string_view new_name, unsigned flags) {
  KVFS_RETURN_IF_ERROR(p_.cfg->check_writable());
  auto r = p_.ns->rename(parent, name, new_parent, new_name, flags);
  if (!r.ok() && r.status().code() == Status::Code::kNotFound) {
    if (auto imp =
            p_.peers ? p_.peers->import_file(parent, name) : Result<InodeRef>(Status::NotFound());
        imp.ok()) {
      r = p_.ns->rename(parent, name, new_parent, new_name, flags);  // a peer's: refused
      (void)p_.ns->release_import(*imp);
    }
  }
  if (!r.ok()) return r.status();
  if (InodeRef replaced = *r) {
    std::lock_guard g(replaced->mu);
    if (FileData::unused_locked(*replaced)) p_.data->free_locked(*replaced);
  }
  return Status::OK();
}

Status NameOps::readdir(uint64_t ino, uint64_t cookie, const Namespace::DirFn& fn) {
  if (p_.peers && cookie == 0)
    p_.peers->import_children(ino);  // the listing shows every node's names
  return p_.ns->readdir(ino, cookie, fn);
}

void NameOps::forget(uint64_t ino, uint64_t n) {
  // The last kernel reference to an unlinked file: nothing can open it now.
  if (InodeRef gone = p_.ns->forget(ino, n)) {
    std::lock_guard g(gone->mu);
    if (!gone->evicted) p_.data->free_locked(*gone);
  }
}

Status NameOps::setxattr(uint64_t ino, const std::string& name, std::string_view value, int flags) {
  KVFS_RETURN_IF_ERROR(p_.cfg->check_writable());
  if (name.empty() || name.size() > 255) return Status::Range("xattr name length");
  if (value.size() > 64 * 1024) return Status::NoSpace("xattr value over 64 KiB");
  auto r = p_.ns->node(ino);
  if (!r.ok()) return r.status();
  InodeRef& in = *r;
  if (in->peer) return Namespace::peer_read_only(*in);
  std::lock_guard g(in->mu);
  auto it = in->xattrs.find(name);
  if ((flags & XATTR_CREATE) && it != in->xattrs.end()) return Status::Exists();
  if ((flags & XATTR_REPLACE) && it == in->xattrs.end()) return Status::NoData();
  if (in->xattrs.size() >= 1024 && it == in->xattrs.end())
    return Status::NoSpace("too many xattrs");
  in->xattrs[name] = std::string(value);
  in->ctime_ns = p_.clock->now_ns();
  in->flush.changed();
  if (FileData::ready_to_flush_locked(*in)) p_.flusher->enqueue_locked(in, false);
  return Status::OK();
}

Result<std::string> NameOps::getxattr(uint64_t ino, const std::string& name) {
  auto r = p_.ns->node(ino);
  if (!r.ok()) return r.status();
  std::lock_guard g((*r)->mu);
  auto it = (*r)->xattrs.find(name);
  if (it == (*r)->xattrs.end()) return Status::NoData();
  return it->second;
}

Result<std::vector<std::string>> NameOps::listxattr(uint64_t ino) {
  auto r = p_.ns->node(ino);
  if (!r.ok()) return r.status();
  std::lock_guard g((*r)->mu);
  std::vector<std::string> v;
  for (auto& [k, val] : (*r)->xattrs) v.push_back(k);
  return v;
}

Status NameOps::removexattr(uint64_t ino, const std::string& name) {
  KVFS_RETURN_IF_ERROR(p_.cfg->check_writable());
  auto r = p_.ns->node(ino);
  if (!r.ok()) return r.status();
  InodeRef& in = *r;
  if (in->peer) return Namespace::peer_read_only(*in);
  std::lock_guard g(in->mu);
  if (in->xattrs.erase(name) == 0) return Status::NoData();
  in->ctime_ns = p_.clock->now_ns();
  in->flush.changed();
  if (FileData::ready_to_flush_locked(*in)) p_.flusher->enqueue_locked(in, false);
  return Status::OK();
}

}  // namespace kvfs
