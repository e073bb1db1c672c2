// SPDX-License-Identifier: Apache-2.0
// NameOps: the filesystem's calls on names and attributes: lookup, getattr,
// setattr, mknod, mkdir, symlink, readlink, unlink, rmdir, rename, readdir,
// forget and the xattrs. The tree itself is the Namespace's; this part
// checks each request, finds a peer's name when this node has none
// (PeerImports), frees the data of what a removal leaves unused (FileData)
// and queues changed metadata for the flushers. It owns no state; of the
// lookup counters (lookup_counters.h) it alone writes negative, files and
// peer.
//
// xattrs are kept in the inode and persisted with its snapshot, so they
// follow renames for free.
//
// Thread-safe: every method may be called from any FUSE worker. Locks, in
// core/'s order (block_store.h): Namespace's (through its calls, or mu_
// shared for a directory's link count) -> Inode::mu; setattr takes
// reclaim_mu shared before the inode's lock and no namespace lock (a
// truncate may read the block it shortens from the backing dir).
#pragma once

#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/config/config.h"
#include "core/inode/inode.h"
#include "core/namespace/namespace.h"
#include "core/store/file_ops.h"
#include "core/util/status.h"

namespace kvfs {

class Clock;
class FileData;
class Flusher;
class PeerImports;
class Prefetcher;
struct LookupCounters;

struct SetAttrRequest {
  bool set_mode = false, set_uid = false, set_gid = false, set_size = false;
  bool set_atime = false, set_mtime = false, atime_now = false, mtime_now = false;
  uint32_t mode = 0, uid = 0, gid = 0;
  uint64_t size = 0;
  int64_t atime_ns = 0, mtime_ns = 0;
};

class NameOps {
 public:
  // What it uses; each outlives it (BlockStore owns them all). peers is
  // nullptr when the dir is not shared.
  struct Parts {
    const StoreConfig* cfg;  // read_only, max_file_size
    const Clock* clock;      // file times, the LRU order
    Namespace* ns;
    FileData* data;        // data freed when nothing uses it any more
    Flusher* flusher;      // changed metadata queued
    Prefetcher* prefetch;  // a looked-up file's cold blocks
    FileOps* files;        // mknod of a regular file, setattr's truncation
    PeerImports* peers;
    LookupCounters* counts;  // negative, files, peer (it alone writes those)
    std::shared_mutex* reclaim_mu;
  };
  explicit NameOps(const Parts& p) : p_(p) {}
  NameOps(const NameOps&) = delete;
  NameOps& operator=(const NameOps&) = delete;

  Result<Attr> lookup(uint64_t parent, std::string_view name);  // +1 kernel ref
  Result<Attr> getattr(uint64_t ino);
  // fh: the handle of an ftruncate (a sealed one is written again).
  Result<Attr> setattr(uint64_t ino, const SetAttrRequest& r, OpenFile* fh);
  // Regular files, FIFOs, sockets and device nodes (rdev: FUSE's encoding).
  Result<Attr> mknod(uint64_t parent, std::string_view name, uint32_t mode, uint32_t rdev,
                     const Caller& c);
  Result<Attr> mkdir(uint64_t parent, std::string_view name, uint32_t mode, const Caller& c);
  Result<Attr> symlink(uint64_t parent, std::string_view name, std::string_view target,
                       const Caller& c);
  Result<std::string> readlink(uint64_t ino);
  Status unlink(uint64_t parent, std::string_view name);
  Status rmdir(uint64_t parent, std::string_view name);
  Status rename(uint64_t parent, std::string_view name, uint64_t new_parent,
                std::string_view new_name, unsigned flags);
  Status readdir(uint64_t ino, uint64_t cookie, const Namespace::DirFn& fn);
  void forget(uint64_t ino, uint64_t n);

  Status setxattr(uint64_t ino, const std::string& name, std::string_view value, int flags);
  Result<std::string> getxattr(uint64_t ino, const std::string& name);
  Result<std::vector<std::string>> listxattr(uint64_t ino);
  Status removexattr(uint64_t ino, const std::string& name);

 private:
  // Creates a data-less inode (symlink, FIFO, socket, device), journaled at
  // once; +1 kernel ref.
  Result<Attr> make_node(uint64_t parent, std::string_view name, const NewNode& n);

  const Parts p_;
};

}  // namespace kvfs
