// SPDX-License-Identifier: Apache-2.0
// Mount tests: the concurrent races of shared/WORKLOADS.md, run hard on a
// real mount. Every test is bounded by iterations, not time, and checks what
// the offloaders rely on: a final name shows a complete version or nothing
// (ENOENT), never a torn, short or foreign one; an open descriptor keeps its
// data; failures are only the errors the protocol allows.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/mount_fixture.h"
#include "tests/reliability_util.h"

namespace kvfs::test {
namespace {

constexpr size_t kKiB = 1024, kMiB = 1024 * 1024;

// Writes all of data to a new fd; "" on success, else what failed.
std::string write_all(int fd, const char* p, size_t n) {
  size_t done = 0;
  while (done < n) {
    ssize_t w = ::write(fd, p + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return "write: " + errstr(w < 0 ? errno : EIO);
    done += size_t(w);
  }
  return "";
}

// The vLLM store: tmp with a unique name, O_EXCL|O_DIRECT optional, one
// write, close, rename over the final name. Returns "" or the failure.
std::string store_via_tmp(const std::string& dst, const std::string& tmp, const char* data,
                          size_t n, bool direct) {
  int fd =
      ::open(tmp.c_str(),
             O_CREAT | O_EXCL | O_WRONLY | O_TRUNC | O_CLOEXEC | (direct ? O_DIRECT : 0), 0644);
  if (fd < 0) return "open " + tmp + ": " + errstr(errno);
  std::string e = write_all(fd, data, n);
  if (::close(fd) != 0 && e.empty()) e = "close: " + errstr(errno);
  if (!e.empty()) return e;
  if (::rename(tmp.c_str(), dst.c_str()) != 0) return "rename: " + errstr(errno);
  return "";
}

// Opens and reads a whole file the way the vLLM load does (one read, O_DIRECT
// optional). Returns 0 and the bytes, or the errno.
int load(const std::string& path, AlignedBuf& buf, size_t* got, bool direct) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
  if (fd < 0) return errno;
  ssize_t n = read_whole(fd, buf.data, buf.size);
  ::close(fd);
  if (n < 0) return int(-n);
  *got = size_t(n);
  return 0;
}

// Where got first differs from want, and whether the wrong bytes are zeros
// (a hole) or foreign: tells a lost write from a stale page.
std::string describe_mismatch(const std::string& got, const std::string& want) {
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  if (i == got.size() && i == want.size()) return "same bytes";
  size_t j = i, zeros = 0;
  while (j < got.size() && j < want.size() && got[j] != want[j]) zeros += got[j++] == 0;
  return "first difference at " + std::to_string(i) + ", " + std::to_string(j - i) +
         " bytes differ there (" + std::to_string(zeros) + " of them zero), sizes " +
         std::to_string(got.size()) + "/" + std::to_string(want.size());
}

// The same file read past the page cache: the daemon's own bytes.
std::string describe_direct(const std::string& path, const std::string& want) {
  AlignedBuf buf(want.size() + 4096);
  size_t n = 0;
  if (int e = load(path, buf, &n, true)) return errstr(e);
  return describe_mismatch(std::string(buf.data, n), want);
}

// ---------------------------------------------------------------------------
// LMCache fs_native: every concurrent writer of a key uses the SAME tmp name
// (open O_CREAT|O_TRUNC, write, close, rename). Writers of one key write
// identical bytes. While they race, a reader of the final name may see a file
// still being (re)written through another writer's descriptor: bytes must be
// either the key's bytes or zeros (a hole from an O_TRUNC), never anything
// else; once all writers are done the final name is complete and the tmp
// name is gone.

TEST(Races, ManyWritersOneTmpNameThenRename) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  constexpr int kKeys = 6, kWriters = 12, kRounds = 8;
  constexpr size_t kSize = 3 * kMiB + 12 * kKiB;
  Failures fails;
  std::atomic<uint64_t> renames{0}, rename_enoent{0}, reads{0};
  for (int round = 0; round < kRounds; ++round) {
    std::vector<std::string> contents;
    for (int k = 0; k < kKeys; ++k) contents.push_back(make_content(kSize, 1000 * round + k));
    std::atomic<bool> writers_done{false};
    std::vector<std::thread> ts;
    for (int w = 0; w < kWriters; ++w) {
      ts.emplace_back([&, w] {
        for (int k = 0; k < kKeys; ++k) {
          const int key = (k + w) % kKeys;
          const std::string dst = m.path("key" + std::to_string(key) + ".data");
          const std::string tmp = dst + ".tmp";
          int fd = ::open(tmp.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
          if (fd < 0) {
            fails.add("open " + tmp + ": " + errstr(errno));
            continue;
          }
          // Buffered 1 MiB writes, as a Python file object would issue.
          std::string e;
          for (size_t off = 0; off < kSize && e.empty(); off += kMiB)
            e = write_all(fd, contents[key].data() + off, std::min(kMiB, kSize - off));
          if (::close(fd) != 0 && e.empty()) e = "close: " + errstr(errno);
          if (!e.empty()) fails.add(tmp + ": " + e);
          if (::rename(tmp.c_str(), dst.c_str()) == 0)
            ++renames;
          else if (errno == ENOENT)
            ++rename_enoent;  // another writer moved the shared tmp first
          else
            fails.add("rename " + tmp + ": " + errstr(errno));
        }
      });
    }
    for (int r = 0; r < 4; ++r) {
      ts.emplace_back([&, r] {
        std::string buf(kSize + 4096, '\0');
        std::mt19937 rng(r + round * 17);
        while (!writers_done.load()) {
          const int key = int(rng() % kKeys);
          int fd =
              ::open(m.path("key" + std::to_string(key) + ".data").c_str(), O_RDONLY | O_CLOEXEC);
          if (fd < 0) {
            if (errno != ENOENT) fails.add("open for read: " + errstr(errno));
            continue;
          }
          ssize_t n = read_whole(fd, buf.data(), buf.size());
          ::close(fd);
          ++reads;
          if (n < 0) {
            fails.add("read: " + errstr(int(-n)));
            continue;
          }
          if (size_t(n) > kSize) {
            fails.add("read " + std::to_string(n) + " bytes from a " + std::to_string(kSize) +
                      " byte key");
            continue;
          }
          const std::string& want = contents[key];
          for (size_t i = 0; i < size_t(n); ++i) {
            if (buf[i] != want[i] && buf[i] != 0) {
              fails.add("key " + std::to_string(key) + ": foreign byte at " + std::to_string(i));
              break;
            }
          }
        }
      });
    }
    for (int w = 0; w < kWriters; ++w) ts[w].join();
    writers_done = true;
    for (size_t i = kWriters; i < ts.size(); ++i) ts[i].join();
    ASSERT_FALSE(fails.any()) << fails.count() << " failures, first: " << fails.first();
    for (int k = 0; k < kKeys; ++k) {
      const std::string dst = m.path("key" + std::to_string(k) + ".data");
      std::string got;
      ASSERT_TRUE(read_file(dst, &got)) << dst << ": " << errstr(errno);
      ASSERT_EQ(got.size(), kSize) << dst;
      ASSERT_TRUE(got == contents[k])
          << dst << " is not the key's bytes after all writers finished: "
          << describe_mismatch(got, contents[k])
          << "; read with O_DIRECT: " << describe_direct(dst, contents[k]);
      struct stat st;
      EXPECT_EQ(::stat((dst + ".tmp").c_str(), &st), -1) << "shared tmp name left behind";
      EXPECT_EQ(errno, ENOENT);
      // The next round writes other bytes under the same names.
      ASSERT_EQ(::unlink(dst.c_str()), 0);
    }
  }
  EXPECT_GT(renames.load(), 0u);
  std::printf("renames %lu, lost rename races (ENOENT) %lu, racing reads %lu\n",
              (unsigned long)renames.load(), (unsigned long)rename_enoent.load(),
              (unsigned long)reads.load());
}

// ---------------------------------------------------------------------------
// Rename storm: many writers each publish complete versions of ONE target
// via their own tmp files; readers only ever see a complete version (any of
// them) at full length, or ENOENT before the first rename. Readers that keep
// a descriptor across renames keep reading their old version.

TEST(Races, RenameStormOverOneTarget) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  constexpr int kWriters = 8, kIters = 30, kReaders = 8;
  constexpr size_t kSize = 1 * kMiB + 4 * kKiB;  // two blocks, 4 KiB multiple (O_DIRECT)
  const std::string target = m.path("target.bin");
  Failures fails;
  std::atomic<int> writers_left{kWriters};
  std::atomic<uint64_t> ok_reads{0}, enoent{0}, held_rereads{0};
  std::vector<std::thread> ts;
  for (int w = 0; w < kWriters; ++w) {
    ts.emplace_back([&, w] {
      AlignedBuf buf(kSize);
      for (int i = 0; i < kIters; ++i) {
        const uint64_t seed = uint64_t(w + 1) << 32 | uint64_t(i);
        make_content(buf.data, kSize, seed);
        const std::string tmp =
            m.path("target.bin_" + std::to_string(w) + "_" + std::to_string(i) + ".tmp");
        std::string e = store_via_tmp(target, tmp, buf.data, kSize, (i + w) % 2 == 0);
        if (!e.empty()) fails.add(e);
      }
      --writers_left;
    });
  }
  for (int r = 0; r < kReaders; ++r) {
    ts.emplace_back([&, r] {
      AlignedBuf buf(kSize + 8192);
      const bool direct = r % 2 == 0;
      while (writers_left.load() > 0) {
        int fd = ::open(target.c_str(), O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
        if (fd < 0) {
          if (errno == ENOENT)
            ++enoent;
          else
            fails.add("open target: " + errstr(errno));
          continue;
        }
        uint64_t seed = 0;
        ssize_t n = read_whole(fd, buf.data, buf.size);
        std::string e =
            n < 0 ? "read: " + errstr(int(-n)) : check_content(buf.data, size_t(n), kSize, &seed);
        if (e.empty() && r % 4 == 1) {
          // Hold the descriptor while the storm goes on, then re-read: still
          // the same version, complete.
          for (int k = 0; k < 3 && writers_left.load() > 0; ++k) {
            struct stat st;
            (void)::stat(target.c_str(), &st);
          }
          uint64_t again = 0;
          n = read_whole(fd, buf.data, buf.size);
          e = n < 0 ? "re-read: " + errstr(int(-n))
                    : check_content(buf.data, size_t(n), kSize, &again);
          if (e.empty() && again != seed) e = "held descriptor changed version";
          ++held_rereads;
        }
        ::close(fd);
        if (!e.empty())
          fails.add(std::string(direct ? "O_DIRECT " : "") + "reader: " + e);
        else
          ++ok_reads;
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_FALSE(fails.any()) << fails.count() << " failures, first: " << fails.first();
  EXPECT_GT(ok_reads.load(), 0u);
  // After the storm: one complete version, and no tmp file left.
  std::string got;
  ASSERT_TRUE(read_file(target, &got));
  EXPECT_EQ(check_content(got.data(), got.size(), kSize, nullptr), "");
  std::printf("complete reads %lu (held across renames %lu), ENOENT %lu\n",
              (unsigned long)ok_reads.load(), (unsigned long)held_rereads.load(),
              (unsigned long)enoent.load());
  // And the same after a remount (everything from the segments).
  m.unmount();
  ASSERT_TRUE(m.mount_ok());
  ASSERT_TRUE(read_file(target, &got));
  EXPECT_EQ(check_content(got.data(), got.size(), kSize, nullptr), "");
}

// ---------------------------------------------------------------------------
// Readers racing unlink (LMCache deletes, llm-d's evictor): a reader that
// opened a file reads it completely even if it is unlinked or replaced right
// after; a reader that comes too late gets ENOENT, nothing else.

TEST(Races, ReadersRacingUnlinkAndRecreate) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  constexpr int kFiles = 16, kIters = 60, kReaders = 8;
  constexpr size_t kSize = 2 * kMiB + 12 * kKiB;
  Failures fails;
  std::atomic<bool> done{false};
  std::atomic<uint64_t> complete{0}, enoent{0}, unlinks{0};
  std::vector<std::thread> ts;
  auto name = [&](int f) { return m.path("f" + std::to_string(f) + ".pt"); };
  for (int f = 0; f < kFiles; ++f) {
    std::string c = make_content(kSize, 7000 + f);
    ASSERT_TRUE(write_file(name(f), c));
  }
  for (int u = 0; u < 2; ++u) {
    ts.emplace_back([&, u] {
      std::mt19937 rng(u);
      std::string buf(kSize, '\0');
      for (int i = 0; i < kIters; ++i) {
        const int f = int(rng() % kFiles);
        if (::unlink(name(f).c_str()) == 0)
          ++unlinks;
        else if (errno != ENOENT)
          fails.add("unlink: " + errstr(errno));
        // LMCache local_disk: writes the final name directly.
        make_content(buf.data(), kSize, (uint64_t(u + 1) << 40) | uint64_t(i));
        int fd = ::open(name(f).c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
        if (fd < 0) {
          if (errno != EEXIST) fails.add("create: " + errstr(errno));
          continue;
        }
        std::string e = write_all(fd, buf.data(), kSize);
        if (!e.empty()) fails.add(e);
        ::close(fd);
      }
    });
  }
  for (int r = 0; r < kReaders; ++r) {
    ts.emplace_back([&, r] {
      std::mt19937 rng(100 + r);
      AlignedBuf buf(kSize + 8192);
      while (!done.load()) {
        const int f = int(rng() % kFiles);
        int fd = ::open(name(f).c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
          if (errno == ENOENT)
            ++enoent;
          else
            fails.add("open: " + errstr(errno));
          continue;
        }
        // A file being written directly under its final name may be short
        // (that is the client's protocol); once its size is final, complete.
        ssize_t n = read_whole(fd, buf.data, buf.size);
        ::close(fd);
        if (n < 0) {
          fails.add("read: " + errstr(int(-n)));
          continue;
        }
        if (size_t(n) == kSize) {
          std::string e = check_content(buf.data, kSize, kSize, nullptr);
          if (!e.empty()) fails.add("read a full-length file: " + e);
          ++complete;
        } else if (n >= 16) {
          // A prefix of a version being written: its bytes so far are right.
          uint64_t seed;
          std::memcpy(&seed, buf.data, 8);
          std::string want = make_content(kSize, seed);
          if (std::memcmp(want.data(), buf.data, size_t(n)) != 0)
            fails.add("a partly written file holds foreign bytes");
        }
      }
    });
  }
  for (int u = 0; u < 2; ++u) ts[u].join();
  done = true;
  for (size_t i = 2; i < ts.size(); ++i) ts[i].join();
  EXPECT_FALSE(fails.any()) << fails.count() << " failures, first: " << fails.first();
  EXPECT_GT(complete.load(), 0u);
  EXPECT_GT(unlinks.load(), 0u);
  // Unlink while open, explicitly: the descriptor keeps the whole file.
  const std::string p = m.path("held.pt");
  std::string c = make_content(kSize, 99);
  ASSERT_TRUE(write_file(p, c));
  int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::unlink(p.c_str()), 0);
  ASSERT_TRUE(write_file(p, make_content(kSize, 100)));  // a new file under the name
  std::string buf(kSize + 4096, '\0');
  ssize_t n = read_whole(fd, buf.data(), buf.size());
  ::close(fd);
  ASSERT_EQ(n, ssize_t(kSize));
  uint64_t seed = 0;
  EXPECT_EQ(check_content(buf.data(), kSize, kSize, &seed), "");
  EXPECT_EQ(seed, 99u);
  std::printf("complete reads %lu, ENOENT %lu, unlinks %lu\n", (unsigned long)complete.load(),
              (unsigned long)enoent.load(), (unsigned long)unlinks.load());
}

// ---------------------------------------------------------------------------
// Two vLLM instances (two processes) store the same keys at once, each
// with its own random tmp names, identical content per key; a third process
// (this one) loads them meanwhile. Loads see ENOENT or the complete block.

int instance_main(const std::string& dir, int inst, int keys, size_t size) {
  std::vector<std::thread> ts;
  std::atomic<int> bad{0};
  for (int t = 0; t < 8; ++t) {
    ts.emplace_back([&, t] {
      AlignedBuf buf(size);
      std::mt19937_64 rng(inst * 1000 + t);
      for (int i = 0; i < keys; ++i) {
        const int k = (i * 7 + t * 3) % keys;
        const std::string dst = dir + "/" + std::to_string(k) + ".bin";
        if (::access(dst.c_str(), F_OK) == 0) continue;  // already stored
        make_content(buf.data, size, 5000 + k);
        char tmp[64];
        std::snprintf(tmp, sizeof(tmp), "_%016llx.tmp", (unsigned long long)rng());
        std::string e = store_via_tmp(dst, dst + tmp, buf.data, size, true);
        if (!e.empty()) {
          std::fprintf(stderr, "instance %d: %s\n", inst, e.c_str());
          ++bad;
        }
      }
    });
  }
  for (auto& t : ts) t.join();
  return bad.load() == 0 ? 0 : 1;
}

TEST(Races, SameKeysFromTwoInstancesAtOnce) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  constexpr int kKeys = 48;
  constexpr size_t kSize = 4 * kMiB;  // O_DIRECT: a multiple of 4 KiB
  const std::string dir = m.path("model_abc_r0/0a1/2b_g0");
  ASSERT_EQ(run_command({"mkdir", "-p", dir}).exit_code, 0);
  // Two processes; under ThreadSanitizer (which cannot follow a fork of a
  // threaded process) two thread groups of this one.
#if defined(__SANITIZE_THREAD__)
  constexpr bool kFork = false;
#else
  constexpr bool kFork = true;
#endif
  std::vector<pid_t> kids;
  std::vector<std::thread> instances;
  std::atomic<int> bad_instances{0};
  for (int inst = 0; inst < 2; ++inst) {
    if (!kFork) {
      instances.emplace_back(
          [&, inst] { bad_instances += instance_main(dir, inst, kKeys, kSize) != 0; });
      continue;
    }
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) ::_exit(instance_main(dir, inst, kKeys, kSize));
    kids.push_back(pid);
  }
  Failures fails;
  std::atomic<bool> done{false};
  std::atomic<uint64_t> complete{0}, misses{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 4; ++r) {
    readers.emplace_back([&, r] {
      AlignedBuf buf(kSize + 4096);
      std::mt19937 rng(r);
      while (!done.load()) {
        const int k = int(rng() % kKeys);
        size_t got = 0;
        int e = load(dir + "/" + std::to_string(k) + ".bin", buf, &got, r % 2 == 0);
        if (e == ENOENT) {
          ++misses;
          continue;
        }
        if (e != 0) {
          fails.add("load: " + errstr(e));
          continue;
        }
        uint64_t seed = 0;
        std::string c = check_content(buf.data, got, kSize, &seed);
        if (c.empty() && seed != uint64_t(5000 + k)) c = "another key's bytes";
        if (!c.empty()) fails.add("key " + std::to_string(k) + ": " + c);
        ++complete;
      }
    });
  }
  int bad_kids = 0;
  for (pid_t p : kids) {
    int st = 0;
    ASSERT_EQ(::waitpid(p, &st, 0), p);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) ++bad_kids;
  }
  for (auto& t : instances) t.join();
  bad_kids += bad_instances.load();
  done = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(bad_kids, 0) << "an instance saw store errors (its stderr says which)";
  EXPECT_FALSE(fails.any()) << fails.count() << " failures, first: " << fails.first();
  // Every key is there, complete; no tmp file is left.
  AlignedBuf buf(kSize + 4096);
  for (int k = 0; k < kKeys; ++k) {
    size_t got = 0;
    ASSERT_EQ(load(dir + "/" + std::to_string(k) + ".bin", buf, &got, true), 0) << k;
    uint64_t seed = 0;
    EXPECT_EQ(check_content(buf.data, got, kSize, &seed), "") << k;
    EXPECT_EQ(seed, uint64_t(5000 + k));
  }
  RunResult ls = run_command({"sh", "-c", "ls '" + dir + "' | grep -c tmp || true"});
  EXPECT_EQ(ls.output, "0\n") << "tmp files left behind";
  std::printf("complete loads %lu, misses %lu\n", (unsigned long)complete.load(),
              (unsigned long)misses.load());
}

// ---------------------------------------------------------------------------
// Readers racing eviction: a small capacity, no grace, no kernel caches; a
// writer stores three times the capacity while readers load random files.
// Every load that opens a file reads it completely and correctly; the only
// failure a reader may see is ENOENT (the file was evicted before its open).
// With no grace a tmp file may be evicted between its close and its rename
// (kvfs(8), evict_grace): the store is lost, its rename fails with ENOENT.

TEST(Races, ReadersRacingEviction) {
  KvfsMount m;
  ASSERT_TRUE(
      m.mount_ok("capacity=64M,segment_size=8M,evict_grace=0,entry_timeout=0,attr_timeout=0,"
                 "negative_timeout=0,ram_size=96M"));
  constexpr size_t kSize = 2 * kMiB;
  constexpr int kFiles = 96;  // 192 MiB: three times the capacity
  Failures fails;
  std::atomic<int> written{0};
  std::atomic<bool> done{false};
  std::atomic<uint64_t> complete{0}, enoent{0}, write_enospc{0}, lost_stores{0};
  auto name = [&](int f) { return m.path("chunks/" + std::to_string(f) + ".bin"); };
  ASSERT_EQ(::mkdir(m.path("chunks").c_str(), 0755), 0);
  std::thread writer([&] {
    AlignedBuf buf(kSize);
    for (int f = 0; f < kFiles; ++f) {
      make_content(buf.data, kSize, 100000 + f);
      std::string e = store_via_tmp(name(f), name(f) + "_w.tmp", buf.data, kSize, f % 2 == 0);
      if (e == "rename: " + errstr(ENOENT)) {
        ++lost_stores;
      } else if (!e.empty()) {
        if (e.find("ENOSPC") != std::string::npos) ++write_enospc;
        fails.add("writer: " + e);
        ::unlink((name(f) + "_w.tmp").c_str());
      }
      written = f + 1;
    }
    done = true;
  });
  std::vector<std::thread> readers;
  for (int r = 0; r < 6; ++r) {
    readers.emplace_back([&, r] {
      AlignedBuf buf(kSize + 4096);
      std::mt19937 rng(r);
      while (!done.load()) {
        const int n = written.load();
        if (n == 0) continue;
        // Mostly old files: those are the ones being evicted.
        const int f = int(rng() % uint32_t(n));
        size_t got = 0;
        int e = load(name(f), buf, &got, r % 2 == 0);
        if (e == ENOENT) {
          ++enoent;
          continue;
        }
        if (e != 0) {
          fails.add("load " + std::to_string(f) + ": " + errstr(e));
          continue;
        }
        uint64_t seed = 0;
        std::string c = check_content(buf.data, got, kSize, &seed);
        if (c.empty() && seed != uint64_t(100000 + f)) c = "another file's bytes";
        if (!c.empty()) fails.add("load " + std::to_string(f) + ": " + c);
        ++complete;
      }
    });
  }
  writer.join();
  for (auto& t : readers) t.join();
  EXPECT_FALSE(fails.any()) << fails.count() << " failures (writer ENOSPC " << write_enospc.load()
                            << "), first: " << fails.first();
  nlohmann::json s = stats(m.mnt());
  ASSERT_FALSE(s.contains("error")) << s.dump();
  const uint64_t evicted = stat_u64(s, "/evictions/capacity") + stat_u64(s, "/evictions/reclaim");
  EXPECT_GT(evicted, 0u) << "nothing was evicted: the test did not race eviction. " << s.dump();
  EXPECT_EQ(stat_u64(s, "/errors/checksum"), 0u) << s.dump();
  EXPECT_EQ(stat_u64(s, "/errors/io"), 0u) << s.dump();
  // What survived is complete.
  AlignedBuf buf(kSize + 4096);
  int present = 0;
  for (int f = 0; f < kFiles; ++f) {
    size_t got = 0;
    int e = load(name(f), buf, &got, false);
    if (e == ENOENT) continue;
    ASSERT_EQ(e, 0) << f << ": " << errstr(e);
    EXPECT_EQ(check_content(buf.data, got, kSize, nullptr), "") << f;
    ++present;
  }
  EXPECT_GT(present, 0);
  EXPECT_LT(present, kFiles);
  // The newest files are the last the LRU takes: a lost store is the
  // exception (a slow writer under a sanitizer), not the rule.
  EXPECT_LE(lost_stores.load(), uint64_t(kFiles / 8));
  std::printf("complete loads %lu, ENOENT %lu, evicted %lu, %d of %d files left, %lu stores lost\n",
              (unsigned long)complete.load(), (unsigned long)enoent.load(), (unsigned long)evicted,
              present, kFiles, (unsigned long)lost_stores.load());
  EXPECT_EQ(daemon_healthy(m), "");
}

}  // namespace
}  // namespace kvfs::test
