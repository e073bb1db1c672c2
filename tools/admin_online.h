// SPDX-License-Identifier: Apache-2.0
// kvfs-admin's online commands, run against a mounted kvfs through its
// control file: stats, evict, flush, ls, config, version. Each returns the
// exit status or throws Failure (tools/admin_exit.h).
#pragma once

#include <string>
#include <vector>

namespace kvfs::admin {

struct StatsOpts {
  std::string mount;
  bool json_out = false, prometheus = false, all = false;
  double watch = 0;
  std::string output;
};

int cmd_stats(const StatsOpts& o);

struct EvictOpts {
  std::string mount, path, prefix, to_size, older_than;
  bool all = false, force = false, dry_run = false;
};

int cmd_evict(const EvictOpts& o);
int cmd_flush(const std::string& mount, bool wait);

struct RetireOpts {
  std::string mount, node;
  bool drop = false, json_out = false;
  double idle_s = 30;
};
// A node gone for good: its files handed over to the mount's node, or dropped.
int cmd_retire(const RetireOpts& o);

struct LsOpts {
  std::string mount, path;
  bool json_out = false, bytes = false;
};

int cmd_ls(const LsOpts& o);
int cmd_config(const std::string& mount, const std::vector<std::string>& args);
int cmd_version(const std::string& mount);

}  // namespace kvfs::admin
