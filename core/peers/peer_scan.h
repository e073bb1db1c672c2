// SPDX-License-Identifier: Apache-2.0
// What PeerLog's passes do to the backing dir, one call each: list the
// segment dir or the heads dir, read one peer segment from a position.
// Each runs under BackingIo::run (peer_log.cc) and writes only to what the
// call owns, so that a call left behind by its deadline harms nothing.
// Every call goes through the BackingFs it is given (the follower's
// SegmentStore's). Thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/backing/backing_fs.h"
#include "core/backing/disk_layout.h"
#include "core/records/record.h"
#include "core/util/status.h"

namespace kvfs {

// What one pass read of one peer segment.
struct ScanOut {
  uint64_t size = 0;   // the file's size at open
  uint64_t from = 0;   // where the scan started
  uint64_t valid = 0;  // the end of the last complete record
  bool partial = false;
  bool sealed = false;  // its owner will never append to it (disk_layout.h)
  bool gone = false;    // deleted between the listing and the open
  uint64_t records = 0;
  std::vector<RecordEntry> entries;
};

// Opens path (close-to-open), reads the complete records from pos on (all
// of them if the file is shorter than pos: cut short by hand). end (0: not
// known): where its owner's head says its complete records end; then the
// scan stops there, and the file's size, seal and tail are not looked at.
Status scan_peer_segment(BackingFs& fs, const std::string& path, uint64_t id, uint64_t pos,
                         uint64_t end, ScanOut* out);
// The segment file names in dir.
Status list_segments(BackingFs& fs, const std::string& dir, std::vector<std::string>* names);
// Every node's newest head in dir (disk_layout.h, NodeHead), by node; an
// absent dir (no node has a head) is none.
Status list_heads(BackingFs& fs, const std::string& dir,
                  std::map<std::string, layout::NodeHead>* heads);

}  // namespace kvfs
