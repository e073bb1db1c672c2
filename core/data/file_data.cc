// SPDX-License-Identifier: Apache-2.0
#include "core/data/file_data.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/ram/ram_tier.h"
#include "core/segments/segment_store.h"
#include "core/segments/segment_windows.h"
#include "core/util/log.h"

namespace kvfs {
namespace {
LogLimiter g_read_err_log;
}  // namespace

void zero_tail(Buffer& b, uint32_t len) {
  const size_t end = std::min<size_t>(align_up(len), b.capacity());
  if (end > len) std::memset(b.data() + len, 0, end - len);
}

InodeSnapshot FileData::snapshot_locked(const Inode& in, uint64_t parent, std::string_view name) {
  InodeSnapshot s;
  s.ino = in.ino;
  s.parent = parent;
  s.name = std::string(name);
  s.mode = in.mode;
  s.uid = in.uid;
  s.gid = in.gid;
  s.size = in.size;
  s.atime_ns = in.atime_ns;
  s.mtime_ns = in.mtime_ns;
  s.ctime_ns = in.ctime_ns;
  s.symlink = in.symlink;
  s.rdev = in.rdev;
  s.xattrs = in.xattrs;
  for (uint32_t i = 0; i < in.blocks.size(); ++i) {
    const BlockSlot& b = in.blocks[i];
    if (!b.buf && b.ext.valid()) s.extents.push_back({i, b.ext});
  }
  return s;
}

bool FileData::ready_to_flush_locked(const Inode& in) {
  return in.dirty() && in.linked.load() && (in.opens.active_writers() == 0 || in.flush.syncing());
}

bool FileData::unused_locked(const Inode& in) {
  return !in.linked.load() && in.opens.handles() == 0 &&
         (!in.kept_for_kernel || in.nlookup.load() == 0);
}

FileData::Source FileData::source_locked(Inode& in, uint32_t idx) {
  Source src;
  if (idx >= in.blocks.size()) return src;
  BlockSlot& s = in.blocks[idx];
  src.len = s.len;
  if (s.buf) {
    s.lent = true;
    src.dirty = s.buf;
  } else if (s.ext.valid()) {
    src.ext = s.ext;
  }
  return src;
}

bool FileData::move_extents_locked(Inode& in, const InodeSnapshot& now) {
  if (!now.extents.empty() && now.extents.back().idx >= in.blocks.size()) return false;
  if (now.size != in.size) return false;
  std::vector<Extent> exts(in.blocks.size());
  for (const BlockExtent& b : now.extents) exts[b.idx] = b.ext;
  for (size_t i = 0; i < exts.size(); ++i) {
    const Extent& o = in.blocks[i].ext;
    if (o.valid() != exts[i].valid() || o.len != exts[i].len || o.hash != exts[i].hash)
      return false;
  }
  for (size_t i = 0; i < exts.size(); ++i) in.blocks[i].ext = exts[i];
  return true;
}

void FileData::free_locked(Inode& in) {
  in.evicted = true;
  uint64_t charge = 0;
  for (BlockSlot& s : in.blocks) {
    charge += s.charge;
    if (s.ext.valid()) {
      ram_->erase(ExtentKey{s.ext.seg, s.ext.off});
      segs_->remove_live(s.ext);
    }
  }
  in.blocks.clear();
  in.blocks.shrink_to_fit();
  in.dirty_charge = 0;
  if (charge) ram_->release_dirty(charge);
}

void FileData::cut_locked(Inode& in, size_t keep) {
  uint64_t released = 0;
  for (size_t i = keep; i < in.blocks.size(); ++i) {
    released += in.blocks[i].charge;
    if (in.blocks[i].ext.valid()) segs_->remove_live(in.blocks[i].ext);
  }
  if (in.blocks.size() > keep) in.blocks.resize(keep);
  in.dirty_charge -= released;
  if (released) ram_->release_dirty(released);
}

void FileData::set_dirty_locked(Inode& in, BlockSlot& s, BufRef buf) {
  const uint32_t used = static_cast<uint32_t>(buf->capacity());
  in.dirty_charge += used;
  in.dirty_charge -= s.charge;
  if (s.charge) ram_->release_dirty(s.charge);
  s.charge = used;
  s.buf = std::move(buf);
  s.lent = false;
}

void FileData::flushed_locked(Inode& in, uint32_t idx, const Extent& ext, const BufRef& buf) {
  if (idx >= in.blocks.size()) return;
  BlockSlot& s = in.blocks[idx];
  if (s.ext.valid()) segs_->remove_live(s.ext);
  segs_->add_live(ext);
  s.ext = ext;
  if (s.buf == buf) {
    s.buf.reset();
    in.dirty_charge -= s.charge;
    ram_->clean_dirty(ExtentKey{ext.seg, ext.off}, buf, s.charge);
    s.charge = 0;
  }
}

namespace {
bool keeps_old(const BlockSlot& s, uint32_t bo, uint32_t n) {
  return s.len > 0 && !(bo == 0 && n >= s.len);
}
}  // namespace

Extent FileData::kept_by_write_locked(const Inode& in, uint32_t idx, uint32_t bo, uint32_t n) {
  if (idx >= in.blocks.size()) return Extent{};
  const BlockSlot& s = in.blocks[idx];
  return keeps_old(s, bo, n) && !s.buf ? s.ext : Extent{};
}

uint64_t FileData::write_locked(Inode& in, uint32_t idx, uint32_t bo, const char* data, uint32_t n,
                                const ConstBufRef& old) {
  if (idx >= in.blocks.size()) in.blocks.resize(idx + 1);
  BlockSlot& s = in.blocks[idx];
  const uint32_t new_len = std::max(s.len, bo + n);
  uint64_t used = 0;
  if (s.buf && !s.lent && s.buf.use_count() == 1 && s.buf->capacity() >= align_up(new_len)) {
    // Nobody else holds this buffer (no reply, no flush): change it in place.
    if (bo > s.len) std::memset(s.buf->data() + s.len, 0, bo - s.len);
    std::memcpy(s.buf->data() + bo, data, n);
  } else {
    BufRef nb = BufferPool::allocate(new_len);
    uint32_t have = 0;
    if (keeps_old(s, bo, n)) {
      const ConstBufRef src = s.buf ? ConstBufRef(s.buf) : old;
      if (src) {
        std::memcpy(nb->data(), src->data(), s.len);
        have = s.len;
      }
    }
    if (bo > have) std::memset(nb->data() + have, 0, bo - have);
    std::memcpy(nb->data() + bo, data, n);
    used = nb->capacity();
    set_dirty_locked(in, s, std::move(nb));
  }
  s.len = new_len;
  zero_tail(*s.buf, new_len);
  return used;
}

Extent FileData::kept_by_truncate_locked(const Inode& in, uint64_t size, uint32_t* idx) {
  if (size >= in.size) return Extent{};
  const size_t nblocks = static_cast<size_t>((size + kBlockSize - 1) / kBlockSize);
  if (nblocks == 0 || nblocks > in.blocks.size()) return Extent{};
  const BlockSlot& s = in.blocks[nblocks - 1];
  const uint32_t keep = static_cast<uint32_t>(size - (nblocks - 1) * kBlockSize);
  if (s.len <= keep || s.buf) return Extent{};
  *idx = uint32_t(nblocks - 1);
  return s.ext;
}

void FileData::truncate_locked(Inode& in, uint64_t size, const ConstBufRef& old) {
  if (size == in.size) return;
  if (size < in.size) {
    const size_t nblocks = static_cast<size_t>((size + kBlockSize - 1) / kBlockSize);
    cut_locked(in, nblocks);
    // Blocks past the slots are holes (a file grown by truncate): nothing
    // to cut there.
    if (nblocks > 0 && nblocks <= in.blocks.size()) {
      BlockSlot& s = in.blocks[nblocks - 1];
      const uint32_t keep = static_cast<uint32_t>(size - (nblocks - 1) * kBlockSize);
      if (s.len > keep) {
        if (s.buf && !s.lent && s.buf.use_count() == 1) {
          std::memset(s.buf->data() + keep, 0, s.len - keep);
        } else {
          const ConstBufRef src = s.buf ? ConstBufRef(s.buf) : old;
          BufRef nb = BufferPool::allocate(keep);
          if (src)
            std::memcpy(nb->data(), src->data(), keep);
          else
            std::memset(nb->data(), 0, keep);
          ram_->charge_dirty(nb->capacity());
          set_dirty_locked(in, s, std::move(nb));
        }
        s.len = keep;
        zero_tail(*s.buf, keep);
      }
    }
    ++in.trunc_gen;
  }
  in.size = size;
}

Status FileData::lock_with_kept(Inode& in, std::unique_lock<std::mutex>* g, const KeptFn& kept,
                                ConstBufRef* old) {
  Extent have;
  for (;;) {
    *g = std::unique_lock(in.mu);
    uint32_t idx = 0;
    const Extent e = kept(in, &idx);
    if (!e.valid()) {
      old->reset();
      return Status::OK();
    }
    if (*old && have == e) return Status::OK();
    have = e;
    *old = ram_->lookup(ExtentKey{e.seg, e.off});
    if (*old) return Status::OK();
    g->unlock();
    // A flush or another truncate may move the block meanwhile: the loop
    // checks the extent again, and a moved one is read again.
    if (Status st = read_block(in.ino, idx, e, old); !st.ok()) {
      old->reset();
      return st;
    }
  }
}

Status FileData::read_block(uint64_t ino, uint32_t idx, const Extent& ext, ConstBufRef* out,
                            bool prefetch) {
  const ExtentKey key{ext.seg, ext.off};
  std::shared_ptr<Flight> f;
  {
    std::unique_lock l(flight_mu_);
    if (auto it = flights_.find(key); it != flights_.end()) {
      if (prefetch) return Status::OK();  // being read already
      f = it->second;
      f->joined = true;
      // The reader is bounded by the backing dir's deadline, so is this.
      flight_cv_.wait(l, [&] { return f->done; });
      joined_reads_.fetch_add(1, std::memory_order_relaxed);
      if (f->st.ok()) *out = f->buf;
      return f->st;
    }
    // Read and cached by another caller since ours missed: no second read
    // (it inserts into RAM before it ends its flight, so one of the two is
    // seen here).
    if (prefetch) {
      if (ram_->contains(key)) return Status::OK();
    } else if (ConstBufRef hit = ram_->peek(key)) {
      *out = std::move(hit);
      return Status::OK();
    }
    f = std::make_shared<Flight>();
    f->ino = ino;
    f->prefetch = prefetch;
    flights_.emplace(key, f);
  }
  BufRef b = BufferPool::allocate(align_up(ext.len));
  // A window read ahead along the segment may hold the bytes (checked
  // against ext's hash there); else read the extent itself, unless the
  // window's read already waited out the backing dir's deadline.
  Status st;
  bool window_timed_out = false;
  const bool from_window = windows_ && windows_->take(ext, b->data(), &window_timed_out);
  if (window_timed_out)
    st = Status::TimedOut("read of segment " + std::to_string(ext.seg) +
                          ": no answer from the backing dir within io_timeout (read ahead)");
  else if (!from_window)
    st = segs_->read_extent(ext, b);
  backing_reads_.fetch_add(1, std::memory_order_relaxed);
  if (!st.ok()) {
    (st.code() == Status::Code::kCorruption ? checksum_errors_ : read_errors_).fetch_add(1);
    uint64_t held = 0;
    if (g_read_err_log.allow(&held))
      spdlog::error("read of inode {} block {} failed: {} ({} similar errors not shown)", ino, idx,
                    st.ToString(), held);
    b.reset();
  } else {
    backing_read_bytes_.fetch_add(ext.len, std::memory_order_relaxed);
    zero_tail(*b, ext.len);
    ram_->insert(key, b, prefetch ? RamTier::Admit::kPrefetch : RamTier::Admit::kRead);
  }
  bool joined;
  bool others_ahead = false;  // another file's blocks are being read ahead
  {
    std::lock_guard l(flight_mu_);
    f->done = true;
    f->st = st;
    f->buf = b;
    joined = f->joined;
    flights_.erase(key);
    if (windows_)
      for (const auto& [k, o] : flights_)
        if (o->prefetch && o->ino != ino) others_ahead = true;
  }
  flight_cv_.notify_all();
  // A client took the bytes straight from this read: the prefetch was used.
  if (prefetch && joined && st.ok()) ram_->claim_prefetched(key);
  // Read along the segment when a client waited for this block (its own
  // cold read, or a read-ahead it caught up with: read-ahead within files
  // is not enough for it) or the windows had it (they keep up: go on).
  // Not while other files are being read ahead: a client that looked its
  // whole prefix up first has the link busy with exactly its files, and a
  // window past the prefix would only slow them.
  if (windows_ && st.ok() && (!prefetch || joined || from_window) && !others_ahead)
    windows_->after_read(ext);
  if (st.ok()) *out = std::move(b);
  return st;
}

}  // namespace kvfs
