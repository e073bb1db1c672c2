// SPDX-License-Identifier: Apache-2.0
// kvfs-admin's offline commands on an unmounted backing directory: fsck and
// rebuild-index. They use the core library directly, on one node's segments
// and index; the node's lock makes them refuse while its daemon runs. Each returns the exit
// status or throws Failure (tools/admin_exit.h).
#pragma once

#include <string>

namespace kvfs::admin {

struct OfflineOpts {
  std::string backing, index_dir;
  std::string node_id;  // the node whose segments and index to use ("": the host's)
  bool verbose = false;
};

// Warnings and errors of the core library to stderr, prefixed kvfs-admin.
void setup_logging();
// Checks the segments, the index and every data block; 4 if it found problems.
int cmd_fsck(const OfflineOpts& o);
int cmd_rebuild_index(const OfflineOpts& o);

}  // namespace kvfs::admin
