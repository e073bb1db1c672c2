// SPDX-License-Identifier: Apache-2.0
// The shortest end-to-end check: mount, write, read back, remount.
#include <gtest/gtest.h>

#include "tests/mount_fixture.h"

namespace kvfs::test {

TEST(MountSmoke, WriteReadRemount) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  const std::string data = random_bytes(3 << 20, 1);
  ASSERT_TRUE(write_file(m.path("f.bin"), data));
  std::string back;
  ASSERT_TRUE(read_file(m.path("f.bin"), &back));
  EXPECT_EQ(back, data);
  m.unmount();
  ASSERT_TRUE(m.mount_ok());
  ASSERT_TRUE(read_file(m.path("f.bin"), &back));
  EXPECT_EQ(back, data);
}

}  // namespace kvfs::test
