// SPDX-License-Identifier: Apache-2.0
// Mount tests: what survives a restart, a lost index, kill -9 and corruption,
// and the RAM tier's backpressure (RSS bounded, large files still work).
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/backing/disk_layout.h"
#include "tests/mount_fixture.h"

namespace kvfs::test {
namespace {

namespace fs = std::filesystem;
constexpr size_t kMiB = 1 << 20;

std::string err() {
  return std::strerror(errno);
}

uint64_t splitmix(uint64_t* s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Deterministic contents: the same (size, seed) always gives the same bytes.
std::string content(size_t n, uint64_t seed) {
  std::string s(n, '\0');
  uint64_t st = seed * 0x2545F4914F6CDD1Dull + 7;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = splitmix(&st);
    std::memcpy(&s[i], &v, 8);
  }
  for (; i < n; ++i) s[i] = static_cast<char>(splitmix(&st));
  return s;
}

bool mkdir_p(const std::string& path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  return !ec;
}

// Writes, optionally fsyncs, closes. Returns "" or the failing step.
std::string write_sync(const std::string& path, const std::string& data, bool fsync_it) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return "open: " + err();
  for (size_t off = 0; off < data.size();) {
    ssize_t n = ::write(fd, data.data() + off, std::min(data.size() - off, 4 * kMiB));
    if (n <= 0) {
      std::string e = "write: " + err();
      ::close(fd);
      return e;
    }
    off += static_cast<size_t>(n);
  }
  if (fsync_it && ::fsync(fd) != 0) {
    std::string e = "fsync: " + err();
    ::close(fd);
    return e;
  }
  if (::close(fd) != 0) return "close: " + err();
  return "";
}

// "absent", "exact", or a description of what is wrong.
std::string absent_or_exact(const std::string& path, const std::string& want) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return errno == ENOENT ? "absent" : "stat: " + err();
  std::string got;
  if (!read_file(path, &got)) return "read failed: " + err();
  if (got == want) return "exact";
  return "WRONG: " + std::to_string(got.size()) + " bytes instead of " +
         std::to_string(want.size()) + (got.size() == want.size() ? " (other bytes)" : "");
}

uint64_t rss_kib(pid_t pid, const char* field) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(field, 0) == 0)
      return std::strtoull(line.c_str() + std::strlen(field), nullptr, 10);
  return 0;
}

// ---------------------------------------------------------------------------
// A full picture of a tree, as stat/readlink/getxattr/read show it.

struct Node {
  char type = '?';  // f, d, l, p (FIFO), s (socket), c, b (devices)
  mode_t mode = 0;
  dev_t rdev = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  off_t size = 0;
  int64_t mtime_ns = 0;
  std::string target;
  std::map<std::string, std::string> xattrs;
  std::string data;
  bool operator==(const Node& o) const {
    return type == o.type && mode == o.mode && rdev == o.rdev && uid == o.uid && gid == o.gid &&
           size == o.size && mtime_ns == o.mtime_ns && target == o.target && xattrs == o.xattrs &&
           data == o.data;
  }
};

std::string describe(const Node& n) {
  std::string s = std::string(1, n.type) + " mode=" + std::to_string(n.mode) +
                  " uid=" + std::to_string(n.uid) + " gid=" + std::to_string(n.gid) +
                  " rdev=" + std::to_string(n.rdev) + " size=" + std::to_string(n.size) +
                  " mtime=" + std::to_string(n.mtime_ns) + " target=" + n.target +
                  " xattrs=" + std::to_string(n.xattrs.size()) +
                  " data=" + std::to_string(n.data.size()) + "B";
  for (auto& [k, v] : n.xattrs) s += " " + k + "(" + std::to_string(v.size()) + ")";
  return s;
}

