// SPDX-License-Identifier: Apache-2.0
// kvfs-admin's link to a mounted kvfs: finds the mount, talks to the daemon
// through its control file (the protocol is core/control/control_client.h), and
// turns command-line paths into paths relative to the mount root. The daemon
// decides who may change what (root or the user who mounted); this tool only
// reports its answer.
//
// Thread-safe: a Mount is immutable once built, and each request opens the
// control file anew.
#pragma once

#include <string>

#include "tools/admin_format.h"

namespace kvfs::admin {

class Mount {
 public:
  // Checks that `arg` is the root of a kvfs mount we can talk to.
  explicit Mount(const std::string& arg);

  const std::string& root() const { return root_; }

  // Sends one request; returns the reply, or fails with the daemon's error.
  json request(const json& req) const;

  // Sends one request and returns the reply, error replies included.
  json request_raw(const json& req) const;

  // A path given on the command line -> a path relative to the mount root.
  // Absolute paths must lie under the mount; relative ones are taken as
  // relative to the mount root.
  std::string relative(const std::string& p) const;

 private:
  std::string arg_, root_, ctl_;
};

}  // namespace kvfs::admin
