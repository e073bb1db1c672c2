// SPDX-License-Identifier: Apache-2.0
// POSIX behaviour of a real kvfs mount: lookup, getattr and access, mkdir -p,
// exclusive create, readdir, 255-byte names, names with any byte, and the
// open errors the clients can hit. Helpers: tests/mount_posix_util.h.

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <system_error>
#include <vector>

#include "tests/mount_posix_util.h"

namespace kvfs::test {

// ---------------------------------------------------------------------------
// lookup / getattr / access

TEST(MountPosix, LookupGetattrAccessPositiveAndNegative) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  ASSERT_TRUE(write_file(m.path("f"), "hello"));
  ASSERT_OK(::chmod(m.path("f").c_str(), 0644));
  ASSERT_OK(::mkdir(m.path("d").c_str(), 0755));

  struct stat st;
  ASSERT_OK(::stat(m.path("f").c_str(), &st));
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  EXPECT_EQ(st.st_size, 5);
  EXPECT_EQ(st.st_nlink, 1u);
  ASSERT_OK(::stat(m.path("d").c_str(), &st));
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  EXPECT_EQ(st.st_nlink, 2u);
  ASSERT_OK(::stat(m.mnt().c_str(), &st));
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_nlink, 3u);  // ".", its entry in the parent, "d/.."

  EXPECT_OK(::access(m.path("f").c_str(), F_OK));
  EXPECT_OK(::access(m.path("f").c_str(), R_OK | W_OK));
  EXPECT_ERRNO(::access(m.path("f").c_str(), X_OK), EACCES);  // no x bit, even for root
  EXPECT_OK(::access(m.path("d").c_str(), R_OK | W_OK | X_OK));

  // Negative: vLLM polls absent chunks; each poll must say ENOENT.
  for (int i = 0; i < 3; ++i) {
    EXPECT_ERRNO(::access(m.path("absent.bin").c_str(), F_OK), ENOENT);
    EXPECT_ERRNO(::stat(m.path("absent.bin").c_str(), &st), ENOENT);
  }
  EXPECT_ERRNO(::lstat(m.path("d/absent").c_str(), &st), ENOENT);
  EXPECT_ERRNO(::access(m.path("nodir/absent").c_str(), F_OK), ENOENT);
  EXPECT_ERRNO(::access(m.path("f/child").c_str(), F_OK), ENOTDIR);
  EXPECT_ERRNO(::open(m.path("absent.bin").c_str(), O_RDONLY), ENOENT);

  // A name that was just looked up as absent appears once created.
  ASSERT_TRUE(write_file(m.path("absent.bin"), "now here"));
  EXPECT_OK(::access(m.path("absent.bin").c_str(), F_OK));
  ASSERT_OK(::stat(m.path("absent.bin").c_str(), &st));
  EXPECT_EQ(st.st_size, 8);
  // ...and absent again once removed.
  ASSERT_OK(::unlink(m.path("absent.bin").c_str()));
  EXPECT_ERRNO(::access(m.path("absent.bin").c_str(), F_OK), ENOENT);

  ASSERT_OK(::chmod(m.path("f").c_str(), 0755));
  EXPECT_OK(::access(m.path("f").c_str(), X_OK));

  remount(m);
  ASSERT_OK(::stat(m.path("f").c_str(), &st));
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  EXPECT_EQ(st.st_size, 5);
  EXPECT_ERRNO(::access(m.path("absent.bin").c_str(), F_OK), ENOENT);
  EXPECT_OK(::access(m.path("d").c_str(), F_OK));
}

// ---------------------------------------------------------------------------
// mkdir -p

