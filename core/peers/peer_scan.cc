// SPDX-License-Identifier: Apache-2.0
#include "core/peers/peer_scan.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>

#include "core/records/segment_scan.h"

namespace kvfs {

Status scan_peer_segment(BackingFs& fs, const std::string& path, uint64_t id, uint64_t pos,
                         uint64_t end, ScanOut* out) {
  const int fd = fs.open(path, O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) {
    // Deleted by its owner between the listing and the open (ENOENT, or
    // ESTALE over NFS): gone, as if not listed.
    if (fd == -ENOENT || fd == -ESTALE) {
      out->gone = true;
      return Status::OK();
    }
    return Status::FromErrno(-fd, "open " + path);
  }
  if (end) {
    // Its owner's head says where its complete records end: no stat, no
    // look past them (an open and the reads of what is new).
    out->size = end;
    out->from = std::min(pos, end);
    out->valid = out->from;
    scan_segment_fd(
        fs, fd, id, end,
        [&](uint64_t, const RecordHeader&, std::vector<RecordEntry>& es) {
          ++out->records;
          for (RecordEntry& e : es) out->entries.push_back(std::move(e));
        },
        &out->valid, out->from, ScanCheck::kHeaders, nullptr);
    (void)fs.close(fd);
    return Status::OK();
  }
  struct stat st;
  // The size and the seal of one stat: a segment sealed then had all its
  // bytes by then.
  const bool statted = fs.fstat(fd, &st) == 0;
  out->size = statted ? static_cast<uint64_t>(st.st_size) : 0;
  out->sealed = statted && layout::segment_sealed(st.st_mode);
  out->from = out->size < pos ? 0 : pos;  // cut short (by hand): all again, by seq
  out->valid = out->from;
  scan_segment_fd(
      fs, fd, id, out->size,
      [&](uint64_t, const RecordHeader&, std::vector<RecordEntry>& es) {
        ++out->records;
        for (RecordEntry& e : es) out->entries.push_back(std::move(e));
      },
      &out->valid, out->from, ScanCheck::kHeaders, nullptr);
  // Past the last complete record: zeros (the owner preallocates ahead of
  // its writes) or a record not complete yet, which is lag.
  if (out->valid + kRecordHeaderSize <= out->size) {
    char hdr[kRecordHeaderSize] = {};
    if (fs.pread(fd, hdr, sizeof(hdr), out->valid) == ssize_t(sizeof(hdr)))
      for (char c : hdr) out->partial |= c != 0;
  }
  (void)fs.close(fd);
  return Status::OK();
}

Status list_segments(BackingFs& fs, const std::string& dir, std::vector<std::string>* names) {
  std::vector<std::string> all;
  if (const int r = fs.list(dir, &all); r < 0) return Status::FromErrno(-r, "list " + dir);
  for (std::string& n : all)
    if (layout::parse_segment_name(n)) names->push_back(std::move(n));
  return Status::OK();
}

Status list_heads(BackingFs& fs, const std::string& dir,
                  std::map<std::string, layout::NodeHead>* heads) {
  std::vector<std::string> names;
  if (const int r = fs.list(dir, &names); r < 0)
    return r == -ENOENT ? Status::OK() : Status::FromErrno(-r, "list " + dir);
  for (const std::string& n : names) {
    auto h = layout::parse_head_name(n);
    if (!h) continue;
    auto [it, fresh] = heads->try_emplace(h->node, *h);
    if (!fresh && it->second.gen < h->gen) it->second = std::move(*h);
  }
  return Status::OK();
}

}  // namespace kvfs
