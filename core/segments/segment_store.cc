// SPDX-License-Identifier: Apache-2.0
#include "core/segments/segment_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/backing/disk_layout.h"
#include "core/segments/head_publisher.h"
#include "core/util/log.h"

namespace kvfs {

SegmentStore::ReadFd::~ReadFd() {
  if (fd >= 0) (void)fs->close(fd);
}

BackingIo::Op SegmentStore::track(std::string what) const {
  return io_ ? io_->track(std::move(what)) : BackingIo::Op();
}

SegmentStore::~SegmentStore() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
  if (shared_lock_fd_ >= 0) ::close(shared_lock_fd_);
}

std::string SegmentStore::seg_path(uint64_t id) const {
  return dir_ + "/" + layout::segment_name(node_, id);
}

Result<std::unique_ptr<SegmentWriter>> SegmentStore::new_writer() {
  uint64_t id;
  std::string path;
  {
    std::unique_lock l(mu_);
    id = next_id_++;
    path = seg_path(id);
    segs_[id] = SegmentInfo{id, 0, 0, true, path};
  }
  auto op = track("create of segment " + path);
  int flags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | (direct_io_ ? O_DIRECT : 0);
  const int fd = fs_->open(path, flags, layout::kSegmentMode);
  if (fd < 0) {
    // Out of room or not: a missing or unusable segment dir is an I/O error
    // to the clients waiting on this flush, never ENOENT.
    const int e = -fd;
    Status s = e == ENOSPC || e == EDQUOT
                   ? Status::FromErrno(e, "create segment " + path)
                   : Status::IOError("create segment " + path + ": " + std::strerror(e));
    std::unique_lock l(mu_);
    segs_.erase(id);
    return s;
  }
  {
    std::unique_lock l(mu_);
    made_id_ = std::max(made_id_, id);  // its file exists, whatever the dir sync says
  }
  if (Status s = sync_dir(dir_, fs_); !s.ok()) {
    // Not known to be durable: nothing is written to it. Out of the store,
    // and removed (it is empty), so that it is neither counted nor left
    // open forever.
    (void)fs_->close(fd);
    (void)fs_->unlink(path);
    std::unique_lock l(mu_);
    segs_.erase(id);
    return s;
  }
  {
    // In the head from now on (its file exists); out of it when the
    // writer closes (note_closed).
    std::unique_lock l(mu_);
    open_.insert(id);
  }
  return std::unique_ptr<SegmentWriter>(new SegmentWriter(this, id, fd));
}

void SegmentStore::reserve_ids_through(uint64_t id) {
  std::unique_lock l(mu_);
  next_id_ = std::max(next_id_, id + 1);
  made_id_ = std::max(made_id_, id);  // a segment the index knows, maybe gone since
}

void SegmentStore::note_closed(uint64_t id) {
  {
    std::unique_lock l(mu_);
    open_.erase(id);
  }
  publish_head();
}

layout::NodeHead SegmentStore::head_state() const {
  std::shared_lock l(mu_);
  layout::NodeHead h;
  h.last_id = made_id_;
  h.open.reserve(open_.size());
  for (uint64_t id : open_)  // one with nothing complete yet says nothing to a peer
    if (auto it = segs_.find(id); it != segs_.end() && it->second.valid)
      h.open.emplace_back(id, it->second.valid);
  return h;
}

void SegmentStore::publish_head() {
  if (head_) head_->publish();
}

void SegmentStore::publish_pending_head() {
  if (head_) head_->publish_pending();
}

uint64_t SegmentStore::head_renames() const {
  return head_ ? head_->renames() : 0;
}

void SegmentStore::note_size(uint64_t id, uint64_t bytes) {
  std::unique_lock l(mu_);
  // An open segment is preallocated: it takes at least that much space.
  if (auto it = segs_.find(id); it != segs_.end())
    it->second.bytes = it->second.open ? std::max(it->second.bytes, bytes) : bytes;
}

Result<std::shared_ptr<SegmentStore::ReadFd>> SegmentStore::read_fd(uint64_t id) {
  std::string path;
  {
    std::shared_lock l(mu_);
    if (auto it = read_fds_.find(id); it != read_fds_.end()) return it->second;
    if (id & kForeignBit) {
      auto it = foreign_.find(id);
      if (it == foreign_.end()) return Status::Corruption("a peer's segment is gone");
      path = it->second;
    } else {
      auto it = segs_.find(id);
      if (it == segs_.end())
        return Status::Corruption("segment " + std::to_string(id) + " is missing");
      path = it->second.path;
    }
  }
  // Opened without the lock: an open on a stalled NFS server blocks.
  auto f = std::make_shared<ReadFd>();
  f->fs = fs_;
  f->name = id & kForeignBit ? path : std::to_string(id);
  const int fd = fs_->open(path, O_RDONLY | O_CLOEXEC | (direct_io_ ? O_DIRECT : 0), 0);
  if (fd < 0) {
    const int e = -fd;
    // A peer's segment gone before its follower saw it go (deleted by hand,
    // or a listing not due yet): the next pass lists the dir.
    if ((id & kForeignBit) && (e == ENOENT || e == ESTALE))
      foreign_missing_.store(true, std::memory_order_relaxed);
    return Status::FromErrno(e, "open segment " + path);
  }
  f->fd = fd;
  std::unique_lock l(mu_);
  if (auto it = read_fds_.find(id); it != read_fds_.end()) return it->second;  // raced: theirs
  if (segs_.count(id) || foreign_.count(id)) read_fds_[id] = f;  // else deleted: use it once
  return f;
}

