// SPDX-License-Identifier: Apache-2.0
#include "tools/admin_nodes.h"

#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>

#include "core/backing/backing_nodes.h"
#include "core/backing/disk_layout.h"
#include "tools/admin_exit.h"
#include "tools/admin_format.h"

namespace kvfs::admin {

int cmd_nodes(const NodesOpts& o) {
  char buf[PATH_MAX];
  if (!::realpath(o.backing.c_str(), buf))
    fail(kExitUnreachable, o.backing + ": " + errno_text(errno));
  const std::string backing = buf;
  if (::access(layout::super_path(backing).c_str(), F_OK) != 0)
    fail(kExitUnreachable,
         o.backing + " is not a kvfs backing directory (no " + layout::kSuperName + ")");
  auto nodes = list_backing_nodes(backing);
  if (!nodes.ok()) fail(kExitUnreachable, nodes.status().ToString());
  auto shared = backing_is_shared(backing);
  if (!shared.ok()) fail(kExitUnreachable, shared.status().ToString());
  uint64_t segs = 0, bytes = 0;
  for (const BackingNode& n : *nodes) segs += n.segments, bytes += n.bytes;
  if (o.json_out) {
    json j = {{"backing_dir", backing}, {"shared", *shared}, {"segments", segs}, {"bytes", bytes}};
    j["nodes"] = json::array();
    for (const BackingNode& n : *nodes)
      j["nodes"].push_back({{"node", n.node},
                            {"running", n.running},
                            {"segments", n.segments},
                            {"bytes", n.bytes},
                            {"pid", n.pid},
                            {"host", n.host},
                            {"mount", n.mount}});
    std::printf("%s\n", j.dump(2).c_str());
    return kExitOk;
  }
  std::printf("%s: %s\n", backing.c_str(),
              *shared ? "shared by nodes" : "owned by one kvfs (no node_id)");
  std::printf("%-20s %-8s %9s %12s  %s\n", "NODE", "RUNNING", "SEGMENTS", "BYTES",
              "LOCK HOLDER (last)");
  for (const BackingNode& n : *nodes) {
    std::string who = n.pid.empty() ? "-" : "pid " + n.pid;
    if (!n.host.empty()) who += " on " + n.host;
    if (!n.mount.empty()) who += ", " + printable(n.mount);
    std::printf("%-20s %-8s %9llu %12s  %s\n", printable(n.node).c_str(), n.running ? "yes" : "no",
                static_cast<unsigned long long>(n.segments), human_bytes(double(n.bytes)).c_str(),
                who.c_str());
  }
  std::printf("%-20s %-8s %9llu %12s\n", "total", "", static_cast<unsigned long long>(segs),
              human_bytes(double(bytes)).c_str());
  return kExitOk;
}

}  // namespace kvfs::admin
