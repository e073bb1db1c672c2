// SPDX-License-Identifier: Apache-2.0
// A fixture for POSIX rules checked on two filesystems: a kvfs mount and a
// tmpfs. The rules are those the conformance suites (pjdfstest) exercise;
// tmpfs is the reference, so a check that fails on tmpfs is a wrong check,
// not a kvfs bug. Used by tests/mount_posix_types_test.cc and
// tests/mount_posix_rules_test.cc.
//
// Non-owner checks run in a child process that switched to an unprivileged
// uid/gid (nobody); the kvfs mount is made with allow_other so that such a
// process reaches it at all (the kernel then checks permissions:
// default_permissions).
#pragma once

#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "tests/mount_posix_util.h"

namespace kvfs::test {

inline constexpr uid_t kNobody = 65534;
inline constexpr uid_t kOther = 65533;  // a second unprivileged user

enum class Backend { kKvfs, kTmpfs };

inline std::string backend_name(const ::testing::TestParamInfo<Backend>& i) {
  return i.param == Backend::kKvfs ? "kvfs" : "tmpfs";
}

// 0, or the errno of a call that returned -1.
inline int err_of(long rc) {
  return rc == -1 ? errno : 0;
}

// Runs fn in a child with real, effective and saved ids uid/gid and no
// supplementary groups; returns what fn returned (0 or an errno), 255 if the
// ids could not be switched, -1 if the child died. fn may allocate: glibc's
// fork() leaves malloc usable in the child, and the only other thread of a
// mount test binary is its watchdog, asleep.
inline int as_user(uid_t uid, gid_t gid, const std::function<int()>& fn) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setresgid(gid, gid, gid) != 0 ||
        ::setresuid(uid, uid, uid) != 0)
      ::_exit(255);
    ::_exit(fn() & 0xff);
  }
  if (pid < 0) return -1;
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// The file types a test makes; symlinks point at "target" (absent).
struct Kind {
  const char* name;
  mode_t type;
};
inline constexpr Kind kAllKinds[] = {{"reg", S_IFREG},    {"dir", S_IFDIR}, {"fifo", S_IFIFO},
                                     {"sock", S_IFSOCK},  {"chr", S_IFCHR}, {"blk", S_IFBLK},
                                     {"symlink", S_IFLNK}};
inline constexpr Kind kSpecialKinds[] = {
    {"fifo", S_IFIFO}, {"sock", S_IFSOCK}, {"chr", S_IFCHR}, {"blk", S_IFBLK}};

inline dev_t rdev_for(mode_t type) {
  return type == S_IFCHR ? makedev(1, 3) : type == S_IFBLK ? makedev(7, 300) : 0;
}

// Makes path as a file of the given type; 0 or an errno.
inline int make_node(const std::string& path, mode_t type, mode_t perm = 0644) {
  switch (type) {
    case S_IFREG: {
      const int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, perm);
      if (fd < 0) return errno;
      ::close(fd);
      return 0;
    }
    case S_IFDIR: return err_of(::mkdir(path.c_str(), perm));
    case S_IFLNK: return err_of(::symlink("target", path.c_str()));
    default: return err_of(::mknod(path.c_str(), type | perm, rdev_for(type)));
  }
}

// rmdir or unlink; 0 or an errno.
inline int remove_node(const std::string& path, mode_t type) {
  return err_of(type == S_IFDIR ? ::rmdir(path.c_str()) : ::unlink(path.c_str()));
}

// Waits until the coarse realtime clock has passed t, so that any timestamp
// taken afterwards (coarse or fine-grained, by the kernel or the daemon) is
// later than t. This waits on the clock itself, a few milliseconds at most,
// not for another thread.
inline void tick_past(const timespec& t) {
  const int64_t want = ns_of(t);
  timespec now;
  do {
    ::clock_gettime(CLOCK_REALTIME_COARSE, &now);
  } while (ns_of(now) <= want);
}

inline struct stat lstat_of(const std::string& p) {
  struct stat st;
  std::memset(&st, 0, sizeof(st));
  EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p << ": " << std::strerror(errno);
  return st;
}

// 0, or the errno of lstat(p).
inline int lstat_err(const std::string& p) {
  struct stat st;
  return err_of(::lstat(p.c_str(), &st));
}

class PosixBoth : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    old_umask_ = ::umask(0);
    if (GetParam() == Backend::kKvfs) {
      kvfs_ = std::make_unique<KvfsMount>();
      ASSERT_TRUE(kvfs_->mount_ok("allow_other"));
      // mkdtemp made the tree 0700: other users must reach the mount point.
      ASSERT_OK(::chmod(kvfs_->root().c_str(), 0755));
      mnt_ = kvfs_->mnt();
    } else {
      char t[] = "/tmp/kvfs-tmpfs-XXXXXX";
      ASSERT_NE(::mkdtemp(t), nullptr);
      tmp_root_ = t;
      ASSERT_OK(::chmod(tmp_root_.c_str(), 0755));
      mnt_ = tmp_root_ + "/mnt";
      ASSERT_OK(::mkdir(mnt_.c_str(), 0755));
      ASSERT_OK(::mount("tmpfs", mnt_.c_str(), "tmpfs", 0, "mode=0755,size=64m"));
      tmpfs_mounted_ = true;
    }
  }
  void TearDown() override {
    ::umask(old_umask_);
    kvfs_.reset();
    if (tmpfs_mounted_ && ::umount(mnt_.c_str()) != 0) ::umount2(mnt_.c_str(), MNT_DETACH);
    if (!tmp_root_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(tmp_root_, ec);
    }
  }
  bool kvfs() const { return GetParam() == Backend::kKvfs; }
  std::string p(const std::string& rel) const { return mnt_ + "/" + rel; }
  // Unmounts and mounts kvfs again; tmpfs keeps nothing across a remount.
  void remount_kvfs() {
    ASSERT_TRUE(kvfs());
    remount(*kvfs_, "allow_other");
  }
  KvfsMount& kvfs_mount() { return *kvfs_; }

 private:
  mode_t old_umask_ = 0;
  std::unique_ptr<KvfsMount> kvfs_;
  std::string tmp_root_, mnt_;
  bool tmpfs_mounted_ = false;
};

}  // namespace kvfs::test
