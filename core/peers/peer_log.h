// SPDX-License-Identifier: Apache-2.0
// PeerLog: what the other nodes sharing the backing dir have committed, as
// their segment logs say (core/backing/disk_layout.h: every node writes only its own
// "<node>-<id>.seg" files, append-only; record.h: every change of a node's
// tree is a snapshot or tombstone in a record there).
//
// One thread reads the peers' logs every peer_poll seconds. A pass lists
// heads/, one name per node that says which segments the node appends to
// and how far their records are complete (disk_layout.h, NodeHead), and
// opens only the segments whose end moved (close-to-open: an NFS client
// sees a writer's appends only after an open) and those that left a head
// (closed: read once more, to the end; and, when a head moves, its node's
// newest segments it does not name and that are not known sealed, since
// one read before a head named it may have filled and closed between two
// passes), applying the complete records past
// where the last pass stopped; a torn tail is read again next time. The
// segment dir is listed only for a segment a head names that this node
// does not know, after a read found a peer's segment gone, and at most
// every kListEvery passes while heads move or after a pass found a segment
// gone (a peer's reclaimed segments leave the listing), so a pass costs one small
// listing plus the segments that moved, however many segments the dir
// holds. A head that stays unchanged is looked past every kStaleEvery
// passes (a node killed between a sync and its rename). A head whose
// newest segment id is older than one the listing shows, and that does
// not move for kListEvery passes, is stale (its node's renames fail, or it
// went back to a kvfs without heads). A peer
// without a head, or with a stale one, is followed as before
// heads: the listing each pass, its newest unsealed segments reopened
// (quiet peers less often, see Pass; a sealed segment never again once
// read; older unsealed ones a few a pass in turn). Headers and entries are checked here, block data
// when it is read (its XXH3 is in the extent). Per node it keeps the newest snapshot of each inode
// by that node's seq, the tombstones, and a (parent, name) -> inode tree, so a path resolves the
// way it does on that node.
//
// Unlinks: a node that unlinks a peer's file logs a kPeerUnlink entry
// (record.h) naming the owner's inode and the version's mtime. A pass hands
// those naming this node to the listener (the owner removes its file); the
// others hide that version (hide()), here and on every other node, until
// the owner's tombstone arrives; a newer version of it is not hidden.
//
// Every backing call of a pass runs under the backing dir's deadline
// (BackingIo::run): a stalled server costs a pass, never the thread.
// Nothing here writes to the backing dir (this node's head is
// SegmentStore's), and no peer file is ever held
// open between passes except through SegmentStore's read descriptors, which
// reopen_foreign() renews whenever a pass saw the file grow. A peer segment
// that leaves the listing (its owner reclaimed it) is forgotten; extents into
// it then read as a clean miss (EIO), never as other bytes.
//
// Thread-safe. mu_ guards the views and is a leaf (no backing call under it);
// pass_mu_ serialises passes (the thread's and poll() from tests or admin)
// and guards the segment table; order pass_mu_ -> mu_. The listener is
// called with pass_mu_ held (one pass's news at a time, in order) and mu_
// not: it may call find() and children().
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/backing/disk_layout.h"
#include "core/records/record.h"
#include "core/util/clock.h"
#include "core/util/status.h"

namespace kvfs {

class BackingIo;
class SegmentStore;

// A regular file or directory some peer has at a path.
struct PeerFile {
  std::string node;
  uint64_t ino = 0;    // the peer's inode number
  InodeSnapshot snap;  // its newest snapshot; extents name foreign segment ids
};

// The names of a peer path ("a/b/c"), empty components skipped; views
// into p.
std::vector<std::string_view> split_path(std::string_view p);

// A regular file of one peer, for a retirement of that node (BlockStore).
struct PeerNodeFile {
  std::string path;
  uint64_t size = 0;
  int64_t atime_ns = 0;
};

struct PeerNodeStats {
  std::string node;
  uint64_t segments = 0, segment_bytes = 0;  // its segment files, as last opened
  uint64_t files = 0, bytes = 0;             // regular files it has now, and their size
  uint64_t read_bytes = 0;                   // of its segments, applied
  uint64_t behind_bytes = 0;  // of records it has begun and not completed, as last seen
  double lag_s = 0;           // since a pass last read its whole log
  uint64_t max_seq = 0;
};

struct PeerStats {
  uint64_t passes = 0, records = 0, entries = 0, errors = 0;
  // What the passes cost the backing dir's server: the listings of the
  // segment dir, the segment files they opened (each an open, a stat and
  // reads), and their time.
  uint64_t listings = 0, segment_opens = 0;
  uint64_t head_listings = 0;  // of heads/ (disk_layout.h)
  uint64_t head_renames = 0;   // this node's own head (SegmentStore), set by its owner
  double pass_seconds = 0, slowest_pass_seconds = 0;
  std::vector<PeerNodeStats> nodes;  // sorted by name
};

class PeerLog {
 public:
  PeerLog(std::string backing, std::string own_node, SegmentStore* segs, BackingIo* io,
          const Clock* clock);
  ~PeerLog();

