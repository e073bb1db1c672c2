// SPDX-License-Identifier: Apache-2.0
// The nodes of a backing directory, as its files show them: every node that
// has a segment or a lock file there, its segments and bytes, and whether
// its daemon holds its lock now. Read-only: it opens lock files to probe
// them (a shared flock, released at once) and never writes or deletes.
//
// What kvfs-admin nodes prints; the daemon asks backing_is_shared(), and at
// start whether a dead mount's daemon still holds its lock (probe_lock_file).
// Thread-safe (no state).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/util/status.h"

namespace kvfs {

struct BackingNode {
  std::string node;
  uint64_t segments = 0;
  uint64_t bytes = 0;    // of its segment files
  bool running = false;  // its lock is held exclusively (its daemon, or fsck/rebuild-index)
  // The lock file's last holder (pid, host, mount point; empty if none).
  std::string pid, host, mount;
};

// One lock file (kvfs.lock, or a node's kvfs.<node>.lock): its last holder
// as written there, and whether a daemon holds it now (exclusively).
struct LockProbe {
  std::string pid, host, mount;  // empty if none
  bool held = false;
};
LockProbe probe_lock_file(const std::string& path);
// The lock files in the backing dir: kvfs.lock if there, then each node's.
std::vector<std::string> lock_files(const std::string& backing);

// Sorted by node name. In a dir owned by one kvfs without node_id (not
// shared), its segments may carry several names (its host's over time);
// the running owner is listed under its host's name.
Result<std::vector<BackingNode>> list_backing_nodes(const std::string& backing);
// The dir is marked as shared by nodes (kvfs.shared). Only ENOENT means
// not: an NFS error must not let a kvfs without node_id into a shared dir.
Result<bool> backing_is_shared(const std::string& backing);

}  // namespace kvfs
