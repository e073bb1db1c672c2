// SPDX-License-Identifier: Apache-2.0
// The on-disk format shared by segment files and the RocksDB index.
//
// An InodeSnapshot is everything that must survive a restart about one inode:
// attributes, its single name (parent, name), xattrs and, for regular files,
// the extent of every 1 MiB block. The index stores the latest committed
// snapshot per inode; segments store every snapshot ever committed, in records
// that also carry the block data, so a lost index is rebuilt by keeping the
// highest-seq snapshot (or tombstone) per inode found in the segments.
//
// A segment is a sequence of records, each starting 4 KiB-aligned:
//   [RecordHeader 64 B][entries: meta_len bytes][pad to 4 KiB]
//   [block 0][pad to 4 KiB][block 1][pad]...   (payload_len bytes in all)
// Block payloads start 4 KiB-aligned so that cold reads can use O_DIRECT
// straight into a cache buffer. Entries are snapshots or tombstones. Every
// block's XXH3-64 lives in the extent that points at it; the header and the
// entries carry their own XXH3, so a torn tail is detected, never trusted.
//
// All integers little-endian; decoding is bounds-checked and fuzzed.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/util/status.h"

namespace kvfs {

struct Extent {
  uint64_t seg = 0;   // segment id; 0 = none
  uint64_t off = 0;   // byte offset of the block payload in the segment
  uint32_t len = 0;   // valid bytes
  uint64_t hash = 0;  // XXH3-64 of those bytes
  bool valid() const { return seg != 0; }
  bool operator==(const Extent& o) const {
    return seg == o.seg && off == o.off && len == o.len && hash == o.hash;
  }
};

struct BlockExtent {
  uint32_t idx = 0;  // block index: file offset idx * kBlockSize
  Extent ext;
};

struct InodeSnapshot {
  uint64_t ino = 0;
  uint64_t seq = 0;  // global order of snapshots and tombstones
  uint64_t parent = 0;
  std::string name;
  uint32_t mode = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint64_t size = 0;
  int64_t atime_ns = 0, mtime_ns = 0, ctime_ns = 0;
  std::string symlink;
  std::map<std::string, std::string> xattrs;
  std::vector<BlockExtent> extents;  // sorted by idx; holes are absent
  // Device number of a character or block node, as FUSE carries it (32 bits,
  // the kernel's new_encode_dev). Encoded only when non-zero (a version 2
  // snapshot), so every other snapshot keeps the version 1 bytes.
  uint32_t rdev = 0;
};

void encode_snapshot(const InodeSnapshot& s, std::string* out);
Status decode_snapshot(std::string_view in, InodeSnapshot* s);

inline constexpr uint32_t kRecordMagic = 0x3152564B;  // "KVR1"
inline constexpr size_t kRecordHeaderSize = 64;

enum class RecordType : uint16_t {
  kFile = 1,    // blocks of one inode plus its committed snapshot
  kMeta = 2,    // snapshots and tombstones only (mkdir, rename, unlink...)
  kBlocks = 3,  // blocks only: early write-out of a file still open
};

// kPeerUnlink: this node unlinked a file another node owns (a shared backing
// dir, core/peers/peer_log.h). It names the owner's file, not an inode here:
// snap.name is the owner node, snap.ino the owner's inode number, snap.mtime_ns
// the mtime of the version unlinked; snap.seq orders it in this node's log.
// The owner removes that version when it reads the entry; the others hide it.
enum class EntryKind : uint8_t { kSnapshot = 1, kTombstone = 2, kPeerUnlink = 3 };

struct RecordEntry {
  EntryKind kind = EntryKind::kSnapshot;
  InodeSnapshot snap;  // for a tombstone only ino and seq are set
};

struct RecordHeader {
  RecordType type = RecordType::kMeta;
  uint32_t meta_len = 0;
  uint32_t nblocks = 0;
  uint64_t payload_len = 0;
  uint64_t meta_hash = 0;
  // Bytes from the record start to the end of the payload.
  uint64_t total_len() const;
  uint64_t payload_start() const;  // offset of block 0 from the record start
};

void encode_header(const RecordHeader& h, char out[kRecordHeaderSize]);
Status decode_header(const char in[kRecordHeaderSize], RecordHeader* h);

void encode_entries(const std::vector<RecordEntry>& entries, std::string* out);
Status decode_entries(std::string_view in, std::vector<RecordEntry>* out);

uint64_t hash_bytes(const void* data, size_t len);

}  // namespace kvfs
