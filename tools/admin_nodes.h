// SPDX-License-Identifier: Apache-2.0
// kvfs-admin nodes: the nodes that share a backing directory (core/
// backing_nodes.h), mounted or not. Returns the exit status or throws
// Failure (tools/admin_exit.h).
#pragma once

#include <string>

namespace kvfs::admin {

struct NodesOpts {
  std::string backing;
  bool json_out = false;
};

int cmd_nodes(const NodesOpts& o);

}  // namespace kvfs::admin
