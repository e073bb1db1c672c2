// SPDX-License-Identifier: Apache-2.0
// Mount tests: several kvfs daemons, one per node_id, over one backing dir.
// Each node owns the files that carry its name: a second daemon of a node is
// refused naming the first, a kvfs without node_id owns a dir alone, an
// index is used by its own node only, and a node's eviction under its cap
// never touches another node's segments,
// whose files stay bit-exact on their own node while it runs and after;
// kvfs-admin nodes lists them all.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/backing/disk_layout.h"
#include "tests/mount_fixture.h"

namespace kvfs::test {
namespace {

namespace fs = std::filesystem;
constexpr size_t kMiB = 1 << 20;
const std::string kNoCache = "entry_timeout=0,attr_timeout=0,negative_timeout=0";

// The node's segment files: name -> size.
std::map<std::string, uint64_t> segments_of(const std::string& backing, const std::string& node) {
  std::map<std::string, uint64_t> v;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(layout::segment_dir(backing), ec)) {
    const auto parsed = layout::parse_segment_name(e.path().filename().string());
    std::error_code ec2;  // one may be deleted while we look
    const uint64_t n = e.file_size(ec2);
    if (parsed && parsed->node == node && !ec2) v[e.path().filename().string()] = n;
  }
  return v;
}

// Every segment of `before` is still there, none shorter (its owner may have
// appended since); "" or the first that is not.
std::string all_kept(const std::map<std::string, uint64_t>& before,
                     const std::map<std::string, uint64_t>& now) {
  for (auto& [name, n] : before) {
    auto it = now.find(name);
    if (it == now.end()) return name + " is gone";
    if (it->second < n) return name + " shrank to " + std::to_string(it->second) + " B";
  }
  return "";
}

uint64_t total(const std::map<std::string, uint64_t>& segs) {
  uint64_t t = 0;
  for (auto& [_, n] : segs) t += n;
  return t;
}

std::string content(const std::string& name, size_t n) {
  return random_bytes(n, std::hash<std::string>{}(name));
}

TEST(Nodes, TwoNodesMountOneBackingDirEachWritingItsOwnSegments) {
  KvfsMount a, b;
  b.set_backing(a.backing());
  ASSERT_TRUE(a.mount_ok("node_id=a,segment_size=4M"));
  ASSERT_TRUE(b.mount_ok("node_id=b,segment_size=4M"));
  std::map<std::string, std::string> on_a, on_b;
  for (int i = 0; i < 4; ++i) {
    on_a["a" + std::to_string(i)] = content("a" + std::to_string(i), 3 * kMiB + 17);
    on_b["b" + std::to_string(i)] = content("b" + std::to_string(i), 2 * kMiB + 5);
  }
  for (auto& [n, d] : on_a) ASSERT_TRUE(write_file(a.path(n), d)) << n;
  for (auto& [n, d] : on_b) ASSERT_TRUE(write_file(b.path(n), d)) << n;
  EXPECT_EQ(check_all(a, on_a), "");
  EXPECT_EQ(check_all(b, on_b), "");
  a.unmount();
  b.unmount();
  // Flushed into each node's own segments, under one superblock.
  EXPECT_GE(total(segments_of(a.backing(), "a")), 12 * kMiB);
  EXPECT_GE(total(segments_of(a.backing(), "b")), 8 * kMiB);
  EXPECT_TRUE(fs::exists(layout::super_path(a.backing())));
  EXPECT_TRUE(fs::exists(layout::lock_path(a.backing(), "a")));
  EXPECT_TRUE(fs::exists(layout::lock_path(a.backing(), "b")));
  // Each index follows its own node's segments only: the other node's
  // records are neither applied nor counted as gone.
  ASSERT_TRUE(b.mount_ok("node_id=b,segment_size=4M"));
  ASSERT_TRUE(a.mount_ok("node_id=a,segment_size=4M"));
  EXPECT_EQ(check_all(a, on_a), "");
  EXPECT_EQ(check_all(b, on_b), "");
  EXPECT_EQ(a.log_tail(1 << 16).find("is no longer in the backing dir"), std::string::npos)
      << a.log_tail(4096);
  a.unmount();
  b.unmount();
  // fsck checks one node's segments and index, named by --node-id.
  for (const KvfsMount* m : {&a, &b}) {
    const std::string node = m == &a ? "a" : "b";
    RunResult f =
        run_admin({"fsck", a.backing(), "--index-dir", m->index_dir(), "--node-id", node});
    EXPECT_EQ(f.exit_code, 0) << f.output;
    EXPECT_NE(f.output.find("clean"), std::string::npos) << f.output;
  }
  RunResult f = run_admin({"fsck", a.backing(), "--index-dir", a.index_dir(), "--node-id", "b"});
  EXPECT_EQ(f.exit_code, 4) << f.output;
  EXPECT_NE(f.output.find("belongs to node 'a'"), std::string::npos) << f.output;
  // rebuild-index never replaces another node's index; a name that is no
  // node here (a typo) checks nothing and leaves no lock file behind.
  f = run_admin({"rebuild-index", a.backing(), "--index-dir", a.index_dir(), "--node-id", "b"});
  EXPECT_EQ(f.exit_code, 2) << f.output;
  EXPECT_NE(f.output.find("belongs to node 'a'"), std::string::npos) << f.output;
  f = run_admin({"fsck", a.backing(), "--index-dir", a.index_dir(), "--node-id", "c"});
  EXPECT_EQ(f.exit_code, 2) << f.output;
  EXPECT_NE(f.output.find("no node 'c'"), std::string::npos) << f.output;
  EXPECT_FALSE(fs::exists(layout::lock_path(a.backing(), "c")));
  // Without --node-id, a shared dir is refused: fsck checks one node.
  f = run_admin({"fsck", a.backing(), "--index-dir", a.index_dir()});
  EXPECT_EQ(f.exit_code, 2) << f.output;
  EXPECT_NE(f.output.find("--node-id"), std::string::npos) << f.output;
  ASSERT_TRUE(a.mount_ok("node_id=a,segment_size=4M"));
  EXPECT_EQ(check_all(a, on_a), "");
}

TEST(Nodes, AdminNodesListsEveryNodeRunningOrNot) {
  KvfsMount a, b;
  b.set_backing(a.backing());
  ASSERT_TRUE(a.mount_ok("node_id=a,segment_size=4M"));
  ASSERT_TRUE(b.mount_ok("node_id=b,segment_size=4M"));
  ASSERT_TRUE(write_file(a.path("x"), content("x", 3 * kMiB)));
  ASSERT_TRUE(write_file(b.path("y"), content("y", 1 * kMiB)));
  b.unmount();  // b stopped; a runs on
  RunResult flush = run_admin({"flush", a.mnt(), "--wait"});
  ASSERT_EQ(flush.exit_code, 0) << flush.output;
  RunResult r = run_admin({"nodes", a.backing(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.output;
  EXPECT_TRUE(j["shared"].get<bool>()) << r.output;
  ASSERT_EQ(j["nodes"].size(), 2u) << r.output;
  const auto& na = j["nodes"][0];
  const auto& nb = j["nodes"][1];
  EXPECT_EQ(na["node"], "a");
  EXPECT_TRUE(na["running"].get<bool>()) << r.output;
  EXPECT_EQ(na["pid"], std::to_string(a.daemon_pid()));
  EXPECT_EQ(na["mount"], a.mnt());
  EXPECT_EQ(na["bytes"].get<uint64_t>(), total(segments_of(a.backing(), "a")));
  EXPECT_GE(na["bytes"].get<uint64_t>(), 3 * kMiB);
  EXPECT_EQ(nb["node"], "b");
  EXPECT_FALSE(nb["running"].get<bool>()) << r.output;
  EXPECT_EQ(nb["bytes"].get<uint64_t>(), total(segments_of(a.backing(), "b")));
  EXPECT_GE(nb["bytes"].get<uint64_t>(), 1 * kMiB);
  EXPECT_EQ(j["bytes"].get<uint64_t>(), na["bytes"].get<uint64_t>() + nb["bytes"].get<uint64_t>());
  r = run_admin({"nodes", a.backing()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("total"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(a.mnt()), std::string::npos) << r.output;
  r = run_admin({"nodes", a.root()});  // not a backing dir
  EXPECT_EQ(r.exit_code, 2) << r.output;
}

TEST(Nodes, ASecondDaemonOfANodeIsRefusedNamingTheFirst) {
  KvfsMount a, twin;
  twin.set_backing(a.backing());
  ASSERT_TRUE(a.mount_ok("node_id=a"));
  RunResult r = twin.mount("node_id=a");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("node 'a'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("pid " + std::to_string(a.daemon_pid())), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(a.mnt()), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("node_id"), std::string::npos) << r.output;
  EXPECT_FALSE(is_mounted(twin.mnt()));
  // Another node_id needs nothing else.
  ASSERT_TRUE(twin.mount_ok("node_id=b"));
  ASSERT_TRUE(write_file(twin.path("x"), "on b"));
  ASSERT_TRUE(write_file(a.path("x"), "on a"));
  std::string got;
  ASSERT_TRUE(read_file(twin.path("x"), &got));
  EXPECT_EQ(got, "on b");
  ASSERT_TRUE(read_file(a.path("x"), &got));
  EXPECT_EQ(got, "on a");
}

TEST(Nodes, WithoutANodeIdAKvfsOwnsTheDirAloneAndASharedDirRefusesIt) {
  KvfsMount solo, node, other;
  node.set_backing(solo.backing());
  other.set_backing(solo.backing());
  // Without node_id: the dir's one owner, which nodes cannot join.
  ASSERT_TRUE(solo.mount_ok());
  ASSERT_TRUE(write_file(solo.path("s"), content("s", 2 * kMiB)));
  RunResult r = node.mount("node_id=a");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("does not share"), std::string::npos) << r.output;
  EXPECT_FALSE(is_mounted(node.mnt()));
  solo.unmount();
  // Its segments carry the host's name; a node of another name would lose
  // them to nobody's index: it refuses to mark the dir shared.
  r = node.mount("node_id=a");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("without node_id"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(layout::shared_marker_path(solo.backing())));
  ASSERT_TRUE(solo.mount_ok());
  std::string got;
  ASSERT_TRUE(read_file(solo.path("s"), &got));
  EXPECT_TRUE(got == content("s", 2 * kMiB));
  solo.unmount();
  // An empty dir: the first node marks it shared; a kvfs without node_id
  // then refuses it, also while no node runs.
  fs::remove_all(layout::segment_dir(solo.backing()));
  ASSERT_TRUE(node.mount_ok("node_id=a"));
  EXPECT_TRUE(fs::exists(layout::shared_marker_path(solo.backing())));
  ASSERT_TRUE(other.mount_ok("node_id=b"));
  r = solo.mount();
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("node_id"), std::string::npos) << r.output;
  node.unmount();
  other.unmount();
  r = solo.mount();
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("shared by several nodes"), std::string::npos) << r.output;
  EXPECT_FALSE(is_mounted(solo.mnt()));
}

TEST(Nodes, AnIndexIsUsedByItsOwnNodeOnly) {
  KvfsMount a, c;
  ASSERT_TRUE(c.mount_ok());  // another backing dir
  c.unmount();
  ASSERT_TRUE(a.mount_ok("node_id=a"));
  ASSERT_TRUE(write_file(a.path("kept"), "a's file"));
  // An index in use is nobody else's, whatever the backing dir: neither a
  // daemon nor rebuild-index touches it.
  RunResult busy = c.mount("index_dir=" + a.index_dir());
  EXPECT_EQ(busy.exit_code, 2) << busy.output;
  EXPECT_NE(busy.output.find("in use"), std::string::npos) << busy.output;
  EXPECT_FALSE(is_mounted(c.mnt()));
  busy = run_admin({"rebuild-index", c.backing(), "--index-dir", a.index_dir()});
  EXPECT_EQ(busy.exit_code, 2) << busy.output;
  EXPECT_NE(busy.output.find("in use"), std::string::npos) << busy.output;
  std::string kept;
  ASSERT_TRUE(read_file(a.path("kept"), &kept));
  EXPECT_EQ(kept, "a's file");
  a.unmount();
  // Node b given a's index: refused before anything is changed (a rebuild
  // from b's segments would have emptied it of a's files).
  const std::string mnt2 = a.root() + "/mnt2";
  fs::create_directories(mnt2);
  RunResult r = run_command({kvfs_binary(), a.backing(), mnt2, "-o",
                             "index_dir=" + a.index_dir() + ",node_id=b,log_file=" + a.log_file()});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("belongs to node 'a'"), std::string::npos) << r.output;
  EXPECT_FALSE(is_mounted(mnt2));
  if (r.exit_code == 0) (void)run_command({"fusermount3", "-u", mnt2});
  ASSERT_TRUE(a.mount_ok("node_id=a"));
  std::string got;
  ASSERT_TRUE(read_file(a.path("kept"), &got));
  EXPECT_EQ(got, "a's file");
}

TEST(Nodes, ANodesEvictionNeverTouchesAnotherNodesSegments) {
  KvfsMount a, b;
  b.set_backing(a.backing());
  ASSERT_TRUE(b.mount_ok("node_id=b,segment_size=4M," + kNoCache));
  std::map<std::string, std::string> on_b;
  for (int i = 0; i < 8; ++i)
    on_b["b" + std::to_string(i)] = content("b" + std::to_string(i), 2 * kMiB + 123);
  for (auto& [n, d] : on_b) ASSERT_TRUE(write_file(b.path(n), d)) << n;
  b.unmount();  // all flushed: its segments are final
  const auto b_segs = segments_of(a.backing(), "b");
  ASSERT_FALSE(b_segs.empty());
  ASSERT_TRUE(b.mount_ok("node_id=b,segment_size=4M,ram_size=32M," + kNoCache));

  // a churns 5x its cap while b reads its own files now and then.
  const uint64_t cap = 32 * kMiB, seg = 4 * kMiB;
  ASSERT_TRUE(
      a.mount_ok("node_id=a,ram_size=32M,capacity=32M,segment_size=4M,evict_grace=0," + kNoCache));
  for (int i = 0; i < 40; ++i) {
    const std::string n = "f" + std::to_string(i);
    ASSERT_TRUE(write_file(a.path(n), content(n, 4 * kMiB))) << n;
    EXPECT_LE(total(segments_of(a.backing(), "a")), cap + seg) << "after " << n;
    if (i % 10 == 9) {
      EXPECT_EQ(check_all(b, on_b), "") << "after a wrote " << n;
    }
  }
  // a's own files left read back whole. (Which ones, and how many, is the
  // evictor's choice: with no grace, and two flushers' grants a large part
  // of so small a cap, passes may leave none.) One listed may still go
  // before it is read.
  ASSERT_TRUE(fsync_dir(a.mnt()));
  int kept = 0;
  for (const auto& e : fs::directory_iterator(a.mnt())) {
    const std::string n = e.path().filename();
    if (n.empty() || n[0] != 'f') continue;
    std::string got;
    if (!read_file(e.path(), &got)) {
      EXPECT_EQ(errno, ENOENT) << n;
      continue;
    }
    EXPECT_TRUE(got == content(n, 4 * kMiB)) << n;
    ++kept;
  }
  RecordProperty("a_files_kept", kept);
  EXPECT_NE(::access(a.path("f0").c_str(), F_OK), 0) << "a evicted nothing";
  a.unmount();
  // b's segments are as b left them, and b's files come back from them.
  EXPECT_EQ(all_kept(b_segs, segments_of(a.backing(), "b")), "");
  b.unmount();
  EXPECT_EQ(all_kept(b_segs, segments_of(a.backing(), "b")), "");
  ASSERT_TRUE(b.mount_ok("node_id=b"));
  EXPECT_EQ(check_all(b, on_b), "");
}

}  // namespace
}  // namespace kvfs::test
