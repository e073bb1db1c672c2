// SPDX-License-Identifier: Apache-2.0
// POSIX behaviour of a real kvfs mount: rename (atomic replace, the store
// loops of the offloaders, xattrs, RENAME_NOREPLACE, directories), unlink
// while open, rmdir, and hard links. Helpers: tests/mount_posix_util.h.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/fs.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <string>

#include "tests/mount_posix_util.h"

namespace kvfs::test {

// ---------------------------------------------------------------------------
// rename

TEST(MountPosix, RenameAtomicReplaceOfExistingTarget) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  const std::string dest = m.path("block.bin"), tmp = m.path("block.bin_42.tmp");
  const std::string old_data = random_bytes(2 * kMiB + 3, 1), new_data = random_bytes(3 * kMiB, 2);
  ASSERT_TRUE(write_file(dest, old_data));
  Fd old_fd(::open(dest.c_str(), O_RDONLY | O_CLOEXEC));  // a reader of the old file
  ASSERT_GE(old_fd, 0);
  struct stat old_st;
  ASSERT_OK(::fstat(old_fd, &old_st));
  ASSERT_TRUE(write_file(tmp, new_data));
  ASSERT_OK(::rename(tmp.c_str(), dest.c_str()));
  EXPECT_ERRNO(::access(tmp.c_str(), F_OK), ENOENT);
  struct stat st;
  ASSERT_OK(::stat(dest.c_str(), &st));
  EXPECT_EQ(size_t(st.st_size), new_data.size());
  EXPECT_NE(st.st_ino, old_st.st_ino);
  EXPECT_SAME_BYTES(slurp(dest), new_data);
  // The replaced file stays whole for its open fd, also past the page cache.
  ASSERT_OK(::posix_fadvise(old_fd, 0, 0, POSIX_FADV_DONTNEED));
  EXPECT_SAME_BYTES(pread_str(old_fd, 4 * kMiB, 0), old_data);
  ASSERT_OK(old_fd.close());
  EXPECT_EQ(list_dir(m.mnt()), (std::map<std::string, int>{{"block.bin", 1}}));
  remount(m);
  EXPECT_SAME_BYTES(slurp(dest), new_data);
  EXPECT_ERRNO(::access(tmp.c_str(), F_OK), ENOENT);
  EXPECT_EQ(list_dir(m.mnt()), (std::map<std::string, int>{{"block.bin", 1}}));
}