std::map<std::string, Node> snapshot_tree(const std::string& root) {
  std::map<std::string, Node> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    const std::string p = it->path().string();
    struct stat st;
    if (::lstat(p.c_str(), &st) != 0) {
      ADD_FAILURE() << "lstat " << p << ": " << err();
      continue;
    }
    Node n;
    n.type = S_ISDIR(st.st_mode)    ? 'd'
             : S_ISLNK(st.st_mode)  ? 'l'
             : S_ISREG(st.st_mode)  ? 'f'
             : S_ISFIFO(st.st_mode) ? 'p'
             : S_ISSOCK(st.st_mode) ? 's'
             : S_ISCHR(st.st_mode)  ? 'c'
             : S_ISBLK(st.st_mode)  ? 'b'
                                    : '?';
    n.mode = st.st_mode;
    n.rdev = st.st_rdev;
    n.uid = st.st_uid;
    n.gid = st.st_gid;
    if (n.type != 'd') {
      n.size = st.st_size;
      n.mtime_ns = st.st_mtim.tv_sec * 1000000000ll + st.st_mtim.tv_nsec;
    }
    if (n.type == 'l') {
      char buf[4096];
      ssize_t r = ::readlink(p.c_str(), buf, sizeof(buf));
      if (r >= 0) n.target.assign(buf, static_cast<size_t>(r));
    }
    if (n.type == 'f' && !read_file(p, &n.data)) ADD_FAILURE() << "read " << p << ": " << err();
    char names[65536];
    ssize_t ln = ::llistxattr(p.c_str(), names, sizeof(names));
    for (ssize_t i = 0; i < ln;) {
      std::string name(names + i);
      i += static_cast<ssize_t>(name.size()) + 1;
      std::string v(70000, '\0');
      ssize_t vn = ::lgetxattr(p.c_str(), name.c_str(), v.data(), v.size());
      if (vn < 0) continue;
      v.resize(static_cast<size_t>(vn));
      n.xattrs[name] = v;
    }
    out[p.substr(root.size())] = std::move(n);
  }
  if (ec) ADD_FAILURE() << "walk " << root << ": " << ec.message();
  return out;
}

void expect_same_tree(const std::map<std::string, Node>& want,
                      const std::map<std::string, Node>& got, const char* when) {
  for (auto& [p, n] : want) {
    auto it = got.find(p);
    if (it == got.end()) {
      ADD_FAILURE() << when << ": " << p << " is missing";
      continue;
    }
    EXPECT_TRUE(it->second == n) << when << ": " << p << "\n  want " << describe(n) << "\n  got  "
                                 << describe(it->second);
  }
  for (auto& [p, n] : got)
    EXPECT_TRUE(want.count(p)) << when << ": unexpected " << p << " " << describe(n);
}

// ---------------------------------------------------------------------------