  // What one pass brought. paths ("a/b/c", relative to the root): those
  // whose peer version may have changed: new, replaced, removed or hidden.
  // unlinks: files of this node that a peer unlinked (record.h
  // kPeerUnlink), as (inode, mtime of the version unlinked).
  // moved_dirs: the old paths of directories a peer renamed or removed
  // (what was found below them may have moved too).
  struct News {
    std::vector<std::string> paths;
    std::vector<std::pair<uint64_t, int64_t>> unlinks;
    std::vector<std::string> moved_dirs;
  };
  using ChangeFn = std::function<void(const News& news)>;
  // Set before start(); called on the pass's thread after every pass whose
  // listing did not fail (or that skipped it, see Pass), with what it
  // brought (often nothing).
  void set_listener(ChangeFn fn);

  // How a pass treats quiet peers. kFull looks at every peer's newest
  // segments (mount, tests, admin, retirement). kFollow is the follower
  // thread's: a peer whose log showed nothing new for kQuietPasses passes
  // rests, its segments opened only every kRestEvery passes (a new segment
  // of it in the listing ends the rest at once), and while every peer rests
  // the listing waits too. Most peers of a fleet are idle at any time, so
  // the server gets a fraction of the opens and listings; the price: a
  // quiet peer's next file is seen within kRestEvery passes instead of one.
  enum class Pass { kFull, kFollow };
  // One pass (see above); the first error of the pass (a listing or an open
  // that failed), after doing what could be done.
  Status poll(Pass kind = Pass::kFull);
  void start(double interval_s);
  void stop();  // idempotent
  // The follower thread's pause after a pass: interval_s; after a slow
  // pass (a busy or far server) twice its length, up to kMaxPauseS; and,
  // after a pass that opened many peer segments (a fleet whose every node
  // writes: the opens grow as N - 1 per pass), long enough that the passes
  // open at most kOpenBudget segments a second, up to kMaxOpenPauseS (10
  // passes, a listing while heads move, take about the default
  // segment_grace). Visibility then grows a little instead of the server's
  // load growing with the fleet.
  static double follow_pause_s(double interval_s, double last_pass_s, uint64_t opens);

  // The version of path that peers offer, if any: a directory if any peer
  // has one there; else the file with the newest mtime, ties to the lowest
  // node name, so every node picks the same one.
  std::optional<PeerFile> find(std::string_view path) const;
  // An unlink of a peer's file here, or one this node's index kept from
  // before (index.h U keys): find() and children() skip that node's inode
  // from now on unless it has a newer mtime (its owner wrote it again).
  // Returns the path the file had, for the caller to drop its import.
  std::string hide(const std::string& node, uint64_t ino, int64_t mtime_ns);
  // Whether the owner's log shows that version of its file gone: removed,
  // or written again (a newer mtime), so a kept unlink of it is moot.
  bool settled(const std::string& node, uint64_t ino, int64_t mtime_ns) const;
  // node's regular files that resolve to its version by path and are not
  // hidden, least recently accessed first.
  std::vector<PeerNodeFile> files_of(const std::string& node) const;
  // When a pass last found new records in node's log; 0 if never.
  int64_t last_news_ns(const std::string& node) const;
  // The names some peer has in directory path, with their mode.
  std::vector<std::pair<std::string, uint32_t>> children(std::string_view path) const;

  PeerStats stats() const;