TEST(MountPosix, MkdirPDeepTree) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  std::string rel;
  for (int i = 0; i < 64; ++i) rel += (i ? "/" : "") + ("level" + std::to_string(i));
  RunResult r = run_command({"mkdir", "-p", m.path(rel)});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // mkdir -p again is a no-op; plain mkdir of an existing dir is EEXIST.
  r = run_command({"mkdir", "-p", m.path(rel)});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_ERRNO(::mkdir(m.path(rel).c_str(), 0755), EEXIST);
  ASSERT_TRUE(write_file(m.path(rel + "/leaf.bin"), "deep"));

  auto check = [&] {
    std::string p;
    for (int i = 0; i < 64; ++i) {
      p += (i ? "/" : "") + ("level" + std::to_string(i));
      struct stat st;
      ASSERT_OK(::stat(m.path(p).c_str(), &st)) << " at level " << i;
      EXPECT_TRUE(S_ISDIR(st.st_mode));
      EXPECT_EQ(st.st_nlink, i == 63 ? 2u : 3u) << "level " << i;
    }
    EXPECT_EQ(slurp(m.path(rel + "/leaf.bin")), "deep");
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

TEST(MountPosix, MkdirPWideTree) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  constexpr int kWide = 5000;
  ASSERT_OK(::mkdir(m.path("wide").c_str(), 0755));
  for (int i = 0; i < kWide; ++i) {
    // vLLM's layout: <h[0:3]>/<h[3:5]>_g<group>; mkdir -p creates both levels
    // (for one in ten here, to keep the test short).
    std::string p = m.path("wide/" + std::to_string(i) + (i % 10 == 1 ? "/g_0" : ""));
    std::error_code ec;
    ASSERT_TRUE(std::filesystem::create_directories(p, ec)) << p << ": " << ec.message();
  }
  auto check = [&] {
    auto names = list_dir(m.path("wide"));
    ASSERT_EQ(names.size(), size_t(kWide));
    for (int i = 0; i < kWide; ++i) {
      auto it = names.find(std::to_string(i));
      ASSERT_NE(it, names.end()) << i;
      EXPECT_EQ(it->second, 1) << i;
    }
    struct stat st;
    ASSERT_OK(::stat(m.path("wide").c_str(), &st));
    EXPECT_EQ(st.st_nlink, 2u + kWide);
    ASSERT_OK(::stat(m.path("wide/4321/g_0").c_str(), &st));
    EXPECT_TRUE(S_ISDIR(st.st_mode));
    ASSERT_OK(::stat(m.path("wide/4321").c_str(), &st));
    EXPECT_EQ(st.st_nlink, 3u);
    EXPECT_ERRNO(::stat(m.path("wide/4322/g_0").c_str(), &st), ENOENT);
    EXPECT_ERRNO(::stat(m.path("wide/" + std::to_string(kWide)).c_str(), &st), ENOENT);
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

// ---------------------------------------------------------------------------
// create: O_EXCL

TEST(MountPosix, CreateExclusive) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  const std::string p = m.path("x.tmp");
  Fd fd(::open(p.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644));
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(::write(fd, "first", 5), 5);
  // A second exclusive create fails, while the first is open and after close.
  EXPECT_ERRNO(::open(p.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644), EEXIST);
  ASSERT_OK(fd.close());
  EXPECT_ERRNO(::open(p.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_TRUNC, 0644), EEXIST);
  EXPECT_EQ(slurp(p), "first");  // the failed O_TRUNC did not truncate
  ASSERT_OK(::mkdir(m.path("dir").c_str(), 0755));
  EXPECT_ERRNO(::open(m.path("dir").c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644), EEXIST);
  EXPECT_ERRNO(::mkdir(p.c_str(), 0755), EEXIST);
  EXPECT_ERRNO(::symlink("t", p.c_str()), EEXIST);
  // vLLM's exact flags on a fresh name.
  fd.reset(::open(m.path("y.tmp").c_str(), O_CREAT | O_EXCL | O_WRONLY | O_TRUNC | O_DIRECT, 0644));
  ASSERT_GE(fd, 0) << std::strerror(errno);
  fd.close();
  remount(m);
  EXPECT_EQ(slurp(p), "first");
  EXPECT_ERRNO(::open(p.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644), EEXIST);
  struct stat st;
  ASSERT_OK(::stat(m.path("y.tmp").c_str(), &st));
  EXPECT_EQ(st.st_size, 0);
}

// ---------------------------------------------------------------------------
// readdir

TEST(MountPosix, Readdir10000EntriesEachOnce) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  constexpr int kN = 10000;
  ASSERT_OK(::mkdir(m.path("big").c_str(), 0755));
  for (int i = 0; i < kN; ++i) {
    Fd fd(::open(m.path("big/entry_" + std::to_string(i)).c_str(),
                 O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644));
    ASSERT_GE(fd, 0) << i << ": " << std::strerror(errno);
    fd.close();
  }
  auto check = [&] {
    DIR* d = ::opendir(m.path("big").c_str());
    ASSERT_NE(d, nullptr);
    std::map<std::string, int> seen;
    int dots = 0;
    errno = 0;
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n == "." || n == "..") {
        ++dots;
        EXPECT_EQ(e->d_type, DT_DIR);
        continue;
      }
      EXPECT_EQ(e->d_type, DT_REG) << n;
      ++seen[n];
    }
    EXPECT_EQ(errno, 0);
    ::closedir(d);
    EXPECT_EQ(dots, 2);
    ASSERT_EQ(seen.size(), size_t(kN));
    for (int i = 0; i < kN; ++i) {
      auto it = seen.find("entry_" + std::to_string(i));
      ASSERT_NE(it, seen.end()) << i;
      EXPECT_EQ(it->second, 1) << "entry_" << i << " returned " << it->second << " times";
    }
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

