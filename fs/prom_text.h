// SPDX-License-Identifier: Apache-2.0
// The Prometheus text exposition format (version 0.0.4) of the daemon's JSON
// stats. One renderer for both outlets, so their metric names, types and
// labels cannot drift apart: `kvfs-admin stats --prometheus` (through the
// control file) and the daemon's own `/metrics` (mount option metrics=).
// A small library of its own: kvfs-admin links it without FUSE.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace kvfs::prom {

// The FUSE operations whose latencies the stats reply carries under
// "latency" (fs/control.h OpLatencies), in the order both outlets list them.
// flush: the close of a handle that can write (read-only handles send none).
inline constexpr const char* kLatencyOps[] = {"lookup", "read",   "write",
                                              "create", "rename", "flush"};

// The stats reply `s` as metrics labelled mountpoint="mnt"; kvfs_up 1.
std::string render(const std::string& mnt, const nlohmann::json& s, const std::string& version);
// Only kvfs_up 0: the daemon could not be reached.
std::string render_down(const std::string& mnt);
// Integers without exponent, others with 9 significant digits.
std::string number(double v);

}  // namespace kvfs::prom
