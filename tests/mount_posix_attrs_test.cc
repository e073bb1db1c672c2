// SPDX-License-Identifier: Apache-2.0
// POSIX behaviour of a real kvfs mount: attributes (utimensat, chmod, chown),
// symlinks, statfs, fsync (also across kill -9 and remount) and user xattrs.
// Helpers: tests/mount_posix_util.h.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <set>
#include <string>

#include "tests/mount_posix_util.h"

#ifndef FUSE_SUPER_MAGIC
#define FUSE_SUPER_MAGIC 0x65735546
#endif

namespace kvfs::test {

// ---------------------------------------------------------------------------
// attributes

TEST(MountPosix, UtimensatAtimeOnly) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  const std::string p = m.path("touched.bin");
  ASSERT_TRUE(write_file(p, "data"));
  const timespec both[2] = {{1000, 0}, {2000, 500000000}};
  ASSERT_OK(::utimensat(AT_FDCWD, p.c_str(), both, 0));
  struct stat st;
  ASSERT_OK(::stat(p.c_str(), &st));
  EXPECT_EQ(ns_of(st.st_atim), 1000ll * 1000000000);
  EXPECT_EQ(ns_of(st.st_mtim), 2000ll * 1000000000 + 500000000);
  // llm-d marks a hit: atime only, mtime omitted.
  const timespec atime_only[2] = {{5000, 123456789}, {0, UTIME_OMIT}};
  ASSERT_OK(::utimensat(AT_FDCWD, p.c_str(), atime_only, 0));
  ASSERT_OK(::stat(p.c_str(), &st));
  EXPECT_EQ(ns_of(st.st_atim), 5000ll * 1000000000 + 123456789);
  EXPECT_EQ(ns_of(st.st_mtim), 2000ll * 1000000000 + 500000000);
  // UTIME_NOW for atime, mtime still omitted.
  timespec before;
  ::clock_gettime(CLOCK_REALTIME, &before);
  const timespec now_only[2] = {{0, UTIME_NOW}, {0, UTIME_OMIT}};
  ASSERT_OK(::utimensat(AT_FDCWD, p.c_str(), now_only, 0));
  ASSERT_OK(::stat(p.c_str(), &st));
  EXPECT_GE(st.st_atim.tv_sec, before.tv_sec);
  EXPECT_EQ(ns_of(st.st_mtim), 2000ll * 1000000000 + 500000000);
  EXPECT_EQ(slurp(p), "data");
  // Same through an fd (futimens).
  Fd fd(::open(p.c_str(), O_RDONLY));
  ASSERT_GE(fd, 0);
  const timespec f_only[2] = {{7000, 7}, {0, UTIME_OMIT}};
  ASSERT_OK(::futimens(fd, f_only));
  ASSERT_OK(::fstat(fd, &st));
  EXPECT_EQ(ns_of(st.st_atim), 7000ll * 1000000000 + 7);
  EXPECT_EQ(ns_of(st.st_mtim), 2000ll * 1000000000 + 500000000);
  fd.close();
  remount(m);
  ASSERT_OK(::stat(p.c_str(), &st));
  EXPECT_EQ(ns_of(st.st_mtim), 2000ll * 1000000000 + 500000000);
}

// The evictor of llm-d orders by atime; a clean unmount must keep it.
TEST(MountPosix, AtimeOnlyTouchSurvivesCleanRemount) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  const std::string p = m.path("hit.bin");
  ASSERT_TRUE(write_file(p, "data"));
  Fd dfd(::open(m.mnt().c_str(), O_RDONLY | O_DIRECTORY));
  ASSERT_GE(dfd, 0);
  ASSERT_OK(::fsync(dfd));  // the file is committed before the touch
  dfd.close();
  const timespec atime_only[2] = {{5000, 123456789}, {0, UTIME_OMIT}};
  ASSERT_OK(::utimensat(AT_FDCWD, p.c_str(), atime_only, 0));
  remount(m);
  struct stat st;
  ASSERT_OK(::stat(p.c_str(), &st));
  EXPECT_EQ(ns_of(st.st_atim), 5000ll * 1000000000 + 123456789);
}

