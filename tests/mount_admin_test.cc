// SPDX-License-Identifier: Apache-2.0
// kvfs-admin against a real mount: stats, evict, config, permissions, fsck,
// rebuild-index; mounting through an fstab line; the man pages' lint.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/backing/disk_layout.h"
#include "fs/stats_schema.h"
#include "tests/mount_fixture.h"

namespace kvfs::test {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr uint64_t kMiB = 1ull << 20;

// kvfs-admin as user nobody (uid/gid 65534, no supplementary groups).
RunResult admin_as_nobody(std::vector<std::string> args) {
  std::vector<std::string> argv = {"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                   KVFS_ADMIN_BIN};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv);
}

json stats_json(const KvfsMount& m) {
  RunResult r = run_admin({"stats", m.mnt(), "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  json j = json::parse(r.output, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << "not JSON: " << r.output;
  return j;
}

uint64_t get(const json& j, const char* ptr) {
  const json::json_pointer p(ptr);
  EXPECT_TRUE(j.contains(p)) << "stats lack " << ptr << ": " << j.dump();
  return j.contains(p) && j.at(p).is_number() ? j.at(p).get<uint64_t>() : 0;
}

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

int stat_errno(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? 0 : errno;
}

// Reads a whole file with O_DIRECT (so the daemon, not the page cache,
// serves every byte).
bool read_direct(const std::string& path, size_t size, std::string* out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (fd < 0) return false;
  const size_t cap = (size + 4095) / 4096 * 4096 + 4096;
  AlignedBuf buf(cap);
  size_t got = 0;
  ssize_t n;
  while ((n = ::pread(fd, buf.data + got, cap - got, static_cast<off_t>(got))) > 0)
    got += static_cast<size_t>(n);
  ::close(fd);
  if (n < 0) return false;
  out->assign(buf.data, got);
  return true;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

pid_t lock_pid(const std::string& backing) {
  std::ifstream in(layout::shared_lock_path(backing));
  pid_t pid = -1;
  in >> pid;
  return pid;
}

TEST(AdminStats, CountsFilesBytesHitsAndMisses) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok("entry_timeout=0,attr_timeout=0,negative_timeout=0"));
  constexpr int kFiles = 4;
  constexpr size_t kSize = 2 * kMiB;  // two 1 MiB blocks each
  std::vector<std::string> data;
  for (int i = 0; i < kFiles; ++i) {
    data.push_back(random_bytes(kSize, 100 + i));
    ASSERT_TRUE(write_file(m.path("f" + std::to_string(i)), data.back()));
  }
  json s0 = stats_json(m);
  EXPECT_EQ(get(s0, "/files"), uint64_t(kFiles));
  EXPECT_EQ(get(s0, "/logical_bytes"), uint64_t(kFiles) * kSize);
  EXPECT_GE(get(s0, "/ram/used_bytes"), uint64_t(kFiles) * kSize);
  EXPECT_EQ(get(s0, "/ram/capacity_bytes"), 256 * kMiB);  // the fixture's ram_size
  EXPECT_GT(get(s0, "/backing/capacity_bytes"), 0u);
  for (const char* k : {"/backing/used_bytes", "/dirty_bytes", "/hits/ram", "/hits/backing",
                        "/misses", "/evictions/admin"})
    get(s0, k);

  // Reads served from RAM count RAM hits, one per block at least.
  for (int i = 0; i < kFiles; ++i) {
    std::string back;
    ASSERT_TRUE(read_direct(m.path("f" + std::to_string(i)), kSize, &back));
    EXPECT_EQ(back, data[i]);
  }
  json s1 = stats_json(m);
  EXPECT_GE(get(s1, "/hits/ram"), get(s0, "/hits/ram") + kFiles * 2);
  EXPECT_EQ(get(s1, "/hits/backing"), get(s0, "/hits/backing"));

  // Each lookup of an absent name is one miss (negative_timeout=0: the
  // kernel asks every time).
  for (int i = 0; i < 3; ++i) EXPECT_EQ(stat_errno(m.path("absent" + std::to_string(i))), ENOENT);
  json s2 = stats_json(m);
  EXPECT_EQ(get(s2, "/misses"), get(s1, "/misses") + 3);

  // The other formats carry the same numbers.
  RunResult prom = run_admin({"stats", m.mnt(), "--prometheus"});
  ASSERT_EQ(prom.exit_code, 0) << prom.output;
  EXPECT_NE(prom.output.find("# TYPE kvfs_ram_used_bytes gauge"), std::string::npos);
  EXPECT_NE(prom.output.find("# HELP kvfs_ram_used_bytes "), std::string::npos);
  EXPECT_NE(prom.output.find("kvfs_files{mountpoint=\"" + m.mnt() + "\"} 4\n"), std::string::npos)
      << prom.output;
  EXPECT_NE(prom.output.find("kvfs_read_served_bytes_total{mountpoint=\"" + m.mnt() +
                             "\",tier=\"ram\"} "),
            std::string::npos);
  // Every sample line is NAME{LABELS} VALUE with a kvfs_ name.
  std::istringstream lines(prom.output);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    EXPECT_EQ(line.rfind("kvfs_", 0), 0u) << line;
    EXPECT_NE(line.find("} "), std::string::npos) << line;
  }
  RunResult table = run_admin({"stats", m.mnt()});
  ASSERT_EQ(table.exit_code, 0) << table.output;
  EXPECT_NE(table.output.find("RAM tier"), std::string::npos) << table.output;
  // --all: one line per statistic of the schema, each with the daemon's value.
  RunResult all = run_admin({"stats", m.mnt(), "--all"});
  ASSERT_EQ(all.exit_code, 0) << all.output;
  const std::string lines_all = "\n" + all.output;
  for (const stats::Def& d : stats::defs()) {
    std::string name = d.path + 1;
    std::replace(name.begin(), name.end(), '/', '.');
    const size_t at = lines_all.find("\n" + name + " ");
    ASSERT_NE(at, std::string::npos) << name << "\n" << all.output;
    const std::string value = lines_all.substr(at + 1 + name.size());
    EXPECT_NE(value.substr(value.find_first_not_of(' '), 2), "- ") << name;
  }
  EXPECT_NE(lines_all.find("\nfiles                            4 "), std::string::npos)
      << all.output;

  // After a remount RAM is empty: the same reads come from the backing dir.
  m.unmount();
  ASSERT_TRUE(m.mount_ok("entry_timeout=0,attr_timeout=0,negative_timeout=0"));
  json r0 = stats_json(m);
  EXPECT_EQ(get(r0, "/files"), uint64_t(kFiles));
  for (int i = 0; i < kFiles; ++i) {
    std::string back;
    ASSERT_TRUE(read_direct(m.path("f" + std::to_string(i)), kSize, &back));
    EXPECT_EQ(back, data[i]);
  }
  json r1 = stats_json(m);
  EXPECT_GE(get(r1, "/hits/backing"), get(r0, "/hits/backing") + kFiles * 2);
}

// The kernel's page cache is kept at an open only for a file nothing wrote
// since its last open (close-to-open): a re-read of an unchanged file does
// not reach the daemon, the first read after a change does, and sees it.
TEST(AdminStats, PageCacheKeptOnlyForUnchangedFiles) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  const std::string f = m.path("cached");
  std::string data = random_bytes(2 * kMiB, 7);
  ASSERT_TRUE(write_file(f, data));
  auto ram_hits = [&] { return get(stats_json(m), "/hits/ram"); };
  std::string back;
  const uint64_t h0 = ram_hits();
  ASSERT_TRUE(read_file(f, &back));
  EXPECT_EQ(back, data);
  const uint64_t h1 = ram_hits();
  EXPECT_GE(h1, h0 + 2) << "the first open after the write is served by the daemon";
  ASSERT_TRUE(read_file(f, &back));
  EXPECT_EQ(back, data);
  EXPECT_EQ(ram_hits(), h1) << "an unchanged file is re-read from the page cache";

  int fd = ::open(f.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  const std::string patch(4096, 'p');
  ASSERT_EQ(::pwrite(fd, patch.data(), patch.size(), kMiB), ssize_t(patch.size()));
  ASSERT_EQ(::close(fd), 0);
  data.replace(kMiB, patch.size(), patch);
  const uint64_t h2 = ram_hits();
  ASSERT_TRUE(read_file(f, &back));
  EXPECT_EQ(back, data);
  EXPECT_GE(ram_hits(), h2 + 2) << "a file written since its last open is read from the daemon";
}

TEST(AdminEvict, PrefixRemovesExactlyThatSubtree) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok("evict_grace=0,entry_timeout=0,attr_timeout=0,negative_timeout=0"));
  ASSERT_EQ(::mkdir(m.path("sub").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(m.path("sub/deeper").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(m.path("subway").c_str(), 0755), 0);  // shares the string prefix
  ASSERT_EQ(::mkdir(m.path("other").c_str(), 0755), 0);
  const std::vector<std::pair<std::string, size_t>> gone = {
      {"sub/a", kMiB}, {"sub/b", 100000}, {"sub/deeper/c", 3 * kMiB + 7}};
  const std::vector<std::pair<std::string, size_t>> kept = {
      {"subway/d", 200000}, {"other/e", kMiB}, {"top", 4096}};
  uint64_t gone_bytes = 0;
  uint64_t seed = 1;
  for (auto& [p, n] : gone) {
    ASSERT_TRUE(write_file(m.path(p), random_bytes(n, seed++)));
    gone_bytes += n;
  }
  std::vector<std::string> kept_data;
  for (auto& [p, n] : kept) {
    kept_data.push_back(random_bytes(n, seed++));
    ASSERT_TRUE(write_file(m.path(p), kept_data.back()));
  }
  // Dirty files are never evicted: write everything first.
  RunResult f = run_admin({"flush", m.mnt(), "--wait"});
  ASSERT_EQ(f.exit_code, 0) << f.output;

  // ls shows the subtree with tiers and sizes.
  RunResult ls = run_admin({"ls", m.mnt(), "sub", "--json"});
  ASSERT_EQ(ls.exit_code, 0) << ls.output;
  json lj = json::parse(ls.output);
  std::set<std::string> names;
  for (auto& e : lj["entries"]) {
    names.insert(e["name"].get<std::string>());
    if (e["name"] == "a") {
      EXPECT_EQ(e["size"].get<uint64_t>(), kMiB);
      EXPECT_NE(e["tier"].get<std::string>(), "dirty");
      EXPECT_GT(e["last_access_ns"].get<int64_t>(), 0);
    }
  }
  EXPECT_EQ(names, (std::set<std::string>{"a", "b", "deeper"}));
  RunResult lt = run_admin({"ls", m.mnt(), m.path("sub")});
  ASSERT_EQ(lt.exit_code, 0) << lt.output;
  EXPECT_NE(lt.output.find("LAST ACCESS"), std::string::npos) << lt.output;
  EXPECT_NE(lt.output.find("deeper/"), std::string::npos) << lt.output;

  const std::string expect =
      "3 files (" + std::to_string(gone_bytes) + " bytes)";  // "evicted N files (B bytes)"
  RunResult dry = run_admin({"evict", m.mnt(), "--prefix", "sub", "--dry-run"});
  ASSERT_EQ(dry.exit_code, 0) << dry.output;
  EXPECT_NE(dry.output.find("would evict " + expect), std::string::npos) << dry.output;
  for (auto& [p, n] : gone) EXPECT_TRUE(exists(m.path(p))) << p << " gone after a dry run";

  RunResult ev = run_admin({"evict", m.mnt(), "--prefix", m.path("sub")});  // absolute form
  ASSERT_EQ(ev.exit_code, 0) << ev.output;
  EXPECT_NE(ev.output.find("evicted " + expect), std::string::npos) << ev.output;
  for (auto& [p, n] : gone) EXPECT_EQ(stat_errno(m.path(p)), ENOENT) << p;
  for (size_t i = 0; i < kept.size(); ++i) {
    std::string back;
    ASSERT_TRUE(read_file(m.path(kept[i].first), &back)) << kept[i].first;
    EXPECT_EQ(back, kept_data[i]) << kept[i].first;
  }
  EXPECT_EQ(get(stats_json(m), "/evictions/admin"), 3u);

  // One file by its relative path.
  RunResult one = run_admin({"evict", m.mnt(), "--path", "other/e"});
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_NE(one.output.find("evicted 1 files (" + std::to_string(kMiB) + " bytes)"),
            std::string::npos)
      << one.output;
  EXPECT_EQ(stat_errno(m.path("other/e")), ENOENT);
  EXPECT_TRUE(exists(m.path("top")));

  // Errors: a name that does not exist is the daemon's ENOENT (exit 3); a
  // path outside the mount and a missing mode are usage errors (exit 1).
  RunResult missing = run_admin({"evict", m.mnt(), "--path", "nope"});
  EXPECT_EQ(missing.exit_code, 3) << missing.output;
  EXPECT_NE(missing.output.find("No such file"), std::string::npos) << missing.output;
  EXPECT_EQ(run_admin({"evict", m.mnt(), "--path", "/etc/passwd"}).exit_code, 1);
  EXPECT_EQ(run_admin({"evict", m.mnt()}).exit_code, 1);
  EXPECT_EQ(run_admin({"evict", m.mnt(), "--all", "--prefix", "sub"}).exit_code, 1);
  EXPECT_EQ(run_admin({"evict", m.mnt(), "--older-than", "5x"}).exit_code, 1);
  EXPECT_EQ(run_admin({"evict", m.mnt(), "--to-size", "lots"}).exit_code, 1);
}

TEST(AdminConfig, CapacityTakesEffect) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  RunResult set = run_admin({"config", m.mnt(), "capacity=3G"});
  ASSERT_EQ(set.exit_code, 0) << set.output;
  struct statvfs v;
  ASSERT_EQ(::statvfs(m.mnt().c_str(), &v), 0);
  EXPECT_EQ(uint64_t(v.f_blocks) * v.f_frsize, 3ull << 30);

  RunResult all = run_admin({"config", m.mnt()});
  ASSERT_EQ(all.exit_code, 0) << all.output;
  EXPECT_NE(all.output.find("capacity"), std::string::npos) << all.output;
  EXPECT_NE(all.output.find("3G (3221225472 bytes)"), std::string::npos) << all.output;
  RunResult one = run_admin({"config", m.mnt(), "capacity"});
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_EQ(one.output, "3221225472\n");

  RunResult ram = run_admin({"config", m.mnt(), "ram_size=128M", "evict_grace=5"});
  ASSERT_EQ(ram.exit_code, 0) << ram.output;
  EXPECT_EQ(get(stats_json(m), "/ram/capacity_bytes"), 128 * kMiB);
  EXPECT_EQ(run_admin({"config", m.mnt(), "evict_grace"}).output, "5.0\n");

  EXPECT_EQ(run_admin({"config", m.mnt(), "capacity=lots"}).exit_code, 3);
  EXPECT_EQ(run_admin({"config", m.mnt(), "no_such_key=1"}).exit_code, 3);
  EXPECT_EQ(run_admin({"config", m.mnt(), "no_such_key"}).exit_code, 1);
  // A refused setting changed nothing.
  ASSERT_EQ(::statvfs(m.mnt().c_str(), &v), 0);
  EXPECT_EQ(uint64_t(v.f_blocks) * v.f_frsize, 3ull << 30);
}

TEST(AdminPermissions, OtherUsersMayLookButNotTouch) {
  KvfsMount m;
  // nobody must reach the mount point through the fixture's 0700 tree.
  ASSERT_EQ(::chmod(m.root().c_str(), 0755), 0);
  ASSERT_TRUE(m.mount_ok("allow_other,evict_grace=0"));
  ASSERT_TRUE(write_file(m.path("f"), random_bytes(4096, 7)));

  RunResult st = admin_as_nobody({"stats", m.mnt(), "--json"});
  ASSERT_EQ(st.exit_code, 0) << st.output;
  EXPECT_EQ(json::parse(st.output)["files"].get<uint64_t>(), 1u);
  EXPECT_EQ(admin_as_nobody({"config", m.mnt()}).exit_code, 0);
  EXPECT_EQ(admin_as_nobody({"ls", m.mnt()}).exit_code, 0);
  // A dry run changes nothing and is allowed.
  EXPECT_EQ(admin_as_nobody({"evict", m.mnt(), "--all", "--dry-run"}).exit_code, 0);

  for (const std::vector<std::string>& cmd :
       std::vector<std::vector<std::string>>{{"evict", m.mnt(), "--all", "--force"},
                                             {"flush", m.mnt()},
                                             {"flush", m.mnt(), "--wait"},
                                             {"config", m.mnt(), "capacity=1G"}}) {
    RunResult r = admin_as_nobody(cmd);
    EXPECT_EQ(r.exit_code, 3) << cmd[0] << ": " << r.output;
    EXPECT_NE(r.output.find("Operation not permitted"), std::string::npos) << r.output;
  }
  EXPECT_TRUE(exists(m.path("f")));
  RunResult cap = run_admin({"config", m.mnt(), "capacity"});
  EXPECT_NE(cap.output, std::to_string(1ull << 30) + "\n");
  // Root may.
  RunResult ev = run_admin({"evict", m.mnt(), "--all", "--force"});
  EXPECT_EQ(ev.exit_code, 0) << ev.output;
  EXPECT_NE(ev.output.find("evicted 1 files"), std::string::npos) << ev.output;

  // Without allow_other, another user cannot reach the daemon at all.
  KvfsMount priv;
  ASSERT_EQ(::chmod(priv.root().c_str(), 0755), 0);
  ASSERT_TRUE(priv.mount_ok());
  RunResult no = admin_as_nobody({"stats", priv.mnt()});
  EXPECT_EQ(no.exit_code, 2) << no.output;
}

TEST(AdminErrors, NotAKvfsMount) {
  RunResult tmp = run_admin({"stats", "/tmp"});
  EXPECT_EQ(tmp.exit_code, 2) << tmp.output;
  EXPECT_NE(tmp.output.find("not a kvfs mount"), std::string::npos) << tmp.output;
  EXPECT_EQ(run_admin({"flush", "/nonexistent-kvfs-dir"}).exit_code, 2);
  EXPECT_EQ(run_admin({"fsck", "/tmp"}).exit_code, 2);  // no kvfs.super: refused, untouched
  EXPECT_FALSE(exists(layout::super_path("/tmp")));
  EXPECT_EQ(run_admin({}).exit_code, 1);
  EXPECT_EQ(run_admin({"no-such-command"}).exit_code, 1);
  EXPECT_EQ(run_admin({"--help"}).exit_code, 0);

  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  ASSERT_EQ(::mkdir(m.path("d").c_str(), 0755), 0);
  // A directory inside the mount is not the mount point.
  RunResult sub = run_admin({"stats", m.path("d")});
  EXPECT_EQ(sub.exit_code, 2) << sub.output;
  RunResult ver = run_admin({"version", m.mnt()});
  EXPECT_EQ(ver.exit_code, 0) << ver.output;
  EXPECT_NE(ver.output.find("kvfs daemon"), std::string::npos) << ver.output;
}

TEST(AdminFsck, CleanThenDetectsACorruptBlock) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  const std::string big = random_bytes(2 * kMiB + 12345, 42);
  ASSERT_TRUE(write_file(m.path("big.bin"), big));
  ASSERT_EQ(::mkdir(m.path("dir").c_str(), 0755), 0);
  ASSERT_TRUE(write_file(m.path("dir/small"), random_bytes(3000, 43)));
  // The daemon holds the backing dir: offline tools refuse.
  RunResult busy = run_admin({"fsck", m.backing(), "--index-dir", m.index_dir()});
  EXPECT_EQ(busy.exit_code, 2) << busy.output;
  EXPECT_NE(busy.output.find("in use"), std::string::npos) << busy.output;
  EXPECT_EQ(run_admin({"rebuild-index", m.backing(), "--index-dir", m.index_dir()}).exit_code, 2);
  m.unmount();

