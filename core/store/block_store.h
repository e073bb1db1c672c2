// SPDX-License-Identifier: Apache-2.0
// BlockStore: the thin owner of core/'s parts. Open() makes and wires them;
// fs/ talks only to this class, which forwards each call to its part.
//
//   NameOps      the calls on names and attributes: lookup, setattr, mkdir,
//                unlink, rename, readdir, xattrs (name_ops.h)
//   FileOps      the calls on a file's handles and data: create, open,
//                close(), release, read, write, fsync; owns the handles
//                and each file's open counts (file_ops.h)
//   Namespace    inodes and directories, in memory; seqs (namespace.h)
//   FileData     a file's block slots and their accounting, cold block
//                reads, the "ready to flush" rule (file_data.h)
//   BlockReader  a client's read: where each block's bytes come from, the
//                read-ahead hint, the held block (block_reader.h)
//   StoreAdmin   kvfs-admin's and statfs's questions: stats, ls, eviction,
//                the live settings and the runtime setter (store_admin.h)
//   RamTier      RAM budget and clean-block cache (ram_tier.h)
//   Flusher      dirty data -> segments -> index (flusher.h)
//   Evictor      LRU eviction, segment reclaim, housekeeping (evictor.h)
//   SpaceBudget  the cap, room for flushes, the no-space state (space_budget.h)
//   SegmentStore the backing directory's segment log (segment_store.h)
//   Index        RocksDB (index.h)
//   BackingIo    deadlines on backing-dir calls (backing_io.h)
//   BackingFs    the segment files' system calls, a seam for a failing disk
//                in tests (backing_fs.h)
//   PeerImports  the other nodes' files shown here; owns PeerLog, their
//                segment logs followed (peer_imports.h, peer_log.h)
//
//   MetaJournal  the namespace's commits: index now, segment log soon
//                (meta_journal.h)
//   SeqCounter   the seqs that order snapshots (seq_counter.h)
//
// Who calls whom (no cycle; the callbacks are RamTier's pressure call to
// Flusher::on_pressure and PeerLog's news of changed paths to PeerImports,
// both wired at construction):
//
//   retire_node (core/retire/, above) -> BlockStore's public operations
//   BlockStore -> every part; load_store (core/load/) at mount, which
//                 settles the index and fills the Namespace
//   NameOps    -> FileOps (mknod of a file, setattr's truncate), Namespace,
//                 PeerImports, FileData, Flusher, Prefetcher
//   FileOps    -> Namespace, FileData, BlockReader, Flusher, RamTier,
//                 SpaceBudget, Prefetcher, HeldBlocks, NameNotices
//   Namespace  -> Journal (MetaJournal) -> Index, SeqCounter, Flusher
//   Evictor    -> Flusher (copies forward, carried tombstones, retries)
//   Evictor, Flusher -> SpaceBudget, Namespace, FileData, RamTier,
//                       SegmentStore, Index, BackingIo
//   BlockReader -> FileData, RamTier, HeldBlocks, Prefetcher
//   StoreAdmin -> the parts it reports on, the owners of runtime options,
//                 Evictor (eviction on request)
//   FileData   -> RamTier, SegmentStore
//   PeerImports -> PeerLog, Namespace, FileData, Evictor (settled unlinks),
//                  Index (pending unlinks)
//   Evictor, PeerImports, FileOps's read -> NameNotices (the kernel
//                  forgets a removed name; fs/ listens)
//   SpaceBudget -> SpaceUsage (SegmentStore's sizes)
//   SegmentStore -> BackingIo
//   PeerLog    -> SegmentStore (foreign segment ids), BackingIo
//
// Life of a file's data: write -> dirty buffers in the inode; close -> queued;
// a flusher packs it into the open segment, fdatasyncs, then commits the
// snapshot to the index (data first, index second); the buffers become clean
// cache entries keyed by their extents and may leave RAM; a read of a block no
// longer in RAM reads its extent and checks its XXH3 (EIO and the file is
// dropped on a mismatch: a cache may lose an entry, never serve wrong bytes).
//
// Lock order, for the whole of core/ (a thread holding a lock takes only
// locks after it; TSan's lock-order checks run over the suite):
//
//   PeerLog::pass_mu_ (its listener, PeerImports, drops imports a peer
//   changed)
//   -> Evictor::pass_mu_
//   -> Namespace::commit_mu_ (exclusive for a change of the tree and its
//      journal commit, shared for a flush commit: the only locks a RocksDB
//      write runs under, besides the index's own; no lookup or read takes it)
//   -> Namespace::mu_ (shared for lookups, exclusive only to apply a
//      committed change) | reclaim_mu_ (shared by readers of extents,
//      exclusive to forget a segment; never held together with
//      Namespace::mu_)
//   -> Inode::mu (one at a time)
//   -> Flusher::q_mu_
//   -> FileData::flight_mu_ (a cold read; never with an inode's mu held)
//   -> the leaves: RamTier's budget_mu_ then its shard mutexes,
//      SegmentStore::mu_, Index's locks, BackingIo's, BufferPool's, FileOps::open_mu_,
//      Prefetcher::mu_, PeerLog::mu_, Evictor::settled_mu_, NameNotices::mu_
//      (its listener runs with no lock held), PeerImports::listed_mu_,
//      FlushPacer::mu_ (taken with none held: a flusher waits there for its
//      turn to write).
//   SpaceBudget::mu_ is taken with no other lock held (it reads
//   SegmentStore::mu_ under it); waiting for room holds no lock.
//
// Thread-safe: every public method may be called from any FUSE worker.
//
// Budget: 600 lines and 40 methods (this header and block_store*.cc, the
// out-of-line BlockStore:: definitions); tools/check-layering.sh fails above
// it, so the owner cannot grow back. What it holds: Open()'s wiring,
// Close()'s order, and one-line forwarders. What may be added: the wiring
// of a new part and forwarders to it; anything with state or a decision of
// its own is a part, in its folder, with its test (the filesystem's calls
// are NameOps's and FileOps's, the admin commands StoreAdmin's, node
// retirement retire/'s, the mount's load load/'s, the read path
// BlockReader's).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/backing/backing_io.h"
#include "core/config/config.h"
#include "core/data/block_reader.h"
#include "core/data/open_file.h"
#include "core/data/prefetcher.h"
#include "core/data/read_load.h"
#include "core/evict/evictor.h"
#include "core/inode/inode.h"
#include "core/namespace/namespace.h"
#include "core/peers/peer_log.h"
#include "core/ram/held_blocks.h"
#include "core/ram/ram_tier.h"
#include "core/records/record.h"
#include "core/recovery/recovery.h"
#include "core/segments/segment_windows.h"
#include "core/store/file_ops.h"
#include "core/store/name_ops.h"
#include "core/store/store_admin.h"
#include "core/util/status.h"

