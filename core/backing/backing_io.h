// SPDX-License-Identifier: Apache-2.0
// BackingIo: deadlines on the backing directory, and the stall detector.
//
// The backing dir is usually NFS, and an NFS server can stop answering for
// minutes (failover, a lost network); a thread inside a read() there cannot
// be interrupted. So nothing a client waits for makes a backing call on the
// client's own thread:
//
//   run()   hands the call to an I/O thread and waits at most io_timeout; past
//           that the caller gets TimedOut (EIO at the FUSE edge) and the call
//           is left to finish in the background. The call owns (shares) every
//           buffer and file it touches, so nothing is reused under it.
//   track() marks a backing call that a background thread (flusher, evictor)
//           makes itself: nobody waits for it directly, but a client waiting
//           on that thread's progress asks gave_up() for its own deadline.
//
// The backing dir is "stalled" while any call has been in flight longer than
// io_timeout. A monitor thread logs the start of a stall once (with the call
// that is stuck) and its end once (with how long it lasted).
//
// Thread-safe. Its one mutex is a leaf: no other lock is taken while it is
// held, and no backing call is made under it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "core/util/status.h"

namespace kvfs {

struct BackingIoStats {
  bool stalled = false;
  uint64_t stalls = 0;         // stalls that began since mount
  double stalled_seconds = 0;  // their total length (the current one so far)
  uint64_t timeouts = 0;       // client calls that gave up (EIO)
  uint64_t in_flight = 0;      // backing calls not yet returned
  double oldest_s = 0;         // age of the oldest one
  uint64_t abandoned = 0;      // calls whose caller left, still running
};

class BackingIo {
 public:
  using Clock = std::chrono::steady_clock;

  // threads: how many calls run() overlaps (cold reads of several clients).
  BackingIo(double timeout_s, unsigned threads);
  // Stops the monitor and the idle I/O threads. A thread still inside a
  // backing call is detached: the process is exiting (see Close()).
  ~BackingIo();
  // Stops the monitor and lets idle I/O threads exit; later run() calls
  // fail. Idempotent (Close() calls it: nothing may log after the daemon's
  // logger is gone).
  void stop();
  BackingIo(const BackingIo&) = delete;
  BackingIo& operator=(const BackingIo&) = delete;

  // Runs fn on an I/O thread; returns its status, or TimedOut once the
  // deadline passes (fn goes on running; the caller must not share anything
  // with it that it does not own a reference to).
  Status run(const std::string& what, std::function<Status()> fn);

  // Marks a backing call made on this thread until the Op is destroyed.
  class Op {
   public:
    Op() : io_(nullptr), id_(0) {}  // marks nothing
    Op(Op&& o) noexcept : io_(o.io_), id_(o.id_) { o.io_ = nullptr; }
    Op(const Op&) = delete;
    ~Op();

   private:
    friend class BackingIo;
    Op(BackingIo* io, uint64_t id) : io_(io), id_(id) {}
    BackingIo* io_;
    uint64_t id_;
  };
  [[nodiscard]] Op track(std::string what);

  // For a client waiting (since `since`) on background backing calls: true
  // once it has waited io_timeout and the backing dir is stalled.
  bool gave_up(Clock::time_point since) const;
  bool stalled() const;
  // Counts a client call that gave up for a stalled backing dir.
  void count_timeout();

  double timeout() const;
  void set_timeout(double seconds);  // checked by StoreConfig::validate() (config.h)
  BackingIoStats stats() const;

 private:
  // Everything the I/O threads touch, shared with them: a thread stuck in a
  // backing call when the owner goes away must not outlive what it uses.
  struct State;
  void end(uint64_t id);
  std::shared_ptr<State> s_;
  std::thread monitor_;
};

}  // namespace kvfs
