// SPDX-License-Identifier: Apache-2.0
// NameNotices: the names removed behind the kernel's back reach whoever
// listens, with no lock held while it runs.
#include "core/namespace/name_notices.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvfs {
namespace {

struct Notice {
  uint64_t parent;
  std::string name;
  uint64_t ino;
};

TEST(NameNotices, ReachTheListenerWhileOneIsSet) {
  NameNotices n;
  n.gone(1, "before", 2);  // nobody listens yet: dropped
  std::vector<Notice> got;
  n.set_listener([&](uint64_t p, const std::string& name, uint64_t ino) {
    got.push_back({p, name, ino});
  });
  n.gone(1, "a", 10);
  n.gone(7, "b", 11);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].name, "a");
  EXPECT_EQ(got[1].parent, 7u);
  EXPECT_EQ(got[1].ino, 11u);
  n.set_listener(nullptr);  // the FUSE session is going
  n.gone(1, "after", 12);
  EXPECT_EQ(got.size(), 2u);
}

// The listener runs with the notices' lock released: it may clear itself
// (as the mount does at unmount) without a deadlock.
TEST(NameNotices, TheListenerRunsWithNoLockHeld) {
  NameNotices n;
  int calls = 0;
  n.set_listener([&](uint64_t, const std::string&, uint64_t) {
    ++calls;
    n.set_listener(nullptr);
  });
  n.gone(1, "a", 2);
  n.gone(1, "b", 3);
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace kvfs
