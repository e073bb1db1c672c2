// SPDX-License-Identifier: Apache-2.0
#include "core/peers/peer_scan.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "core/records/segment_scan.h"

namespace kvfs {

Status scan_peer_segment(const std::string& path, uint64_t id, uint64_t pos, uint64_t end,
                         ScanOut* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    // Deleted by its owner between the listing and the open (ENOENT, or
    // ESTALE over NFS): gone, as if not listed.
    if (errno == ENOENT || errno == ESTALE) {
      out->gone = true;
      return Status::OK();
    }
    return Status::FromErrno(errno, "open " + path);
  }
  if (end) {
    // Its owner's head says where its complete records end: no stat, no
    // look past them (an open and the reads of what is new).
    out->size = end;
    out->from = std::min(pos, end);
    out->valid = out->from;
    scan_segment_fd(
        fd, id, end,
        [&](uint64_t, const RecordHeader&, std::vector<RecordEntry>& es) {
          ++out->records;
          for (RecordEntry& e : es) out->entries.push_back(std::move(e));
        },
        &out->valid, out->from, ScanCheck::kHeaders, nullptr);
    ::close(fd);
    return Status::OK();
  }
  struct stat st;
  // The size and the seal of one stat: a segment sealed then had all its
  // bytes by then.
  const bool statted = ::fstat(fd, &st) == 0;
  out->size = statted ? static_cast<uint64_t>(st.st_size) : 0;
  out->sealed = statted && layout::segment_sealed(st.st_mode);
  out->from = out->size < pos ? 0 : pos;  // cut short (by hand): all again, by seq
  out->valid = out->from;
  scan_segment_fd(
      fd, id, out->size,
      [&](uint64_t, const RecordHeader&, std::vector<RecordEntry>& es) {
        ++out->records;
        for (RecordEntry& e : es) out->entries.push_back(std::move(e));
      },
      &out->valid, out->from, ScanCheck::kHeaders, nullptr);
  // Past the last complete record: zeros (the owner preallocates ahead of
  // its writes) or a record not complete yet, which is lag.
  if (out->valid + kRecordHeaderSize <= out->size) {
    char hdr[kRecordHeaderSize] = {};
    if (::pread(fd, hdr, sizeof(hdr), static_cast<off_t>(out->valid)) == ssize_t(sizeof(hdr)))
      for (char c : hdr) out->partial |= c != 0;
  }
  ::close(fd);
  return Status::OK();
}

Status list_segments(const std::string& dir, std::vector<std::string>* names) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return Status::FromErrno(errno, "list " + dir);
  while (dirent* e = ::readdir(d))
    if (layout::parse_segment_name(e->d_name)) names->push_back(e->d_name);
  ::closedir(d);
  return Status::OK();
}

Status list_heads(const std::string& dir, std::map<std::string, layout::NodeHead>* heads) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return errno == ENOENT ? Status::OK() : Status::FromErrno(errno, "list " + dir);
  while (dirent* e = ::readdir(d)) {
    auto h = layout::parse_head_name(e->d_name);
    if (!h) continue;
    auto [it, fresh] = heads->try_emplace(h->node, *h);
    if (!fresh && it->second.gen < h->gen) it->second = std::move(*h);
  }
  ::closedir(d);
  return Status::OK();
}

}  // namespace kvfs
