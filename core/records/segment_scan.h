// SPDX-License-Identifier: Apache-2.0
// Reading a segment file's records in order, from an open descriptor: what
// a node's own catch-up, reclaim and rebuild do through SegmentStore::scan,
// and what a peer does to follow another node's log (peer_log.h) without
// owning the file.
//
// Thread-safe (no state); the descriptor is only pread (through fs, the
// BackingFs it was opened with), never moved.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/backing/backing_fs.h"
#include "core/records/record.h"
#include "core/util/status.h"

namespace kvfs {

// kHeaders checks each record's header and entries; kBlocks also reads every
// block a record's snapshots place inside that record and checks its hash
// (segment_store.h says when which is needed).
enum class ScanCheck { kHeaders, kBlocks };
using RecordFn = std::function<void(uint64_t off, const RecordHeader&, std::vector<RecordEntry>&)>;

// Walks the complete records of segment `id` (open as fd, `size` bytes: a
// peer passes the size it saw at open, a later append is read next time)
// from `from`, a record start, stopping quietly at the first torn or corrupt
// record. valid_bytes: the end of the last complete record. With kBlocks a
// record whose blocks fail is skipped and counted in *damaged.
void scan_segment_fd(BackingFs& fs, int fd, uint64_t id, uint64_t size, const RecordFn& fn,
                     uint64_t* valid_bytes, uint64_t from, ScanCheck check, uint64_t* damaged);

}  // namespace kvfs