uint64_t SegmentStore::foreign_segment(const std::string& path) {
  std::unique_lock l(mu_);
  if (auto it = foreign_ids_.find(path); it != foreign_ids_.end()) return it->second;
  const uint64_t id = kForeignBit | next_foreign_++;
  foreign_ids_[path] = id;
  foreign_[id] = path;
  return id;
}

bool SegmentStore::take_foreign_missing() {
  return foreign_missing_.exchange(false, std::memory_order_relaxed);
}

void SegmentStore::reopen_foreign(uint64_t id) {
  std::unique_lock l(mu_);
  read_fds_.erase(id);  // closed by the last read still using it
}

void SegmentStore::forget_foreign(uint64_t id) {
  std::unique_lock l(mu_);
  if (auto it = foreign_.find(id); it != foreign_.end()) {
    foreign_ids_.erase(it->second);
    foreign_.erase(it);
  }
  read_fds_.erase(id);
}

namespace {

Status read_into(BackingFs* fs, int fd, const std::string& seg, const Extent& ext, char* dst) {
  const size_t want = align_up(ext.len);
  size_t got = 0;
  while (got < ext.len) {
    const ssize_t r = fs->pread(fd, dst + got, want - got, ext.off + got);
    if (r < 0) return Status::FromErrno(static_cast<int>(-r), "read segment " + seg);
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  if (got < ext.len)
    return Status::Corruption("short segment " + seg + " at offset " + std::to_string(ext.off));
  if (hash_bytes(dst, ext.len) != ext.hash)
    return Status::Corruption("checksum mismatch in segment " + seg + " at offset " +
                              std::to_string(ext.off));
  return Status::OK();
}

}  // namespace

Status SegmentStore::read_extent(const Extent& ext, const BufRef& dst) {
  if (!dst || dst->capacity() < align_up(ext.len))
    return Status::Invalid("read buffer too small for extent");
  // The call owns its buffer and descriptor: left behind by the deadline, it
  // may finish later without touching memory or a file someone else reuses.
  auto body = [this, ext, dst]() -> Status {
    auto f = read_fd(ext.seg);
    if (!f.ok()) return f.status();
    return read_into((*f)->fs, (*f)->fd, (*f)->name, ext, dst->data());
  };
  if (!io_) return body();
  return io_->run("read of segment " + std::to_string(ext.seg), std::move(body));
}

Status SegmentStore::read_range(uint64_t id, uint64_t off, size_t len, const BufRef& dst,
                                size_t* got) {
  *got = 0;
  if (!dst || dst->capacity() < len || off % kAlign || len % kAlign)
    return Status::Invalid("unaligned segment range read");
  // As read_extent: the call owns the buffer and the count it fills.
  auto n = std::make_shared<size_t>(0);
  auto body = [this, id, off, len, dst, n]() -> Status {
    auto f = read_fd(id);
    if (!f.ok()) return f.status();
    while (*n < len) {
      const ssize_t r = (*f)->fs->pread((*f)->fd, dst->data() + *n, len - *n, off + *n);
      if (r < 0) return Status::FromErrno(static_cast<int>(-r), "read segment " + (*f)->name);
      if (r == 0) break;
      *n += static_cast<size_t>(r);
      if (*n % kAlign) break;  // the file's end (O_DIRECT reads go on in pages)
    }
    return Status::OK();
  };
  Status st = io_ ? io_->run("read ahead in segment " + std::to_string(id), body) : body();
  if (st.ok()) *got = *n;
  return st;
}

uint64_t SegmentStore::prealloc_step() const {
  return std::clamp<uint64_t>(segment_size_ / 8, 4u << 20, 32u << 20);
}

std::vector<SegmentInfo> SegmentStore::list() const {
  std::shared_lock l(mu_);
  std::vector<SegmentInfo> v;
  for (auto& [id, info] : segs_) v.push_back(info);
  std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.id < b.id; });
  return v;
}

bool SegmentStore::has_segment(uint64_t id) const {
  std::shared_lock l(mu_);
  return segs_.count(id) != 0;
}

uint64_t SegmentStore::segment_bytes() const {
  std::shared_lock l(mu_);
  uint64_t n = 0;
  for (auto& [id, info] : segs_) n += info.bytes;
  return n;
}

uint64_t SegmentStore::used_bytes() const {
  return segment_bytes() + retired_bytes_.load();
}

void SegmentStore::add_live(const Extent& e) {
  std::unique_lock l(mu_);
  if (auto it = segs_.find(e.seg); it != segs_.end()) it->second.live += align_up(e.len);
}

