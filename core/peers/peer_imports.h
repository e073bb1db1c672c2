// SPDX-License-Identifier: Apache-2.0
// PeerImports: the other nodes' files as this node shows them. A name that
// is not here but that a peer committed (PeerLog) is imported on lookup, or
// on a listing of its directory, as a read-only inode whose extents point
// into the peer's segments; a peer's newer version or removal drops the
// import (or, when only where its bytes lie changed, moves it to the new
// extents), so the next lookup finds what the peer has now. Also the other
// way: a peer's unlink of this node's file removes it here, and this node's
// unlink of a peer's file is logged and hidden.
//
// Owns the PeerLog follower, the listings' imports (released a minute later
// unless looked up) and the import counters. Made by BlockStore at mount
// when the backing dir is shared, after every part it uses; it writes the
// namespace only through Namespace's operations (import, drop,
// release_import, create) and frees a dropped file's blocks through
// FileData.
//
// Thread-safe. listed_mu_ is a leaf. The follower's news arrive on its
// thread with PeerLog's pass_mu_ held (peer_log.h), and take Namespace's and
// an inode's locks below it, as lookups do.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/namespace/namespace.h"
#include "core/peers/peer_log.h"
#include "core/util/status.h"

namespace kvfs {

class BackingIo;
class Evictor;
class FileData;
class Index;
class NameNotices;
class SegmentStore;
struct StoreConfig;

class PeerImports {
 public:
  // What it uses; each outlives it (BlockStore owns them all).
  struct Parts {
    const StoreConfig* cfg;
    const Clock* clock;
    SegmentStore* segs;
    BackingIo* io;
    Index* index;          // this node's pending unlinks of peers' files
    Namespace* ns;         // where imports are linked
    FileData* data;        // a dropped file's cached blocks
    Evictor* evictor;      // asks whether an unlink settled
    NameNotices* notices;  // the kernel forgets each name removed
  };
  // nullptr when the backing dir is not shared. Reads the peers' logs once
  // before it returns (what they had at mount is there before the mount is
  // ready), then follows them every peer_poll.
  static Result<std::unique_ptr<PeerImports>> Open(const Parts& p);
  ~PeerImports();
  void stop();  // the follower; idempotent

  // Reads the peers' logs now, as the follower does every peer_poll.
  Status poll();
  PeerStats stats() const;
  PeerLog& log() { return *log_; }  // a node's retirement reads its files

  // What a peer has at (parent, name): a file imported here, a directory
  // made here. NotFound if no peer has it (or it changed meanwhile).
  Result<InodeRef> import(uint64_t parent, std::string_view name);
  // The same for a regular file only (an unlink or a rename of a name the
  // kernel did not look up first).
  Result<InodeRef> import_file(uint64_t parent, std::string_view name);
  // A listing of dir shows every node's names: what peers have in it is
  // imported, and released a minute later unless looked up.
  void import_children(uint64_t dir);
  // This node unlinked a peer's file (version mtime_ns): hidden here, and
  // logged for its owner by the journal.
  void unlinked(const PeerOrigin& o, int64_t mtime_ns);

  struct Counters {
    uint64_t imports = 0, drops = 0, dirs = 0;
    uint64_t unlinks = 0, unlinks_applied = 0;
  };
  Counters counters() const;

 private:
  PeerImports(const Parts& p, std::unique_ptr<PeerLog> log);
  Status start();
  void on_news(const PeerLog::News& n);
  void paths_changed(const std::vector<std::string>& paths);
  // An import whose name a peer's pass changed: kept with the peer's new
  // extents if it holds the same bytes, else dropped.
  void recheck(const InodeRef& in, const std::string& path);
  // A peer renamed or removed the directory at these paths: every import
  // below the local directory there is checked again.
  void dirs_moved(const std::vector<std::string>& paths);
  // This node's files that a peer unlinked: each goes unless it was written
  // again since that peer's look at it.
  void apply_unlinks(const std::vector<std::pair<uint64_t, int64_t>>& unlinks);
  // Releases the listings' imports older than a minute.
  void release_listed(int64_t now);
  // Unlinks a file found by identity, tells the kernel; false if it was gone.
  bool drop_and_forget(const InodeRef& in);

  const Parts p_;
  std::unique_ptr<PeerLog> log_;
  std::atomic<uint64_t> imports_{0}, drops_{0}, dirs_{0}, unlinks_{0}, unlinks_applied_{0};
  // Peers' files imported by a listing, oldest first: the kernel never
  // references those, so they are released (Namespace::release_import) a
  // while later unless looked up meanwhile.
  std::mutex listed_mu_;
  std::deque<std::pair<int64_t, InodeRef>> listed_;  // guarded by listed_mu_
};

}  // namespace kvfs
