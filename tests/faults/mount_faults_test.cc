// SPDX-License-Identifier: Apache-2.0
// Mount tests: injected faults in a live daemon, and a backing filesystem
// that really runs out of space.
//
// libfiu: the daemon runs under `fiu-run -x` (libfiu's POSIX preload), whose
// control fifo follows the daemon across its fork (libfiu re-creates it in
// the child, named after the child's pid), so `fiu-ctrl` switches failure
// points on and off while the mount serves requests. io_uring submissions do
// not go through libc, so the daemon runs with io_uring refused by a seccomp
// filter (tests/no_uring_exec.cc): its segment writer then uses pwrite(2),
// which libfiu can fail. Checked for each fault: the daemon stays up; a
// client whose data is affected gets EIO or ENOSPC, never wrong or short
// bytes; data in RAM keeps being served; once the fault clears, flushing
// resumes (fsync succeeds) and everything survives a remount; the error
// counters of the stats move.
//
// tmpfs: a size-limited tmpfs as the backing dir gives a real ENOSPC.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/mount_fixture.h"
#include "tests/reliability_util.h"

namespace kvfs::test {
namespace {

using json = nlohmann::json;
constexpr size_t kMiB = 1 << 20;
constexpr int kEIO = 5, kENOSPC = 28;

const char* kPosixPreload = "/usr/lib/fiu/fiu_posix_preload.so";

// A kvfs mount whose daemon runs under fiu-run, without io_uring.
class FaultMount {
 public:
  FaultMount() : prefix_(m_.root() + "/fiu") {}
  ~FaultMount() {
    // Never leave a fault on while the daemon flushes at unmount.
    if (m_.mounted() && under_fiu_ && process_alive(m_.daemon_pid()))
      for (const auto& p : enabled_) (void)try_fiu("disable name=" + p);
  }

  KvfsMount& m() { return m_; }

  // Mounts through a wrapper that kvfs_binary() picks up from KVFS_BIN.
  bool mount(const std::string& opts) {
    const std::string wrapper = m_.root() + "/kvfs-under-fiu";
    {
      std::ofstream w(wrapper);
      w << "#!/bin/sh\nexec '" << NO_URING_EXEC << "' fiu-run -x -f '" << prefix_ << "' '"
        << real_kvfs_ << "' \"$@\"\n";
    }
    ::chmod(wrapper.c_str(), 0755);
    ::setenv("KVFS_BIN", wrapper.c_str(), 1);
    bool ok = m_.mount_ok(opts);
    restore_env();
    if (!ok) return false;
    struct stat st;
    const std::string fifo = prefix_ + "-" + std::to_string(m_.daemon_pid()) + ".in";
    EXPECT_EQ(::stat(fifo.c_str(), &st), 0)
        << "fiu-run gave the daemon no control fifo at " << fifo;
    under_fiu_ = ::stat(fifo.c_str(), &st) == 0;
    return under_fiu_;
  }

  // Runs one libfiu remote-control command in the daemon.
  // fiu-ctrl exits 0 even when the command failed; it then says "error".
  bool try_fiu(const std::string& cmd, std::string* out = nullptr) {
    // fiu-ctrl blocks on the fifo if the daemon died: bounded.
    RunResult r = run_command(
        {"timeout", "20", "fiu-ctrl", "-f", prefix_, "-c", cmd, std::to_string(m_.daemon_pid())});
    if (out) *out = r.output;
    return r.exit_code == 0 && r.output.find("rror") == std::string::npos;
  }
  bool fiu(const std::string& cmd) {
    std::string out;
    bool ok = try_fiu(cmd, &out);
    EXPECT_TRUE(ok) << "fiu-ctrl -c '" << cmd << "': " << out;
    return ok;
  }
  void fail(const std::string& point, int err) {
    if (fiu("enable name=" + point + ",failinfo=" + std::to_string(err))) enabled_.insert(point);
  }
  void fail_randomly(const std::string& point, double p, int err) {
    if (fiu("enable_random name=" + point + ",probability=" + std::to_string(p) +
            ",failinfo=" + std::to_string(err)))
      enabled_.insert(point);
  }
  void clear(const std::string& point) {
    fiu("disable name=" + point);
    enabled_.erase(point);
  }
  void note_enabled(const std::string& point) { enabled_.insert(point); }
  // libfiu disables a point by the exact name it was enabled with.
  void disable_all() {
    for (const auto& p : std::set<std::string>(enabled_)) clear(p);
  }