 private:
  struct Seg {
    std::string node;
    uint64_t id = 0;
    std::string path;
    uint64_t alias = 0;    // SegmentStore's foreign id
    uint64_t pos = 0;      // applied up to here (a record start)
    uint64_t size = 0;     // as the last open saw it
    bool partial = false;  // a record past pos is not complete yet
    bool grew = true;      // its size changed at the last look (or it is new)
    bool sealed = false;   // and read to its end: never opened again
    bool listed = false;
    bool read = false;      // opened at least once
    bool in_head = false;   // its node's head named it at the last look
    bool owed = false;      // not named, and its node's head moved since its last read
    uint64_t short_of = 0;  // a read up to this head end stopped short of it
  };
  struct View {
    std::unordered_map<uint64_t, InodeSnapshot> inodes;  // newest snapshot per inode
    std::unordered_map<uint64_t, uint64_t> dead;         // inode -> tombstone seq
    std::map<std::pair<uint64_t, std::string>, uint64_t> names;
    std::map<uint64_t, uint64_t> aliases;  // its segment id -> foreign id (listed ones)
    uint64_t max_seq = 0;
    int64_t last_full_ns = 0;
    int64_t last_news_ns = 0;
    uint64_t read_bytes = 0, behind_bytes = 0, segments = 0, segment_bytes = 0;
  };
  void run(double interval_s);
  Status io(const std::string& what, std::function<Status()> fn);
  // Under mu_: applies one entry; adds what it changes.
  void apply_locked(View& v, RecordEntry& e, News* news);
  std::string hide_locked(const std::string& node, uint64_t ino, int64_t mtime_ns);
  bool hidden_locked(const std::string& node, uint64_t ino, int64_t mtime_ns) const;
  std::string path_locked(const View& v, uint64_t ino) const;
  const InodeSnapshot* resolve_locked(const View& v, std::string_view path, uint64_t* ino) const;

  const std::string dir_;  // <backing>/segments
  const std::string own_;
  SegmentStore* const segs_;
  BackingIo* const io_;
  const Clock* const clock_;

  static constexpr size_t kHot = 8;
  static constexpr size_t kOldCycle = 25, kOldPerPass = 4;
  static constexpr uint32_t kQuietPasses = 5;
  static constexpr uint64_t kRestEvery = 5;
  static constexpr uint64_t kListEvery = 10, kStaleEvery = 150, kDiscoverEvery = 300;
  static constexpr double kMaxPauseS = 5, kOpenBudget = 20, kMaxOpenPauseS = 0.5;
  std::atomic<uint64_t> last_opens_{0};  // the last pass's segment opens, for run()
  std::mutex pass_mu_;
  std::map<std::pair<std::string, uint64_t>, Seg> seg_table_;  // guarded by pass_mu_
  uint64_t pass_no_ = 0;                                       // guarded by pass_mu_
  std::map<std::string, uint32_t> quiet_;       // node -> passes with nothing new; pass_mu_
  std::map<std::string, uint64_t> old_cursor_;  // node -> last old segment checked; pass_mu_
  // Heads (disk_layout.h), all guarded by pass_mu_: the peers' heads as
  // last listed; node -> the head's last_id when the dir was last listed
  // for it; the pass of the last listing; whether a head moved (or a
  // segment was found gone) since.
  std::map<std::string, layout::NodeHead> heads_;
  std::map<std::string, uint64_t> listed_for_;
  std::set<std::pair<std::string, uint64_t>> gone_named_;  // found gone while a head named it
  // node -> the head (gen) a listing found older than the node's newest
  // segment, and that pass: stale if it has not moved kListEvery passes on.
  struct Suspect {
    uint64_t gen = 0, pass = 0;
  };
  std::map<std::string, Suspect> stale_;
  uint64_t listed_pass_ = 0;
  bool heads_moved_ = false;
  const std::string head_dir_;

  mutable std::mutex mu_;
  std::map<std::string, View> views_;  // guarded by mu_
  ChangeFn listener_;                  // guarded by mu_
  // (node, inode) -> the newest mtime some node unlinked of it.
  std::map<std::pair<std::string, uint64_t>, int64_t> hidden_;     // guarded by mu_
  uint64_t passes_ = 0, records_ = 0, entries_ = 0, errors_ = 0;   // guarded by mu_
  uint64_t listings_ = 0, segment_opens_ = 0, head_listings_ = 0;  // guarded by mu_
  int64_t pass_ns_ = 0, slowest_pass_ns_ = 0;                      // guarded by mu_
  // Ends a pass's accounting; requires mu_.
  void pass_done_locked(std::chrono::steady_clock::time_point began, bool listed, bool heads,
                        uint64_t opens, bool failed);

  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;  // guarded by stop_mu_
  std::thread th_;
};

}  // namespace kvfs
