// SPDX-License-Identifier: Apache-2.0
// Notifier: tells the kernel to forget names and pages that kvfs removed on
// its own (eviction), from a thread of its own.
//
// fuse_lowlevel_notify_inval_entry may block until the kernel has taken the
// directory's lock, which a FUSE request of that directory may hold while it
// waits for kvfs: so notifications are never sent from a request handler or
// with a core lock held, only queued. Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

struct fuse_session;

namespace kvfs {

class Notifier {
 public:
  explicit Notifier(fuse_session* se);
  ~Notifier();
  void start();
  void stop();
  void removed(uint64_t parent, const std::string& name, uint64_t ino);

 private:
  struct Item {
    uint64_t parent, ino;
    std::string name;
  };
  void run();
  fuse_session* const se_;
  std::mutex mu_;
  std::condition_variable cv_;  // guarded by mu_
  std::deque<Item> q_;          // guarded by mu_
  bool stop_ = false;           // guarded by mu_
  std::thread th_;
};

}  // namespace kvfs
