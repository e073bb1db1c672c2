// SPDX-License-Identifier: Apache-2.0
// BlockReader (block_reader.h).
#include "core/data/block_reader.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/data/file_data.h"
#include "core/data/prefetcher.h"
#include "core/data/read_load.h"
#include "core/ram/held_blocks.h"
#include "core/ram/ram_tier.h"
#include "core/util/clock.h"

namespace kvfs {
namespace {

// How far a cold read reads ahead of itself: 32 MiB, about one KV chunk.
constexpr uint32_t kReadAheadBlocks = 32;

const char* zero_page() {
  static char* z = [] {
    char* p = static_cast<char*>(std::aligned_alloc(kAlign, kBlockSize));
    std::memset(p, 0, kBlockSize);
    return p;
  }();
  return z;
}

}  // namespace

Status BlockReader::read(OpenFile* f, uint64_t off, size_t size, ReadResult* out) {
  Inode& in = *f->in;
  struct Piece {
    ConstBufRef ref;
    uint32_t idx, from, to, valid;
    Extent miss;
    ExtentKey key;  // of the extent read (RAM or backing); seg 0: none
    bool held = false;
  };
  std::vector<Piece> pieces;
  std::shared_lock rl(*p_.reclaim_mu);  // the extents chosen below stay readable
  {
    std::lock_guard g(in.mu);
    if (off >= in.size || size == 0) return Status::OK();
    const uint64_t end = std::min<uint64_t>(off + size, in.size);
    for (uint64_t b = off / kBlockSize; b * kBlockSize < end; ++b) {
      const uint64_t base = b * kBlockSize;
      Piece p{nullptr,
              uint32_t(b),
              uint32_t(std::max(off, base) - base),
              uint32_t(std::min(end, base + kBlockSize) - base),
              0,
              Extent{},
              ExtentKey{},
              false};
      FileData::Source src = FileData::source_locked(in, uint32_t(b));
      p.valid = src.len;
      if (src.dirty) {
        p.ref = std::move(src.dirty);
      } else if (src.ext.valid()) {
        p.key = ExtentKey{src.ext.seg, src.ext.off};
        if ((p.ref = p_.held->find_locked(f->held, p.key))) {
          p.held = true;  // the rest of a block this load read part of: the same use of it
        } else {
          p.ref = p_.ram->lookup(p.key);
          if (!p.ref) p.miss = src.ext;
        }
      }
      pieces.push_back(std::move(p));
    }
    const int64_t t = p_.clock->now_ns();
    in.touch(t);
    // relatime: enough for "last read" without a write per read.
    if (!f->noatime && (in.atime_ns <= in.mtime_ns || t - in.atime_ns > 86400ll * 1000000000)) {
      in.atime_ns = t;
      if (!in.peer) in.flush.atime_changed();  // a peer's file is never written here
    }
  }
  uint64_t ram_hits = 0;
  for (Piece& p : pieces) ram_hits += p.ref != nullptr;
  if (ram_hits) ram_block_hits_.fetch_add(ram_hits, std::memory_order_relaxed);
  if (p_.reads != nullptr) p_.reads->note(p_.clock->mono_ns());
  // A cold read: read the next blocks of the file ahead, on the
  // prefetcher's threads, while this one reads what the client asked for
  // (a window, so that a long sequential read does not scan the whole file
  // at every miss).
  uint32_t last_miss = 0;
  bool any_miss = false;
  for (Piece& p : pieces)
    if (p.miss.valid()) last_miss = p.idx, any_miss = true;
  if (any_miss) p_.prefetch->want(f->in, last_miss + 1, kReadAheadBlocks);
  for (Piece& p : pieces) {
    if (!p.miss.valid()) continue;
    p_.prefetch->taken(ExtentKey{p.miss.seg, p.miss.off});
    KVFS_RETURN_IF_ERROR(p_.data->read_block(in.ino, p.idx, p.miss, &p.ref));
  }
  // A block read only in part: its open holds it for the rest (the last
  // such piece; a read of whole blocks holds nothing).
  for (auto p = pieces.rbegin(); p != pieces.rend(); ++p) {
    if (p->held || !p->ref || p->key.seg == 0 || (p->from == 0 && p->to >= p->valid)) continue;
    std::lock_guard g(in.mu);
    p_.held->hold_locked(&f->held, p->key, p->ref);
    break;
  }
  out->refs.reserve(pieces.size());
  uint64_t hit_bytes = 0, miss_bytes = 0;
  for (Piece& p : pieces) {
    const uint32_t data_end = std::min(p.to, std::max(p.valid, p.from));
    if (p.ref && data_end > p.from) {
      out->iov.push_back({const_cast<char*>(p.ref->data()) + p.from, size_t(data_end - p.from)});
      out->refs.push_back(std::move(p.ref));
      // Bytes handed to the reader, by where they were: the same unit for
      // hits and misses (block counts would weigh a 4 KiB read like 1 MiB).
      (p.miss.valid() ? miss_bytes : hit_bytes) += data_end - p.from;
    }
    const uint32_t zfrom = std::max(p.from, data_end);
    if (p.to > zfrom) out->iov.push_back({const_cast<char*>(zero_page()), size_t(p.to - zfrom)});
    out->bytes += p.to - p.from;
  }
  if (hit_bytes) ram_hit_bytes_.fetch_add(hit_bytes, std::memory_order_relaxed);
  if (miss_bytes) ram_miss_bytes_.fetch_add(miss_bytes, std::memory_order_relaxed);
  if (in.peer) peer_read_bytes_.fetch_add(out->bytes, std::memory_order_relaxed);
  return Status::OK();
}

BlockReader::Stats BlockReader::stats() const {
  Stats s;
  s.ram_block_hits = ram_block_hits_.load(std::memory_order_relaxed);
  s.ram_hit_bytes = ram_hit_bytes_.load(std::memory_order_relaxed);
  s.ram_miss_bytes = ram_miss_bytes_.load(std::memory_order_relaxed);
  s.peer_read_bytes = peer_read_bytes_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace kvfs
