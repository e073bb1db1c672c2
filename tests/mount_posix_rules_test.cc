// SPDX-License-Identifier: Apache-2.0
// POSIX rules the conformance suites check, on kvfs and on tmpfs
// (tests/mount_posix_both.h): sticky directories, the order of ENOTDIR,
// ENOENT, ELOOP and ENAMETOOLONG, set-user/group-ID clearing on chown and
// write, set-group-ID directories, and which calls change ctime and mtime.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tests/mount_posix_both.h"

namespace kvfs::test {

INSTANTIATE_TEST_SUITE_P(Fs, PosixBoth, ::testing::Values(Backend::kKvfs, Backend::kTmpfs),
                         backend_name);

namespace {

mode_t mode_of(const std::string& path) {
  return lstat_of(path).st_mode & 07777;
}

}  // namespace

// In a sticky directory only the owner of a name, the owner of the
// directory or root may remove or rename it, for every type of file.
TEST_P(PosixBoth, StickyDirectoryRenameAndUnlinkByNonOwner) {
  const std::string st = p("sticky");
  ASSERT_OK(::mkdir(st.c_str(), 01777));
  ASSERT_OK(::chown(st.c_str(), kOther, kOther));
  ASSERT_OK(::mkdir(p("plain").c_str(), 0777));
  for (const Kind& k : kAllKinds) {
    SCOPED_TRACE(k.name);
    const std::string theirs = st + "/root_" + k.name;
    const std::string mine = st + "/mine_" + k.name;
    const std::string moved = st + "/moved_" + k.name;
    ASSERT_EQ(make_node(theirs, k.type, 0777), 0);
    ASSERT_EQ(make_node(mine, k.type, 0777), 0);
    ASSERT_OK(::lchown(mine.c_str(), kNobody, kNobody));
    // Not nobody's, in a directory that is not nobody's either.
    EXPECT_EQ(as_user(kNobody, kNobody, [&] { return remove_node(theirs, k.type); }), EPERM);
    EXPECT_EQ(
        as_user(kNobody, kNobody, [&] { return err_of(::rename(theirs.c_str(), moved.c_str())); }),
        EPERM);
    // Nor may nobody replace it with a name of its own.
    EXPECT_EQ(
        as_user(kNobody, kNobody, [&] { return err_of(::rename(mine.c_str(), theirs.c_str())); }),
        EPERM);
    EXPECT_EQ(lstat_of(theirs).st_uid, 0u);
    EXPECT_EQ(lstat_of(mine).st_uid, kNobody);
    // Its own name it may rename and remove.
    EXPECT_EQ(
        as_user(kNobody, kNobody, [&] { return err_of(::rename(mine.c_str(), moved.c_str())); }),
        0);
    EXPECT_EQ(as_user(kNobody, kNobody, [&] { return remove_node(moved, k.type); }), 0);
    EXPECT_EQ(lstat_err(moved), ENOENT);
    // The directory's owner may remove anybody's name.
    EXPECT_EQ(as_user(kOther, kOther, [&] { return remove_node(theirs, k.type); }), 0);
    // Without the sticky bit, write permission on the directory is enough.
    const std::string open_name = p(std::string("plain/root_") + k.name);
    ASSERT_EQ(make_node(open_name, k.type, 0700), 0);
    EXPECT_EQ(as_user(kNobody, kNobody,
                      [&] {
                        return err_of(::rename(open_name.c_str(), (open_name + "_moved").c_str()));
                      }),
              0);
    EXPECT_EQ(as_user(kNobody, kNobody, [&] { return remove_node(open_name + "_moved", k.type); }),
              0);
  }
}

// Which error a path gives when several apply, component by component.
TEST_P(PosixBoth, ErrnoOrderNotDirNoEntLoopNameTooLong) {
  const std::string long_name(256, 'n');
  const std::string max_name(255, 'm');
  ASSERT_TRUE(write_file(p("exists"), "x"));
  for (const Kind& k : kAllKinds) {
    if (k.type == S_IFDIR || k.type == S_IFLNK) continue;
    SCOPED_TRACE(k.name);
    const std::string f = p(k.name);
    ASSERT_EQ(make_node(f, k.type), 0);
    const std::string below = f + "/x";
    struct stat st;
    EXPECT_ERRNO(::stat(below.c_str(), &st), ENOTDIR);
    EXPECT_ERRNO(::open(below.c_str(), O_RDONLY | O_CLOEXEC), ENOTDIR);
    EXPECT_ERRNO(::open(below.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644), ENOTDIR);
    EXPECT_ERRNO(::mkdir(below.c_str(), 0755), ENOTDIR);
    EXPECT_ERRNO(::mkfifo(below.c_str(), 0644), ENOTDIR);
    EXPECT_ERRNO(::symlink("t", below.c_str()), ENOTDIR);
    EXPECT_ERRNO(::unlink(below.c_str()), ENOTDIR);
    EXPECT_ERRNO(::rename(below.c_str(), p("z").c_str()), ENOTDIR);
    EXPECT_ERRNO(::rename(p("exists").c_str(), below.c_str()), ENOTDIR);
    EXPECT_ERRNO(::rmdir(f.c_str()), ENOTDIR);
    EXPECT_ERRNO(::open(f.c_str(), O_RDONLY | O_DIRECTORY | O_NONBLOCK | O_CLOEXEC), ENOTDIR);
    EXPECT_ERRNO(::rename(p("exists").c_str(), (f + "/").c_str()), ENOTDIR);
    // A component that is not a directory comes before a name too long.
    EXPECT_ERRNO(::stat((f + "/" + long_name).c_str(), &st), ENOTDIR);
  }
  struct stat st;
  // A missing component comes before a name too long behind it...
  EXPECT_ERRNO(::stat(p("missing/" + long_name).c_str(), &st), ENOENT);
  EXPECT_ERRNO(::mkfifo(p("missing/x").c_str(), 0644), ENOENT);
  EXPECT_ERRNO(::mknod(p("missing/x").c_str(), S_IFCHR | 0644, makedev(1, 3)), ENOENT);
  EXPECT_ERRNO(::rename(p("missing").c_str(), p("z").c_str()), ENOENT);
  EXPECT_ERRNO(::rename(p("exists").c_str(), p("missing/z").c_str()), ENOENT);
  EXPECT_ERRNO(::unlink(p("missing").c_str()), ENOENT);
  // ...and a name too long before what lies behind it.
  EXPECT_ERRNO(::stat(p(long_name + "/x").c_str(), &st), ENAMETOOLONG);
  EXPECT_ERRNO(::stat(p(long_name).c_str(), &st), ENAMETOOLONG);
  EXPECT_ERRNO(::mkfifo(p(long_name).c_str(), 0644), ENAMETOOLONG);
  EXPECT_ERRNO(::mknod(p(long_name).c_str(), S_IFSOCK | 0644, 0), ENAMETOOLONG);
  EXPECT_ERRNO(::mkdir(p(long_name).c_str(), 0755), ENAMETOOLONG);
  EXPECT_ERRNO(::symlink("t", p(long_name).c_str()), ENAMETOOLONG);
  EXPECT_ERRNO(::rename(p("exists").c_str(), p(long_name).c_str()), ENAMETOOLONG);
  EXPECT_ERRNO(::unlink(p(long_name).c_str()), ENAMETOOLONG);
  ASSERT_OK(::mkfifo(p(max_name).c_str(), 0644));
  ASSERT_OK(::rename(p(max_name).c_str(), p(std::string(255, 'r')).c_str()));
  EXPECT_TRUE(S_ISFIFO(lstat_of(p(std::string(255, 'r'))).st_mode));
  std::string huge = p("");
  while (huge.size() <= 4096) huge += "a/";
  EXPECT_ERRNO(::stat(huge.c_str(), &st), ENAMETOOLONG);
  // Search and write permission come before what lies behind them.
  ASSERT_OK(::mkdir(p("closed").c_str(), 0700));
  ASSERT_OK(::mkdir(p("closed/sub").c_str(), 0777));
  ASSERT_OK(::mkdir(p("ro").c_str(), 0755));
  const std::string closed_long = p("closed/" + long_name);
  EXPECT_EQ(as_user(kNobody, kNobody, [&] { return err_of(::mkfifo(p("ro/f").c_str(), 0644)); }),
            EACCES);
  EXPECT_EQ(
      as_user(kNobody, kNobody, [&] { return err_of(::mkfifo(p("closed/sub/f").c_str(), 0644)); }),
      EACCES);
  EXPECT_EQ(as_user(kNobody, kNobody, [&] { return err_of(::mkfifo(closed_long.c_str(), 0644)); }),
            EACCES);
  EXPECT_EQ(as_user(kNobody, kNobody,
                    [&] { return err_of(::rename(p("ro").c_str(), p("ro2").c_str())); }),
            EACCES);
  // Symlink loops.
  ASSERT_OK(::symlink("loop_b", p("loop_a").c_str()));
  ASSERT_OK(::symlink("loop_a", p("loop_b").c_str()));
  EXPECT_ERRNO(::stat(p("loop_a").c_str(), &st), ELOOP);
  EXPECT_ERRNO(::open(p("loop_a").c_str(), O_RDONLY | O_CLOEXEC), ELOOP);
  EXPECT_ERRNO(::open(p("loop_a").c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644), ELOOP);
  EXPECT_ERRNO(::stat(p("loop_a/x").c_str(), &st), ELOOP);
  EXPECT_ERRNO(::mkfifo(p("loop_a/x").c_str(), 0644), ELOOP);
  EXPECT_ERRNO(::rename(p("exists").c_str(), p("loop_a/x").c_str()), ELOOP);
  EXPECT_ERRNO(::chmod(p("loop_a").c_str(), 0600), ELOOP);
  EXPECT_ERRNO(::open(p("loop_a").c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC), ELOOP);
  ASSERT_OK(::symlink("exists", p("to_file").c_str()));
  EXPECT_ERRNO(::open(p("to_file").c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC), ELOOP);
  // A chain of 40 symlinks resolves; 41 is a loop.
  ASSERT_OK(::symlink("exists", p("chain40").c_str()));
  for (int i = 39; i >= 0; --i)
    ASSERT_OK(::symlink(("chain" + std::to_string(i + 1)).c_str(),
                        p("chain" + std::to_string(i)).c_str()));
  EXPECT_OK(::stat(p("chain1").c_str(), &st));
  EXPECT_ERRNO(::stat(p("chain0").c_str(), &st), ELOOP);
  // The loop itself is a name like any other.
  EXPECT_TRUE(S_ISLNK(lstat_of(p("loop_a")).st_mode));
  EXPECT_OK(::unlink(p("loop_a").c_str()));
  EXPECT_ERRNO(::stat(p("loop_b").c_str(), &st), ENOENT);
}

// chown clears set-user-ID, and set-group-ID where group execute is set,
// of everything but directories; a write or truncate by a user without
// CAP_FSETID does the same.
TEST_P(PosixBoth, SetuidSetgidClearedOnChownAndWrite) {
  struct Case {
    const char* name;
    mode_t type;
    mode_t before, after;
  };
  const Case chown_cases[] = {
      {"f6755", S_IFREG, 06755, 0755}, {"f4644", S_IFREG, 04644, 0644},
      {"f2755", S_IFREG, 02755, 0755}, {"f2745", S_IFREG, 02745, 02745},
      {"fifo", S_IFIFO, 06775, 0775},  {"chr", S_IFCHR, 04755, 0755},
      {"dir", S_IFDIR, 06755, 06755},  {"f1755", S_IFREG, 01755, 01755},
  };
  for (const Case& c : chown_cases) {
    SCOPED_TRACE(c.name);
    const std::string f = p(c.name);
    ASSERT_EQ(make_node(f, c.type), 0);
    ASSERT_OK(::chmod(f.c_str(), c.before));
    ASSERT_EQ(mode_of(f), c.before);
    ASSERT_OK(::chown(f.c_str(), kNobody, kNobody));
    EXPECT_EQ(mode_of(f), c.after) << std::oct << mode_of(f);
    // Also when neither id changes.
    ASSERT_OK(::chmod(f.c_str(), c.before));
    ASSERT_OK(::chown(f.c_str(), static_cast<uid_t>(-1), static_cast<gid_t>(-1)));
    EXPECT_EQ(mode_of(f), c.after) << "chown(-1, -1): " << std::oct << mode_of(f);
  }
  // An owner's chmod cannot set set-group-ID for a group it is not in.
  ASSERT_TRUE(write_file(p("owned"), "x"));
  ASSERT_OK(::chown(p("owned").c_str(), kNobody, 0));
  EXPECT_EQ(as_user(kNobody, kNobody, [&] { return err_of(::chmod(p("owned").c_str(), 02755)); }),
            0);
  EXPECT_EQ(mode_of(p("owned")), 0755u);

  // Set-group-ID without group execute goes too, unless the writer is in
  // the file's group ("g" cases: the group is nobody's).
  const Case write_cases[] = {{"w6777", S_IFREG, 06777, 0777},  {"w4666", S_IFREG, 04666, 0666},
                              {"w2777", S_IFREG, 02777, 0777},  {"w2666", S_IFREG, 02666, 0666},
                              {"g2666", S_IFREG, 02666, 02666}, {"g2777", S_IFREG, 02777, 0777},
                              {"w0777", S_IFREG, 0777, 0777}};
  for (const Case& c : write_cases) {
    SCOPED_TRACE(c.name);
    const std::string f = p(c.name);
    ASSERT_TRUE(write_file(f, "data"));
    if (c.name[0] == 'g') {
      ASSERT_OK(::chown(f.c_str(), 0, kNobody));
    }
    ASSERT_OK(::chmod(f.c_str(), c.before));
    // root (CAP_FSETID) keeps the bits.
    {
      Fd fd(::open(f.c_str(), O_WRONLY | O_CLOEXEC));
      ASSERT_GE(fd, 0);
      ASSERT_EQ(::pwrite(fd, "r", 1, 0), 1);
    }
    EXPECT_EQ(mode_of(f), c.before) << "write by root";
    EXPECT_EQ(as_user(kNobody, kNobody,
                      [&] {
                        const int fd = ::open(f.c_str(), O_WRONLY | O_CLOEXEC);
                        if (fd < 0) return errno;
                        const int e = ::pwrite(fd, "n", 1, 1) == 1 ? 0 : errno;
                        ::close(fd);
                        return e;
                      }),
              0);
    EXPECT_EQ(mode_of(f), c.after) << "write by nobody: " << std::oct << mode_of(f);
    EXPECT_EQ(slurp(f), "rnta");
    ASSERT_OK(::chmod(f.c_str(), c.before));
    EXPECT_EQ(as_user(kNobody, kNobody, [&] { return err_of(::truncate(f.c_str(), 2)); }), 0);
    EXPECT_EQ(mode_of(f), c.after) << "truncate by nobody: " << std::oct << mode_of(f);
    EXPECT_EQ(lstat_of(f).st_size, 2);
    ASSERT_OK(::chmod(f.c_str(), c.before));
    EXPECT_EQ(as_user(kNobody, kNobody,
                      [&] {
                        const int fd = ::open(f.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
                        if (fd < 0) return errno;
                        ::close(fd);
                        return 0;
                      }),
              0);
    EXPECT_EQ(mode_of(f), c.after) << "open O_TRUNC by nobody: " << std::oct << mode_of(f);
    EXPECT_EQ(lstat_of(f).st_size, 0);
  }
}

// A set-group-ID directory hands its group to what is made in it, and its
// set-group-ID bit to subdirectories.
TEST_P(PosixBoth, SetgidDirectoryGroupIsInherited) {
  const std::string d = p("sgid");
  ASSERT_OK(::mkdir(d.c_str(), 0777));
  ASSERT_OK(::chown(d.c_str(), 0, 4242));
  ASSERT_OK(::chmod(d.c_str(), 02777));
  for (const Kind& k : kAllKinds) {
    SCOPED_TRACE(k.name);
    const std::string f = d + "/" + k.name;
    ASSERT_EQ(make_node(f, k.type, 0755), 0);
    const struct stat st = lstat_of(f);
    EXPECT_EQ(st.st_gid, 4242u);
    EXPECT_EQ(st.st_uid, 0u);
    if (k.type == S_IFDIR) {
      EXPECT_EQ(st.st_mode & 07777, 02755u);
    } else if (k.type != S_IFLNK) {
      EXPECT_EQ(st.st_mode & 07777, 0755u);
    }
  }
  // Somebody else's file: the group is still the directory's.
  EXPECT_EQ(as_user(kNobody, kNobody, [&] { return make_node(d + "/nobody", S_IFREG, 0644); }), 0);
  EXPECT_EQ(lstat_of(d + "/nobody").st_gid, 4242u);
  EXPECT_EQ(lstat_of(d + "/nobody").st_uid, kNobody);
  // Without the bit, the creator's group.
  ASSERT_OK(::mkdir(p("plain").c_str(), 0777));
  ASSERT_OK(::chown(p("plain").c_str(), 0, 4242));
  EXPECT_EQ(as_user(kNobody, kNobody, [&] { return make_node(p("plain/f"), S_IFIFO); }), 0);
  EXPECT_EQ(lstat_of(p("plain/f")).st_gid, kNobody);
}

// A directory's link count is 2 plus its subdirectories, through mkdir,
// rmdir and renames between directories; other types count 1.
TEST_P(PosixBoth, DirectoryLinkCounts) {
  ASSERT_OK(::mkdir(p("a").c_str(), 0755));
  ASSERT_OK(::mkdir(p("b").c_str(), 0755));
  EXPECT_EQ(lstat_of(p("a")).st_nlink, 2u);
  ASSERT_OK(::mkdir(p("a/sub").c_str(), 0755));
  for (const Kind& k : kAllKinds) {
    if (k.type == S_IFDIR) continue;
    ASSERT_EQ(make_node(p(std::string("a/") + k.name), k.type), 0);
  }
  EXPECT_EQ(lstat_of(p("a")).st_nlink, 3u) << "only subdirectories count";
  for (const Kind& k : kAllKinds) {
    if (k.type == S_IFDIR) continue;
    EXPECT_EQ(lstat_of(p(std::string("a/") + k.name)).st_nlink, 1u);
  }
  ASSERT_OK(::rename(p("a/sub").c_str(), p("b/sub").c_str()));
  EXPECT_EQ(lstat_of(p("a")).st_nlink, 2u);
  EXPECT_EQ(lstat_of(p("b")).st_nlink, 3u);
  ASSERT_OK(::mkdir(p("a/other").c_str(), 0755));
  ASSERT_OK(::rename(p("b/sub").c_str(), p("a/other").c_str()));  // over an empty directory
  EXPECT_EQ(lstat_of(p("a")).st_nlink, 3u);
  EXPECT_EQ(lstat_of(p("b")).st_nlink, 2u);
  ASSERT_OK(::rename(p("a/fifo").c_str(), p("b/fifo").c_str()));
  EXPECT_EQ(lstat_of(p("b")).st_nlink, 2u);
  ASSERT_OK(::rmdir(p("a/other").c_str()));
  EXPECT_EQ(lstat_of(p("a")).st_nlink, 2u);
}

// Which calls mark ctime and mtime for update, on the file and on its
// directories, and that a call which fails marks nothing.
TEST_P(PosixBoth, CtimeAndMtimeUpdates) {
  const std::string d = p("d"), d2 = p("d2");
  ASSERT_OK(::mkdir(d.c_str(), 0777));
  ASSERT_OK(::mkdir(d2.c_str(), 0777));
  // Runs op; then each path's ctime (and mtime, where want_m) must have
  // advanced, and mtime must not have where !want_m.
  struct Want {
    std::string path;
    bool m;
  };
  auto expect_marks = [&](const char* what, const std::function<void()>& op,
                          const std::vector<Want>& wants) {
    SCOPED_TRACE(what);
    std::vector<struct stat> before;
    for (const Want& w : wants) before.push_back(lstat_of(w.path));
    for (const struct stat& b : before) tick_past(b.st_ctim);
    op();
    for (size_t i = 0; i < wants.size(); ++i) {
      const struct stat a = lstat_of(wants[i].path);
      EXPECT_GT(ns_of(a.st_ctim), ns_of(before[i].st_ctim)) << wants[i].path << " ctime";
      if (wants[i].m)
        EXPECT_GT(ns_of(a.st_mtim), ns_of(before[i].st_mtim)) << wants[i].path << " mtime";
      else
        EXPECT_EQ(ns_of(a.st_mtim), ns_of(before[i].st_mtim)) << wants[i].path << " mtime";
    }
  };
  const std::string f = d + "/f";
  expect_marks("create", [&] { ASSERT_TRUE(write_file(f, "0123456789")); }, {{d, true}});
  expect_marks("mkfifo", [&] { ASSERT_OK(::mkfifo((d + "/p").c_str(), 0644)); }, {{d, true}});
  expect_marks("mknod", [&] { ASSERT_EQ(make_node(d + "/c", S_IFCHR), 0); }, {{d, true}});
  expect_marks("mkdir", [&] { ASSERT_OK(::mkdir((d + "/sub").c_str(), 0755)); }, {{d, true}});
  expect_marks("symlink", [&] { ASSERT_OK(::symlink("f", (d + "/l").c_str())); }, {{d, true}});
  expect_marks("rmdir", [&] { ASSERT_OK(::rmdir((d + "/sub").c_str())); }, {{d, true}});
  expect_marks("write",
               [&] {
                 Fd fd(::open(f.c_str(), O_WRONLY | O_CLOEXEC));
                 ASSERT_EQ(::pwrite(fd, "ab", 2, 3), 2);
               },
               {{f, true}});
  expect_marks("truncate", [&] { ASSERT_OK(::truncate(f.c_str(), 5)); }, {{f, true}});
  expect_marks("truncate to the same size", [&] { ASSERT_OK(::truncate(f.c_str(), 5)); },
               {{f, true}});
  expect_marks("open O_TRUNC",
               [&] {
                 Fd fd(::open(f.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC));
                 ASSERT_GE(fd, 0);
                 ASSERT_EQ(::write(fd, "new", 3), 3);
               },
               {{f, true}});
  expect_marks("chmod", [&] { ASSERT_OK(::chmod(f.c_str(), 0666)); }, {{f, false}});
  expect_marks("chown", [&] { ASSERT_OK(::chown(f.c_str(), kNobody, kNobody)); }, {{f, false}});
  expect_marks(
      "chown(-1, -1)",
      [&] { ASSERT_OK(::chown(f.c_str(), static_cast<uid_t>(-1), static_cast<gid_t>(-1))); },
      {{f, false}});
  expect_marks(
      "chown(-1, -1) of a FIFO",
      [&] {
        ASSERT_OK(::chown((d + "/p").c_str(), static_cast<uid_t>(-1), static_cast<gid_t>(-1)));
      },
      {{d + "/p", false}});
  expect_marks("setxattr", [&] { ASSERT_OK(::setxattr(f.c_str(), "user.k", "v", 1, 0)); },
               {{f, false}});
  expect_marks("removexattr", [&] { ASSERT_OK(::removexattr(f.c_str(), "user.k")); }, {{f, false}});
  expect_marks("utimensat UTIME_NOW",
               [&] {
                 const timespec now[2] = {{0, UTIME_NOW}, {0, UTIME_NOW}};
                 ASSERT_OK(::utimensat(AT_FDCWD, f.c_str(), now, 0));
               },
               {{f, true}});
  expect_marks("utimensat",
               [&] {
                 const timespec t[2] = {{1000, 0}, {0, UTIME_OMIT}};
                 ASSERT_OK(::utimensat(AT_FDCWD, f.c_str(), t, 0));
               },
               {{f, false}});
  // rename: the file itself and both directories.
  const std::string g = d2 + "/g";
  {
    const struct stat fb = lstat_of(f);
    const struct stat db = lstat_of(d);
    const struct stat d2b = lstat_of(d2);
    tick_past(fb.st_ctim);
    tick_past(db.st_ctim);
    tick_past(d2b.st_ctim);
    ASSERT_OK(::rename(f.c_str(), g.c_str()));
    const struct stat ga = lstat_of(g);
    EXPECT_GT(ns_of(ga.st_ctim), ns_of(fb.st_ctim)) << "renamed file ctime";
    EXPECT_EQ(ns_of(ga.st_mtim), ns_of(fb.st_mtim)) << "renamed file mtime";
    for (const auto& [path, b] : {std::pair{d, db}, std::pair{d2, d2b}}) {
      const struct stat a = lstat_of(path);
      EXPECT_GT(ns_of(a.st_ctim), ns_of(b.st_ctim)) << path;
      EXPECT_GT(ns_of(a.st_mtim), ns_of(b.st_mtim)) << path;
    }
  }
  expect_marks("rename over a name", [&] { ASSERT_OK(::rename((d + "/p").c_str(), g.c_str())); },
               {{d, true}, {d2, true}});
  // unlink: the directory, and the file still open.
  ASSERT_TRUE(write_file(d2 + "/open", "o"));
  {
    Fd fd(::open((d2 + "/open").c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_GE(fd, 0);
    struct stat fb;
    ASSERT_OK(::fstat(fd, &fb));
    expect_marks("unlink", [&] { ASSERT_OK(::unlink((d2 + "/open").c_str())); }, {{d2, true}});
    struct stat fa;
    ASSERT_OK(::fstat(fd, &fa));
    EXPECT_EQ(fa.st_nlink, 0u);
    EXPECT_GT(ns_of(fa.st_ctim), ns_of(fb.st_ctim)) << "unlinked file ctime";
  }
  // Calls that fail or change nothing mark nothing.
  ASSERT_TRUE(write_file(p("still"), "s"));
  ASSERT_OK(::mkdir((d + "/full").c_str(), 0755));
  ASSERT_TRUE(write_file(d + "/full/x", "x"));
  const struct stat sb = lstat_of(p("still"));
  const struct stat db = lstat_of(d);
  tick_past(sb.st_ctim);
  tick_past(db.st_ctim);
  EXPECT_EQ(as_user(kNobody, kNobody, [&] { return err_of(::chmod(p("still").c_str(), 0777)); }),
            EPERM);
  EXPECT_EQ(
      as_user(kNobody, kNobody, [&] { return err_of(::chown(p("still").c_str(), kNobody, -1)); }),
      EPERM);
  EXPECT_EQ(as_user(kNobody, kNobody,
                    [&] {
                      const timespec t[2] = {{5, 0}, {5, 0}};
                      return err_of(::utimensat(AT_FDCWD, p("still").c_str(), t, 0));
                    }),
            EPERM);
  EXPECT_ERRNO(::rename(d2.c_str(), (d + "/full").c_str()), ENOTEMPTY);
  EXPECT_ERRNO(::mkdir((d + "/full").c_str(), 0755), EEXIST);
  {
    Fd fd(::open(p("still").c_str(), O_RDONLY | O_CLOEXEC));
    char c;
    ASSERT_EQ(::read(fd, &c, 1), 1);
  }
  const struct stat sa = lstat_of(p("still"));
  const struct stat da = lstat_of(d);
  EXPECT_EQ(ns_of(sa.st_ctim), ns_of(sb.st_ctim));
  EXPECT_EQ(ns_of(sa.st_mtim), ns_of(sb.st_mtim));
  EXPECT_EQ(sa.st_mode, sb.st_mode);
  EXPECT_EQ(ns_of(da.st_ctim), ns_of(db.st_ctim));
  EXPECT_EQ(ns_of(da.st_mtim), ns_of(db.st_mtim));
}

}  // namespace kvfs::test
