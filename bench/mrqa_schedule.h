// SPDX-License-Identifier: Apache-2.0
// The schedule of LMCache's multi-round QA benchmark (multi-round-qa.py's
// UserSessionManager), shared by the file-level replay (kvfs-bench mrqa)
// and the RAM tier's replay (kvfs-core-bench mrqa-tier): which user sends
// which round, with how long a prompt, in the order the requests start.
#pragma once

#include <cstdint>
#include <vector>

namespace kvfs::bench {

struct Request {
  uint32_t user;
  uint32_t round;
  uint64_t tokens;  // prompt length
};

struct Workload {
  uint64_t users = 15, rounds = 20, sys = 1000, ctx = 1000, answer = 100, question = 32;
  double qps = 2, time = 1200;
};

// Requests finishing at once (the replay runs them time-compressed).
std::vector<Request> schedule(const Workload& w);

}  // namespace kvfs::bench