  RunResult clean = run_admin({"fsck", m.backing(), "--index-dir", m.index_dir()});
  ASSERT_EQ(clean.exit_code, 0) << clean.output;
  EXPECT_NE(clean.output.find("\nclean"), std::string::npos) << clean.output;
  EXPECT_NE(clean.output.find("2 files"), std::string::npos) << clean.output;

  // Flip one byte of big.bin's data where it lies in a segment.
  const std::string needle = big.substr(kMiB + 4096, 256);
  bool flipped = false;
  for (const auto& de : fs::directory_iterator(layout::segment_dir(m.backing()))) {
    const std::string seg = slurp(de.path());
    const size_t at = seg.find(needle);
    if (at == std::string::npos) continue;
    int fd = ::open(de.path().c_str(), O_RDWR | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    char c = static_cast<char>(seg[at + 100] ^ 0x5a);
    ASSERT_EQ(::pwrite(fd, &c, 1, static_cast<off_t>(at + 100)), 1);
    ::close(fd);
    flipped = true;
    break;
  }
  ASSERT_TRUE(flipped) << "big.bin's bytes not found in any segment";
  RunResult bad = run_admin({"fsck", m.backing(), "--index-dir", m.index_dir()});
  EXPECT_EQ(bad.exit_code, 4) << bad.output;
  EXPECT_NE(bad.output.find("checksum"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("/big.bin"), std::string::npos) << bad.output;
}

// ls names every file type; fsck and rebuild-index read the snapshots of
// special files (a device node's carries its device number).
TEST(AdminLs, NamesEveryFileTypeAndOfflineToolsReadThem) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  ASSERT_TRUE(write_file(m.path("file"), "x"));
  ASSERT_EQ(::mkdir(m.path("dir").c_str(), 0755), 0);
  ASSERT_EQ(::symlink("file", m.path("link").c_str()), 0);
  ASSERT_EQ(::mkfifo(m.path("fifo").c_str(), 0644), 0);
  ASSERT_EQ(::mknod(m.path("sock").c_str(), S_IFSOCK | 0644, 0), 0);
  ASSERT_EQ(::mknod(m.path("chr").c_str(), S_IFCHR | 0644, makedev(1, 3)), 0);
  ASSERT_EQ(::mknod(m.path("blk").c_str(), S_IFBLK | 0644, makedev(7, 300)), 0);
  RunResult ls = run_admin({"ls", m.mnt(), "--json"});
  ASSERT_EQ(ls.exit_code, 0) << ls.output;
  std::map<std::string, std::string> types;
  const json lj = json::parse(ls.output);
  for (auto& e : lj["entries"]) types[e["name"].get<std::string>()] = e["type"].get<std::string>();
  EXPECT_EQ(types, (std::map<std::string, std::string>{{"blk", "blockdev"},
                                                       {"chr", "chardev"},
                                                       {"dir", "dir"},
                                                       {"fifo", "fifo"},
                                                       {"file", "file"},
                                                       {"link", "symlink"},
                                                       {"sock", "socket"}}));
  m.unmount();
  RunResult clean = run_admin({"fsck", m.backing(), "--index-dir", m.index_dir()});
  ASSERT_EQ(clean.exit_code, 0) << clean.output;
  EXPECT_NE(clean.output.find("8 inodes"), std::string::npos) << clean.output;
  fs::remove_all(m.index_dir());
  RunResult rb = run_admin({"rebuild-index", m.backing(), "--index-dir", m.index_dir()});
  ASSERT_EQ(rb.exit_code, 0) << rb.output;
  ASSERT_TRUE(m.mount_ok());
  struct stat st;
  ASSERT_EQ(::lstat(m.path("blk").c_str(), &st), 0);
  EXPECT_TRUE(S_ISBLK(st.st_mode));
  EXPECT_EQ(st.st_rdev, makedev(7, 300));
}

TEST(AdminRebuildIndex, RecreatesADeletedIndex) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  ASSERT_EQ(::mkdir(m.path("d").c_str(), 0755), 0);
  std::vector<std::string> data;
  for (int i = 0; i < 5; ++i) {
    data.push_back(random_bytes(kMiB / 2 + i, 200 + i));
    ASSERT_TRUE(write_file(m.path("d/f" + std::to_string(i)), data.back()));
  }
  m.unmount();
  std::error_code ec;
  fs::remove_all(m.index_dir(), ec);
  ASSERT_FALSE(exists(m.index_dir()));