TEST(MountPosix, ChmodChownStoredAndReported) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  const std::string f = m.path("f"), d = m.path("d"), l = m.path("l");
  ASSERT_TRUE(write_file(f, "x"));
  ASSERT_OK(::mkdir(d.c_str(), 0755));
  ASSERT_OK(::symlink("f", l.c_str()));
  ASSERT_OK(::chmod(f.c_str(), 0640));
  ASSERT_OK(::chown(f.c_str(), 1234, 5678));
  ASSERT_OK(::chmod(d.c_str(), 01750));
  ASSERT_OK(::chown(d.c_str(), 4321, 8765));
  ASSERT_OK(::lchown(l.c_str(), 111, 222));
  Fd fd(::open(m.path("g").c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
  ASSERT_GE(fd, 0);
  ASSERT_OK(::fchmod(fd, 0604));
  ASSERT_OK(::fchown(fd, 42, 43));
  ASSERT_OK(fd.close());
  auto check = [&] {
    struct stat st;
    ASSERT_OK(::stat(f.c_str(), &st));
    EXPECT_EQ(st.st_mode, S_IFREG | 0640u);
    EXPECT_EQ(st.st_uid, 1234u);
    EXPECT_EQ(st.st_gid, 5678u);
    ASSERT_OK(::stat(d.c_str(), &st));
    EXPECT_EQ(st.st_mode, S_IFDIR | 01750u);
    EXPECT_EQ(st.st_uid, 4321u);
    EXPECT_EQ(st.st_gid, 8765u);
    ASSERT_OK(::lstat(l.c_str(), &st));
    EXPECT_TRUE(S_ISLNK(st.st_mode));
    EXPECT_EQ(st.st_uid, 111u);
    EXPECT_EQ(st.st_gid, 222u);
    ASSERT_OK(::stat(m.path("g").c_str(), &st));
    EXPECT_EQ(st.st_mode, S_IFREG | 0604u);
    EXPECT_EQ(st.st_uid, 42u);
    EXPECT_EQ(st.st_gid, 43u);
    EXPECT_EQ(slurp(f), "x");
  };
  {
    SCOPED_TRACE("before remount");
    check();
  }
  remount(m);
  {
    SCOPED_TRACE("after remount");
    check();
  }
}

TEST(MountPosix, SymlinkReadlink) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  ASSERT_TRUE(write_file(m.path("target.bin"), "through the link"));
  const std::string odd_target = "some/dir with spaces/caf\xc3\xa9/\xff-x/../y";
  ASSERT_OK(::symlink("target.bin", m.path("rel").c_str()));
  ASSERT_OK(::symlink(odd_target.c_str(), m.path("dangling").c_str()));
  const std::string long_target(4000, 'a');
  ASSERT_OK(::symlink(long_target.c_str(), m.path("long").c_str()));
  EXPECT_ERRNO(::symlink("x", m.path("rel").c_str()), EEXIST);
  auto rl = [](const std::string& p) {
    std::string b(8192, '\0');
    ssize_t n = ::readlink(p.c_str(), b.data(), b.size());
    if (n < 0) return "<readlink: " + std::string(std::strerror(errno)) + ">";
    b.resize(static_cast<size_t>(n));
    return b;
  };
  auto check = [&] {
    EXPECT_EQ(rl(m.path("rel")), "target.bin");
    EXPECT_EQ(rl(m.path("dangling")), odd_target);
    EXPECT_EQ(rl(m.path("long")), long_target);
    struct stat st;
    ASSERT_OK(::lstat(m.path("rel").c_str(), &st));
    EXPECT_TRUE(S_ISLNK(st.st_mode));
    EXPECT_EQ(st.st_size, 10);
    ASSERT_OK(::stat(m.path("rel").c_str(), &st));
    EXPECT_TRUE(S_ISREG(st.st_mode));
    EXPECT_EQ(slurp(m.path("rel")), "through the link");
    EXPECT_ERRNO(::stat(m.path("dangling").c_str(), &st), ENOENT);
    char rbuf[16];
    EXPECT_ERRNO(::readlink(m.path("target.bin").c_str(), rbuf, sizeof(rbuf)), EINVAL);
    EXPECT_ERRNO(::open(m.path("rel").c_str(), O_RDONLY | O_NOFOLLOW), ELOOP);
  };
  {
    SCOPED_TRACE("before remount");
    check();
  }
  remount(m);
  {
    SCOPED_TRACE("after remount");
    check();
  }
}

