// SPDX-License-Identifier: Apache-2.0
// Mount tests: the index follows the segment log. An index dir put back from
// an older copy after a kill -9 is caught up at the next mount (every
// fsync'ed file back bit-exact, also after a later rebuild-index), fsck says
// how far behind it is; names removed by unlink, rename over, admin and
// capacity eviction never come back through reclamation and a rebuild.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "tests/mount_fixture.h"
#include "tests/reliability_util.h"

namespace kvfs::test {
namespace {

namespace fs = std::filesystem;
constexpr size_t kMiB = 1 << 20;

// Writes, fsyncs and closes; "" or the failing step.
std::string write_fsync(const std::string& path, const std::string& data) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return "open: " + errstr(errno);
  std::string e;
  if (::write(fd, data.data(), data.size()) != ssize_t(data.size()))
    e = "write: " + errstr(errno);
  else if (::fsync(fd) != 0)
    e = "fsync: " + errstr(errno);
  ::close(fd);
  return e;
}

void copy_dir(const std::string& from, const std::string& to) {
  fs::remove_all(to);
  fs::copy(from, to, fs::copy_options::recursive);
}

// The scenario: fsync'ed files written after the index copy was
// taken, a kill -9, the old copy put back. Before catch-up, the 40 files
// were gone, and under capacity pressure their segments were deleted as
// dead, so that not even a rebuild found them.
TEST(CatchUp, IndexCopyFromBeforeAKillIsCaughtUp) {
  KvfsMount m;
  const std::string opts = "ram_size=128M,segment_size=32M";
  ASSERT_TRUE(m.mount_ok(opts));
  std::map<std::string, std::string> want;
  for (int i = 0; i < 5; ++i) {
    const std::string n = "early" + std::to_string(i);
    want[n] = make_content(kMiB + 4096 * i, i);
    ASSERT_EQ(write_fsync(m.path(n), want[n]), "") << n;
  }
  m.unmount();
  const std::string saved = m.root() + "/index.copy";
  copy_dir(m.index_dir(), saved);

  ASSERT_TRUE(m.mount_ok(opts));
  fs::create_directories(m.path("late"));
  for (int i = 0; i < 40; ++i) {  // about 100 MiB
    const std::string n = "late/f" + std::to_string(i);
    want[n] = make_content(2 * kMiB + 512 * 1024 + 17 * i, 100 + i);
    ASSERT_EQ(write_fsync(m.path(n), want[n]), "") << n;
  }
  m.kill9();
  copy_dir(saved, m.index_dir());

  // fsck: the index is behind the segments, by how much, and not "clean".
  RunResult f = run_admin({"fsck", m.backing(), "--index-dir", m.index_dir()});
  EXPECT_NE(f.exit_code, 0) << f.output;
  EXPECT_NE(f.output.find("the index is behind the segments"), std::string::npos) << f.output;
  EXPECT_EQ(f.output.find("\nclean"), std::string::npos) << f.output;

  ASSERT_TRUE(m.mount_ok(opts + ",capacity=160M,evict_grace=3600"));
  EXPECT_EQ(check_all(m, want), "");
  auto st = stats(m.mnt());
  EXPECT_GE(stat_u64(st, "/index/caught_up_entries"), 41u) << st.dump();
  EXPECT_GE(stat_u64(st, "/index/caught_up_bytes"), 100 * kMiB) << st.dump();
  std::ifstream log(m.log_file());
  std::string all((std::istreambuf_iterator<char>(log)), {});
  EXPECT_NE(all.find("index caught up with the segments"), std::string::npos);
  EXPECT_EQ(all.find("rebuilding the index"), std::string::npos) << "caught up, not rebuilt";
  m.unmount();

  f = run_admin({"fsck", m.backing(), "--index-dir", m.index_dir()});
  EXPECT_EQ(f.exit_code, 0) << f.output;
  RunResult r = run_admin({"rebuild-index", m.backing(), "--index-dir", m.index_dir()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(m.mount_ok(opts));
  EXPECT_EQ(check_all(m, want), "") << "after rebuild-index";
}

// Removed names stay removed: unlink, rename over an existing name, admin
// eviction and capacity eviction, while reclamation deletes the segments
// that held their records, then a rebuild of the index from the segments.
TEST(CatchUp, RemovedNamesNeverComeBackAfterReclamationAndRebuild) {
  KvfsMount m;
  const std::string opts =
      "ram_size=64M,segment_size=8M,capacity=64M,evict_grace=0,entry_timeout=0,attr_timeout=0,"
      "flush_threads=1";
  ASSERT_TRUE(m.mount_ok(opts));
  std::set<std::string> removed;
  std::map<std::string, std::string> renamed;  // final name -> its new content
  fs::create_directories(m.path("d"));
  for (int i = 0; i < 12; ++i) {
    const std::string n = "d/v" + std::to_string(i);
    ASSERT_EQ(write_fsync(m.path(n), make_content(256 * 1024, i)), "");
    const std::string t = "d/t" + std::to_string(i);
    ASSERT_EQ(write_fsync(m.path(t), make_content(128 * 1024, 50 + i)), "");
  }
  // Read all along, so the cap never takes it: it keeps the segment that
  // holds the old snapshots of the names removed below, while the
  // segments with their tombstones are reclaimed.
  const std::string keep = make_content(4 * kMiB, 77);
  ASSERT_EQ(write_fsync(m.path("keep"), keep), "");
  for (int i = 0; i < 12; ++i) {
    const std::string v = "d/v" + std::to_string(i), t = "d/t" + std::to_string(i);
    if (i % 3 == 0) {
      ASSERT_EQ(::unlink(m.path(v).c_str()), 0);
      removed.insert(v);
    } else if (i % 3 == 1) {
      // The vLLM store: a tmp file renamed over an existing final name.
      const std::string tmp = t + ".tmp";
      const std::string data = make_content(64 * 1024, 500 + i);
      ASSERT_EQ(write_fsync(m.path(tmp), data), "");
      ASSERT_EQ(::rename(m.path(tmp).c_str(), m.path(t).c_str()), 0);
      removed.insert(tmp);
      renamed[t] = data;
    } else {
      RunResult e = run_admin({"evict", m.mnt(), "--path", v, "--force"});
      ASSERT_EQ(e.exit_code, 0) << e.output;
      removed.insert(v);
    }
  }
  // 3x the cap through it: capacity eviction and reclamation delete segments.
  for (int i = 0; i < 48; ++i) {
    ASSERT_EQ(write_fsync(m.path("fill" + std::to_string(i)), make_content(4 * kMiB, 900 + i)), "");
    std::string got;
    ASSERT_TRUE(read_file(m.path("keep"), &got) && got == keep) << "after fill " << i;
  }
  auto st = stats(m.mnt());
  EXPECT_GT(stat_u64(st, "/evictions/segments_deleted"), 0u) << st.dump();
  EXPECT_GT(stat_u64(st, "/evictions/capacity"), 0u) << st.dump();
  auto names = [&] {
    std::map<std::string, uintmax_t> v;
    for (auto& e : fs::recursive_directory_iterator(m.mnt()))
      if (e.is_regular_file()) v[fs::relative(e.path(), m.mnt())] = e.file_size();
    return v;
  };
  m.unmount();
  // The names compared on mounts whose cap evicts nothing: under the 64M cap
  // the evictor could take a file between a listing and its stat, or between
  // the two listings (a CI flake).
  const std::string roomy =
      "ram_size=64M,segment_size=8M,capacity=4G,entry_timeout=0,attr_timeout=0,flush_threads=1";
  ASSERT_TRUE(m.mount_ok(roomy));
  const auto before = names();
  for (auto& n : removed) EXPECT_FALSE(before.count(n)) << n;
  m.unmount();

  RunResult r = run_admin({"rebuild-index", m.backing(), "--index-dir", m.index_dir()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(m.mount_ok(roomy));
  // A clean unmount wrote everything: the rebuilt index shows exactly the
  // names there were, none that was removed (unlinked, renamed over, or
  // evicted by the admin or the cap).
  const auto after = names();
  for (auto& [n, size] : after) EXPECT_TRUE(before.count(n)) << n << " came back";
  for (auto& [n, size] : before) EXPECT_TRUE(after.count(n)) << n << " was lost";
  for (auto& [n, data] : renamed) {
    std::string got;
    if (read_file(m.path(n), &got)) {  // present unless the cap evicted it
      EXPECT_TRUE(got == data) << n << " holds the content from before the rename";
    }
  }
}

}  // namespace
}  // namespace kvfs::test