  // kill -9 of the daemon under fiu, faults still on: nothing to disable.
  void kill9() {
    m_.kill9();
    enabled_.clear();
    under_fiu_ = false;
  }

  // Remount without fiu (a clean daemon on the same dirs).
  bool remount_plain(const std::string& opts) {
    disable_all();
    m_.unmount();
    under_fiu_ = false;
    restore_env();
    return m_.mount_ok(opts);
  }

 private:
  void restore_env() {
    if (old_bin_.empty())
      ::unsetenv("KVFS_BIN");
    else
      ::setenv("KVFS_BIN", old_bin_.c_str(), 1);
  }

  KvfsMount m_;
  std::string prefix_;
  bool under_fiu_ = false;
  std::set<std::string> enabled_;
  std::string old_bin_ = std::getenv("KVFS_BIN") ? std::getenv("KVFS_BIN") : "";
  std::string real_kvfs_ = kvfs_binary();
};

// libfiu's POSIX preload defines malloc, calloc and realloc (failure points
// libc/mm/*); loaded ahead of ASan's runtime it takes the allocator from
// under it and an ASan-built daemon crashes at start.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif
#else
constexpr bool kAsan = false;
#endif

#define SKIP_WITHOUT_FIU()                                                                       \
  do {                                                                                           \
    if (!have("fiu-run") || !have("fiu-ctrl") || ::access(kPosixPreload, R_OK) != 0)             \
      GTEST_SKIP() << "libfiu is not installed (apt-get install fiu-utils libfiu-dev)";          \
    if (kAsan) GTEST_SKIP() << "libfiu's preload replaces malloc: it cannot run an ASan daemon"; \
  } while (0)

// fsync(2) of a path: 0 or the errno.
int fsync_path(const std::string& p) {
  int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  int r = ::fsync(fd) == 0 ? 0 : errno;
  ::close(fd);
  return r;
}

// Writes a whole file (one write, like vLLM): 0 or the errno of the first
// failing call. A short write is reported as EIO.
int put(const std::string& p, const std::string& data, int flags = 0) {
  int fd = ::open(p.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC | flags, 0644);
  if (fd < 0) return errno;
  AlignedBuf buf(data.size());
  std::memcpy(buf.data, data.data(), data.size());
  ssize_t n = ::write(fd, buf.data, data.size());
  int e = n < 0 ? errno : size_t(n) != data.size() ? kEIO : 0;
  if (::close(fd) != 0 && e == 0) e = errno;
  return e;
}

// Reads a whole file: 0 and the bytes, or the errno.
int get(const std::string& p, std::string* out, bool direct = false) {
  int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
  if (fd < 0) return errno;
  struct stat st;
  ::fstat(fd, &st);
  AlignedBuf buf(size_t(st.st_size) + 8192);
  ssize_t n = read_whole(fd, buf.data, buf.size);
  ::close(fd);
  if (n < 0) return int(-n);
  out->assign(buf.data, size_t(n));
  return 0;
}

// The client's view of a file under faults: complete and right, or an
// error; never short or wrong. Returns the errno (0: complete and right).
int check_file(const std::string& p, const std::string& want, std::string* why,
               bool direct = false) {
  std::string got;
  int e = get(p, &got, direct);
  if (e != 0) return e;
  if (got.size() != want.size())
    *why =
        p + ": " + std::to_string(got.size()) + " bytes, expected " + std::to_string(want.size());
  else if (got != want)
    *why = p + ": wrong bytes";
  return 0;
}

json stats_of(KvfsMount& m) {
  json s = stats(m.mnt());
  EXPECT_FALSE(s.contains("error")) << s.dump();
  return s;
}

// ---------------------------------------------------------------------------
// Faults in the flush path, one failure point at a time: the segment's
// pwrite (EIO, ENOSPC) and fdatasync, the open of a new segment and the
// fsync of its directory, and write(2), which only the index (RocksDB's
// write-ahead log) uses.

struct FlushFault {
  const char* point;
  int err;
};

class FlushFaults : public ::testing::TestWithParam<FlushFault> {};

TEST_P(FlushFaults, ClientSeesTheErrorRamStillServesFlushResumes) {
  SKIP_WITHOUT_FIU();
  const FlushFault f = GetParam();
  FaultMount fm;
  KvfsMount& m = fm.m();
  // segment_size=4M: once a flusher's segment holds 4 MiB, its next flush
  // opens, preallocates and fsyncs (the directory of) a new one. With two
  // flushers, the second 5 MiB file flushed needs a new segment at the
  // latest.
  ASSERT_TRUE(fm.mount("ram_size=256M,segment_size=4M,evict_grace=3600"));
  // Committed before the fault.
  const std::string a = m.path("a.bin"), ca = make_content(6 * kMiB + 4096, 1);
  ASSERT_EQ(put(a, ca, O_DIRECT), 0);
  ASSERT_EQ(fsync_path(a), 0);
  const json before = stats_of(m);

  fm.fail(f.point, f.err);
  std::vector<std::pair<std::string, std::string>> in_ram;
  int failed_syncs = 0;
  for (int i = 0; i < 3 && failed_syncs == 0; ++i) {
    const std::string p = m.path("b" + std::to_string(i) + ".bin");
    const std::string c = make_content(5 * kMiB + 100, 10 + i);
    int e = put(p, c);
    if (e != 0) {
      // Once a flush said ENOSPC, writers are told so at once.
      EXPECT_EQ(e, kENOSPC) << "a write under " << f.point << ": " << errstr(e);
      EXPECT_EQ(f.err, kENOSPC) << "writes land in RAM: only ENOSPC may reach them";
      ::unlink(p.c_str());
      break;
    }
    in_ram.emplace_back(p, c);
    e = fsync_path(p);
    if (e != 0) {
      EXPECT_TRUE(e == f.err || e == kEIO) << "fsync under " << f.point << ": " << errstr(e);
      ASSERT_EQ(daemon_healthy(m), "") << "the daemon died of a failed " << f.point;
      ++failed_syncs;
    }
  }
  EXPECT_GT(failed_syncs, 0) << "the fault never reached a client's fsync";
  // The data is still served, complete, from RAM; so is the committed file.
  std::string why;
  for (auto& [p, c] : in_ram) {
    EXPECT_EQ(check_file(p, c, &why), 0) << p;
    EXPECT_EQ(check_file(p, c, &why, /*direct=*/true), 0) << p;
  }
  EXPECT_EQ(check_file(a, ca, &why, true), 0);
  EXPECT_EQ(why, "");
  const json during = stats_of(m);
  const char* counter = f.err == kENOSPC ? "/errors/enospc" : "/errors/io";
  EXPECT_GT(stat_u64(during, counter), stat_u64(before, counter)) << during.dump();
  EXPECT_EQ(stat_u64(during, "/errors/checksum"), 0u) << during.dump();
  ASSERT_EQ(daemon_healthy(m), "");
  // Directories keep working, unless the fault hits the index itself:
  // write(2) is how RocksDB appends to its WAL, and a directory is committed
  // to the index when it is made. Then mkdir fails cleanly, with EIO.
  const bool index_fault = std::string(f.point) == "posix/io/rw/write";
  const int mk = ::mkdir(m.path("d").c_str(), 0755) == 0 ? 0 : errno;
  if (index_fault) {
    EXPECT_TRUE(mk == 0 || mk == kEIO) << "mkdir under " << f.point << ": " << errstr(mk);
  } else {
    ASSERT_EQ(mk, 0) << "mkdir under " << f.point << ": " << errstr(mk);
  }
  ASSERT_EQ(daemon_healthy(m), "");

  fm.clear(f.point);
  if (mk != 0) {
    ASSERT_EQ(::mkdir(m.path("d").c_str(), 0755), 0) << "mkdir after the fault cleared";
  }
  // Flushing resumes: every file written under the fault becomes durable.
  for (auto& [p, c] : in_ram)
    EXPECT_EQ(fsync_path(p), 0) << p << ": flushing did not resume after the fault cleared";
  ASSERT_FALSE(in_ram.empty());
  const std::string moved = m.path("d/moved.bin");
  ASSERT_EQ(::rename(in_ram[0].first.c_str(), moved.c_str()), 0);
  in_ram[0].first = moved;
  const std::string c = m.path("c.bin"), cc = make_content(3 * kMiB, 3);
  EXPECT_EQ(put(c, cc), 0) << "writes are refused after the fault cleared";
  EXPECT_EQ(fsync_path(c), 0);
  EXPECT_EQ(daemon_healthy(m), "");

  // Everything is durable and right, from the segments, without fiu.
  ASSERT_TRUE(fm.remount_plain("ram_size=16M"));
  EXPECT_EQ(check_file(a, ca, &why, true), 0);
  for (auto& [p, cp] : in_ram) EXPECT_EQ(check_file(p, cp, &why, true), 0) << p;
  EXPECT_EQ(check_file(c, cc, &why, true), 0);
  EXPECT_EQ(why, "");
}

INSTANTIATE_TEST_SUITE_P(Faults, FlushFaults,
                         ::testing::Values(FlushFault{"posix/io/rw/pwrite", kEIO},
                                           FlushFault{"posix/io/rw/pwrite", kENOSPC},
                                           FlushFault{"posix/io/sync/fdatasync", kEIO},
                                           FlushFault{"posix/io/oc/open", kEIO},
                                           FlushFault{"posix/io/sync/fsync", kEIO},
                                           FlushFault{"posix/io/rw/write", kEIO}),
                         [](const auto& info) {
                           std::string n = info.param.point;
                           n = n.substr(n.rfind('/') + 1);
                           return n + (info.param.err == kEIO ? "_EIO" : "_ENOSPC");
                         });

// ---------------------------------------------------------------------------
// One failed fdatasync of the index's write-ahead log (RocksDB's
// PosixWritableFile::Sync; the segment's own fdatasync is left alone). An
// fsync on a still-open file makes the flusher commit with a WAL sync. The
// client sees EIO for that fsync; once the fault is gone, later fsyncs must
// succeed again and every file must survive unmount and remount.

TEST(Faults, IndexWalSyncFailureDoesNotOutliveTheFault) {
  SKIP_WITHOUT_FIU();
  FaultMount fm;
  KvfsMount& m = fm.m();
  ASSERT_TRUE(fm.mount("ram_size=64M,evict_grace=3600"));
  const std::string wal_sync =
      "_ZN7rocksdb17PosixWritableFile4SyncERKNS_9IOOptionsEPNS_14IODebugContextE";
  std::string out;
  if (!fm.try_fiu(
          "enable_stack_by_name name=posix/io/sync/fdatasync,func_name=" + wal_sync + ",failinfo=5",
          &out))
    GTEST_SKIP() << "this librocksdb has no " << wal_sync << " to fail: " << out;
  fm.note_enabled("posix/io/sync/fdatasync");
  // Write and fsync while the file is open (the fsync waiter is seen at
  // capture, so the commit syncs the WAL), then close.
  auto write_fsync_open = [&](const std::string& p, const std::string& c) {
    int fd = ::open(p.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return errno;
    int e = ::write(fd, c.data(), c.size()) == ssize_t(c.size()) ? 0 : kEIO;
    if (e == 0 && ::fsync(fd) != 0) e = errno;
    ::close(fd);
    return e;
  };
  std::map<std::string, std::string> files;
  for (int i = 0; i < 3; ++i)
    files[m.path("g" + std::to_string(i))] = make_content(3 * kMiB, 40 + i);
  auto it = files.begin();
  EXPECT_EQ(write_fsync_open(it->first, it->second), kEIO)
      << "the WAL sync fault did not reach the client's fsync";
  fm.clear("posix/io/sync/fdatasync");
  for (++it; it != files.end(); ++it)
    EXPECT_EQ(write_fsync_open(it->first, it->second), 0)
        << it->first << ": fsync still fails after the WAL fault cleared";
  EXPECT_EQ(fsync_path(files.begin()->first), 0) << "the first file never became durable";
  EXPECT_EQ(daemon_healthy(m), "");
  ASSERT_TRUE(fm.remount_plain("ram_size=16M"));
  std::string why;
  for (auto& [p, c] : files) EXPECT_EQ(check_file(p, c, &why, true), 0) << p << " lost";
  EXPECT_EQ(why, "");
}

// A crash between a segment's fdatasync and the index commit of its records:
// RocksDB's write-ahead-log appends fail (PosixWritableFile::Append), so the
// flush of a file reaches its segment and never the index; the client's
// fsync fails. After kill -9 the next mount catches the index up with the
// segment: the file is back, bit-exact, and the index was not rebuilt.
TEST(Faults, CrashBetweenSegmentSyncAndIndexCommitIsCaughtUp) {
  SKIP_WITHOUT_FIU();
  FaultMount fm;
  KvfsMount& m = fm.m();
  const std::string opts = "ram_size=64M,evict_grace=3600";
  ASSERT_TRUE(fm.mount(opts));
  const std::string before = make_content(2 * kMiB, 60), after = make_content(3 * kMiB + 5, 61);
  ASSERT_EQ(put(m.path("before"), before), 0);
  ASSERT_EQ(fsync_path(m.path("before")), 0);
  const std::string wal_append =
      "_ZN7rocksdb17PosixWritableFile6AppendERKNS_5SliceERKNS_9IOOptionsEPNS_14IODebugContextE";
  std::string out;
  if (!fm.try_fiu(
          "enable_stack_by_name name=posix/io/rw/write,func_name=" + wal_append + ",failinfo=5",
          &out))
    GTEST_SKIP() << "this librocksdb has no " << wal_append << " to fail: " << out;
  fm.note_enabled("posix/io/rw/write");
  ASSERT_EQ(put(m.path("after"), after), 0);
  EXPECT_NE(fsync_path(m.path("after")), 0) << "the index commit did not fail";
  fm.kill9();
  // The segment holds the record (its sync succeeded before the commit).
  ASSERT_TRUE(m.mount_ok(opts));
  std::string why;
  EXPECT_EQ(check_file(m.path("after"), after, &why, true), 0) << why;
  EXPECT_EQ(check_file(m.path("before"), before, &why, true), 0) << why;
  EXPECT_EQ(why, "");
  auto st = stats(m.mnt());
  EXPECT_FALSE(st["index"]["rebuilt"].get<bool>()) << st.dump();
  EXPECT_GE(stat_u64(st, "/index/caught_up_records"), 1u) << st.dump();
}

// ---------------------------------------------------------------------------
// Faults in cold reads: open (a segment's read descriptor) and pread.

class ColdReadFaults : public ::testing::TestWithParam<const char*> {};

TEST_P(ColdReadFaults, EioNeverWrongBytesThenReadsAgain) {
  SKIP_WITHOUT_FIU();
  FaultMount fm;
  KvfsMount& m = fm.m();
  // Written by a plain daemon, read by a fresh fiu one with a 16 MiB RAM
  // tier: the reads below come from the segments, and no segment has a read
  // descriptor yet.
  ASSERT_TRUE(m.mount_ok("ram_size=64M,segment_size=8M"));
  constexpr int kFiles = 6;
  std::vector<std::string> content;
  for (int i = 0; i < kFiles; ++i) {
    content.push_back(make_content(4 * kMiB + 4096 * i, 100 + i));
    ASSERT_EQ(put(m.path("f" + std::to_string(i)), content[i]), 0);
  }
  m.unmount();
  ASSERT_TRUE(fm.mount("ram_size=16M,evict_grace=3600"));
  const json before = stats_of(m);

  fm.fail(GetParam(), kEIO);
  std::string why;
  int eio = 0;
  for (int i = 0; i < kFiles; ++i) {
    const int e = check_file(m.path("f" + std::to_string(i)), content[i], &why, i % 2 == 0);
    EXPECT_TRUE(e == 0 || e == kEIO) << "f" << i << ": " << errstr(e);
    eio += e == kEIO;
  }
  EXPECT_EQ(why, "") << "a read under an injected fault returned wrong or short bytes";
  EXPECT_GT(eio, 0) << "no read failed: the reads did not reach the segments";
  // New data in RAM is served while the backing dir cannot be read.
  const std::string n = m.path("new.bin"), cn = make_content(2 * kMiB, 7);
  ASSERT_EQ(put(n, cn), 0);
  EXPECT_EQ(check_file(n, cn, &why, true), 0);
  const json during = stats_of(m);
  EXPECT_GT(stat_u64(during, "/errors/io"), stat_u64(before, "/errors/io")) << during.dump();
  EXPECT_EQ(stat_u64(during, "/errors/checksum"), 0u) << during.dump();
  // An I/O error is not corruption: no file was dropped.
  EXPECT_EQ(stat_u64(during, "/errors/dropped_files"), 0u) << during.dump();
  EXPECT_EQ(daemon_healthy(m), "");

  fm.clear(GetParam());
  for (int i = 0; i < kFiles; ++i)
    EXPECT_EQ(check_file(m.path("f" + std::to_string(i)), content[i], &why, i % 2 == 1), 0) << i;
  EXPECT_EQ(why, "");
}

INSTANTIATE_TEST_SUITE_P(Faults, ColdReadFaults,
                         ::testing::Values("posix/io/rw/pread", "posix/io/oc/open"),
                         [](const auto& info) {
                           std::string n = info.param;
                           return n.substr(n.rfind('/') + 1);
                         });

// ---------------------------------------------------------------------------
// Random faults (the fiu-run -c 'enable_random ...' way) in every read, write
// and sync of the daemon while a vLLM-like load runs: stores, loads, fsyncs.
// Loads give the right bytes or an error; stores and fsyncs give success or
// EIO/ENOSPC. Once the faults clear, every file flushes and survives a
// remount.

TEST(Faults, RandomFaultsUnderLoad) {
  SKIP_WITHOUT_FIU();
  FaultMount fm;
  KvfsMount& m = fm.m();
  ASSERT_TRUE(fm.mount("ram_size=48M,segment_size=8M,flush_batch=8M,evict_grace=3600"));
  // Per call: a flush batch of 8 MiB makes about ten pwrite calls.
  fm.fail_randomly("posix/io/rw/pwrite", 0.01, kEIO);
  fm.fail_randomly("posix/io/rw/pread", 0.02, kEIO);
  fm.fail_randomly("posix/io/sync/fdatasync", 0.02, kEIO);
  constexpr int kThreads = 6, kFiles = 12;
  constexpr size_t kSize = 3 * kMiB;
  Failures fails;
  std::atomic<uint64_t> ok_loads{0}, err_loads{0}, err_syncs{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < kFiles; ++i) {
        const std::string p = m.path("t" + std::to_string(t) + "_" + std::to_string(i));
        const std::string c = make_content(kSize, t * 1000 + i);
        int e = put(p, c, (i % 2) ? O_DIRECT : 0);
        if (e != 0) {
          fails.add("store " + p + ": " + errstr(e));
          continue;
        }
        e = fsync_path(p);
        if (e != 0 && e != kEIO && e != kENOSPC) fails.add("fsync: " + errstr(e));
        if (e != 0) ++err_syncs;
        // Load an earlier file of this thread (probably cold by now).
        const int j = int(rng() % uint32_t(i + 1));
        const std::string q = m.path("t" + std::to_string(t) + "_" + std::to_string(j));
        std::string why;
        e = check_file(q, make_content(kSize, t * 1000 + j), &why, j % 2 == 0);
        if (!why.empty()) fails.add(why);
        if (e == 0)
          ++ok_loads;
        else if (e == kEIO)
          ++err_loads;
        else
          fails.add("load " + q + ": " + errstr(e));
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_FALSE(fails.any()) << fails.count() << " failures, first: " << fails.first();
  EXPECT_EQ(daemon_healthy(m), "");
  const json during = stats_of(m);
  EXPECT_EQ(stat_u64(during, "/errors/checksum"), 0u) << during.dump();
  fm.disable_all();
  // Every file flushes now, and is right.
  for (int t = 0; t < kThreads; ++t)
    for (int i = 0; i < kFiles; ++i) {
      const std::string p = m.path("t" + std::to_string(t) + "_" + std::to_string(i));
      EXPECT_EQ(fsync_path(p), 0) << p;
    }
  ASSERT_TRUE(fm.remount_plain("ram_size=16M"));
  std::string why;
  for (int t = 0; t < kThreads; ++t)
    for (int i = 0; i < kFiles; ++i) {
      const std::string p = m.path("t" + std::to_string(t) + "_" + std::to_string(i));
      EXPECT_EQ(check_file(p, make_content(kSize, t * 1000 + i), &why, true), 0) << p;
    }
  EXPECT_EQ(why, "");
  std::printf("loads ok %lu, EIO %lu; fsyncs failed %lu; io errors counted %lu\n",
              (unsigned long)ok_loads.load(), (unsigned long)err_loads.load(),
              (unsigned long)err_syncs.load(), (unsigned long)stat_u64(during, "/errors/io"));
}

// ---------------------------------------------------------------------------
// A backing dir on a 64 MiB tmpfs, a capacity far above it: the filesystem
// itself runs out of space. Stores get ENOSPC (or succeed), never hang; the
// daemon stays up; every file whose fsync succeeded is intact, before and
// after a remount; no read returns wrong bytes.

TEST(Faults, TmpfsBackingDirRunsOutOfSpace) {
  KvfsMount m;
  const std::string backing = m.root() + "/tmpfs";
  ASSERT_EQ(::mkdir(backing.c_str(), 0755), 0);
  if (::mount("tmpfs", backing.c_str(), "tmpfs", 0, "size=64M") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs: " << errstr(errno);
  struct Unmount {
    std::string p;
    ~Unmount() { ::umount2(p.c_str(), MNT_DETACH); }
  } unmount_tmpfs{backing};
  m.set_backing(backing);
  // evict_grace: nothing is evicted within the test, so space cannot be
  // made and ENOSPC must reach the writers.
  ASSERT_TRUE(m.mount_ok("ram_size=256M,segment_size=8M,capacity=1G,evict_grace=3600"));
  constexpr size_t kSize = 4 * kMiB;
  std::map<std::string, std::string> durable;  // fsync said yes
  int enospc = 0, eio = 0;
  for (int i = 0; i < 40 && enospc + eio < 6; ++i) {
    const std::string p = m.path("f" + std::to_string(i));
    const std::string c = make_content(kSize, 500 + i);
    int e = put(p, c, i % 2 ? O_DIRECT : 0);
    if (e == 0) e = fsync_path(p);
    if (e == 0) {
      durable[p] = c;
    } else if (e == kENOSPC) {
      ++enospc;
    } else if (e == kEIO) {
      ++eio;
    } else {
      ADD_FAILURE() << p << ": " << errstr(e);
    }
  }
  EXPECT_GT(enospc, 0) << "160 MiB into a 64 MiB tmpfs and no ENOSPC";
  EXPECT_GT(durable.size(), 4u);
  EXPECT_EQ(daemon_healthy(m), "");
  json s = stats_of(m);
  EXPECT_GT(stat_u64(s, "/errors/enospc"), 0u) << s.dump();
  std::string why;
  for (auto& [p, c] : durable) EXPECT_EQ(check_file(p, c, &why, true), 0) << p;
  EXPECT_EQ(why, "");
  // The mount still serves metadata and reads while full.
  struct stat st;
  EXPECT_EQ(::stat(m.mnt().c_str(), &st), 0);
  EXPECT_EQ(::mkdir(m.path("still-works").c_str(), 0755) == 0 || errno == ENOSPC, true)
      << errstr(errno);
  std::printf("durable files %zu, ENOSPC %d, EIO %d\n", durable.size(), enospc, eio);
  // Unmount with dirty data that cannot be written: the daemon must still
  // exit (unmount() checks that). Then the durable files are all back.
  m.unmount();
  ASSERT_TRUE(m.mount_ok("ram_size=64M,segment_size=8M,capacity=1G"));
  for (auto& [p, c] : durable) EXPECT_EQ(check_file(p, c, &why, true), 0) << p;
  EXPECT_EQ(why, "");
  EXPECT_EQ(daemon_healthy(m), "");
  m.unmount();  // before the tmpfs goes
}

}  // namespace
}  // namespace kvfs::test
