// SPDX-License-Identifier: Apache-2.0
// Logging: spdlog's default logger, set up once by the daemon (log_file if
// given, else stderr in the foreground, syslog in the background). Nothing is logged per I/O at the
// default level (info); every error a client sees as EIO or ENOSPC is logged
// once, through LogLimiter, so a failing disk cannot flood the log.
#pragma once

#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cstdint>

namespace kvfs {

// Lets one message through per interval; counts what it held back.
// Thread-safe (lock-free).
class LogLimiter {
 public:
  explicit LogLimiter(std::chrono::seconds interval = std::chrono::seconds(10))
      : interval_ns_(std::chrono::duration_cast<std::chrono::nanoseconds>(interval).count()) {}
  // True if the caller should log now; *suppressed gets the count held back.
  bool allow(uint64_t* suppressed) {
    int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
    int64_t last = last_.load(std::memory_order_relaxed);
    if (last != 0 && now - last < interval_ns_) {
      held_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    if (!last_.compare_exchange_strong(last, now)) {
      held_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    *suppressed = held_.exchange(0);
    return true;
  }

 private:
  int64_t interval_ns_;
  std::atomic<int64_t> last_{0};
  std::atomic<uint64_t> held_{0};
};

}  // namespace kvfs
