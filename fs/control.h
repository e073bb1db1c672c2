// SPDX-License-Identifier: Apache-2.0
// The control file: how kvfs-admin talks to a mounted kvfs; the daemon's
// side of the protocol that core/control/control_client.h describes and implements
// for clients.
//
// A hidden regular file (control::kControlName) at the mount root, absent
// from readdir, reserved as a name. Each write is one request; each open
// handle keeps its own reply, read from offset 0. Requests that change state
// (evict, flush, config set) are refused with EACCES-style errors unless the
// caller is root or the user who mounted: the daemon checks the caller's uid
// from the FUSE request, the tool cannot bypass it. Thread-safe: handles are
// per open file; the store is thread-safe.
#pragma once

// 312, not 34: below 312 libfuse 3.14 maps fuse_session_loop_mt to its 3.2 entry
// point, which misreads fuse_loop_cfg_create()'s config (no idle threads: a new
// thread, buffer and /dev/fuse clone per request).
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <cstdint>
#include <mutex>
#include <string>

#include "core/control/control_client.h"
#include "core/util/metrics.h"

namespace kvfs {

class BlockStore;
struct FsConfig;

using control::kControlName;
// Far above any inode number the store hands out.
inline constexpr uint64_t kControlIno = 0xFFFFFFFFFFFF0001ull;

// Latencies recorded by the FUSE ops: p50/p99 for the admin tool, histograms
// for Prometheus.
struct OpLatencies {
  LatencyHistogram lookup, read, write, create, rename, flush;
};

// One open of the control file. Thread-safe: a client may use one descriptor
// from several threads, so reply is only touched under mu, and a read replies
// from a copy (the handle may be released as soon as the client has its bytes).
struct ControlHandle {
  std::mutex mu;
  std::string reply;  // guarded by mu
};

// The stats in the Prometheus text format (fs/prom_text.h), for /metrics.
std::string metrics_text(BlockStore& store, OpLatencies& lat, const std::string& mountpoint);

// Runs one request; returns the JSON reply (errors included).
std::string control_execute(BlockStore& store, const FsConfig& cfg, OpLatencies& lat,
                            const std::string& request, uint32_t caller_uid);

}  // namespace kvfs