namespace kvfs {

class BackingFs;
class Index;
class FileData;
class Flusher;
class PeerImports;
class MetaJournal;
class SeqCounter;
class SegmentStore;
class SpaceBudget;

class BlockStore {
 public:
  // Opens the backing dir and the index; rebuilds the index from the segments
  // when it is missing, belongs to another backing dir, or is unreadable.
  // clock: the time for file times, LRU order and grace periods (tests pass
  // a ManualClock; it must outlive the store); nullptr is the real clock.
  // fs: the segment files' system calls (tests pass a FaultFs, which fails
  // on cue; it must outlive the store); nullptr is the real ones.
  static Result<std::unique_ptr<BlockStore>> Open(const StoreConfig& cfg,
                                                  const Clock* clock = nullptr,
                                                  BackingFs* fs = nullptr);
  ~BlockStore();

  // Writes every dirty file, stops the flushers and closes the index; the
  // store serves nothing afterwards. Idempotent.
  Status Close();

  const StoreConfig& config() const { return cfg_; }
  const std::string& node_id() const;  // the effective one (hostname by default)
  bool rebuilt_index() const { return rebuilt_; }
  // What the mount's catch-up with the segment log applied (recovery.h).
  const CatchUpStats& catch_up_stats() const { return catch_up_; }

  // --- names and attributes (name_ops.h says what each does) ---
  Result<Attr> lookup(uint64_t parent, std::string_view name);  // +1 kernel ref
  Result<Attr> getattr(uint64_t ino);
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

