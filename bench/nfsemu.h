// SPDX-License-Identifier: Apache-2.0
// nfsemu: shared declarations of the emulator's cost model (nfsemu_model.cc)
// and its passthrough operations (nfsemu_ops.cc). See nfsemu.cc's header for
// what it models and why.
#pragma once

#define FUSE_USE_VERSION 312  // see bench/nullfs.cc: below 312 the loop call is the 3.2 one
#include <fuse_lowlevel.h>

#include <atomic>
#include <cstdint>
#include <string>

namespace nfsemu {

// Every request kind the daemon counts; kOpNames spells them in the stats.
enum Op : int {
  kLookup,
  kGetattr,
  kSetattr,
  kReaddir,
  kMkdir,
  kRmdir,
  kCreate,
  kOpen,
  kRead,
  kWrite,
  kFlush,
  kRelease,
  kFsync,
  kFsyncdir,
  kRename,
  kUnlink,
  kLink,
  kSymlink,
  kReadlink,
  kStatfs,
  kFallocate,
  kForget,
  kOpendir,
  kReleasedir,
  kAccess,
  kOpCount
};
extern const char* const kOpNames[kOpCount];

struct Config {
  std::string preset = "none";
  uint64_t rtt_ns = 0;        // one metadata round trip
  uint64_t data_ns = 0;       // fixed latency of one READ/WRITE request
  double bw_bytes_s = 0;      // data bandwidth cap, 0 = none
  bool bw_shared = false;     // one bucket for reads and writes (else one each)
  double jitter = 0;          // uniform +-fraction on every modelled delay
  double attr_timeout = 1.0;  // s: entry, negative entry and attribute cache
  unsigned layout_rtt = 0;    // extra MDS round trips on open/create/fsync (pNFS)
  unsigned close_rtt = 0;     // round trips on close (FLUSH): NFSv4 CLOSE
  bool direct_commit = true;  // an O_DIRECT handle that wrote commits at close
  bool fallocate = true;      // false: EOPNOTSUPP, like a server without ALLOCATE
  bool writeback = false;     // FUSE writeback cache (async buffered writes)
  unsigned threads = 64;      // worker threads: outstanding RPCs that overlap
  std::string stats_path;     // JSON line at SIGUSR1 and at exit
  std::string pidfile;        // the daemon's pid, written before the parent returns
};

// Fills cfg from the preset's figures; false for an unknown name.
bool apply_preset(const std::string& name, Config* cfg);
// Takes nfsemu's own keys (rtt_us=, data_us=, ...) out of a comma-separated
// -o list into cfg and returns the rest (FUSE's options). Sets *err on a bad
// value and returns "".
std::string take_options(const std::string& opts, Config* cfg, std::string* err);
// The presets and options, for --help.
std::string presets_help();

// The model: set once at startup, read by every worker.
void model_init(const Config& cfg);
const Config& config();

// Counts one request of kind op and sleeps rtts modelled round trips. Called
// after the local syscall and before the reply, so that the modelled cost
// adds to the local one and concurrent requests overlap their waits.
void pay(Op op, unsigned rtts);
// A READ or WRITE of bytes that arrived at arrived_ns (clock_ns()): counts
// it, reserves its transfer time in the bandwidth bucket from its arrival on
// and sleeps until its data would have crossed plus data_ns. The local I/O,
// done meanwhile, overlaps that time, as a server's disk overlaps the wire.
void pay_data(Op op, uint64_t bytes, uint64_t arrived_ns);
uint64_t clock_ns();
void count_error();
// A COMMIT paid at close for a handle's direct writes (em_flush).
void count_commit();

// The counters as one JSON line (no newline).
std::string stats_json();
// Writes stats_json() to cfg.stats_path (via a temporary and rename); no-op
// without one.
void write_stats();

// The passthrough: opens the source directory (false with errno set).
bool ops_init(const char* source);
// After the session ends: the inodes the kernel never forgot (an unmount
// sends no FORGETs) are closed and freed.
void ops_shutdown();
fuse_lowlevel_ops ops_table();

}  // namespace nfsemu
