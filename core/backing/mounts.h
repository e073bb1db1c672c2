// SPDX-License-Identifier: Apache-2.0
// Mounts: what /proc/self/mountinfo says, for the checks that keep kvfs off
// paths it must not use (a mount point already in use, a backing dir inside
// a kvfs mount) and for telling an exiting owner of a backing dir from a
// live one (segment_store_open.cc).
//
// Thread-safe (reads the file each call; no state).
#pragma once

#include <string>
#include <vector>

namespace kvfs {

struct MountEntry {
  std::string target;  // where it is mounted
  std::string fstype;  // e.g. "fuse.kvfs"
  std::string source;  // kvfs: its backing dir (fsname=)
};

std::vector<MountEntry> read_mounts();

// `path` (absolute, resolved) is `dir` or lies below it.
bool path_within(const std::string& path, const std::string& dir);

}  // namespace kvfs