  // --- a file's handles and data (file_ops.h) ---
  Result<OpenFile*> create(uint64_t parent, std::string_view name, uint32_t mode, int flags,
                           const Caller& c, Attr* attr);
  Result<OpenFile*> open(uint64_t ino, int flags);
  Status closed(OpenFile* f);  // close() of a descriptor (FUSE flush)
  void release(OpenFile* f);
  Status read(OpenFile* f, uint64_t off, size_t size, ReadResult* out);
  Result<size_t> write(OpenFile* f, uint64_t off, const char* data, size_t size);
  Status fsync(uint64_t ino);

  // --- xattrs ---
  Status setxattr(uint64_t ino, const std::string& name, std::string_view value, int flags);
  Result<std::string> getxattr(uint64_t ino, const std::string& name);
  Result<std::vector<std::string>> listxattr(uint64_t ino);
  Status removexattr(uint64_t ino, const std::string& name);

  // --- whole store ---
  // What kvfs-admin and statfs ask: stats, ls, eviction, the live settings
  // and the runtime setter (store_admin.h).
  StoreAdmin& admin() { return *admin_; }
  // Writes every dirty file not open for writing (an open one is not
  // complete yet) and waits until it is committed: fsync of a directory.
  Status flush_all();
  RamTier& ram() { return *ram_; }
  // Told (parent, name, ino) after the evictor removed a name, or the store
  // dropped a file, so that the kernel's caches can be invalidated. Called
  // with no lock held; may be set or cleared while the store runs.
  using EvictListener = NameNotices::Listener;
  void set_eviction_listener(EvictListener fn);

  // --- the other nodes of a shared backing dir (peer_log.h) ---
  // Their logs as followed here; nullptr when the dir is not shared.
  PeerLog* peer_log();
  // The node whose version of a regular file ino is: a peer's name for one
  // imported here, "" for this node's own.
  Result<std::string> peer_owner(uint64_t ino);

  // --- for the parts above the store (core/retire/) ---
  // ReadOnly while mounted read-only; else OK.
  Status check_writable() const;
  // Places ino in the LRU order as if last accessed at ns (a copy keeps
  // the original's place).
  Status set_lru_time(uint64_t ino, int64_t ns);
  BackingIo& backing_io() { return *io_; }
  const Clock& clock() const { return *clock_; }

 private:
  BlockStore(const StoreConfig& cfg, const Clock* clock);

  StoreConfig cfg_;
  const Clock* const clock_;
  bool rebuilt_ = false;           // the mount's load (store_load.h) rebuilt the index
  CatchUpStats catch_up_;          // what the mount's catch-up applied
  std::unique_ptr<BackingIo> io_;  // first made, last destroyed: the parts use it
  std::unique_ptr<SegmentStore> segs_;
  std::unique_ptr<Index> index_;
  std::unique_ptr<RamTier> ram_;
  std::unique_ptr<SegmentWindows> windows_;  // before data_, which reads through it
  std::unique_ptr<FileData> data_;
  std::unique_ptr<Prefetcher> prefetch_;
  std::unique_ptr<SpaceBudget> budget_;
  std::unique_ptr<SeqCounter> seqs_;
  std::unique_ptr<MetaJournal> journal_;
  std::unique_ptr<Namespace> ns_;
  ReadLoad reads_;  // written by reader_, read by flusher_'s pacer: before both
  std::unique_ptr<Flusher> flusher_;
  NameNotices notices_;  // before the parts that tell it
  std::unique_ptr<Evictor> evictor_;
  std::unique_ptr<HeldBlocks> held_;     // the blocks open files hold (OpenFile::held)
  std::unique_ptr<BlockReader> reader_;  // after held_ and prefetch_, which it reads through
  std::unique_ptr<PeerImports> peers_;   // shared dirs only; stopped first at Close()
  // Readers of segment extents hold it shared from choosing an extent until
  // their read completes; deleting a segment takes it exclusively.
  std::shared_mutex reclaim_mu_;
  std::atomic<int> forgetting_{0};  // a segment deletion waits for reclaim_mu_
  std::atomic<bool> closed_{false};
  std::thread prefault_;  // BufferPool::prefill at mount
  std::atomic<bool> stop_prefault_{false};
  LookupCounters lookups_;             // written by files_ and names_, read by admin_
  std::unique_ptr<FileOps> files_;     // the calls on a file's handles and data
  std::unique_ptr<NameOps> names_;     // the calls on names and attributes; uses files_
  std::unique_ptr<StoreAdmin> admin_;  // after every part it asks
};

}  // namespace kvfs