// The LMCache/vLLM store loop: write tmp, close, rename over the final name,
// many times in a row (half of them replacing a committed file), then check
// that the index recorded the final names, not the tmp names.
TEST(MountPosix, RenameAfterCloseManyFilesSurvivesRemount) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  constexpr int kFiles = 300;
  for (int i = 0; i < kFiles; i += 2)
    ASSERT_TRUE(write_file(m.path("k" + std::to_string(i) + ".bin"), "old" + std::to_string(i)));
  Fd dfd(::open(m.mnt().c_str(), O_RDONLY | O_DIRECTORY));
  ASSERT_GE(dfd, 0);
  ASSERT_OK(::fsync(dfd));  // commits the "old" files
  dfd.close();
  auto content = [](int i) { return "new" + std::to_string(i) + random_bytes(4096 * (i % 5), i); };
  for (int i = 0; i < kFiles; ++i) {
    const std::string fin = m.path("k" + std::to_string(i) + ".bin");
    const std::string tmp = fin + ".tmp";
    ASSERT_TRUE(write_file(tmp, content(i)));
    ASSERT_OK(::rename(tmp.c_str(), fin.c_str())) << i;
  }
  auto check = [&] {
    auto names = list_dir(m.mnt());
    EXPECT_EQ(names.size(), size_t(kFiles));
    // Counted, with a few examples, rather than one failure per file.
    int missing = 0, tmp_listed = 0, wrong = 0;
    std::string examples;
    for (int i = 0; i < kFiles; ++i) {
      const std::string n = "k" + std::to_string(i) + ".bin";
      const bool bad_name = names.count(n) != 1, bad_tmp = names.count(n + ".tmp") != 0;
      const bool bad_data = slurp(m.path(n)) != content(i);
      missing += bad_name;
      tmp_listed += bad_tmp;
      wrong += bad_data;
      if ((bad_name || bad_tmp || bad_data) && examples.size() < 200) examples += " " + n;
    }
    EXPECT_EQ(missing, 0) << "final names missing from the listing";
    EXPECT_EQ(tmp_listed, 0) << "tmp names (renamed away) listed";
    EXPECT_EQ(wrong, 0) << "final names with wrong content";
    EXPECT_EQ(examples, "") << "of " << kFiles << " files";
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

// A committed file or directory whose attributes change (xattr, mode) and
// that is renamed right after: a flush of the attribute change may be in
// flight during the rename, and must not put the old name back in the index.
TEST(MountPosix, RenameRightAfterAttrChangeSurvivesRemount) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  constexpr int kFiles = 100, kDirs = 20;
  for (int i = 0; i < kFiles; ++i)
    ASSERT_TRUE(write_file(m.path("f" + std::to_string(i) + ".tmp"), "data" + std::to_string(i)));
  for (int i = 0; i < kDirs; ++i) ASSERT_OK(::mkdir(m.path("d" + std::to_string(i)).c_str(), 0755));
  Fd dfd(::open(m.mnt().c_str(), O_RDONLY | O_DIRECTORY));
  ASSERT_GE(dfd, 0);
  ASSERT_OK(::fsync(dfd));  // everything committed under the first names
  ASSERT_OK(dfd.close());
  for (int i = 0; i < kFiles; ++i) {
    const std::string tmp = m.path("f" + std::to_string(i) + ".tmp");
    const std::string crc = "crc" + std::to_string(i);
    ASSERT_OK(::setxattr(tmp.c_str(), "user.vllm.kv_crc32c", crc.data(), crc.size(), 0));
    ASSERT_OK(::rename(tmp.c_str(), m.path("f" + std::to_string(i) + ".bin").c_str()));
  }
  for (int i = 0; i < kDirs; ++i) {
    const std::string d = m.path("d" + std::to_string(i));
    ASSERT_OK(::chmod(d.c_str(), 0700));
    ASSERT_OK(::rename(d.c_str(), m.path("e" + std::to_string(i)).c_str()));
  }
  auto check = [&] {
    std::map<std::string, int> want;
    for (int i = 0; i < kFiles; ++i) want["f" + std::to_string(i) + ".bin"] = 1;
    for (int i = 0; i < kDirs; ++i) want["e" + std::to_string(i)] = 1;
    auto got = list_dir(m.mnt());
    std::string extra, missing;
    for (auto& [n, c] : got)
      if (!want.count(n)) extra += " " + n;
    for (auto& [n, c] : want)
      if (!got.count(n)) missing += " " + n;
    EXPECT_EQ(extra, "") << "names that were renamed away";
    EXPECT_EQ(missing, "") << "names missing";
    int bad = 0;
    for (int i = 0; i < kFiles; ++i) {
      const std::string f = m.path("f" + std::to_string(i) + ".bin");
      bad += slurp(f) != "data" + std::to_string(i) ||
             getx(f, "user.vllm.kv_crc32c") != "crc" + std::to_string(i);
    }
    EXPECT_EQ(bad, 0) << "files with wrong content or xattr";
    struct stat st;
    for (int i = 0; i < kDirs; ++i) {
      if (::stat(m.path("e" + std::to_string(i)).c_str(), &st) == 0) {
        EXPECT_EQ(st.st_mode & 07777, 0700u) << "e" << i;
      }
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

TEST(MountPosix, RenameWhileSourceFdOpen) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  const std::string dest = m.path("chunk.bin"), tmp = m.path("chunk.bin_7.tmp");
  ASSERT_TRUE(write_file(dest, "previous"));
  const std::string data = random_bytes(5 * kMiB + 11, 31);
  // llm-d: buffered 1 MiB writes, flush, rename with the fd still open, close.
  Fd fd(::open(tmp.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644));
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, data.data(), 3 * kMiB), ssize_t(3 * kMiB));
  ASSERT_OK(::rename(tmp.c_str(), dest.c_str()));
  EXPECT_ERRNO(::access(tmp.c_str(), F_OK), ENOENT);
  // Keep writing through the fd after the rename.
  ASSERT_EQ(::write(fd, data.data() + 3 * kMiB, data.size() - 3 * kMiB),
            ssize_t(data.size() - 3 * kMiB));
  struct stat st;
  ASSERT_OK(::fstat(fd, &st));
  EXPECT_EQ(size_t(st.st_size), data.size());
  EXPECT_EQ(st.st_nlink, 1u);
  ASSERT_OK(fd.close());
  EXPECT_SAME_BYTES(slurp(dest), data);
  drop_cache(dest);
  EXPECT_SAME_BYTES(slurp(dest), data);
  remount(m);
  EXPECT_SAME_BYTES(slurp(dest), data);
  EXPECT_ERRNO(::access(tmp.c_str(), F_OK), ENOENT);
  EXPECT_EQ(list_dir(m.mnt()), (std::map<std::string, int>{{"chunk.bin", 1}}));
}

