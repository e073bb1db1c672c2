// SPDX-License-Identifier: Apache-2.0
// The backing directory's layout: every name kvfs gives a file there, and the
// segment file name format, so that the store, the daemon's start-up checks,
// kvfs-admin and the tests cannot drift apart. Renaming anything here is a
// change of the on-disk format.
//
//   <backing>/kvfs.super                       id and format (made once, by link())
//   <backing>/kvfs.super.<node>.tmp            a node's superblock before that link
//   <backing>/kvfs.lock                        flock()ed (below); pid, host, mount of its owner
//   <backing>/kvfs.shared                      empty: the dir is shared by nodes
//   <backing>/kvfs.<node>.lock                 flock()ed by node's daemon: pid, host, mount
//   <backing>/segments/<node>-<16 hex id>.seg  append-only segment files (record.h)
//   <backing>/segments/<segment name>.retired  a node's reclaimed segment, in its
//                                              grace before deletion (Evictor)
//   <backing>/segments/.direct_probe.<node>    O_DIRECT probe, written at open
//   <backing>/heads/<node>.<gen>.<last>[.<id>-<valid>]...  a node's head
//                                              (below): an empty file, all
//                                              in its name
//
// A kvfs without a node_id owns the dir alone, as before nodes: it takes
// kvfs.lock exclusively and every segment as its own (named after its host,
// which may have had other names before). A kvfs with a node_id is one of
// the nodes sharing the dir: it holds kvfs.lock shared and its own lock
// exclusively, and writes, lists and deletes only the files that carry its
// name. The first node creates kvfs.shared; a kvfs without node_id refuses
// a dir that has it, and a node refuses to mark a dir that holds another
// name's segments (they belong to a kvfs without node_id).
//
// A segment is sealed when no write bit is left in its mode (0400 instead
// of the 0600 it is made with): its owner chmods it so when it closes it for
// good (the writer's last record is in, its tail trimmed) and never appends
// to it again; at mount it seals the newest few that a crash left open. A
// peer that has read a sealed segment to its end never opens it again. The
// mode is an ordinary attribute every backing fs keeps (a listing or an open
// returns it), so the rule costs one SETATTR per segment and no record; a
// dir copied without its modes only loses the saving (an unsealed segment
// is checked in turn, as all were before the rule).
//
// A node's head, in a shared dir: the newest segment id it has made, which
// of its segments it appends to and how far their records are complete
// (synced), in the name of one empty
// file that only that node renames, each time that changes (NodeHead). A
// peer lists heads/, a directory of one name per node, and opens only the
// segments whose end moved: what a pass costs no longer grows with the
// segments in the dir nor with the segments a busy peer keeps open. A
// rename changes the directory, so an NFS client's listing after its
// open-time revalidation has the new name (close-to-open for dirs). The
// head is a hint: the segments stay the log, and a node without one (older
// kvfs, or one whose rename failed) is followed from the listing of
// segments/ as before.
//
// Constants and pure functions only: thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvfs::layout {

inline constexpr const char* kSuperName = "kvfs.super";
inline constexpr const char* kSuperMagic = "kvfs-superblock";  // its first line
inline constexpr int kSuperFormat = 1;                         // what this kvfs reads and writes
inline constexpr const char* kSharedLockName = "kvfs.lock";
inline constexpr const char* kSharedMarkerName = "kvfs.shared";
inline constexpr const char* kSegDir = "segments";
// In the index dir (local disk), beside RocksDB's files: flock()ed by the
// kvfs using that index.
inline constexpr const char* kIndexLockName = "kvfs.lock";
inline constexpr const char* kSegSuffix = ".seg";
inline constexpr const char* kHeadDir = "heads";
inline constexpr unsigned kSegmentMode = 0600;        // made so, appended to by its owner
inline constexpr unsigned kSealedSegmentMode = 0400;  // its owner will never append again
// Whether a segment file with this st_mode is sealed (see above).
inline bool segment_sealed(unsigned st_mode) {
  return (st_mode & 0222) == 0;
}

std::string super_path(const std::string& backing);
std::string super_tmp_path(const std::string& backing, const std::string& node);
// The node's own lock, which keeps a second daemon of that node out.
std::string lock_path(const std::string& backing, const std::string& node);
std::string shared_lock_path(const std::string& backing);
std::string shared_marker_path(const std::string& backing);
std::string segment_dir(const std::string& backing);
std::string head_dir(const std::string& backing);
std::string direct_probe_path(const std::string& backing, const std::string& node);

// "<node>-<id as 16 lower-case hex digits>.seg". node must not be empty.
std::string segment_name(const std::string& node, uint64_t id);

// What a lock file holds about its holder: "<pid>\n<host>\n<mount point>\n"
// (mount point empty for an offline tool). Fields absent in the text are "".
struct LockHolder {
  std::string pid, host, mount;
};
std::string lock_holder_text(const LockHolder& h);
LockHolder parse_lock_holder(std::string_view text);

struct SegmentFileName {
  std::string node;  // may itself hold '-': the id is the last 16 digits
  uint64_t id = 0;
};
// The node and id of a segment file name; nullopt for any other name (id 0
// is never handed out, so it is not a segment either).
std::optional<SegmentFileName> parse_segment_name(std::string_view name);
// A reclaimed segment is renamed so (no longer a segment to any listing)
// for its grace period, then deleted.
std::string retired_segment_name(std::string_view segment_name);
// The node and id of a retired segment's file name; nullopt for any other.
std::optional<SegmentFileName> parse_retired_segment_name(std::string_view name);

// What a node's head name says (see above). gen grows with every rename,
// so that a peer that finds two (a crash between a rename's two halves on
// some servers) takes the newer.
struct NodeHead {
  std::string node;
  uint64_t gen = 0;
  // False: the list did not fit in a name; a peer follows the node as if it
  // had no head.
  bool complete = true;
  uint64_t last_id = 0;  // the newest segment it has made (a peer lists the dir for one it lacks)
  std::vector<std::pair<uint64_t, uint64_t>> open;  // (segment id, records complete up to)
  bool operator==(const NodeHead& o) const = default;
};
// "<node>.<gen>.<last_id>" then ".<id>-<valid>" per open segment (lower-case
// hex), or ".all" when the list would pass NAME_MAX. node: a node_id (no
// '.').
std::string head_name(const NodeHead& h);
// nullopt for any other name.
std::optional<NodeHead> parse_head_name(std::string_view name);

}  // namespace kvfs::layout
