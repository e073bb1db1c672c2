// SPDX-License-Identifier: Apache-2.0
// Mount options: `kvfs BACKING_DIR MOUNTPOINT [-o OPTIONS] [-f] [-d]`.
//
// One -o string serves the command line, mount.fuse3 and /etc/fstab alike:
// kvfs's own options fill StoreConfig and FsConfig; FUSE's mount options are
// handed to libfuse; fstab-only words (noauto, nofail, _netdev, x-systemd.*,
// ...) are accepted and ignored. Anything else is an error, reported before
// anything is mounted. Which options there are, and their types, defaults and
// ranges, is the option table's (fs/option_table.h).
#pragma once

#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/util/status.h"

namespace kvfs {

struct FsConfig {
  std::string mountpoint;
  bool foreground = false;
  bool debug = false;
  // FUSE worker threads: enough that the 1 MiB pieces of one large O_DIRECT
  // read are copied in parallel.
  unsigned threads = 16;
  // How long the kernel may cache names, attributes and absent names. kvfs is
  // the only writer behind the mount, so long timeouts are safe; eviction
  // invalidates explicitly.
  double entry_timeout = 10.0;
  double attr_timeout = 10.0;
  double negative_timeout = 10.0;
  std::string log_level = "info";
  // Where the daemon logs: empty = syslog in the background, stderr with -f.
  // A file for hosts and containers without a syslog daemon.
  std::string log_file;
  // Tell the kernel to forget evicted names at once (see fs/main.cc).
  bool invalidate = false;
  bool allow_other = false;
  // The kernel checks permissions from mode and owner: on by default (with
  // allow_other other users reach the files), off with no_default_permissions.
  // It also lets the kernel answer access() from its attribute cache.
  bool default_permissions = true;
  // metrics=[ADDR:]PORT: serve Prometheus text at http://ADDR:PORT/metrics.
  // Port 0 = off (the default); a port alone listens on loopback only.
  std::string metrics_host;
  unsigned metrics_port = 0;
  // Options passed to libfuse's fuse_session_new ("-o a,b,c").
  std::vector<std::string> fuse_opts;

  Status validate() const;
};

// Every setting of a mount: what the option table fills and validates.
struct MountConfig {
  StoreConfig store;
  FsConfig fs;
  // StoreConfig's rules, then FsConfig's: the one check for mount options
  // and, with a change applied, for `kvfs-admin config` at run time.
  Status validate() const;
};

struct ParsedArgs : MountConfig {
  // With node_id, a name absent here may be a peer's file in a second:
  // negative_timeout is then 0.2 s unless given.
  bool negative_timeout_given = false;
  bool help = false;
  bool version = false;
};

// Parses argv; Invalid with a one-line message on any bad input.
Result<ParsedArgs> parse_args(int argc, char** argv);

// Splits "a,b=c,d" honouring backslash escapes of commas.
std::vector<std::string> split_options(const std::string& s);

const char* usage_text();

}  // namespace kvfs
