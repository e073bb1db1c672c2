// SPDX-License-Identifier: Apache-2.0
// The mount's load: settles which index this node uses (opened, or rebuilt
// from the segments when it is missing, foreign or unreadable), catches it
// up with the segment log (recovery.h), hands the journal what never reached
// a segment, and loads every inode into the namespace.
//
// Owns nothing past the call: the index it returns goes to the caller
// (BlockStore), which wires the flushers, evictor and peers to it.
// Not thread-safe: runs once, before the store serves anything.
#pragma once

#include <memory>

#include "core/recovery/recovery.h"
#include "core/util/status.h"

namespace kvfs {

class Index;
class MetaJournal;
class Namespace;
class SegmentStore;
class SeqCounter;
struct StoreConfig;

struct LoadParts {
  const StoreConfig* cfg;  // index_dir, load_threads
  SegmentStore* segs;      // opened; told each loaded extent (add_live)
  Namespace* ns;           // empty; filled and linked, with its root
  MetaJournal* journal;    // told the index and the entries to log again
  SeqCounter* seqs;        // started past every seq in the index
};

struct LoadedStore {
  std::unique_ptr<Index> index;
  bool rebuilt = false;   // from the segments, the old index set aside
  CatchUpStats catch_up;  // what the catch-up applied (empty when rebuilt)
};

// Busy when another kvfs holds the index (never rebuilt from here); any
// other error leaves the mount refused with nothing changed on the backing
// dir but the index.
Result<LoadedStore> load_store(const LoadParts& p);

}  // namespace kvfs
