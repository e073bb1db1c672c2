// SPDX-License-Identifier: Apache-2.0
// main() for the mount test binaries: GoogleTest plus a watchdog that, if the
// binary runs past KVFS_TEST_TIMEOUT seconds (default 600), kills every kvfs
// daemon it started, detaches their mounts and aborts, so that a hung daemon
// fails CI quickly instead of hanging it.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

namespace kvfs::test {
void emergency_cleanup();
}

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  int secs = 600;
  if (const char* e = std::getenv("KVFS_TEST_TIMEOUT")) secs = std::atoi(e);
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread watchdog([&] {
    std::unique_lock l(mu);
    if (!cv.wait_for(l, std::chrono::seconds(secs), [&] { return done; })) {
      std::fprintf(stderr, "watchdog: tests ran past %d s; killing kvfs daemons\n", secs);
      kvfs::test::emergency_cleanup();
      std::abort();
    }
  });
  int rc = RUN_ALL_TESTS();
  {
    std::lock_guard l(mu);
    done = true;
  }
  cv.notify_all();
  watchdog.join();
  return rc;
}