TEST(MountPosix, Statfs) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  struct statvfs v;
  ASSERT_OK(::statvfs(m.mnt().c_str(), &v));
  EXPECT_EQ(v.f_bsize, 4096u);
  EXPECT_EQ(v.f_frsize, 4096u);
  EXPECT_EQ(v.f_namemax, 255u);
  EXPECT_GT(v.f_blocks, 0u);
  EXPECT_LE(v.f_bfree, v.f_blocks);
  EXPECT_LE(v.f_bavail, v.f_bfree);
  EXPECT_GT(v.f_files, 0u);
  struct statfs sf;
  ASSERT_OK(::statfs(m.path("").c_str(), &sf));
  EXPECT_EQ(static_cast<unsigned long>(sf.f_type), static_cast<unsigned long>(FUSE_SUPER_MAGIC));
  EXPECT_EQ(sf.f_bsize, 4096);
  EXPECT_EQ(sf.f_namelen, 255);
  // Also through a file and a file descriptor inside the mount.
  ASSERT_TRUE(write_file(m.path("f"), "x"));
  struct statvfs v2;
  ASSERT_OK(::statvfs(m.path("f").c_str(), &v2));
  EXPECT_EQ(v2.f_bsize, 4096u);
  EXPECT_EQ(v2.f_namemax, 255u);
  Fd fd(::open(m.path("f").c_str(), O_RDONLY));
  ASSERT_GE(fd, 0);
  ASSERT_OK(::fstatvfs(fd, &v2));
  EXPECT_EQ(v2.f_bsize, 4096u);
  EXPECT_GT(v2.f_blocks, 0u);
  fd.close();
}

// ---------------------------------------------------------------------------
// fsync

