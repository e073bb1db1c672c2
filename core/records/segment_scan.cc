// SPDX-License-Identifier: Apache-2.0
#include "core/records/segment_scan.h"

#include <string>

namespace kvfs {
namespace {

// Whether every block that the entries place in [start, end) of segment id
// reads back with its hash.
bool blocks_intact(BackingFs& fs, int fd, uint64_t id, uint64_t start, uint64_t end,
                   const std::vector<RecordEntry>& entries, std::string* buf) {
  for (const RecordEntry& e : entries)
    for (const BlockExtent& b : e.snap.extents) {
      const Extent& x = b.ext;
      if (x.seg != id || x.off < start || x.off + x.len > end) continue;
      buf->resize(x.len);
      if (fs.pread(fd, buf->data(), x.len, x.off) != ssize_t(x.len) ||
          hash_bytes(buf->data(), x.len) != x.hash)
        return false;
    }
  return true;
}

}  // namespace

void scan_segment_fd(BackingFs& fs, int fd, uint64_t id, uint64_t size, const RecordFn& fn,
                     uint64_t* valid_bytes, uint64_t from, ScanCheck check, uint64_t* damaged) {
  uint64_t off = from;
  std::string meta, block;
  while (off + kRecordHeaderSize <= size) {
    char hdr[kRecordHeaderSize];
    if (fs.pread(fd, hdr, sizeof(hdr), off) != ssize_t(sizeof(hdr))) break;
    RecordHeader h;
    if (!decode_header(hdr, &h).ok() || off + h.total_len() > size) break;
    meta.resize(h.meta_len);
    if (h.meta_len > 0 &&
        fs.pread(fd, meta.data(), h.meta_len, off + kRecordHeaderSize) != ssize_t(h.meta_len))
      break;
    if (hash_bytes(meta.data(), meta.size()) != h.meta_hash) break;
    std::vector<RecordEntry> entries;
    if (!decode_entries(meta, &entries).ok()) break;
    if (check == ScanCheck::kBlocks &&
        !blocks_intact(fs, fd, id, off, off + h.total_len(), entries, &block)) {
      if (damaged) ++*damaged;
    } else {
      fn(off, h, entries);
    }
    off += h.total_len();
  }
  if (valid_bytes) *valid_bytes = off;
}

}  // namespace kvfs
