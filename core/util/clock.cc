// SPDX-License-Identifier: Apache-2.0
#include "core/util/clock.h"

#include <ctime>

namespace kvfs {
namespace {

class SystemClock final : public Clock {
 public:
  int64_t now_ns() const override {
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  }
};

}  // namespace

const Clock& system_clock() {
  static const SystemClock c;
  return c;
}

ManualClock::ManualClock() : t_(system_clock().now_ns()) {}

}  // namespace kvfs
