// SPDX-License-Identifier: Apache-2.0
#include "fs/notifier.h"

#include "fs/fuse_ops.h"

namespace kvfs {

Notifier::Notifier(fuse_session* se) : se_(se) {}
Notifier::~Notifier() {
  stop();
}

void Notifier::start() {
  th_ = std::thread([this] { run(); });
}

void Notifier::stop() {
  {
    std::lock_guard l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (th_.joinable()) th_.join();
}

void Notifier::removed(uint64_t parent, const std::string& name, uint64_t ino) {
  {
    std::lock_guard l(mu_);
    if (stop_) return;
    q_.push_back({parent, ino, name});
  }
  cv_.notify_one();
}

void Notifier::run() {
  std::unique_lock l(mu_);
  for (;;) {
    cv_.wait(l, [&] { return stop_ || !q_.empty(); });
    if (stop_) return;
    Item it = std::move(q_.front());
    q_.pop_front();
    l.unlock();
    // -ENOENT means the kernel had nothing cached: nothing to do.
    (void)fuse_lowlevel_notify_inval_entry(se_, it.parent, it.name.data(), it.name.size());
    (void)fuse_lowlevel_notify_inval_inode(se_, it.ino, 0, 0);
    l.lock();
  }
}

}  // namespace kvfs
