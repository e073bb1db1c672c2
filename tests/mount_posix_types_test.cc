// SPDX-License-Identifier: Apache-2.0
// FIFOs, sockets and device nodes, and O_EXCL on every file type, on kvfs
// and on tmpfs (tests/mount_posix_both.h): made, listed, opened (FIFOs),
// bound and connected to (sockets), changed, renamed and removed like any
// other file; on kvfs also across a remount and an index rebuild.

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>

#include "tests/mount_posix_both.h"

namespace kvfs::test {
namespace {

unsigned char dtype_of(mode_t type) {
  switch (type) {
    case S_IFREG: return DT_REG;
    case S_IFDIR: return DT_DIR;
    case S_IFIFO: return DT_FIFO;
    case S_IFSOCK: return DT_SOCK;
    case S_IFCHR: return DT_CHR;
    case S_IFBLK: return DT_BLK;
    case S_IFLNK: return DT_LNK;
    default: return DT_UNKNOWN;
  }
}

std::map<std::string, unsigned char> dtypes(const std::string& dir) {
  std::map<std::string, unsigned char> out;
  DIR* d = ::opendir(dir.c_str());
  EXPECT_NE(d, nullptr) << dir << ": " << std::strerror(errno);
  if (!d) return out;
  while (dirent* e = ::readdir(d)) out[e->d_name] = e->d_type;
  ::closedir(d);
  return out;
}

sockaddr_un unix_addr(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  EXPECT_LT(path.size(), sizeof(a.sun_path)) << path;
  std::strncpy(a.sun_path, path.c_str(), sizeof(a.sun_path) - 1);
  return a;
}

// What identifies a special file: type, permissions, owner, device number.
void expect_node(const std::string& path, mode_t type, mode_t perm, uid_t uid, gid_t gid) {
  struct stat st = lstat_of(path);
  EXPECT_EQ(st.st_mode & S_IFMT, type) << path;
  EXPECT_EQ(st.st_mode & 07777, perm) << path;
  EXPECT_EQ(st.st_uid, uid) << path;
  EXPECT_EQ(st.st_gid, gid) << path;
  if (type == S_IFCHR || type == S_IFBLK) {
    EXPECT_EQ(major(st.st_rdev), major(rdev_for(type))) << path;
    EXPECT_EQ(minor(st.st_rdev), minor(rdev_for(type))) << path;
  }
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(Fs, PosixBoth, ::testing::Values(Backend::kKvfs, Backend::kTmpfs),
                         backend_name);

TEST_P(PosixBoth, SpecialFilesStatAndReaddir) {
  for (const Kind& k : kSpecialKinds) {
    SCOPED_TRACE(k.name);
    const std::string f = p(k.name);
    ASSERT_EQ(make_node(f, k.type, 0640), 0);
    struct stat st = lstat_of(f);
    EXPECT_EQ(st.st_mode, k.type | 0640);
    EXPECT_EQ(st.st_nlink, 1u);
    EXPECT_EQ(st.st_size, 0);
    EXPECT_EQ(st.st_uid, 0u);
    EXPECT_EQ(st.st_rdev, rdev_for(k.type));
    EXPECT_EQ(st.st_atim.tv_sec, st.st_mtim.tv_sec);
  }
  // Every permission bit is kept, set-ID and sticky included.
  ASSERT_OK(::mkfifo(p("all_bits").c_str(), 07777));
  EXPECT_EQ(lstat_of(p("all_bits")).st_mode, S_IFIFO | 07777u);
  // A socket file is not opened like a file.
  EXPECT_ERRNO(::open(p("sock").c_str(), O_RDONLY | O_CLOEXEC), ENXIO);
  // A FIFO's "device number" means nothing and is not kept.
  ASSERT_OK(::mknod(p("fifo_dev").c_str(), S_IFIFO | 0600, makedev(3, 4)));
  EXPECT_EQ(lstat_of(p("fifo_dev")).st_rdev, 0u);
  // A type of 0 is a regular file; a directory or an unknown type is refused.
  ASSERT_OK(::mknod(p("plain").c_str(), 0600, 0));
  EXPECT_TRUE(S_ISREG(lstat_of(p("plain")).st_mode));
  EXPECT_ERRNO(::mknod(p("d").c_str(), S_IFDIR | 0755, 0), EPERM);
  EXPECT_ERRNO(::mknod(p("bad").c_str(), 0170000 | 0600, 0), EINVAL);
  auto types = dtypes(p(""));
  for (const Kind& k : kSpecialKinds) EXPECT_EQ(types[k.name], dtype_of(k.type)) << k.name;
  EXPECT_EQ(types["plain"], DT_REG);
  EXPECT_EQ(types.count("d"), 0u);
  EXPECT_EQ(types.count("bad"), 0u);
}

TEST_P(PosixBoth, FifoOpensAndCarriesBytes) {
  const std::string f = p("pipe");
  ASSERT_OK(::mkfifo(f.c_str(), 0666));
  Fd rw(::open(f.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC));
  ASSERT_GE(rw, 0) << std::strerror(errno);
  struct stat st;
  ASSERT_OK(::fstat(rw, &st));
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  ASSERT_EQ(::write(rw, "kv", 2), 2);
  char buf[8] = {};
  ASSERT_EQ(::read(rw, buf, sizeof(buf)), 2);
  EXPECT_EQ(std::string(buf, 2), "kv");
  EXPECT_ERRNO(::read(rw, buf, sizeof(buf)), EAGAIN);
  // A writer without a reader is ENXIO; with one, both ends work.
  Fd wr(::open(f.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC));
  ASSERT_GE(wr, 0) << "rw is a reader: " << std::strerror(errno);
  rw.close();
  wr.close();
  EXPECT_ERRNO(::open(f.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC), ENXIO);
  Fd rd(::open(f.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  ASSERT_GE(rd, 0) << std::strerror(errno);
  wr.reset(::open(f.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC));
  ASSERT_GE(wr, 0) << std::strerror(errno);
  ASSERT_EQ(::write(wr, "abc", 3), 3);
  EXPECT_EQ(::read(rd, buf, sizeof(buf)), 3);
  // The bytes never reach the filesystem.
  EXPECT_EQ(lstat_of(f).st_size, 0);
}

TEST_P(PosixBoth, UnixSocketBindsAndConnects) {
  const std::string path = p("kv.sock");
  const sockaddr_un a = unix_addr(path);
  Fd srv(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ASSERT_GE(srv, 0);
  ASSERT_OK(::bind(srv, reinterpret_cast<const sockaddr*>(&a), sizeof(a)));
  ASSERT_OK(::listen(srv, 4));
  EXPECT_TRUE(S_ISSOCK(lstat_of(path).st_mode));
  EXPECT_EQ(dtypes(p(""))["kv.sock"], DT_SOCK);
  Fd cli(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ASSERT_GE(cli, 0);
  ASSERT_OK(::connect(cli, reinterpret_cast<const sockaddr*>(&a), sizeof(a)));
  Fd acc(::accept4(srv, nullptr, nullptr, SOCK_CLOEXEC));
  ASSERT_GE(acc, 0) << std::strerror(errno);
  ASSERT_EQ(::write(cli, "ping", 4), 4);
  char buf[8] = {};
  ASSERT_EQ(::read(acc, buf, sizeof(buf)), 4);
  EXPECT_EQ(std::string(buf, 4), "ping");
  // The name is taken; a second bind to it fails.
  Fd other(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  EXPECT_ERRNO(::bind(other, reinterpret_cast<const sockaddr*>(&a), sizeof(a)), EADDRINUSE);
  // Renamed, the socket is still reached by its new name.
  const std::string moved = p("moved.sock");
  ASSERT_OK(::rename(path.c_str(), moved.c_str()));
  const sockaddr_un b = unix_addr(moved);
  Fd cli2(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ASSERT_OK(::connect(cli2, reinterpret_cast<const sockaddr*>(&b), sizeof(b)));
  Fd cli3(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  EXPECT_ERRNO(::connect(cli3, reinterpret_cast<const sockaddr*>(&a), sizeof(a)), ENOENT);
  ASSERT_OK(::unlink(moved.c_str()));
  Fd cli4(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  EXPECT_ERRNO(::connect(cli4, reinterpret_cast<const sockaddr*>(&b), sizeof(b)), ENOENT);
  // Bound to a name a file of another type holds: taken as well.
  ASSERT_EQ(make_node(p("fifo"), S_IFIFO), 0);
  const sockaddr_un c = unix_addr(p("fifo"));
  EXPECT_ERRNO(::bind(other, reinterpret_cast<const sockaddr*>(&c), sizeof(c)), EADDRINUSE);
}

// O_CREAT|O_EXCL, and every call that makes a name, fail with EEXIST on a
// name that any type of file holds, a dangling symlink included.
TEST_P(PosixBoth, ExclusiveCreateOnEveryType) {
  for (const Kind& k : kAllKinds) {
    SCOPED_TRACE(k.name);
    const std::string f = p(std::string("e_") + k.name);
    ASSERT_EQ(make_node(f, k.type), 0);
    EXPECT_ERRNO(::open(f.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0644), EEXIST);
    EXPECT_ERRNO(::open(f.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_NONBLOCK | O_CLOEXEC, 0644),
                 EEXIST);
    EXPECT_ERRNO(::mkfifo(f.c_str(), 0644), EEXIST);
    EXPECT_ERRNO(::mknod(f.c_str(), S_IFCHR | 0644, makedev(1, 5)), EEXIST);
    EXPECT_ERRNO(::mknod(f.c_str(), S_IFSOCK | 0644, 0), EEXIST);
    EXPECT_ERRNO(::mknod(f.c_str(), S_IFREG | 0644, 0), EEXIST);
    EXPECT_ERRNO(::mkdir(f.c_str(), 0755), EEXIST);
    EXPECT_ERRNO(::symlink("x", f.c_str()), EEXIST);
    Fd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    const sockaddr_un a = unix_addr(f);
    EXPECT_ERRNO(::bind(s, reinterpret_cast<const sockaddr*>(&a), sizeof(a)), EADDRINUSE);
    EXPECT_EQ(lstat_of(f).st_mode & S_IFMT, k.type) << "left as it was";
  }
  // Through a symlink to a FIFO: the target exists.
  ASSERT_OK(::symlink("e_fifo", p("to_fifo").c_str()));
  EXPECT_ERRNO(::open(p("to_fifo").c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0644), EEXIST);
}

TEST_P(PosixBoth, RenameAndUnlinkOfSpecialFiles) {
  ASSERT_OK(::mkdir(p("sub").c_str(), 0755));
  ASSERT_OK(::mkdir(p("empty").c_str(), 0755));
  for (const Kind& k : kSpecialKinds) {
    SCOPED_TRACE(k.name);
    const std::string a = p(std::string("a_") + k.name);
    const std::string b = p(std::string("sub/b_") + k.name);
    ASSERT_EQ(make_node(a, k.type, 0604), 0);
    // Moved to another directory, and back over a regular file.
    ASSERT_OK(::rename(a.c_str(), b.c_str()));
    EXPECT_EQ(lstat_err(a), ENOENT);
    expect_node(b, k.type, 0604, 0, 0);
    const std::string r = p(std::string("r_") + k.name);
    ASSERT_TRUE(write_file(r, "regular"));
    ASSERT_OK(::rename(b.c_str(), r.c_str()));
    expect_node(r, k.type, 0604, 0, 0);
    EXPECT_EQ(lstat_err(b), ENOENT);
    // Onto itself: nothing happens.
    ASSERT_OK(::rename(r.c_str(), r.c_str()));
    // Not over a directory; a directory not over it.
    EXPECT_ERRNO(::rename(r.c_str(), p("empty").c_str()), EISDIR);
    EXPECT_ERRNO(::rename(p("empty").c_str(), r.c_str()), ENOTDIR);
    EXPECT_ERRNO(::renameat2(AT_FDCWD, r.c_str(), AT_FDCWD, p("sub").c_str(), RENAME_NOREPLACE),
                 EEXIST);
    // A regular file over it replaces it.
    const std::string f = p(std::string("f_") + k.name);
    ASSERT_TRUE(write_file(f, "file"));
    ASSERT_OK(::rename(f.c_str(), r.c_str()));
    EXPECT_TRUE(S_ISREG(lstat_of(r).st_mode));
    EXPECT_EQ(slurp(r), "file");
    // Removed by unlink only.
    ASSERT_EQ(make_node(a, k.type), 0);
    EXPECT_ERRNO(::rmdir(a.c_str()), ENOTDIR);
    ASSERT_OK(::unlink(a.c_str()));
    EXPECT_ERRNO(::unlink(a.c_str()), ENOENT);
  }
  EXPECT_EQ(list_dir(p("sub")).size(), 0u);
}

TEST_P(PosixBoth, ChmodChownUtimensOnSpecialFiles) {
  for (const Kind& k : kSpecialKinds) {
    SCOPED_TRACE(k.name);
    const std::string f = p(k.name);
    ASSERT_EQ(make_node(f, k.type, 0644), 0);
    struct stat before = lstat_of(f);
    tick_past(before.st_ctim);
    ASSERT_OK(::chmod(f.c_str(), 01600));
    struct stat st = lstat_of(f);
    EXPECT_EQ(st.st_mode, k.type | 01600);
    EXPECT_GT(ns_of(st.st_ctim), ns_of(before.st_ctim)) << "chmod";
    tick_past(st.st_ctim);
    ASSERT_OK(::chown(f.c_str(), kNobody, kOther));
    struct stat st2 = lstat_of(f);
    EXPECT_GT(ns_of(st2.st_ctim), ns_of(st.st_ctim)) << "chown";
    tick_past(st2.st_ctim);
    const timespec times[2] = {{1000, 1}, {2000, 2}};
    ASSERT_OK(::utimensat(AT_FDCWD, f.c_str(), times, AT_SYMLINK_NOFOLLOW));
    struct stat st3 = lstat_of(f);
    EXPECT_EQ(ns_of(st3.st_atim), 1000ll * 1000000000 + 1);
    EXPECT_EQ(ns_of(st3.st_mtim), 2000ll * 1000000000 + 2);
    EXPECT_GT(ns_of(st3.st_ctim), ns_of(st2.st_ctim)) << "utimensat";
    expect_node(f, k.type, 01600, kNobody, kOther);
    // The new owner may change it; somebody else may not.
    EXPECT_EQ(as_user(kOther, kOther, [&] { return err_of(::chmod(f.c_str(), 0666)); }), EPERM);
    EXPECT_EQ(as_user(kNobody, kNobody, [&] { return err_of(::chmod(f.c_str(), 0640)); }), 0);
    EXPECT_EQ(lstat_of(f).st_mode, k.type | 0640);
  }
}

// kvfs only (tmpfs keeps nothing across a remount): the new types are
// persisted like any inode, and come back from the segments alone when the
// index is rebuilt.
class PosixKvfsOnly : public PosixBoth {};
INSTANTIATE_TEST_SUITE_P(Fs, PosixKvfsOnly, ::testing::Values(Backend::kKvfs), backend_name);

TEST_P(PosixKvfsOnly, SpecialFilesSurviveRemountAndIndexRebuild) {
  for (const Kind& k : kSpecialKinds) {
    ASSERT_EQ(make_node(p(k.name), k.type, 0640), 0);
    ASSERT_OK(::chown(p(k.name).c_str(), kNobody, kOther));
  }
  ASSERT_OK(::mkdir(p("d").c_str(), 0755));
  ASSERT_OK(::rename(p("fifo").c_str(), p("d/fifo2").c_str()));
  ASSERT_EQ(make_node(p("gone"), S_IFIFO), 0);
  ASSERT_OK(::unlink(p("gone").c_str()));
  const timespec times[2] = {{1000, 1}, {2000, 2}};
  ASSERT_OK(::utimensat(AT_FDCWD, p("chr").c_str(), times, 0));
  ASSERT_OK(::chmod(p("blk").c_str(), 0600));
  const struct stat chr_before = lstat_of(p("chr"));
  auto check = [&](const char* when) {
    SCOPED_TRACE(when);
    expect_node(p("d/fifo2"), S_IFIFO, 0640, kNobody, kOther);
    expect_node(p("sock"), S_IFSOCK, 0640, kNobody, kOther);
    expect_node(p("chr"), S_IFCHR, 0640, kNobody, kOther);
    expect_node(p("blk"), S_IFBLK, 0600, kNobody, kOther);
    const struct stat st = lstat_of(p("chr"));
    EXPECT_EQ(ns_of(st.st_mtim), 2000ll * 1000000000 + 2);
    EXPECT_EQ(ns_of(st.st_ctim), ns_of(chr_before.st_ctim));
    EXPECT_EQ(lstat_err(p("fifo")), ENOENT);
    EXPECT_EQ(lstat_err(p("gone")), ENOENT);
    auto types = dtypes(p(""));
    EXPECT_EQ(types["sock"], DT_SOCK);
    EXPECT_EQ(types["chr"], DT_CHR);
    EXPECT_EQ(types["blk"], DT_BLK);
    EXPECT_EQ(dtypes(p("d"))["fifo2"], DT_FIFO);
    // Still a FIFO that works; a socket file nobody listens on refuses.
    Fd rw(::open(p("d/fifo2").c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC));
    EXPECT_GE(rw, 0) << std::strerror(errno);
    const sockaddr_un a = unix_addr(p("sock"));
    Fd cli(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    EXPECT_ERRNO(::connect(cli, reinterpret_cast<const sockaddr*>(&a), sizeof(a)), ECONNREFUSED);
  };
  check("before remount");
  // Hard links stay refused, for every type (README: one name per inode).
  for (const Kind& k : kAllKinds) {
    const std::string f = p(std::string("l_") + k.name);
    ASSERT_EQ(make_node(f, k.type), 0) << k.name;
    EXPECT_ERRNO(::linkat(AT_FDCWD, f.c_str(), AT_FDCWD, (f + "_2").c_str(), 0), EPERM);
    EXPECT_EQ(remove_node(f, k.type), 0) << k.name;
  }
  remount_kvfs();
  check("after remount");
  kvfs_mount().unmount();
  std::filesystem::remove_all(kvfs_mount().index_dir());
  ASSERT_TRUE(kvfs_mount().mount_ok("allow_other"));
  check("after rebuilding the index from the segments");
  // Changed after the rebuild: still renamed and removed for good.
  ASSERT_OK(::rename(p("sock").c_str(), p("d/sock2").c_str()));
  ASSERT_OK(::unlink(p("blk").c_str()));
  remount_kvfs();
  expect_node(p("d/sock2"), S_IFSOCK, 0640, kNobody, kOther);
  EXPECT_EQ(lstat_err(p("blk")), ENOENT);
}

}  // namespace kvfs::test