TEST(MountPosix, RenameCarriesUserXattrs) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  const std::string dest = m.path("a.bin"), tmp = m.path("a.bin_1.tmp");
  ASSERT_TRUE(write_file(dest, "old"));
  ASSERT_OK(::setxattr(dest.c_str(), "user.old", "1", 1, 0));
  // vLLM: CRC32C set on the tmp file (fd still open) before the rename.
  Fd fd(::open(tmp.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644));
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "new data", 8), 8);
  const std::string crc("\x12\x34\x00\xff", 4);
  ASSERT_OK(::fsetxattr(fd, "user.vllm.kv_crc32c", crc.data(), crc.size(), XATTR_CREATE));
  ASSERT_OK(fd.close());
  ASSERT_OK(::setxattr(tmp.c_str(), "user.other", "v", 1, 0));
  ASSERT_OK(::rename(tmp.c_str(), dest.c_str()));
  // A directory's xattrs follow its rename too.
  ASSERT_OK(::mkdir(m.path("d1").c_str(), 0755));
  ASSERT_OK(::setxattr(m.path("d1").c_str(), "user.dir", "dv", 2, 0));
  ASSERT_OK(::rename(m.path("d1").c_str(), m.path("d2").c_str()));
  auto check = [&] {
    EXPECT_EQ(getx(dest, "user.vllm.kv_crc32c"), crc);
    EXPECT_EQ(getx(dest, "user.other"), "v");
    EXPECT_ERRNO(::getxattr(dest.c_str(), "user.old", nullptr, 0), ENODATA);
    EXPECT_EQ(listx(dest), (std::set<std::string>{"user.vllm.kv_crc32c", "user.other"}));
    EXPECT_EQ(slurp(dest), "new data");
    EXPECT_EQ(getx(m.path("d2"), "user.dir"), "dv");
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

TEST(MountPosix, RenameNoReplaceGivesEexist) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  ASSERT_TRUE(write_file(m.path("a"), "A"));
  ASSERT_TRUE(write_file(m.path("b"), "B"));
  auto renameat2 = [](const std::string& from, const std::string& to, unsigned flags) {
    return ::syscall(SYS_renameat2, AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), flags);
  };
  EXPECT_ERRNO(renameat2(m.path("a"), m.path("b"), RENAME_NOREPLACE), EEXIST);
  EXPECT_EQ(slurp(m.path("a")), "A");
  EXPECT_EQ(slurp(m.path("b")), "B");
  ASSERT_OK(::mkdir(m.path("d").c_str(), 0755));
  EXPECT_ERRNO(renameat2(m.path("a"), m.path("d"), RENAME_NOREPLACE), EEXIST);
  // To a free name it works.
  ASSERT_OK(renameat2(m.path("a"), m.path("c"), RENAME_NOREPLACE));
  EXPECT_ERRNO(::access(m.path("a").c_str(), F_OK), ENOENT);
  EXPECT_EQ(slurp(m.path("c")), "A");
  remount(m);
  EXPECT_EQ(slurp(m.path("b")), "B");
  EXPECT_EQ(slurp(m.path("c")), "A");
  EXPECT_ERRNO(::access(m.path("a").c_str(), F_OK), ENOENT);
}