TEST(Recovery, RemountAndIndexRebuildKeepEverything) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  const std::string r = m.mnt();
  struct DirSpec {
    const char* path;
    mode_t mode;
    uid_t uid;
    gid_t gid;
  };
  const DirSpec dirs[] = {{"a", 0755, 0, 0},           {"a/b", 0711, 1000, 1000},
                          {"a/b/c", 0700, 4242, 4343}, {"d", 0775, 0, 4242},
                          {"d/e", 02755, 7, 8},        {"d/e/empty_dir", 0750, 0, 0}};
  for (auto& d : dirs) {
    const std::string p = r + "/" + d.path;
    ASSERT_EQ(::mkdir(p.c_str(), 0755), 0) << p << ": " << err();
    ASSERT_EQ(::chown(p.c_str(), d.uid, d.gid), 0) << err();
    ASSERT_EQ(::chmod(p.c_str(), d.mode), 0) << err();
  }
  std::string binval;
  for (int i = 0; i < 300; ++i) binval += static_cast<char>(i * 37);
  struct FileSpec {
    const char* path;
    size_t size;
    mode_t mode;
    uid_t uid;
    gid_t gid;
    std::map<std::string, std::string> xattrs;
  };
  const std::vector<FileSpec> files = {
      {"zero", 0, 0644, 0, 0, {}},
      {"a/one", 1, 0600, 1000, 1000, {{"user.k", "v"}}},
      {"a/b/page_minus_one", 4095, 0640, 1234, 5678, {{"user.bin", binval}, {"user.empty", ""}}},
      {"a/b/c/mib_plus_one", kMiB + 1, 0755, 65534, 65534, {}},
      {"d/e/chunk.bin",
       37748736,
       0444,
       0,
       0,
       {{"user.vllm.kv_crc32c", std::string("\x01\0\x02\x03", 4)}}},
      {"d/big_xattr", 10, 0604, 3, 4, {{"user.large", content(8000, 5)}, {"user.small", "x"}}},
      {"d/setuid", 4096 * 3, 04755, 0, 0, {}},
      {"d/sticky_odd", 777, 01606, 99, 98, {}},
  };
  int seed = 0;
  for (auto& f : files) {
    const std::string p = r + "/" + f.path;
    ASSERT_TRUE(write_file(p, content(f.size, ++seed))) << p << ": " << err();
    ASSERT_EQ(::chown(p.c_str(), f.uid, f.gid), 0) << err();
    ASSERT_EQ(::chmod(p.c_str(), f.mode), 0) << err();
    for (auto& [k, v] : f.xattrs)
      ASSERT_EQ(::setxattr(p.c_str(), k.c_str(), v.data(), v.size(), 0), 0) << p << " " << k;
  }
  ASSERT_EQ(::setxattr((r + "/a/b").c_str(), "user.dir", "dv", 2, 0), 0) << err();
  ASSERT_EQ(::symlink("b/c/mib_plus_one", (r + "/a/link_rel").c_str()), 0);
  ASSERT_EQ(::symlink("/etc/hostname", (r + "/abs_link").c_str()), 0);
  ASSERT_EQ(::symlink("nowhere/at/all", (r + "/d/dangling").c_str()), 0);
  ASSERT_EQ(::lchown((r + "/d/dangling").c_str(), 1000, 1001), 0);
  // Special files: metadata only, with owners, times and device numbers.
  struct SpecialSpec {
    const char* path;
    mode_t mode;
    dev_t rdev;
    uid_t uid;
    gid_t gid;
  };
  const SpecialSpec specials[] = {{"fifo", S_IFIFO | 0640, 0, 1000, 1000},
                                  {"a/b/sock", S_IFSOCK | 0777, 0, 0, 0},
                                  {"d/e/null", S_IFCHR | 0666, makedev(1, 3), 0, 0},
                                  {"d/tty_hi", S_IFCHR | 0620, makedev(136, 300), 5, 5},
                                  {"d/loop0", S_IFBLK | 0660, makedev(7, 0), 0, 6},
                                  {"a/suid_fifo", S_IFIFO | 04711, 0, 42, 43}};
  for (auto& sp : specials) {
    const std::string p = r + "/" + sp.path;
    ASSERT_EQ(::mknod(p.c_str(), sp.mode, sp.rdev), 0) << p << ": " << err();
    ASSERT_EQ(::chown(p.c_str(), sp.uid, sp.gid), 0) << err();
    ASSERT_EQ(::chmod(p.c_str(), sp.mode & 07777), 0) << err();
  }
  const timespec old_times[2] = {{1000, 1}, {2000, 2}};
  ASSERT_EQ(::utimensat(AT_FDCWD, (r + "/d/loop0").c_str(), old_times, 0), 0) << err();
  ASSERT_EQ(::rename((r + "/fifo").c_str(), (r + "/a/b/c/fifo_moved").c_str()), 0) << err();

  const auto want = snapshot_tree(r);
  ASSERT_EQ(want.size(), std::size(dirs) + files.size() + 3 + std::size(specials));

  m.unmount();
  ASSERT_TRUE(m.mount_ok());
  expect_same_tree(want, snapshot_tree(r), "after remount");

  m.unmount();
  fs::remove_all(m.index_dir());
  ASSERT_TRUE(m.mount_ok());
  expect_same_tree(want, snapshot_tree(r), "after deleting the index");

  m.unmount();
  fs::remove_all(m.index_dir());
  fs::create_directories(m.index_dir());
  const char* garbage[] = {"CURRENT",  "MANIFEST-000007", "000005.sst", "000004.log",
                           "IDENTITY", "OPTIONS-000009",  "LOCK"};
  int g = 100;
  for (const char* n : garbage) {
    std::ofstream(m.index_dir() + "/" + n) << content(5000, ++g);
  }
  ASSERT_TRUE(m.mount_ok());
  expect_same_tree(want, snapshot_tree(r), "after replacing the index with garbage");

  m.unmount();
  ASSERT_TRUE(m.mount_ok());
  expect_same_tree(want, snapshot_tree(r), "after a remount of the rebuilt index");
}

