// SPDX-License-Identifier: Apache-2.0
// SegmentWriter (segment_store.h): appends records to one open segment
// through an io_uring, or plain pwrite where io_uring is refused.
#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/backing/disk_layout.h"
#include "core/segments/segment_store.h"
#include "core/util/log.h"

namespace kvfs {

SegmentWriter::SegmentWriter(SegmentStore* store, uint64_t id, int fd)
    : store_(store), fs_(store->fs_), id_(id), fd_(fd), ring_(new io_uring) {
  // A ring writes past the BackingFs: only over the system calls themselves.
  if (!fs_->kernel_direct() || io_uring_queue_init(64, ring_.get(), 0) != 0) ring_.reset();
}

SegmentWriter::~SegmentWriter() {
  auto op = store_->track("close of segment " + std::to_string(id_));
  (void)reap(true);
  if (ring_) io_uring_queue_exit(ring_.get());
  // Give back the preallocated tail; a crash leaves zeros there, which a
  // scan reads as the end of the segment.
  const uint64_t end = std::min(off_, keep_);
  const bool trimmed = fs_->ftruncate(fd_, end) == 0;
  // Sealed (disk_layout.h): nothing is appended to it again, so a peer that
  // has read it to its end never opens it again. After the trim, which on
  // NFS writes back every byte first, so a peer that sees the seal sees
  // them. A seal that fails costs only that saving.
  if (const int r = trimmed && end > 0 ? fs_->fchmod(fd_, layout::kSealedSegmentMode) : 0; r < 0) {
    static LogLimiter limit;
    uint64_t held = 0;
    if (limit.allow(&held))
      spdlog::warn("cannot seal segment {} (chmod): {} ({} more like it)", id_, std::strerror(-r),
                   held);
  }
  (void)fs_->close(fd_);
  std::string path;
  {
    std::unique_lock l(store_->mu_);
    if (auto it = store_->segs_.find(id_); it != store_->segs_.end()) {
      it->second.open = false;
      if (trimmed) {
        it->second.bytes = end;
        it->second.valid = std::min(it->second.valid, end);
      }
      // Nothing was ever committed in it: no one can point into it.
      if (trimmed && end == 0) {
        path = it->second.path;
        store_->segs_.erase(it);
      }
    }
  }
  if (const int r = path.empty() ? 0 : fs_->unlink(path); r < 0)
    spdlog::warn("cannot delete the empty segment {}: {}", path, std::strerror(-r));
  // Sealed: out of the head, so peers read it once more, to its end.
  store_->note_closed(id_);
}

namespace {
// A run is queued once it holds kRunBytes (the kernel splits it into the
// backing fs's requests, all in flight together), or this many buffers.
constexpr size_t kRunBuffers = 256;
}  // namespace

Status SegmentWriter::submit(const char* data, size_t len, uint64_t off) {
  if (!ring_) {
    auto op = store_->track("write to segment " + std::to_string(id_));
    size_t done = 0;
    while (done < len) {
      if (pause_.wait && since_pause_ >= kRunBytes) {
        since_pause_ = 0;
        pause_.wait();
      }
      const ssize_t r = fs_->pwrite(fd_, data + done, len - done, off + done);
      if (r <= 0) return Status::FromErrno(r < 0 ? static_cast<int>(-r) : ENOSPC, "write segment");
      done += static_cast<size_t>(r);
      since_pause_ += static_cast<size_t>(r);
    }
    return Status::OK();
  }
  if (!run_.empty() &&
      (off != run_off_ + run_len_ || run_.size() >= kRunBuffers || run_len_ + len > kRunBytes))
    KVFS_RETURN_IF_ERROR(queue_run());
  if (run_.empty()) run_off_ = off;
  run_.push_back({const_cast<char*>(data), len});
  run_len_ += len;
  return Status::OK();
}

Status SegmentWriter::queue_run() {
  if (run_.empty()) return Status::OK();
  if (pause_.wait) {
    if (pause_.bounded && pause_.bounded())
      while (inflight_ >= kRunsInFlight) KVFS_RETURN_IF_ERROR(reap(false));
    pause_.wait();
  }
  io_uring_sqe* sqe = io_uring_get_sqe(ring_.get());
  if (sqe == nullptr) {
    // The submission queue is full: hand it to the kernel, make room.
    int r = io_uring_submit(ring_.get());
    if (r < 0) return Status::FromErrno(-r, "io_uring submit");
    KVFS_RETURN_IF_ERROR(reap(false));
    sqe = io_uring_get_sqe(ring_.get());
  }
  queued_iovs_.push_back(std::move(run_));
  run_.clear();
  const std::vector<iovec>& v = queued_iovs_.back();
  io_uring_prep_writev(sqe, fd_, v.data(), static_cast<unsigned>(v.size()), run_off_);
  io_uring_sqe_set_data64(sqe, run_len_);
  run_len_ = 0;
  ++inflight_;
  return Status::OK();
}

Status SegmentWriter::reap(bool all) {
  if (!ring_) return Status::OK();
  // Tracked from here: io_uring_submit may run a write inline (a FUSE or NFS
  // backing blocks there), and a stalled dir must show as stalled.
  auto op = store_->track("write to segment " + std::to_string(id_));
  // Whatever was gathered or prepared but not yet handed to the kernel must
  // go first, or waiting for its completion would never end.
  if (all) KVFS_RETURN_IF_ERROR(queue_run());
  if (int r = io_uring_submit(ring_.get()); r < 0) return Status::FromErrno(-r, "io_uring submit");
  unsigned want = all ? inflight_ : std::min(inflight_, 1u);
  if (want == 0) return Status::OK();
  Status st;
  for (unsigned i = 0; i < want; ++i) {
    io_uring_cqe* cqe = nullptr;
    int r = io_uring_wait_cqe(ring_.get(), &cqe);
    if (r < 0) return Status::FromErrno(-r, "io_uring wait");
    uint64_t expect = io_uring_cqe_get_data64(cqe);
    int res = cqe->res;
    io_uring_cqe_seen(ring_.get(), cqe);
    --inflight_;
    if (res < 0 && st.ok()) st = Status::FromErrno(-res, "write segment " + std::to_string(id_));
    if (res >= 0 && uint64_t(res) != expect && st.ok())
      st = Status::NoSpace("short write to segment " + std::to_string(id_));
  }
  return st;
}

Status SegmentWriter::append(RecordType type, std::vector<RecordEntry>& entries,
                             const std::vector<Block>& blocks, const FillFn& fill) {
  if (!failed_.ok()) return failed_;
  std::string meta;
  encode_entries(entries, &meta);
  RecordHeader h;
  h.type = type;
  h.meta_len = static_cast<uint32_t>(meta.size());
  h.nblocks = static_cast<uint32_t>(blocks.size());
  for (const auto& b : blocks) h.payload_len += align_up(b.len);
  std::vector<uint64_t> offs;
  uint64_t pos = off_ + h.payload_start();
  for (const auto& b : blocks) {
    offs.push_back(pos);
    pos += align_up(b.len);
  }
  if (fill) {
    fill(offs);
    meta.clear();
    encode_entries(entries, &meta);
    if (meta.size() != h.meta_len) return Status::Invalid("record entries changed length");
  }
  h.meta_hash = hash_bytes(meta.data(), meta.size());

  const size_t head_len = h.payload_start();
  BufRef head;
  std::unique_ptr<char, decltype(&std::free)> big(nullptr, &std::free);
  char* hp;
  if (head_len <= kBlockSize) {
    head = BufferPool::allocate(head_len);
    hp = head->data();
  } else {
    big.reset(static_cast<char*>(std::aligned_alloc(kAlign, head_len)));
    if (!big) return Status::NoSpace("out of memory for a record header");
    hp = big.get();
  }
  std::memset(hp, 0, head_len);
  encode_header(h, hp);
  std::memcpy(hp + kRecordHeaderSize, meta.data(), meta.size());

  const uint64_t start = off_;
  // io_uring_submit may run a write inline (a FUSE or NFS backing blocks there).
  auto op = store_->track("write to segment " + std::to_string(id_));
  // Only data is written ahead of a preallocation: a metadata record (a page
  // or two, written without waiting for room under the cap) would otherwise
  // take a whole step, a new segment's first record 4 MiB of it.
  Status st = blocks.empty() ? Status::OK() : preallocate(pos);
  if (st.ok()) st = submit(hp, head_len, start);
  for (size_t i = 0; st.ok() && i < blocks.size(); ++i) {
    st = submit(blocks[i].buf->data(), align_up(blocks[i].len), offs[i]);
    pinned_.push_back(blocks[i].buf);
  }
  // A full run goes to the kernel now, so the writes overlap the next
  // records' encoding; smaller ones wait for more, or for sync().
  if (ring_ && st.ok() && run_len_ >= kRunBytes) st = queue_run();
  if (ring_ && st.ok() && inflight_ > 0) {
    int r = io_uring_submit(ring_.get());
    if (r < 0) st = Status::FromErrno(-r, "io_uring submit");
  }
  if (big && st.ok()) st = reap(true);  // the big header buffer dies here
  if (head) headers_.push_back(std::move(head));
  if (!st.ok()) {
    // Never written now (the big header is gone): the batch failed, and
    // the file is cut back before it anyway (discard_from).
    run_.clear();
    run_len_ = 0;
    failed_ = st;
    return st;
  }
  off_ = pos;
  state_.end = off_;
  ++state_.records;
  for (const auto& e : entries) state_.add_seq(e.snap.seq);
  return Status::OK();
}

// Writes inside the file's size let ext4 run O_DIRECT writes in parallel
// instead of serialising size changes, so the file is extended ahead of the
// writes, a step at a time (bounded waste: the open segment's unused step,
// counted in the segment's size and given back when it is closed).
Status SegmentWriter::preallocate(uint64_t end) {
  if (end <= allocated_ || no_fallocate_) return Status::OK();
  const uint64_t step = store_->prealloc_step();
  const uint64_t want = align_up(end, step);
  auto op = store_->track("fallocate of segment " + std::to_string(id_));
  if (const int r = fs_->fallocate(fd_, allocated_, want - allocated_); r < 0) {
    if (r == -ENOSPC || r == -EDQUOT)
      return Status::NoSpace("preallocating segment " + std::to_string(id_));
    no_fallocate_ = true;  // not supported here (some NFS): plain appends
    return Status::OK();
  }
  allocated_ = want;
  store_->note_size(id_, allocated_);
  return Status::OK();
}

Status SegmentWriter::drain() {
  if (!failed_.ok()) return failed_;
  Status st = reap(true);
  if (!st.ok()) failed_ = st;
  return st;
}

Status SegmentWriter::sync() {
  Status st = reap(true);
  headers_.clear();
  pinned_.clear();
  queued_iovs_.clear();
  if (st.ok() && !failed_.ok()) st = failed_;
  if (st.ok()) {
    auto op = store_->track("fdatasync of segment " + std::to_string(id_));
    if (const int r = fs_->fdatasync(fd_); r < 0)
      st = Status::FromErrno(-r, "fdatasync segment " + std::to_string(id_));
    // Removed under us (the backing dir wiped): the data is in a file no
    // one can open again, so it is not durable.
    struct stat sst;
    if (st.ok() && fs_->fstat(fd_, &sst) == 0 && sst.st_nlink == 0)
      st = Status::IOError("segment " + std::to_string(id_) + " was deleted from the backing dir");
  }
  if (!st.ok()) failed_ = st;
  store_->note_size(id_, off_);
  if (st.ok()) {
    std::unique_lock l(store_->mu_);
    if (auto it = store_->segs_.find(id_); it != store_->segs_.end()) {
      it->second.valid = off_;
      it->second.min_seq = state_.min_seq;
      it->second.max_seq = state_.max_seq;
    }
  }
  // Durable now: peers may read up to here (disk_layout.h, NodeHead).
  if (st.ok()) store_->publish_head();
  return st;
}

}  // namespace kvfs
