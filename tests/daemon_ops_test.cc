// SPDX-License-Identifier: Apache-2.0
// The daemon as operations run it: paths and sizes it refuses before
// mounting anything, umount followed at once by a remount, fsck or
// rebuild-index, logs that reach their file within a second (also without a
// syslog socket), and `kvfs-admin config` that changes all or nothing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/backing/disk_layout.h"
#include "tests/mount_fixture.h"

namespace kvfs::test {
namespace {

namespace fs = std::filesystem;

std::string slurp(const std::string& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// Each refused with its documented exit status and a one-line reason,
// nothing mounted.
TEST(DaemonOps, RefusesBadPathsAndSizes) {
  KvfsMount m;
  struct Case {
    std::string opts;
    int code;
    const char* says;
  };
  const std::vector<Case> sizes = {
      {"ram_size=100T", 1, "memory"},
      {"capacity=0", 1, "capacity"},
      {"capacity=1K", 1, "two segments"},
      {"segment_size=8M,capacity=8M", 1, "two segments"},
      {"low_watermark=0.9,high_watermark=0.8", 1, "watermark"},
  };
  for (const Case& c : sizes) {
    RunResult r = m.mount(c.opts);
    EXPECT_EQ(r.exit_code, c.code) << c.opts << ": " << r.output;
    EXPECT_NE(r.output.find(c.says), std::string::npos) << c.opts << ": " << r.output;
    EXPECT_FALSE(is_mounted(m.mnt())) << c.opts;
    if (m.mounted()) m.unmount();
  }
  // A backing dir inside the mount point (here: the mount point itself).
  RunResult r = run_command({kvfs_binary(), m.mnt(), m.mnt(), "-o", "index_dir=" + m.index_dir()});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("inside the mount point"), std::string::npos) << r.output;
  fs::create_directories(m.mnt() + "/sub");
  r = run_command({kvfs_binary(), m.mnt() + "/sub", m.mnt(), "-o", "index_dir=" + m.index_dir()});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  fs::remove(m.mnt() + "/sub");

  ASSERT_TRUE(m.mount_ok());
  // Another store's segments/ as a backing dir.
  const std::string other_mnt = m.root() + "/mnt2";
  fs::create_directories(other_mnt);
  r = run_command({kvfs_binary(), layout::segment_dir(m.backing()), other_mnt, "-o",
                   "index_dir=" + m.root() + "/index2"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("inside the kvfs backing directory"), std::string::npos) << r.output;
  EXPECT_FALSE(is_mounted(other_mnt));
  // A second kvfs on top of the live mount (it would hide the cache).
  const std::string b2 = m.root() + "/backing2";
  fs::create_directories(b2);
  r = run_command({kvfs_binary(), b2, m.mnt(), "-o", "index_dir=" + m.root() + "/index2"});
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("already a mount point"), std::string::npos) << r.output;
  // The first mount still serves.
  std::ofstream(m.path("alive")) << "yes";
  EXPECT_EQ(slurp(m.path("alive")), "yes");
  // A second daemon on the same backing dir while it is mounted: at once.
  r = run_command({kvfs_binary(), m.backing(), other_mnt, "-o", "index_dir=" + m.index_dir()});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("mounted at " + m.mnt()), std::string::npos) << r.output;
}

// umount returns before the daemon has flushed and let go of the backing
// dir; what comes right after must still work: a remount (five times), an
// fsck, a rebuild-index. Each file written before an umount is back.
TEST(DaemonOps, UmountThenAtOnceRemountFsckRebuild) {
  KvfsMount m;
  std::vector<pid_t> old;
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(m.mount_ok("ram_size=64M")) << "remount " << i << " right after umount";
    for (int j = 0; j < i; ++j)
      EXPECT_EQ(slurp(m.path("f" + std::to_string(j))), std::string(1 << 20, char('a' + j)));
    std::ofstream(m.path("f" + std::to_string(i))) << std::string(1 << 20, char('a' + i));
    RunResult u = run_command({"fusermount3", "-u", m.mnt()});
    ASSERT_EQ(u.exit_code, 0) << u.output;
    old.push_back(m.forget_unmounted());
  }
  RunResult f = run_admin({"fsck", m.backing(), "--index-dir", m.index_dir()});
  EXPECT_EQ(f.exit_code, 0) << f.output;
  EXPECT_NE(f.output.find("clean"), std::string::npos) << f.output;
  ASSERT_TRUE(m.mount_ok("ram_size=64M"));
  ASSERT_EQ(run_command({"fusermount3", "-u", m.mnt()}).exit_code, 0);
  old.push_back(m.forget_unmounted());
  RunResult rb = run_admin({"rebuild-index", m.backing(), "--index-dir", m.index_dir()});
  EXPECT_EQ(rb.exit_code, 0) << rb.output;
  for (pid_t p : old) EXPECT_TRUE(KvfsMount::wait_exit(p, 60000)) << p;
  ASSERT_TRUE(m.mount_ok("ram_size=64M"));
  for (int j = 0; j < 5; ++j)
    EXPECT_EQ(slurp(m.path("f" + std::to_string(j))), std::string(1 << 20, char('a' + j))) << j;
}