TEST(MountPosix, RenameDirIntoOwnSubtreeIsEinval) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  ASSERT_EQ(run_command({"mkdir", "-p", m.path("a/b/c")}).exit_code, 0);
  ASSERT_TRUE(write_file(m.path("a/b/c/f"), "f"));
  EXPECT_ERRNO(::rename(m.path("a").c_str(), m.path("a/b/c/x").c_str()), EINVAL);
  EXPECT_ERRNO(::rename(m.path("a").c_str(), m.path("a/b/x").c_str()), EINVAL);
  EXPECT_ERRNO(::rename(m.path("a/b").c_str(), m.path("a/b/c/x").c_str()), EINVAL);
  // Moving a directory elsewhere works and takes its subtree along.
  ASSERT_OK(::mkdir(m.path("z").c_str(), 0755));
  ASSERT_OK(::rename(m.path("a/b").c_str(), m.path("z/b").c_str()));
  // Over an empty directory: allowed; over a non-empty one: ENOTEMPTY.
  ASSERT_OK(::mkdir(m.path("empty").c_str(), 0755));
  ASSERT_OK(::rename(m.path("z").c_str(), m.path("empty").c_str()));
  ASSERT_OK(::mkdir(m.path("z").c_str(), 0755));
  ASSERT_OK(::mkdir(m.path("z/child").c_str(), 0755));
  EXPECT_ERRNO(::rename(m.path("a").c_str(), m.path("z").c_str()), ENOTEMPTY);
  // File over directory and directory over file.
  EXPECT_ERRNO(::rename(m.path("empty/b/c/f").c_str(), m.path("z").c_str()), EISDIR);
  EXPECT_ERRNO(::rename(m.path("z").c_str(), m.path("empty/b/c/f").c_str()), ENOTDIR);
  auto check = [&] {
    EXPECT_EQ(slurp(m.path("empty/b/c/f")), "f");
    EXPECT_EQ(list_dir(m.path("a")), (std::map<std::string, int>{}));
    EXPECT_EQ(list_dir(m.mnt()), (std::map<std::string, int>{{"a", 1}, {"empty", 1}, {"z", 1}}));
    EXPECT_EQ(list_dir(m.path("z")), (std::map<std::string, int>{{"child", 1}}));
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
// unlink, rmdir

void unlink_while_open(bool committed_first) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  const std::string p = m.path("victim.bin");
  const std::string data = random_bytes(4 * kMiB + 5, committed_first ? 44 : 43);
  ASSERT_TRUE(write_file(p, data));
  Fd fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_GE(fd, 0);
  if (committed_first) {
    ASSERT_OK(::fsync(fd));
  }
  ASSERT_OK(::unlink(p.c_str()));
  EXPECT_ERRNO(::access(p.c_str(), F_OK), ENOENT);
  EXPECT_ERRNO(::unlink(p.c_str()), ENOENT);
  struct stat st;
  ASSERT_OK(::fstat(fd, &st));
  EXPECT_EQ(st.st_nlink, 0u);
  EXPECT_EQ(size_t(st.st_size), data.size());
  // A new file under the same name is a different file.
  ASSERT_TRUE(write_file(p, "replacement"));
  // Read through the open fd, from the daemon (not the page cache).
  ASSERT_OK(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED));
  EXPECT_SAME_BYTES(pread_str(fd, 8 * kMiB, 0), data);
  AlignedBuf rb(8 * kMiB);
  Fd dfd(::open(("/proc/self/fd/" + std::to_string(fd)).c_str(), O_RDONLY | O_DIRECT));
  if (dfd >= 0) {  // reopening a deleted file through /proc: O_DIRECT path too
    ssize_t r = ::pread(dfd, rb.data, 8 * kMiB, 0);
    EXPECT_EQ(r, ssize_t(data.size())) << std::strerror(errno);
    if (r == ssize_t(data.size())) {
      EXPECT_EQ(std::memcmp(rb.data, data.data(), data.size()), 0);
    }
    dfd.close();
  }
  ASSERT_OK(fd.close());
  EXPECT_EQ(slurp(p), "replacement");
  remount(m);
  EXPECT_EQ(slurp(p), "replacement");
  EXPECT_EQ(list_dir(m.mnt()), (std::map<std::string, int>{{"victim.bin", 1}}));
}

