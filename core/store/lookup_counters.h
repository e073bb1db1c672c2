// SPDX-License-Identifier: Apache-2.0
// LookupCounters: what the filesystem's calls count for the stats. Held by
// BlockStore; each field written by one part alone (NameOps's lookups:
// negative, files, peer; FileOps's drops: dropped_files), read by
// StoreAdmin. Thread-safe (relaxed atomics).
#pragma once

#include <atomic>
#include <cstdint>

namespace kvfs {

struct LookupCounters {
  std::atomic<uint64_t> negative{0}, files{0}, peer{0};
  std::atomic<uint64_t> dropped_files{0};
};

}  // namespace kvfs