// Names changed or removed right after close (racing the flushers' first
// commit of the file) must be what comes back, from the index and from the
// segments alone.
TEST(Recovery, RenamedAndUnlinkedAfterCloseStayThatWay) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  const std::string r = m.mnt();
  constexpr int kFiles = 40;
  for (int i = 0; i < kFiles; ++i) {
    const std::string fin = r + "/kept_" + std::to_string(i);
    ASSERT_TRUE(write_file(fin + ".tmp", content(64 * 1024 + i, 500 + i)));
    ASSERT_EQ(::rename((fin + ".tmp").c_str(), fin.c_str()), 0);
    const std::string gone = r + "/gone_" + std::to_string(i);
    ASSERT_TRUE(write_file(gone, content(32 * 1024, 600 + i)));
    ASSERT_EQ(::unlink(gone.c_str()), 0);
  }
  auto check = [&](const char* when) {
    std::vector<std::string> names;
    for (auto& e : fs::directory_iterator(r)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    std::vector<std::string> want;
    for (int i = 0; i < kFiles; ++i) want.push_back("kept_" + std::to_string(i));
    std::sort(want.begin(), want.end());
    EXPECT_EQ(names, want) << when;
    for (int i = 0; i < kFiles; ++i) {
      const std::string fin = r + "/kept_" + std::to_string(i);
      EXPECT_EQ(absent_or_exact(fin, content(64 * 1024 + i, 500 + i)), "exact")
          << when << " " << fin;
    }
  };
  check("before remount");
  m.unmount();
  ASSERT_TRUE(m.mount_ok());
  check("after remount");
  m.unmount();
  fs::remove_all(m.index_dir());
  ASSERT_TRUE(m.mount_ok());
  check("after rebuilding the index from the segments");
}

// close() is the moment a file is complete, not the kernel's release, which
// arrives later in the background: a dup'ed descriptor keeps the release from
// coming at all, and a directory fsync after the close must still cover the
// file. Data written after that close (through the dup) is not committed by
// the next directory fsync: the file comes back as it was at the close.
TEST(Recovery, DirFsyncAfterCloseCoversFileBeforeRelease) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  const std::string dir = m.path("d");
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0) << err();
  const std::string f = dir + "/block.bin";
  const std::string first = content(3 * kMiB + 123, 71), second = content(kMiB, 72);
  int fd = ::open(f.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
  ASSERT_GE(fd, 0) << err();
  ASSERT_EQ(::write(fd, first.data(), first.size()), static_cast<ssize_t>(first.size()));
  const int keep = ::dup(fd);  // holds the open file: no release
  ASSERT_GE(keep, 0) << err();
  ASSERT_EQ(::close(fd), 0) << err();
  auto fsync_dir = [&] {
    int d = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
    ASSERT_GE(d, 0) << err();
    EXPECT_EQ(::fsync(d), 0) << err();
    ::close(d);
  };
  fsync_dir();
  ASSERT_EQ(::pwrite(keep, second.data(), second.size(), static_cast<off_t>(first.size())),
            static_cast<ssize_t>(second.size()));
  fsync_dir();  // the file is open again: its new tail is not complete
  m.kill9();
  ::close(keep);
  ASSERT_TRUE(m.mount_ok());
  EXPECT_EQ(absent_or_exact(f, first), "exact");
}