TEST(MountPosix, UnlinkWhileOpenKeepsDataDirty) {
  unlink_while_open(false);
}
TEST(MountPosix, UnlinkWhileOpenKeepsDataCommitted) {
  unlink_while_open(true);
}

TEST(MountPosix, RmdirErrors) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  ASSERT_EQ(run_command({"mkdir", "-p", m.path("full/sub")}).exit_code, 0);
  ASSERT_TRUE(write_file(m.path("full/file"), "x"));
  ASSERT_OK(::mkdir(m.path("empty").c_str(), 0755));
  EXPECT_ERRNO(::rmdir(m.path("full").c_str()), ENOTEMPTY);
  EXPECT_ERRNO(::rmdir(m.path("full/file").c_str()), ENOTDIR);
  EXPECT_ERRNO(::rmdir(m.path("absent").c_str()), ENOENT);
  EXPECT_ERRNO(::unlink(m.path("empty").c_str()), EISDIR);
  EXPECT_ERRNO(::unlink(m.path("absent").c_str()), ENOENT);
  EXPECT_OK(::rmdir(m.path("empty").c_str()));
  EXPECT_ERRNO(::access(m.path("empty").c_str(), F_OK), ENOENT);
  // A directory with only an (empty) subdirectory is still not empty.
  ASSERT_OK(::unlink(m.path("full/file").c_str()));
  EXPECT_ERRNO(::rmdir(m.path("full").c_str()), ENOTEMPTY);
  remount(m);
  EXPECT_ERRNO(::access(m.path("empty").c_str(), F_OK), ENOENT);
  EXPECT_ERRNO(::rmdir(m.path("full").c_str()), ENOTEMPTY);
  EXPECT_OK(::rmdir(m.path("full/sub").c_str()));
  EXPECT_OK(::rmdir(m.path("full").c_str()));
  remount(m);
  EXPECT_EQ(list_dir(m.mnt()), (std::map<std::string, int>{}));
}

// ---------------------------------------------------------------------------
// links

TEST(MountPosix, HardLinkIsEperm) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  ASSERT_TRUE(write_file(m.path("a"), "A"));
  EXPECT_ERRNO(::link(m.path("a").c_str(), m.path("b").c_str()), EPERM);
  EXPECT_ERRNO(::linkat(AT_FDCWD, m.path("a").c_str(), AT_FDCWD, m.path("c").c_str(), 0), EPERM);
  EXPECT_ERRNO(::access(m.path("b").c_str(), F_OK), ENOENT);
  EXPECT_ERRNO(::access(m.path("c").c_str(), F_OK), ENOENT);
  struct stat st;
  ASSERT_OK(::stat(m.path("a").c_str(), &st));
  EXPECT_EQ(st.st_nlink, 1u);
  EXPECT_EQ(slurp(m.path("a")), "A");
  EXPECT_EQ(list_dir(m.mnt()), (std::map<std::string, int>{{"a", 1}}));
}

}  // namespace kvfs::test
