// SPDX-License-Identifier: Apache-2.0
// Mounts: reading /proc/self/mountinfo and the path rules the daemon's
// startup checks use (a backing dir inside a mount, a mount point in use).
#include "core/backing/mounts.h"

#include <gtest/gtest.h>

namespace kvfs {
namespace {

TEST(Mounts, PathWithinMatchesWholeComponents) {
  EXPECT_TRUE(path_within("/mnt/kv", "/mnt/kv"));
  EXPECT_TRUE(path_within("/mnt/kv/a/b", "/mnt/kv"));
  EXPECT_FALSE(path_within("/mnt/kvcache", "/mnt/kv"));  // a prefix is not a parent
  EXPECT_FALSE(path_within("/mnt", "/mnt/kv"));
  EXPECT_TRUE(path_within("/anything", "/"));
}

TEST(Mounts, ReadsThisProcessMountTable) {
  bool root = false;
  for (const MountEntry& m : read_mounts()) {
    EXPECT_FALSE(m.target.empty());
    EXPECT_FALSE(m.fstype.empty());
    root |= m.target == "/";
  }
  EXPECT_TRUE(root);
}

}  // namespace
}  // namespace kvfs