// The log file gets info lines while the daemon runs (not at exit), with
// the effective settings, and the evictions an admin asks for.
TEST(DaemonOps, LogLinesArriveWithinASecond) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok("ram_size=64M,capacity=1G,segment_size=8M,node_id=n1"));
  std::ofstream(m.path("x")) << "data";
  RunResult e = run_admin({"evict", m.mnt(), "--path", "x", "--force"});
  ASSERT_EQ(e.exit_code, 0) << e.output;
  std::string log;
  // Bounded wait for the periodic flush (1 s), not a sleep for ordering.
  for (int i = 0; i < 40 && log.find("asked by kvfs-admin") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    log = slurp(m.log_file());
  }
  EXPECT_NE(log.find("capacity=1G"), std::string::npos) << log;
  EXPECT_NE(log.find("node_id=n1"), std::string::npos) << log;
  EXPECT_NE(log.find("index_dir=" + m.index_dir()), std::string::npos) << log;
  EXPECT_NE(log.find("evicted 1 files"), std::string::npos) << log;
}

// kvfs-admin config K=V...: all or nothing, in the order given.
TEST(DaemonOps, ConfigIsAllOrNothing) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok("ram_size=64M,segment_size=8M,capacity=1G"));
  RunResult r = run_admin({"config", m.mnt(), "evict_grace=5", "capacity=1K"});
  EXPECT_NE(r.exit_code, 0) << r.output;
  RunResult g = run_admin({"config", m.mnt(), "evict_grace", "capacity"});
  ASSERT_EQ(g.exit_code, 0) << g.output;
  EXPECT_EQ(g.output, "60.0\n1073741824\n") << "a refused setting left others applied";
  r = run_admin({"config", m.mnt(), "capacity=2G", "evict_grace=7", "capacity=3G"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("changed capacity"), std::string::npos) << r.output;
  g = run_admin({"config", m.mnt(), "evict_grace", "capacity"});
  EXPECT_EQ(g.output, "7.0\n3221225472\n") << "applied in the order given: the last one wins";
}

}  // namespace
}  // namespace kvfs::test

