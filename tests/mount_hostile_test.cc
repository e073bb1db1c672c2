// SPDX-License-Identifier: Apache-2.0
// Hostile input through a real mount: huge offsets, writes past the maximum
// file size (EFBIG, the max_file_size option), odd names, paths at PATH_MAX,
// and operations on a file while it is being evicted.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>

#include "core/control/control_client.h"
#include "tests/mount_fixture.h"

namespace kvfs::test {
namespace {

namespace fs = std::filesystem;

TEST(MountHostile, WritesPastTheMaximumFileSizeAreEfbig) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok("max_file_size=16M"));
  int fd = ::open(m.path("f").c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_GE(fd, 0);
  char b[4096] = {1};
  EXPECT_EQ(::pwrite(fd, b, sizeof(b), (16 << 20) - 4096), ssize_t(sizeof(b)));  // fits
  errno = 0;
  EXPECT_EQ(::pwrite(fd, b, sizeof(b), 16 << 20), -1);
  EXPECT_EQ(errno, EFBIG);
  errno = 0;
  EXPECT_EQ(::ftruncate(fd, (16 << 20) + 1), -1);
  EXPECT_EQ(errno, EFBIG);
  struct stat st;
  ASSERT_EQ(::fstat(fd, &st), 0);
  EXPECT_EQ(st.st_size, 16 << 20) << "a refused write must not change the size";
  ::close(fd);
}

TEST(MountHostile, HugeOffsets) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  int fd = ::open(m.path("h").c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_GE(fd, 0);
  char b[16] = "kv";
  errno = 0;
  EXPECT_EQ(::pwrite(fd, b, sizeof(b), (1LL << 62)), -1);  // past the default 1T limit
  EXPECT_EQ(errno, EFBIG);
  EXPECT_EQ(::pread(fd, b, sizeof(b), (1LL << 62)), 0) << "reading past EOF is 0 bytes";
  EXPECT_EQ(::pwrite(fd, b, sizeof(b), 1 << 30), ssize_t(sizeof(b)));  // a 1 GiB sparse file
  char z[16];
  EXPECT_EQ(::pread(fd, z, sizeof(z), 12345678), ssize_t(sizeof(z)));
  EXPECT_EQ(std::string(z, sizeof(z)), std::string(sizeof(z), '\0'));
  ::close(fd);
}

TEST(MountHostile, DotNamesAndPathMax) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  EXPECT_EQ(::mkdir(m.path(".").c_str(), 0755), -1);
  EXPECT_EQ(errno, EEXIST);
  EXPECT_EQ(::rmdir(m.path("d/..").c_str()), -1);
  // Nest directories until the path reaches PATH_MAX: each level works until
  // the kernel refuses the path with ENAMETOOLONG.
  std::string p = m.mnt();
  const std::string part(200, 'p');
  int made = 0;
  for (;;) {
    std::string next = p + "/" + part;
    if (next.size() >= PATH_MAX) {
      errno = 0;
      EXPECT_EQ(::mkdir(next.c_str(), 0755), -1);
      EXPECT_EQ(errno, ENAMETOOLONG);
      break;
    }
    ASSERT_EQ(::mkdir(next.c_str(), 0755), 0) << next.size();
    p = next;
    ++made;
  }
  EXPECT_GT(made, 15);
  m.unmount();
  ASSERT_TRUE(m.mount_ok());
  EXPECT_TRUE(fs::is_directory(p)) << "the deep tree survives a remount";
}

TEST(MountHostile, OperationsOnAFileBeingEvicted) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok("evict_grace=0,entry_timeout=0,attr_timeout=0,negative_timeout=0"));
  const std::string data = random_bytes(3 << 20, 9);
  ASSERT_TRUE(write_file(m.path("e"), data));
  int fd = ::open(m.path("e").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  // Forced eviction of an open file: the name goes, the open fd keeps its data.
  auto reply = control::request(control::control_path(m.mnt()),
                                R"({"cmd":"evict","mode":"path","path":"e","force":true})");
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->value("files", -1), 1) << reply->dump();
  EXPECT_NE(::access(m.path("e").c_str(), F_OK), 0);
  EXPECT_EQ(errno, ENOENT);
  std::string got(data.size(), '\0');
  EXPECT_EQ(::pread(fd, got.data(), got.size(), 0), ssize_t(got.size()));
  EXPECT_EQ(got, data);
  ::close(fd);
  // The name is free again for a new file.
  ASSERT_TRUE(write_file(m.path("e"), "new"));
  std::string back;
  ASSERT_TRUE(read_file(m.path("e"), &back));
  EXPECT_EQ(back, "new");
}

}  // namespace
}  // namespace kvfs::test