// kill -9 after fsync'ed, dir-fsync'ed and unsynced files, five times over.
TEST(Recovery, Kill9LoopKeepsSyncedNeverPartial) {
  KvfsMount m;
  struct Want {
    std::string path;
    size_t size;
    uint64_t seed;
  };
  std::vector<Want> must, maybe;
  size_t maybe_kept = 0, maybe_lost = 0;
  uint64_t seed = 1;
  auto size_for = [](uint64_t s) -> size_t {
    switch (s % 5) {
      case 0: return 0;
      case 1: return 1 + s % 4096;
      case 2: return kMiB + s % 7;
      default: return (s * 7919) % (3 * kMiB);
    }
  };
  auto verify = [&](const std::string& when) {
    for (auto& w : must)
      EXPECT_EQ(absent_or_exact(w.path, content(w.size, w.seed)), "exact")
          << when << ": synced file " << w.path;
    for (auto& w : maybe) {
      std::string v = absent_or_exact(w.path, content(w.size, w.seed));
      EXPECT_TRUE(v == "absent" || v == "exact")
          << when << ": unsynced file " << w.path << " " << v;
      if (v == "exact") {
        ++maybe_kept;
        must.push_back(w);  // recovered once: it is in the store now
      } else {
        ++maybe_lost;
      }
    }
    maybe.clear();
  };
  for (int it = 0; it < 5; ++it) {
    ASSERT_TRUE(m.mount_ok());
    verify("remount " + std::to_string(it));
    const std::string d = m.mnt() + "/it" + std::to_string(it);
    ASSERT_TRUE(mkdir_p(d + "/sub/deeper"));
    for (int i = 0; i < 6; ++i) {  // N: fsync each
      Want w{d + "/sub/deeper/synced_" + std::to_string(i), size_for(seed), seed};
      ++seed;
      ASSERT_EQ(write_sync(w.path, content(w.size, w.seed), true), "") << w.path;
      must.push_back(w);
    }
    std::vector<Want> batch;
    for (int i = 0; i < 6; ++i) {  // M: then fsync of a directory
      Want w{d + "/sub/flushed_" + std::to_string(i), size_for(seed), seed};
      ++seed;
      ASSERT_EQ(write_sync(w.path, content(w.size, w.seed), false), "") << w.path;
      batch.push_back(w);
    }
    ASSERT_TRUE(fsync_dir(d)) << err();
    must.insert(must.end(), batch.begin(), batch.end());
    for (int i = 0; i < 6; ++i) {  // K: no sync at all
      Want w{d + "/unsynced_" + std::to_string(i), size_for(seed), seed};
      ++seed;
      ASSERT_EQ(write_sync(w.path, content(w.size, w.seed), false), "") << w.path;
      maybe.push_back(w);
    }
    m.kill9();
  }
  ASSERT_TRUE(m.mount_ok());
  verify("final remount");
  std::printf("unsynced files: %zu came back exact, %zu were lost\n", maybe_kept, maybe_lost);
}

// kill -9 while four threads keep writing (and some fsyncing) files.
TEST(Recovery, Kill9DuringWriteLoad) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  struct Rec {
    std::string path;
    size_t size;
    uint64_t seed;
    bool fsynced = false;
  };
  constexpr int kWriters = 4, kMaxFiles = 400, kKillAfterSynced = 24;
  std::mutex mu;
  std::condition_variable cv;
  int synced = 0, done_writers = 0;
  std::vector<std::vector<Rec>> recs(kWriters);
  std::vector<std::string> first_err(kWriters);
  for (int t = 0; t < kWriters; ++t) ASSERT_TRUE(mkdir_p(m.mnt() + "/w" + std::to_string(t)));
  ASSERT_TRUE(fsync_dir(m.mnt()));

  std::vector<std::thread> ts;
  for (int t = 0; t < kWriters; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < kMaxFiles; ++i) {
        const uint64_t sd = 10000 * (t + 1) + i;
        Rec r{m.mnt() + "/w" + std::to_string(t) + "/f" + std::to_string(i),
              16384 + (sd * 104729) % (3 * kMiB), sd};
        recs[t].push_back(r);  // recorded before the open: may be in flight
        const bool want_sync = i % 2 == 0;
        std::string e = write_sync(r.path, content(r.size, r.seed), want_sync);
        if (!e.empty()) {
          // fsync returned 0 before a failing close still counts as synced,
          // but write_sync cannot tell; such a file is only "maybe" here.
          first_err[t] = e;
          break;
        }
        if (want_sync) {
          recs[t].back().fsynced = true;
          std::lock_guard g(mu);
          ++synced;
          cv.notify_all();
        }
      }
      std::lock_guard g(mu);
      ++done_writers;
      cv.notify_all();
    });
  {
    std::unique_lock l(mu);
    cv.wait(l, [&] { return synced >= kKillAfterSynced || done_writers == kWriters; });
  }
  const pid_t pid = m.daemon_pid();
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  EXPECT_TRUE(KvfsMount::wait_exit(pid, 30000));
  // The connection is aborted: every pending and later call on the still
  // attached mount fails (ECONNABORTED/ENOTCONN), so each writer stops at its
  // next call; none may hang. Only then is the dead mount detached (after
  // that, paths would lead to the directory underneath).
  for (auto& t : ts) t.join();
  m.kill9();
  int errors = 0;
  for (auto& e : first_err) errors += !e.empty();
  EXPECT_EQ(errors, kWriters) << "a writer did not notice the dead daemon";
  std::printf("writers stopped with: %s | %s | %s | %s\n", first_err[0].c_str(),
              first_err[1].c_str(), first_err[2].c_str(), first_err[3].c_str());

  ASSERT_TRUE(m.mount_ok());
  int n_sync = 0, kept = 0, lost = 0;
  for (auto& v : recs)
    for (auto& r : v) {
      std::string got = absent_or_exact(r.path, content(r.size, r.seed));
      if (r.fsynced) {
        ++n_sync;
        EXPECT_EQ(got, "exact") << "fsynced " << r.path;
      } else {
        EXPECT_TRUE(got == "absent" || got == "exact") << r.path << ": " << got;
        (got == "exact" ? kept : lost)++;
      }
    }
  EXPECT_GE(n_sync, kKillAfterSynced);
  std::printf("after kill -9 under load: %d fsynced ok, %d unsynced kept, %d lost\n", n_sync, kept,
              lost);
}

