// SPDX-License-Identifier: Apache-2.0
// OpenCounts: the handles open on one file and whether the kernel's page
// cache of it may be kept at the next open. Owned by FileOps
// (core/store/file_ops.h: open, close(), release, write, truncate), which
// alone calls its changes (and NameOps's setattr, through FileOps's
// truncate and an ftruncate's handle); the other parts (the
// flush, the evictor, the namespace, the block slots) read it.
//
// Three counts: handles (any open), writers (handles opened for writing) and
// active writers (writable handles not sealed: a client's close() seals its
// handle, a write or ftruncate through it after that opens it again). While
// a file has an active writer it is incomplete, and only fsync or unmount
// may commit it.
//
// Not thread-safe: it lives in an Inode and every call requires Inode::mu.
#pragma once

#include <cassert>
#include <cstdint>

namespace kvfs {

class OpenCounts {
 public:
  // --- reads ---
  uint32_t handles() const { return handles_; }
  uint32_t writers() const { return writers_; }
  uint32_t active_writers() const { return active_; }

  // --- changes (the store's file operations) ---
  // An open by inode number: whether the kernel's cached pages may stay (a
  // reader, no writer open, nothing written or truncated since the last
  // open). Close-to-open, as NFS does: pages the kernel cached while
  // writers on other descriptors raced (an O_TRUNC against a write in
  // flight) are dropped once the file is opened again, so a reader gets
  // the daemon's bytes. From now on they may stay, until the next change.
  bool keep_kernel_cache(bool writable) {
    const bool keep = !writable && writers_ == 0 && cache_ok_;
    cache_ok_ = true;
    return keep;
  }
  void opened(bool writable) {
    ++handles_;
    if (writable) ++writers_, ++active_;
  }
  // A writable handle sealed by close(), and one written through again.
  void sealed() {
    assert(active_ > 0);
    --active_;
  }
  void unsealed() { ++active_; }
  // A handle released (sealed: its close() came first). True when it was
  // the last writer.
  bool released(bool writable, bool was_sealed) {
    assert(handles_ > 0);
    --handles_;
    if (!writable) return false;
    if (!was_sealed) sealed();
    assert(writers_ > 0);
    return --writers_ == 0;
  }
  // Written or truncated: the kernel's cached pages are stale at the next open.
  void data_changed() { cache_ok_ = false; }

 private:
  uint32_t handles_ = 0;
  uint32_t writers_ = 0;
  uint32_t active_ = 0;
  bool cache_ok_ = false;
};

}  // namespace kvfs
