// SPDX-License-Identifier: Apache-2.0
#include "core/util/clock.h"

#include <ctime>

namespace kvfs {
namespace {

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class SystemClock final : public Clock {
 public:
  int64_t now_ns() const override {
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  }
  int64_t mono_ns() const override { return steady_ns(); }
};

}  // namespace

const Clock& system_clock() {
  static const SystemClock c;
  return c;
}

ManualClock::ManualClock() : t_(system_clock().now_ns()) {}

int64_t ManualClock::mono_ns() const {
  return steady_ns() + mono_offset_.load(std::memory_order_relaxed);
}

}  // namespace kvfs