  RunResult r = run_admin({"rebuild-index", m.backing(), "--index-dir", m.index_dir()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("index rebuilt"), std::string::npos) << r.output;
  EXPECT_TRUE(exists(m.index_dir() + "/CURRENT"));
  // fsck reads the rebuilt index itself (it falls back to the segments, with
  // a warning, only when the index is missing or not this backing dir's).
  RunResult f = run_admin({"fsck", m.backing(), "--index-dir", m.index_dir()});
  EXPECT_EQ(f.exit_code, 0) << f.output;
  EXPECT_NE(f.output.find("index: " + m.index_dir()), std::string::npos) << f.output;
  EXPECT_NE(f.output.find("5 files"), std::string::npos) << f.output;

  ASSERT_TRUE(m.mount_ok());
  for (int i = 0; i < 5; ++i) {
    std::string back;
    ASSERT_TRUE(read_file(m.path("d/f" + std::to_string(i)), &back)) << i;
    EXPECT_EQ(back, data[i]);
  }
}

// Stops the daemon that mount(8) started if the test fails before it exits.
struct DaemonGuard {
  pid_t pid = -1;
  ~DaemonGuard() {
    if (pid > 0 && ::kill(pid, 0) == 0) {
      ::kill(pid, SIGTERM);  // unmounts, flushes, exits
      KvfsMount::wait_exit(pid, 60000);
    }
  }
};

// The fstab route: mount(8) -> mount.fuse3 -> `kvfs` found in PATH. mount(8)
// drops PATH from its environment (util-linux sanitize_env), so the helper's
// shell only searches the default PATH: a private mount namespace bind-mounts
// a directory holding `kvfs` (the binary under test) over /usr/local/sbin,
// which is on that default PATH, without touching the machine outside it.
// Inside it, one shell script mounts through a temporary fstab, uses the
// mount and unmounts; this test checks what it recorded, waits for the
// daemon to exit and remounts to see that unmounting flushed.
TEST(AdminFstab, MountAndUmountThroughAnFstabLine) {
  KvfsMount m;  // directories only: mount(8) starts the daemon
  DaemonGuard guard;
  const std::string bin = m.root() + "/bin", out = m.root() + "/out";
  ASSERT_TRUE(fs::create_directories(bin) && fs::create_directories(out));
  fs::create_symlink(fs::absolute(kvfs_binary()), bin + "/kvfs");
  std::string on_path;
  for (const char* d : {"/usr/local/sbin", "/usr/local/bin"})
    if (fs::is_directory(d)) {
      on_path = d;
      break;
    }
  ASSERT_FALSE(on_path.empty()) << "neither /usr/local/sbin nor /usr/local/bin exists";

  const std::string fstab = m.root() + "/fstab";
  {
    std::ofstream f(fstab);
    f << "# kvfs test\n"
      << m.backing() << " " << m.mnt() << " fuse.kvfs index_dir=" << m.index_dir()
      << ",ram_size=64M,noauto,nofail,_netdev,x-systemd.requires=foo.mount 0 0\n";
  }
  const std::string data = random_bytes(3 * kMiB + 5, 9);
  const std::string src = m.root() + "/src.bin";
  ASSERT_TRUE(write_file(src, data));

  const char* script = R"(set -e
mount --bind "$1" "$2"
mount -T "$3" "$4"
stat -f -c %t "$4" > "$7/ftype"
grep " $4 " /proc/self/mountinfo > "$7/mountinfo"
cp "$6" "$4/kv.bin"
cmp "$6" "$4/kv.bin"
"$5" stats "$4" --json > "$7/stats.json"
"$5" config "$4" index_dir > "$7/index_dir"
umount "$4"
echo unmounted
)";
  RunResult r = run_command({"unshare", "--mount", "--propagation", "private", "sh", "-c", script,
                             "sh", bin, on_path, fstab, m.mnt(), KVFS_ADMIN_BIN, src, out});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("unmounted"), std::string::npos) << r.output;
  guard.pid = lock_pid(m.backing());
  ASSERT_GT(guard.pid, 0) << "kvfs never started";
  EXPECT_TRUE(KvfsMount::wait_exit(guard.pid, 60000)) << "kvfs did not exit after umount";

  EXPECT_EQ(slurp(out + "/ftype"), "65735546\n");  // FUSE_SUPER_MAGIC
  EXPECT_NE(slurp(out + "/mountinfo").find(" - fuse.kvfs " + m.backing() + " "), std::string::npos)
      << slurp(out + "/mountinfo");
  json st = json::parse(slurp(out + "/stats.json"), nullptr, false);
  ASSERT_FALSE(st.is_discarded()) << slurp(out + "/stats.json");
  EXPECT_EQ(get(st, "/files"), 1u);
  EXPECT_EQ(get(st, "/ram/capacity_bytes"), 64 * kMiB);  // the options reached kvfs
  EXPECT_EQ(slurp(out + "/index_dir"), m.index_dir() + "\n");

  // Unmounting flushed: the file is back on the next mount.
  ASSERT_TRUE(m.mount_ok());
  std::string back;
  ASSERT_TRUE(read_file(m.path("kv.bin"), &back));
  EXPECT_EQ(back, data);
}

