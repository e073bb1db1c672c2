// SPDX-License-Identifier: Apache-2.0
// kvfs-admin's exit statuses, and Failure: every error is thrown as one, and
// main() (admin_main.cc) prints its message and exits with its code.
//
// Exit status: 0 ok, 1 usage, 2 not a kvfs mount / cannot reach the daemon /
// backing dir unusable, 3 the daemon refused the request (its errno is shown),
// 4 fsck found problems.
#pragma once

#include <cstring>
#include <string>
#include <utility>

namespace kvfs::admin {

inline constexpr int kExitOk = 0;
inline constexpr int kExitUsage = 1;
inline constexpr int kExitUnreachable = 2;
inline constexpr int kExitRefused = 3;
inline constexpr int kExitProblems = 4;

// Every failure ends here: main() prints the message and exits with code.
struct Failure {
  int code;
  std::string msg;
};

[[noreturn]] inline void fail(int code, std::string msg) {
  throw Failure{code, std::move(msg)};
}

inline std::string errno_text(int e) {
  return std::strerror(e);
}

}  // namespace kvfs::admin
