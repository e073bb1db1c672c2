// SPDX-License-Identifier: Apache-2.0
// Node retirement: a node of a shared backing dir that is gone for good
// hands its files over to this one. Only a node's own daemon ever deletes
// its segments; retiring is the one exception, on purpose, and only for a
// node whose lock is free and whose log has been still for idle_s.
//
// Each of its files that this node has no version of is copied here as an
// ordinary file of this node (a tmp name, then a rename over the import, as
// vLLM stores), with its access time and its place in the LRU order kept:
// from then on it counts against this node's capacity and LRU eviction takes
// it in turn. The copies have a newer mtime than the retired node's
// versions, so the other nodes pick them at their next pass. Then the
// retired node's segments are deleted; a peer still reading one gets a clean
// miss (ENOENT, ESTALE, EIO) and, looking the name up again, the copy. With
// drop, nothing is copied: its data goes.
//
// A client of BlockStore, above it: the copies go through the store's file
// operations, as a copy through the mount would, and the backing dir's
// listing and deletes run under its deadline (BlockStore::backing_io()).
// Owns no state. Thread-safe as the store is; two retirements of one node
// at once copy no file twice (the second finds the first's copy, this
// node's own) but may count a segment twice.
#pragma once

#include <cstdint>
#include <string>

#include "core/util/status.h"

namespace kvfs {

class BlockStore;

struct RetireResult {
  uint64_t files_copied = 0, bytes_copied = 0;
  uint64_t files_kept = 0;  // this node had its own version (or a newer one was elsewhere)
  uint64_t files_lost = 0;  // could not be read or written (logged each)
  uint64_t segments_deleted = 0;
};

// Hands node who's files over to store's node (copies that its LRU
// eviction takes in turn) and deletes who's segments; with drop, only
// deletes them. Invalid when the dir is not shared or who is this node;
// NotFound for a node the dir does not know; Busy while who's lock is held
// or its log changed within idle_s.
Result<RetireResult> retire_node(BlockStore& store, const std::string& who, bool drop,
                                 double idle_s);

}  // namespace kvfs
