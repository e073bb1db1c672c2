// SPDX-License-Identifier: Apache-2.0
// FileOps: the filesystem's calls on a regular file's handles and data:
// create, open, close() (FUSE flush), release, read, write, truncate and
// fsync. Owns the handles (each OpenFile from its open to its release, or
// close() for the ones never released) and each file's OpenCounts
// (Inode::opens, open_counts.h): nothing else changes them. Each call checks
// the request, takes the inode's lock and leaves the block slots to
// FileData, queueing and fsync's wait to the Flusher, reads to the
// BlockReader; a file whose bytes fail their checksum is dropped here.
//
// Thread-safe: every method may be called from any FUSE worker. Locks, in
// core/'s order (block_store.h): reclaim_mu (shared, a write) -> Inode::mu
// (one at a time) -> open_mu_ (a leaf). A write reserves RAM before it
// takes the inode's lock: waiting for the flushers with it held would stop
// them from capturing this very inode.
#pragma once

#include <mutex>
#include <shared_mutex>
#include <string_view>
#include <unordered_set>

#include "core/config/config.h"
#include "core/data/open_file.h"
#include "core/inode/inode.h"
#include "core/util/status.h"

namespace kvfs {

class BackingIo;
class BlockReader;
class Clock;
class FileData;
class Flusher;
class NameNotices;
class Namespace;
class Prefetcher;
class HeldBlocks;
class RamTier;
class SpaceBudget;
struct LookupCounters;

// Who asks (the FUSE request's credentials), for what a call creates.
struct Caller {
  uint32_t uid = 0, gid = 0;
};

class FileOps {
 public:
  // What it uses; each outlives it (BlockStore owns them all).
  struct Parts {
    const StoreConfig* cfg;  // read_only, max_file_size
    const Clock* clock;      // file times, the LRU order
    Namespace* ns;           // creates, the tree's lock, unlinked files' reaping
    FileData* data;          // the block slots
    RamTier* ram;            // dirty RAM reserved by a write
    Flusher* flusher;        // queueing, writes refused, fsync
    SpaceBudget* budget;     // the cap (no file may be larger)
    BackingIo* io;           // timeouts counted
    BlockReader* reader;     // reads
    Prefetcher* prefetch;    // a reader's open starts the cold blocks
    HeldBlocks* held;        // the block a handle holds, let go at release
    NameNotices* notices;    // the kernel forgets a dropped file
    LookupCounters* counts;  // dropped_files (it alone writes that one)
    std::shared_mutex* reclaim_mu;
  };
  explicit FileOps(const Parts& p) : p_(p) {}
  FileOps(const FileOps&) = delete;
  FileOps& operator=(const FileOps&) = delete;
  ~FileOps() { close(); }

  // create: O_CREAT (excl for O_EXCL, truncating an existing file for O_TRUNC).
  Result<OpenFile*> create(uint64_t parent, std::string_view name, uint32_t mode, int flags,
                           const Caller& c, Attr* attr);
  Result<OpenFile*> open(uint64_t ino, int flags);
  // close() of a descriptor (FUSE flush, synchronous, unlike release):
  // what was written through f is complete and may be committed, so a
  // later fsync of a directory covers it even before the kernel's release
  // arrives. NoSpace if the file is dirty while flushes fail for
  // lack of room (it stays queued, and is flushed if room comes).
  Status closed(OpenFile* f);
  void release(OpenFile* f);
  Status read(OpenFile* f, uint64_t off, size_t size, ReadResult* out);
  Result<size_t> write(OpenFile* f, uint64_t off, const char* data, size_t size);
  Status fsync(uint64_t ino);
  // Truncates to size (setattr's, O_TRUNC's); old: the kept bytes of the
  // last block when FileData::kept_by_truncate_locked names an extent.
  // Requires in.mu.
  void truncate_locked(Inode& in, uint64_t size, const ConstBufRef& old = nullptr);
  // Written (or truncated) through f: a handle sealed by close() and used
  // again (a dup'ed descriptor, mmap, an ftruncate) is open again, and the
  // file incomplete until its next close(). Requires f->in->mu.
  void written_locked(OpenFile* f);
  // Frees the handles the kernel never released (a lazy unmount, a dead
  // connection): the store's Close().
  void close();

 private:
  Result<OpenFile*> open_file(uint64_t ino, int flags);  // open() but the read-ahead
  OpenFile* track_handle(OpenFile* f);
  void drop_file(const InodeRef& in, const Status& why);

  const Parts p_;
  std::mutex open_mu_;                        // a leaf
  std::unordered_set<OpenFile*> open_files_;  // guarded by open_mu_
};

}  // namespace kvfs