TEST(MountPosix, ReaddirWhileCreatingNoDuplicates) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  constexpr int kN = 3000;
  ASSERT_OK(::mkdir(m.path("dir").c_str(), 0755));
  for (int i = 0; i < kN; ++i)
    ASSERT_TRUE(write_file(m.path("dir/old_" + std::to_string(i)), "")) << i;
  DIR* d = ::opendir(m.path("dir").c_str());
  ASSERT_NE(d, nullptr);
  std::map<std::string, int> seen;
  int created = 0, read_calls = 0;
  errno = 0;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") ++seen[n];
    // Between readdir calls: new files appear (a writer pool at work).
    if (++read_calls % 10 == 0) {
      ASSERT_TRUE(write_file(m.path("dir/new_" + std::to_string(created)), "")) << created;
      ++created;
    }
  }
  EXPECT_EQ(errno, 0);
  ::closedir(d);
  ASSERT_GT(created, 250);
  for (auto& [n, c] : seen) EXPECT_EQ(c, 1) << n << " returned " << c << " times";
  for (int i = 0; i < kN; ++i)
    EXPECT_EQ(seen.count("old_" + std::to_string(i)), 1u) << "old_" << i << " missing";
  for (auto& [n, c] : seen)
    EXPECT_TRUE(n.rfind("old_", 0) == 0 || n.rfind("new_", 0) == 0) << "unexpected name " << n;
  // Afterwards a fresh listing has every file once.
  auto all = list_dir(m.path("dir"));
  EXPECT_EQ(all.size(), size_t(kN + created));
  for (auto& [n, c] : all) EXPECT_EQ(c, 1) << n;
}

// ---------------------------------------------------------------------------
// names

TEST(MountPosix, NameOf255BytesWorks256IsTooLong) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  std::string n255;
  for (int i = 0; n255.size() < 255; ++i) n255 += static_cast<char>('a' + i % 26);
  const std::string n256 = n255 + "z";
  ASSERT_EQ(n255.size(), 255u);
  ASSERT_TRUE(write_file(m.path(n255), "max name")) << std::strerror(errno);
  ASSERT_OK(::mkdir(m.path("d").c_str(), 0755));
  ASSERT_OK(::mkdir(m.path("d/" + n255).c_str(), 0755));
  struct stat st;
  EXPECT_OK(::stat(m.path(n255).c_str(), &st));
  EXPECT_ERRNO(::open(m.path(n256).c_str(), O_CREAT | O_WRONLY, 0644), ENAMETOOLONG);
  EXPECT_ERRNO(::stat(m.path(n256).c_str(), &st), ENAMETOOLONG);
  EXPECT_ERRNO(::access(m.path(n256).c_str(), F_OK), ENAMETOOLONG);
  EXPECT_ERRNO(::mkdir(m.path(n256).c_str(), 0755), ENAMETOOLONG);
  EXPECT_ERRNO(::symlink("t", m.path(n256).c_str()), ENAMETOOLONG);
  EXPECT_ERRNO(::rename(m.path(n255).c_str(), m.path(n256).c_str()), ENAMETOOLONG);
  EXPECT_ERRNO(::unlink(m.path(n256).c_str()), ENAMETOOLONG);
  auto check = [&] {
    EXPECT_EQ(slurp(m.path(n255)), "max name");
    EXPECT_EQ(list_dir(m.mnt()), (std::map<std::string, int>{{n255, 1}, {"d", 1}}));
    EXPECT_EQ(list_dir(m.path("d")), (std::map<std::string, int>{{n255, 1}}));
    struct stat s2;
    EXPECT_ERRNO(::stat(m.path(n256).c_str(), &s2), ENAMETOOLONG);
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
  // Rename to and from a 255-byte name.
  ASSERT_OK(::rename(m.path(n255).c_str(), m.path("short").c_str()));
  ASSERT_OK(::rename(m.path("short").c_str(), m.path("d/" + n255 + "/" + n255).c_str()));
  remount(m);
  EXPECT_EQ(slurp(m.path("d/" + n255 + "/" + n255)), "max name");
}