// ram_size=64M, 1 GiB written by 4 threads: no error, exact contents, and
// the daemon stays under ram_size + 5 % + 64 MiB.
TEST(Recovery, RamBackpressureBoundsRss) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok("ram_size=64M"));
  const pid_t pid = m.daemon_pid();
  const uint64_t limit_kib = (64 * 1024) * 105 / 100 + 64 * 1024;
  constexpr int kThreads = 4, kFiles = 64;
  const size_t size = 16 * kMiB;
  std::atomic<uint64_t> max_rss{0};
  auto sample = [&] {
    uint64_t v = rss_kib(pid, "VmRSS:");
    uint64_t cur = max_rss.load();
    while (v > cur && !max_rss.compare_exchange_weak(cur, v)) {
    }
  };
  auto path = [&](int i) { return m.mnt() + "/bp_" + std::to_string(i); };
  std::mutex mu;
  std::vector<std::string> errs;
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&, t] {
      for (int i = t; i < kFiles; i += kThreads) {
        const std::string data = content(size, 7000 + i);
        int fd = ::open(path(i).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        std::string e;
        if (fd < 0) e = "open: " + err();
        for (size_t off = 0; e.empty() && off < size; off += kMiB) {
          if (::write(fd, data.data() + off, kMiB) != static_cast<ssize_t>(kMiB))
            e = "write: " + err();
          sample();  // the RSS right after each 1 MiB write
        }
        if (fd >= 0 && ::close(fd) != 0 && e.empty()) e = "close: " + err();
        if (!e.empty()) {
          std::lock_guard g(mu);
          errs.push_back(path(i) + ": " + e);
        }
      }
    });
  for (auto& t : ts) t.join();
  const uint64_t hwm_writes = rss_kib(pid, "VmHWM:");
  EXPECT_TRUE(errs.empty()) << errs.size() << " files failed, first: " << errs.front();
  for (int i = 0; i < kFiles; ++i) {
    std::string back;
    ASSERT_TRUE(read_file(path(i), &back)) << path(i) << ": " << err();
    EXPECT_TRUE(back == content(size, 7000 + i)) << path(i) << " reads back wrong";
    sample();
  }
  const uint64_t hwm_all = rss_kib(pid, "VmHWM:");
  std::printf(
      "ram_size=64M, 1 GiB written: max sampled VmRSS %.1f MiB, VmHWM after writes "
      "%.1f MiB, after reads %.1f MiB (limit %.1f MiB)\n",
      max_rss.load() / 1024.0, hwm_writes / 1024.0, hwm_all / 1024.0, limit_kib / 1024.0);
  EXPECT_GT(max_rss.load(), 0u);
  EXPECT_LT(max_rss.load(), limit_kib) << "sampled VmRSS during the writes";
  EXPECT_LT(hwm_writes, limit_kib) << "VmHWM (peak RSS) over the write phase";
  EXPECT_LT(hwm_all, limit_kib) << "VmHWM (peak RSS) after reading everything back";
}