void SegmentStore::remove_live(const Extent& e) {
  std::unique_lock l(mu_);
  if (auto it = segs_.find(e.seg); it != segs_.end()) {
    const uint64_t n = align_up(e.len);
    it->second.live = it->second.live > n ? it->second.live - n : 0;
  }
}

uint64_t SegmentStore::live_bytes() const {
  std::shared_lock l(mu_);
  uint64_t n = 0;
  for (auto& [id, info] : segs_) n += info.live;
  return n;
}

std::string SegmentStore::forget_segment(uint64_t id) {
  std::unique_lock l(mu_);
  auto it = segs_.find(id);
  if (it == segs_.end()) return "";
  std::string path = std::move(it->second.path);
  segs_.erase(it);
  read_fds_.erase(id);  // closed by the last read still using it
  return path;
}

Status SegmentStore::unlink_segment(const std::string& path) {
  if (path.empty()) return Status::OK();
  auto body = [fs = fs_, path]() -> Status {
    if (const int r = fs->unlink(path); r < 0 && r != -ENOENT)
      return Status::FromErrno(-r, "unlink " + path);
    return Status::OK();
  };
  if (!io_) return body();
  return io_->run("unlink of " + path, std::move(body));
}

Result<std::string> SegmentStore::retire_segment(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string to = path.substr(0, slash + 1) +
                         layout::retired_segment_name(std::string_view(path).substr(slash + 1));
  auto body = [fs = fs_, path, to]() -> Status {
    if (const int r = fs->rename(path, to); r < 0)
      return Status::FromErrno(-r, "rename " + path + " to " + to);
    return Status::OK();
  };
  Status s = io_ ? io_->run("rename of " + path, std::move(body)) : body();
  if (!s.ok()) return s;
  return to;
}

void SegmentStore::retire_later(std::string path, uint64_t bytes, int64_t due_ns) {
  std::lock_guard l(retired_mu_);
  retired_.push_back({std::move(path), bytes, due_ns});
  retired_bytes_ += bytes;
}

void SegmentStore::set_due_of_found_retired(int64_t due_ns) {
  std::lock_guard l(retired_mu_);
  for (Retired& r : retired_)
    if (r.due_ns == 0) r.due_ns = due_ns;
}

uint64_t SegmentStore::delete_retired(int64_t now, uint64_t free_bytes) {
  std::vector<Retired> go;
  {
    std::lock_guard l(retired_mu_);
    uint64_t freed = 0;
    std::vector<Retired> keep;
    for (Retired& r : retired_) {
      if (r.due_ns <= now || freed < free_bytes) {
        freed += r.bytes;
        go.push_back(std::move(r));
      } else {
        keep.push_back(std::move(r));
      }
    }
    retired_ = std::move(keep);
  }
  uint64_t n = 0;
  for (Retired& r : go) {
    if (Status s = unlink_segment(r.path); !s.ok()) {
      spdlog::warn("cannot delete retired segment {}: {}", r.path, s.ToString());
      std::lock_guard l(retired_mu_);
      retired_.insert(retired_.begin(), std::move(r));
      continue;
    }
    retired_bytes_ -= r.bytes;
    ++n;
  }
  return n;
}

SegmentStore::RetiringStats SegmentStore::retiring() const {
  std::lock_guard l(retired_mu_);
  return {retired_.size(), retired_bytes_.load()};
}

void SegmentStore::set_log_state(uint64_t id, uint64_t valid, const SegmentLogState& applied) {
  std::unique_lock l(mu_);
  if (auto it = segs_.find(id); it != segs_.end()) {
    it->second.valid = valid;
    it->second.applied = applied.end;
    it->second.min_seq = applied.min_seq;
    it->second.max_seq = applied.max_seq;
  }
}

void SegmentStore::note_applied(uint64_t id, uint64_t applied) {
  std::unique_lock l(mu_);
  if (auto it = segs_.find(id); it != segs_.end())
    it->second.applied = std::max(it->second.applied, applied);
}

uint64_t SegmentStore::applied(uint64_t id) const {
  std::shared_lock l(mu_);
  auto it = segs_.find(id);
  return it == segs_.end() ? 0 : it->second.applied;
}

uint64_t SegmentStore::min_seq_except(uint64_t except) const {
  std::shared_lock l(mu_);
  uint64_t m = UINT64_MAX;
  for (auto& [id, info] : segs_)
    if (id != except && info.min_seq != 0) m = std::min(m, info.min_seq);
  return m;
}

Status SegmentStore::scan(uint64_t id, const RecordFn& fn, uint64_t* valid_bytes, uint64_t from,
                          Check check, uint64_t* damaged) {
  std::string path;
  {
    std::shared_lock l(mu_);
    auto it = segs_.find(id);
    if (it == segs_.end()) return Status::NotFound("segment " + std::to_string(id));
    path = it->second.path;
  }
  auto op = track("scan of segment " + path);
  const int fd = fs_->open(path, O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) return Status::FromErrno(-fd, "open " + path);
  struct stat st;
  const uint64_t size = fs_->fstat(fd, &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  scan_segment_fd(*fs_, fd, id, size, fn, valid_bytes, from, check, damaged);
  (void)fs_->close(fd);
  return Status::OK();
}

}  // namespace kvfs