namespace kvfs::test {
namespace {

uint64_t json_u64(const std::string& out, const std::string& key) {
  const auto p = out.find("\"" + key + "\"");
  if (p == std::string::npos) return UINT64_MAX;
  return std::strtoull(out.c_str() + out.find(':', p) + 1, nullptr, 10);
}

// Stats count what a client can still open; inspecting a file does not
// make it recent; evict --prefix leaves no empty directories below it.
TEST(DaemonOps, StatsLsAndPrefixEviction) {
  KvfsMount m;
  // No kernel caching of names: what a stat sees is what kvfs holds (with
  // caching, an evicted name lasts until entry_timeout; see invalidate=1).
  ASSERT_TRUE(m.mount_ok("ram_size=64M,entry_timeout=0,attr_timeout=0"));
  fs::create_directories(m.path("p/a/b"));
  fs::create_directories(m.path("p/c"));
  for (const char* f : {"p/a/b/x", "p/a/b/y", "p/c/z", "keep1", "keep2"})
    std::ofstream(m.path(f)) << f;
  for (const char* f : {"p/a/b/x", "p/a/b/y", "p/c/z"})
    ASSERT_TRUE(fs::exists(m.path(f)));  // the kernel now holds their names

  RunResult a = run_admin({"ls", m.mnt(), "keep1", "--json"});
  ASSERT_EQ(a.exit_code, 0) << a.output;
  RunResult b = run_admin({"ls", m.mnt(), "keep1", "--json"});
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_EQ(json_u64(a.output, "last_access_ns"), json_u64(b.output, "last_access_ns"))
      << "kvfs-admin ls refreshed the file's last access:\n"
      << a.output << b.output;

  RunResult e = run_admin({"evict", m.mnt(), "--prefix", "p", "--force"});
  ASSERT_EQ(e.exit_code, 0) << e.output;
  EXPECT_TRUE(fs::is_directory(m.path("p")));
  EXPECT_FALSE(fs::exists(m.path("p/a"))) << "emptied directories stay";
  EXPECT_FALSE(fs::exists(m.path("p/c")));
  RunResult s = run_admin({"stats", m.mnt(), "--json"});
  ASSERT_EQ(s.exit_code, 0) << s.output;
  EXPECT_EQ(json_u64(s.output, "files"), 2u) << s.output;
  EXPECT_EQ(json_u64(s.output, "directories"), 2u) << "the root and p:\n" << s.output;
}

}  // namespace
}  // namespace kvfs::test

namespace kvfs::test {
namespace {

// A host or container without a syslog socket: in a private mount
// namespace whose /dev/log is not a socket, a daemon started without
// log_file logs to /var/log/kvfs/<mount point, '/' as '->.log, and its
// lines arrive while it runs.
TEST(DaemonOps, NoSyslogSocketLogsToVarLogKvfs) {
  if (run_command({"unshare", "--help"}).exit_code != 0) GTEST_SKIP() << "no unshare(1)";
  KvfsMount m;
  std::string name = m.mnt().substr(1);
  for (char& c : name)
    if (c == '/') c = '-';
  const std::string log = "/var/log/kvfs/" + name + ".log";
  fs::remove(log);
  // Everything inside the namespace: the mount is only visible there.
  const std::string script =
      "set -e\n"
      "if [ -e /dev/log ]; then mount --bind /dev/null /dev/log; fi\n"
      "'" +
      std::string(kvfs_binary()) + "' '" + m.backing() + "' '" + m.mnt() +
      "' -o index_dir=" + m.index_dir() +
      ",ram_size=64M\n"
      "echo data > '" +
      m.mnt() +
      "/f'\n"
      // Bounded: the line must be there within the 1 s flush interval.
      "for i in $(seq 50); do grep -q 'mounted ' '" +
      log +
      "' 2>/dev/null && break; sleep 0.1; done\n"
      "grep -q 'mounted ' '" +
      log +
      "'\n"
      "pid=$(head -n1 '" +
      layout::shared_lock_path(m.backing()) +
      "')\n"
      "fusermount3 -u '" +
      m.mnt() +
      "'\n"
      "while kill -0 $pid 2>/dev/null; do sleep 0.05; done\n";
  RunResult r = run_command({"unshare", "-m", "--propagation", "private", "sh", "-c", script});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const std::string text = slurp(log);
  EXPECT_NE(text.find("no syslog socket"), std::string::npos) << text;
  EXPECT_NE(text.find("mounted " + m.backing()), std::string::npos) << text;
  EXPECT_NE(text.find("stopped"), std::string::npos) << text;
  fs::remove(log);
}

}  // namespace
}  // namespace kvfs::test
