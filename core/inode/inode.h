// SPDX-License-Identifier: Apache-2.0
// Inode: one file, directory, symlink or special file (FIFO, socket, device
// node: metadata only, their I/O never reaches kvfs) in memory.
//
// The whole namespace lives in RAM (the index holds its persistent copy), so
// lookups never touch the disk. A regular file's data is a vector of 1 MiB
// block slots; each slot holds a dirty RAM buffer (authoritative while set)
// and/or the extent of its latest copy in a segment (authoritative when no
// buffer is set). Clean copies of extents live in the RamTier, keyed by
// extent, so dropping them never touches the inode.
//
// Locking: the tree's fields (below) are written only with Namespace's two
// locks held exclusively and read with either held at least shared. Fields
// under "mu" need the inode's own mutex. Lock order: Namespace's locks, then
// Inode::mu; never two inode mutexes at once.
#pragma once

#include <sys/stat.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/inode/flush_state.h"
#include "core/inode/open_counts.h"
#include "core/records/record.h"
#include "core/util/buffer.h"
#include "core/util/status.h"

namespace kvfs {

inline constexpr uint64_t kRootIno = 1;

struct BlockSlot {
  BufRef buf;           // dirty copy; null when clean or a hole
  uint32_t len = 0;     // valid bytes in this block; the rest reads as zeros
  uint32_t charge = 0;  // dirty bytes charged to the RamTier for buf
  Extent ext;           // latest copy written to a segment
  // buf was handed to a reader: never written in place again (the reply
  // may still be reading it after the reader's reference looks gone).
  bool lent = false;
};

class Inode;

// Where a file imported from another node's log came from (peer_log.h).
struct PeerOrigin {
  std::string node;
  uint64_t ino = 0;  // the peer's inode number
};

struct DirData {
  std::unordered_map<std::string, std::shared_ptr<Inode>> by_name;
  std::map<uint64_t, Inode*> by_cookie;  // readdir order, stable offsets
  uint64_t next_cookie = 3;              // 1 and 2 are "." and ".."
  uint32_t subdirs = 0;
};

class Inode {
 public:
  explicit Inode(uint64_t i) : ino(i) {}
  const uint64_t ino;

  // --- the tree: written with Namespace::commit_mu_ and Namespace::mu_ both
  // held exclusively, read under either (namespace.h) ---
  uint64_t parent = 0;
  std::string name;
  uint64_t dir_cookie = 0;
  std::atomic<bool> linked{true};  // false once unlinked (nlink 0)
  std::unique_ptr<DirData> dir;    // directories only
  // Last snapshot in the index; null if the index does not know this inode.
  // Written under Namespace::commit_mu_ exclusive (the journal), or shared
  // plus mu (a flush commit); read under commit_mu_ plus mu.
  std::unique_ptr<InodeSnapshot> committed;
  // Set (before it is linked, never changed) for a file another node owns:
  // read only here, never journaled, flushed or evicted; its extents name
  // the peer's segments (SegmentStore's foreign ids), and may move under mu
  // to where the peer has the same bytes now (peer_imports.cc).
  std::unique_ptr<const PeerOrigin> peer;

  std::atomic<uint64_t> nlookup{0};  // kernel references (FUSE lookup count)
  // Last open, lookup, stat, read or atime touch (CLOCK_REALTIME ns): the LRU
  // key of the evictor. Relaxed atomics: a stale value only shifts the order.
  std::atomic<int64_t> last_access_ns{0};
  void touch(int64_t t) { last_access_ns.store(t, std::memory_order_relaxed); }

  // --- guarded by mu; below, each group says which part writes it ---
  std::mutex mu;
  // The attributes: set by the namespace at create and by the store's
  // calls (setattr, write's size and times, a read's atime).
  uint32_t mode = 0;
  uint32_t uid = 0, gid = 0;
  uint64_t size = 0;
  int64_t atime_ns = 0, mtime_ns = 0, ctime_ns = 0;
  std::string symlink;
  uint32_t rdev = 0;  // device nodes only
  std::map<std::string, std::string> xattrs;
  // The block slots: written by FileData alone (file_data.h; the index's
  // load fills them before the inode is published).
  std::vector<BlockSlot> blocks;
  uint64_t dirty_charge = 0;  // sum of blocks[i].charge
  uint64_t trunc_gen = 0;     // bumped by truncation: stale flushes must not land
  // Where the file stands with the flush: the flush part's (flush_state.h).
  FlushState flush;
  // The handles open on it: the store's file operations' (open_counts.h).
  OpenCounts opens;
  // Removed by the evictor (the namespace's evict) or its data freed
  // (FileData::free_locked): opens by inode number fail. Cleared only by
  // the namespace, when the journal refused an eviction.
  bool evicted = false;
  // The namespace's: unlinked or renamed over by a client, the data stays
  // while the kernel holds the inode (nlookup > 0), so an open through a
  // dentry it resolved just before finds this version, as on a local
  // filesystem.
  bool kept_for_kernel = false;

  bool is_dir() const { return S_ISDIR(mode); }
  bool is_reg() const { return S_ISREG(mode); }
  bool is_symlink() const { return S_ISLNK(mode); }
  // Needs a flush: something changed since the last commit. Requires mu.
  bool dirty() const { return flush.dirty(); }
};

using InodeRef = std::shared_ptr<Inode>;

// Attributes as the FUSE layer reports them.
struct Attr {
  uint64_t ino = 0;
  uint32_t mode = 0;
  uint32_t nlink = 1;
  uint32_t uid = 0, gid = 0;
  uint64_t size = 0;
  uint64_t blocks = 0;  // 512-byte units
  uint32_t rdev = 0;
  int64_t atime_ns = 0, mtime_ns = 0, ctime_ns = 0;
};

// What stat says of in. Requires in.mu; a directory's link count is the
// tree's, which the caller adds (Namespace::mu_ held shared).
inline Attr attr_locked(const Inode& in) {
  Attr a;
  a.ino = in.ino;
  a.mode = in.mode;
  a.uid = in.uid;
  a.gid = in.gid;
  a.size = in.size;
  a.rdev = in.rdev;
  a.atime_ns = in.atime_ns;
  a.mtime_ns = in.mtime_ns;
  a.ctime_ns = in.ctime_ns;
  a.blocks = align_up(in.size, 4096) / 512;
  a.nlink = in.linked.load() ? 1 : 0;
  return a;
}

}  // namespace kvfs