std::string man_page(const char* name) {
  return std::string(KVFS_SOURCE_DIR) + "/man/" + name;
}

TEST(AdminManPages, RenderWithoutWarnings) {
  for (const char* page : {"kvfs.8", "kvfs-admin.8"}) {
    ASSERT_TRUE(exists(man_page(page))) << man_page(page);
    // -z: no output, so whatever comes back is a warning or an error.
    RunResult r = run_command({"groff", "-man", "-ww", "-z", man_page(page)});
    EXPECT_EQ(r.exit_code, 0) << page << ": " << r.output;
    EXPECT_EQ(r.output, "") << page;
  }
}

TEST(AdminManPages, DocumentEveryOptionAndSubcommand) {
  // Every mount option `kvfs --help` lists is in kvfs.8.
  RunResult help = run_command({kvfs_binary(), "--help"});
  ASSERT_EQ(help.exit_code, 0);
  const std::string kvfs8 = slurp(man_page("kvfs.8"));
  std::istringstream lines(help.output);
  int options = 0;
  for (std::string line; std::getline(lines, line);) {
    // "  ram_size=SIZE   RAM tier capacity (default 1G)"
    if (line.size() < 3 || line[0] != ' ' || line[1] != ' ' || line[2] == ' ') continue;
    const size_t eq = line.find('=');
    const size_t sp = line.find(' ', 2);
    if (eq == std::string::npos || eq > sp) continue;
    const std::string key = line.substr(2, eq - 2 + 1);  // "ram_size="
    ++options;
    EXPECT_NE(kvfs8.find(key), std::string::npos) << key << " is not in kvfs.8";
  }
  EXPECT_GE(options, 20);
  const std::string admin8 = slurp(man_page("kvfs-admin.8"));
  for (const char* sub :
       {"stats", "evict", "flush", "ls", "config", "version", "fsck", "rebuild\\-index"})
    EXPECT_NE(admin8.find(std::string(".SS ") + sub), std::string::npos) << sub;
  for (const char* field : {"hits.ram", "hits.backing", "misses", "ram.used_bytes",
                            "backing.capacity_bytes", "dirty_bytes", "evictions"})
    EXPECT_NE(admin8.find(field), std::string::npos) << field;
}

}  // namespace
}  // namespace kvfs::test