TEST(MountPosix, NamesWithAnyByteExceptSlashAndNul) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  std::vector<std::string> names = {"with space",
                                    " leading space",
                                    "trailing space ",
                                    "new\nline",
                                    "\nstarts",
                                    "\xff",
                                    "\xff\xfe\xfd",
                                    "caf\xc3\xa9",
                                    "\xc3\x28",
                                    "\xed\xa0\x80",
                                    "-leading-dash",
                                    "--",
                                    "-",
                                    "-rf",
                                    "tab\tname",
                                    "\x01\x02\x7f",
                                    "...",
                                    ".hidden",
                                    "a\\b",
                                    "*?[]{}",
                                    "'\"`$(x)",
                                    "a:b;c|d&e",
                                    "\r\x1b[0m",
                                    "%s%n%x",
                                    "\xe2\x80\x8b"};
  // Every byte value 1..255 except '/' appears in some name.
  std::string all;
  for (int c = 1; c < 256; ++c)
    if (c != '/') all += static_cast<char>(c);
  names.push_back(all.substr(0, 200));
  names.push_back(all.substr(200));
  for (size_t i = 0; i < names.size(); ++i)
    ASSERT_TRUE(write_file(m.path(names[i]), "content " + std::to_string(i)))
        << "create of name #" << i << ": " << std::strerror(errno);
  ASSERT_OK(::mkdir(m.path("dir \xff\n-x").c_str(), 0755));
  ASSERT_TRUE(write_file(m.path("dir \xff\n-x/-inner\xfe"), "inner"));
  auto check = [&] {
    std::map<std::string, int> want;
    for (auto& n : names) want[n] = 1;
    want["dir \xff\n-x"] = 1;
    EXPECT_EQ(list_dir(m.mnt()), want);
    for (size_t i = 0; i < names.size(); ++i) {
      EXPECT_EQ(slurp(m.path(names[i])), "content " + std::to_string(i)) << "name #" << i;
      EXPECT_OK(::access(m.path(names[i]).c_str(), F_OK)) << "name #" << i;
    }
    EXPECT_EQ(slurp(m.path("dir \xff\n-x/-inner\xfe")), "inner");
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
  // Renames between odd names.
  ASSERT_OK(::rename(m.path(names[3]).c_str(), m.path("\xff\xff renamed\n").c_str()));
  EXPECT_EQ(slurp(m.path("\xff\xff renamed\n")), "content 3");
  EXPECT_ERRNO(::access(m.path(names[3]).c_str(), F_OK), ENOENT);
}

// ---------------------------------------------------------------------------
// Misc errors the clients can hit.

TEST(MountPosix, OpenErrors) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  ASSERT_OK(::mkdir(m.path("d").c_str(), 0755));
  ASSERT_TRUE(write_file(m.path("f"), "x"));
  EXPECT_ERRNO(::open(m.path("d").c_str(), O_WRONLY), EISDIR);
  EXPECT_ERRNO(::open(m.path("f").c_str(), O_RDONLY | O_DIRECTORY), ENOTDIR);
  EXPECT_ERRNO(::open(m.path("f/x").c_str(), O_CREAT | O_WRONLY, 0644), ENOTDIR);
  EXPECT_ERRNO(::open(m.path("nodir/x").c_str(), O_CREAT | O_WRONLY, 0644), ENOENT);
  EXPECT_ERRNO(::mkdir(m.path("nodir/x").c_str(), 0755), ENOENT);
  EXPECT_ERRNO(::rename(m.path("absent").c_str(), m.path("y").c_str()), ENOENT);
  Fd fd(::open(m.path("f").c_str(), O_RDONLY));
  ASSERT_GE(fd, 0);
  char c;
  EXPECT_ERRNO(::write(fd, &c, 1), EBADF);
  fd.close();
}

}  // namespace kvfs::test