// One file of 300 MiB through a 64 MiB RAM tier.
TEST(Recovery, FileLargerThanRam) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok("ram_size=64M"));
  const pid_t pid = m.daemon_pid();
  const std::string p = m.mnt() + "/huge.bin";
  const size_t size = 300 * kMiB;
  const std::string data = content(size, 31337);
  ASSERT_EQ(write_sync(p, data, false), "");
  const uint64_t hwm = rss_kib(pid, "VmHWM:");
  std::string back;
  ASSERT_TRUE(read_file(p, &back)) << err();
  EXPECT_EQ(back.size(), size);
  EXPECT_TRUE(back == data) << "300 MiB file reads back wrong";
  std::printf("300 MiB file, ram_size=64M: VmHWM after the write %.1f MiB\n", hwm / 1024.0);
  EXPECT_LT(hwm, (64 * 1024) * 105 / 100 + 64 * 1024u);
  m.unmount();
  ASSERT_TRUE(m.mount_ok("ram_size=64M"));
  back.clear();
  ASSERT_TRUE(read_file(p, &back)) << err();
  EXPECT_EQ(back.size(), size);
  EXPECT_TRUE(back == data) << "300 MiB file reads back wrong after remount";
}

// Flipped bytes inside a segment: EIO, never other bytes; then the file is
// gone and the others are intact.
TEST(Recovery, CorruptSegmentGivesEioThenFileIsGone) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  const size_t vsize = 8 * kMiB;
  const std::string victim = m.mnt() + "/victim.bin", vdata = content(vsize, 4711);
  ASSERT_TRUE(write_file(victim, vdata));
  std::vector<std::string> others;
  for (int i = 0; i < 4; ++i) {
    others.push_back(m.mnt() + "/other_" + std::to_string(i));
    ASSERT_TRUE(write_file(others.back(), content(2 * kMiB + i, 100 + i)));
  }
  m.unmount();

  // Find the victim's bytes at 5 MiB + 777 in a segment file and flip 32 of them.
  const size_t at = 5 * kMiB + 777;
  const std::string needle = vdata.substr(at, 64);
  int found = 0;
  for (auto& e : fs::recursive_directory_iterator(m.backing())) {
    if (!e.is_regular_file() || !layout::parse_segment_name(e.path().filename().string())) continue;
    std::string seg;
    ASSERT_TRUE(read_file(e.path().string(), &seg));
    for (size_t pos = seg.find(needle); pos != std::string::npos; pos = seg.find(needle, pos + 1)) {
      ++found;
      int fd = ::open(e.path().c_str(), O_WRONLY | O_CLOEXEC);
      ASSERT_GE(fd, 0);
      std::string flipped = needle.substr(0, 32);
      for (char& c : flipped) c = static_cast<char>(~c);
      ASSERT_EQ(::pwrite(fd, flipped.data(), 32, static_cast<off_t>(pos)), 32);
      ::close(fd);
    }
  }
  ASSERT_EQ(found, 1) << "the victim's data should be stored once in " << m.backing();

  ASSERT_TRUE(m.mount_ok());
  {
    int fd = ::open(victim.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0) << err();
    std::string got;
    char buf[1 << 16];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof(buf))) > 0) got.append(buf, static_cast<size_t>(n));
    const int e = errno;
    ::close(fd);
    EXPECT_EQ(n, -1) << "the corrupted file read to the end (" << got.size() << " bytes)";
    EXPECT_EQ(e, EIO) << std::strerror(e);
    EXPECT_LE(got.size(), at + 32);
    EXPECT_TRUE(got == vdata.substr(0, got.size())) << "bytes before the error are wrong";
  }
  // The daemon no longer lists it ...
  for (auto& e : fs::directory_iterator(m.mnt()))
    EXPECT_NE(e.path().filename().string(), "victim.bin") << "the corrupted file is still listed";
  // ... and no cached name or attribute in the kernel may keep it alive.
  struct stat st;
  EXPECT_EQ(::stat(victim.c_str(), &st), -1) << "the corrupted file is still visible";
  EXPECT_EQ(errno, ENOENT);
  const int vfd = ::open(victim.c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT_EQ(vfd, -1) << "the corrupted file still opens";
  if (vfd >= 0) ::close(vfd);
  for (size_t i = 0; i < others.size(); ++i)
    EXPECT_EQ(absent_or_exact(others[i], content(2 * kMiB + i, 100 + i)), "exact") << others[i];

  m.unmount();
  ASSERT_TRUE(m.mount_ok());
  EXPECT_EQ(::stat(victim.c_str(), &st), -1) << "the dropped file came back after a remount";
  EXPECT_EQ(errno, ENOENT);
  for (size_t i = 0; i < others.size(); ++i)
    EXPECT_EQ(absent_or_exact(others[i], content(2 * kMiB + i, 100 + i)), "exact") << others[i];
}

}  // namespace
}  // namespace kvfs::test