TEST(MountPosix, FsyncReturnsZeroAndDataPersists) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  ASSERT_OK(::mkdir(m.path("d").c_str(), 0755));
  const std::string p = m.path("d/synced.bin");
  const std::string data = random_bytes(4 * kMiB + 99, 17);
  Fd fd(::open(p.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(pwrite_all(fd, data.data(), data.size(), 0));
  EXPECT_OK(::fsync(fd));
  EXPECT_OK(::fdatasync(fd));
  EXPECT_OK(::fsync(fd));  // nothing dirty: still 0
  ASSERT_TRUE(pwrite_all(fd, "tail", 4, static_cast<off_t>(data.size())));
  EXPECT_OK(::fdatasync(fd));
  ASSERT_OK(fd.close());
  Fd dfd(::open(m.path("d").c_str(), O_RDONLY | O_DIRECTORY));
  ASSERT_GE(dfd, 0);
  EXPECT_OK(::fsync(dfd));
  dfd.close();
  remount(m);
  EXPECT_SAME_BYTES(slurp(p), data + "tail");
}

// fsync means durable: the data must survive the daemon dying right after.
TEST(MountPosix, FsyncedDataSurvivesKill9) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  ASSERT_OK(::mkdir(m.path("d").c_str(), 0755));
  const std::string p = m.path("d/synced.bin");
  const std::string data = random_bytes(3 * kMiB + 1, 18);
  Fd fd(::open(p.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(pwrite_all(fd, data.data(), data.size(), 0));
  ASSERT_OK(::fsync(fd));
  ASSERT_OK(fd.close());
  m.kill9();
  ASSERT_TRUE(m.mount_ok());
  EXPECT_SAME_BYTES(slurp(p), data);
}

// ---------------------------------------------------------------------------
// xattrs

TEST(MountPosix, UserXattrs) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  const std::string f = m.path("x.bin");
  ASSERT_TRUE(write_file(f, "payload"));
  ASSERT_OK(::mkdir(m.path("dir").c_str(), 0755));
  EXPECT_EQ(listx(f), std::set<std::string>{});
  ASSERT_OK(::setxattr(f.c_str(), "user.a", "alpha", 5, 0));
  const std::string bin("\0\x01\xff\0zz", 6);
  ASSERT_OK(::setxattr(f.c_str(), "user.bin", bin.data(), bin.size(), XATTR_CREATE));
  ASSERT_OK(::setxattr(f.c_str(), "user.empty", "", 0, 0));
  const std::string big = random_bytes(60000, 5);
  ASSERT_OK(::setxattr(f.c_str(), "user.big", big.data(), big.size(), 0));
  EXPECT_EQ(getx(f, "user.a"), "alpha");
  EXPECT_EQ(getx(f, "user.bin"), bin);
  EXPECT_EQ(getx(f, "user.empty"), "");
  EXPECT_EQ(getx(f, "user.big"), big);
  // Size probe, then a buffer too small.
  EXPECT_EQ(::getxattr(f.c_str(), "user.a", nullptr, 0), 5);
  char small[2];
  EXPECT_ERRNO(::getxattr(f.c_str(), "user.a", small, sizeof(small)), ERANGE);
  // Flags.
  EXPECT_ERRNO(::setxattr(f.c_str(), "user.a", "x", 1, XATTR_CREATE), EEXIST);
  EXPECT_EQ(getx(f, "user.a"), "alpha");
  EXPECT_ERRNO(::setxattr(f.c_str(), "user.missing", "x", 1, XATTR_REPLACE), ENODATA);
  EXPECT_ERRNO(::getxattr(f.c_str(), "user.missing", nullptr, 0), ENODATA);
  ASSERT_OK(::setxattr(f.c_str(), "user.a", "beta!", 5, XATTR_REPLACE));
  EXPECT_EQ(getx(f, "user.a"), "beta!");
  ASSERT_OK(::setxattr(f.c_str(), "user.a", "gamma-longer", 12, 0));
  EXPECT_EQ(getx(f, "user.a"), "gamma-longer");
  // list, and a list buffer too small.
  EXPECT_EQ(listx(f), (std::set<std::string>{"user.a", "user.bin", "user.empty", "user.big"}));
  char lsmall[4];
  EXPECT_ERRNO(::listxattr(f.c_str(), lsmall, sizeof(lsmall)), ERANGE);
  // remove.
  ASSERT_OK(::removexattr(f.c_str(), "user.bin"));
  EXPECT_ERRNO(::getxattr(f.c_str(), "user.bin", nullptr, 0), ENODATA);
  EXPECT_ERRNO(::removexattr(f.c_str(), "user.bin"), ENODATA);
  EXPECT_ERRNO(::removexattr(f.c_str(), "user.never"), ENODATA);
  // On a directory, and through an fd.
  ASSERT_OK(::setxattr(m.path("dir").c_str(), "user.d", "dirval", 6, 0));
  Fd fd(::open(f.c_str(), O_RDONLY));
  ASSERT_GE(fd, 0);
  ASSERT_OK(::fsetxattr(fd, "user.fd", "1", 1, 0));
  char fbuf[16];
  EXPECT_EQ(::fgetxattr(fd, "user.fd", fbuf, sizeof(fbuf)), 1);
  fd.close();
  // Setting xattrs does not touch the data.
  EXPECT_EQ(slurp(f), "payload");
  auto check = [&] {
    EXPECT_EQ(getx(f, "user.a"), "gamma-longer");
    EXPECT_EQ(getx(f, "user.empty"), "");
    EXPECT_EQ(getx(f, "user.big"), big);
    EXPECT_EQ(getx(f, "user.fd"), "1");
    EXPECT_ERRNO(::getxattr(f.c_str(), "user.bin", nullptr, 0), ENODATA);
    EXPECT_EQ(listx(f), (std::set<std::string>{"user.a", "user.empty", "user.big", "user.fd"}));
    EXPECT_EQ(getx(m.path("dir"), "user.d"), "dirval");
    EXPECT_EQ(slurp(f), "payload");
  };
  {
    SCOPED_TRACE("before remount");
    check();
  }
  remount(m);
  {
    SCOPED_TRACE("after remount");
    check();
  }
}

}  // namespace kvfs::test
