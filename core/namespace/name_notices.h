// SPDX-License-Identifier: Apache-2.0
// NameNotices: tells whoever serves the kernel (fs/: FUSE's inval_entry and
// inval_inode) that a name went away behind a client's back, so that the
// kernel's caches of it go too: a file evicted for room or by kvfs-admin, a
// file dropped because its data failed a checksum, a file removed because
// another node changed or unlinked it. The parts that remove names
// (Evictor, PeerImports, BlockStore's read path) tell it; fs/ listens.
//
// Thread-safe. mu_ is a leaf; the listener is called with no lock held (it
// writes to /dev/fuse, which may wait on the kernel).
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

namespace kvfs {

class NameNotices {
 public:
  // Told (parent, name, ino) after a name was removed.
  using Listener = std::function<void(uint64_t parent, const std::string& name, uint64_t ino)>;

  // May be set or cleared while the store runs (the mount sets it once its
  // FUSE session exists, and clears it before the session goes).
  void set_listener(Listener fn) {
    std::lock_guard l(mu_);
    fn_ = std::move(fn);
  }
  // The name (parent, name) of inode ino is gone; calls the listener, if any.
  void gone(uint64_t parent, const std::string& name, uint64_t ino) {
    Listener fn;
    {
      std::lock_guard l(mu_);
      fn = fn_;
    }
    if (fn) fn(parent, name, ino);
  }

 private:
  std::mutex mu_;
  Listener fn_;  // guarded by mu_
};

}  // namespace kvfs
