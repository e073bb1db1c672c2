// SPDX-License-Identifier: Apache-2.0
// Namespace::load_*: the tree built at startup from the index's snapshots,
// including the damaged shapes an index rebuild can produce (missing parents,
// two inodes claiming one name, a directory below itself).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/namespace/namespace.h"

namespace kvfs {
namespace {

// The loader journals nothing; ensure_root() and later changes do.
class CountingJournal : public Journal {
 public:
  Status journal(const std::vector<Put>&, const std::vector<Inode*>&, uint64_t) override {
    ++calls;
    return Status::OK();
  }
  int calls = 0;
};

InodeSnapshot snap(uint64_t ino, uint64_t parent, std::string name, bool dir, uint64_t seq = 1) {
  InodeSnapshot s;
  s.ino = ino;
  s.parent = parent;
  s.name = std::move(name);
  s.mode = dir ? (S_IFDIR | 0755) : (S_IFREG | 0644);
  s.seq = seq;
  s.mtime_ns = int64_t(seq) * 1000;
  return s;
}

struct Loaded {
  CountingJournal journal;
  Namespace ns{&journal, &system_clock()};
  std::vector<uint64_t> orphans;

  void load(std::vector<InodeSnapshot> snaps, bool check_cycles) {
    ns.load_reserve(snaps.size());
    for (auto& s : snaps) ns.load_add(Namespace::make_loaded(std::move(s)));
    ns.load_finish(check_cycles, &orphans);
    std::sort(orphans.begin(), orphans.end());
  }
  std::vector<std::string> names(uint64_t dir) {
    std::vector<std::string> out;
    uint64_t last = 0;
    Status s = ns.readdir(dir, 0, [&](std::string_view n, uint64_t, uint32_t, uint64_t c) {
      EXPECT_GT(c, last) << "cookies must grow";
      last = c;
      if (n != "." && n != "..") out.emplace_back(n);
      return true;
    });
    EXPECT_TRUE(s.ok()) << s.ToString();
    std::sort(out.begin(), out.end());
    return out;
  }
};

TEST(NamespaceLoad, BuildsTheTreeInAnyOrder) {
  Loaded l;
  // Children before their parents, as a hash table hands them out.
  l.load({snap(7, 5, "f.bin", false), snap(5, 2, "ab_g0", true), snap(2, 1, "abc", true),
          snap(1, 1, "", true), snap(8, 5, "g.bin", false), snap(9, 1, "top", false)},
         false);
  EXPECT_TRUE(l.orphans.empty());
  EXPECT_EQ(l.ns.count(), 6u);
  auto f = l.ns.resolve("abc/ab_g0/f.bin");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->ino, 7u);
  EXPECT_EQ((*f)->name, "f.bin");
  EXPECT_EQ((*f)->last_access_ns.load(), 1000);
  ASSERT_TRUE((*f)->committed);
  EXPECT_EQ(l.names(5), (std::vector<std::string>{"f.bin", "g.bin"}));
  EXPECT_EQ(l.names(1), (std::vector<std::string>{"abc", "top"}));
  EXPECT_GE(l.ns.next_ino(), 10u);
  EXPECT_TRUE(l.ns.ensure_root(0, 0).ok());
  EXPECT_EQ(l.journal.calls, 0) << "the root was loaded, not made";
  // A rename of a loaded inode re-journals its committed snapshot.
  EXPECT_TRUE(l.ns.rename(5, "f.bin", 1, "moved", 0).ok());
  EXPECT_EQ(l.journal.calls, 1);
  EXPECT_TRUE(l.ns.resolve("moved").ok());
}

TEST(NamespaceLoad, DropsWhatHangsBelowAMissingParent) {
  Loaded l;
  l.load({snap(1, 1, "", true), snap(2, 1, "kept", true), snap(3, 99, "lost", true),
          snap(4, 3, "a", false), snap(5, 3, "sub", true), snap(6, 5, "b", false),
          snap(7, 2, "f", true), snap(8, 7, "x", false), snap(10, 8, "under-a-file", false),
          snap(11, 1, "bad/name", false)},
         false);
  EXPECT_EQ(l.orphans, (std::vector<uint64_t>{3, 4, 5, 6, 10, 11}));
  EXPECT_EQ(l.ns.count(), 4u);
  EXPECT_TRUE(l.ns.resolve("kept/f/x").ok());
  EXPECT_FALSE(l.ns.get(5));
}

TEST(NamespaceLoad, ANameClaimedTwiceKeepsTheNewerInode) {
  for (bool newer_first : {false, true}) {
    Loaded l;
    std::vector<InodeSnapshot> s{snap(1, 1, "", true),
                                 snap(20, 1, "d", true, 3),
                                 snap(21, 20, "old-child", false, 4),
                                 snap(30, 1, "d", true, 9),
                                 snap(31, 30, "new-child", false, 10),
                                 snap(40, 30, "f", false, 11),
                                 snap(41, 30, "f", false, 12)};
    if (newer_first) std::reverse(s.begin(), s.end());
    l.load(std::move(s), false);
    EXPECT_EQ(l.orphans, (std::vector<uint64_t>{20, 21, 40})) << newer_first;
    auto d = l.ns.resolve("d");
    ASSERT_TRUE(d.ok());
    EXPECT_EQ((*d)->ino, 30u);
    EXPECT_EQ(l.names(30), (std::vector<std::string>{"f", "new-child"}));
    EXPECT_EQ((*l.ns.resolve("d/f"))->ino, 41u);
    EXPECT_EQ(l.ns.count(), 4u);
  }
}

TEST(NamespaceLoad, ADirectoryBelowItselfIsDroppedAfterARebuild) {
  Loaded l;
  l.load({snap(1, 1, "", true), snap(2, 1, "ok", true), snap(10, 11, "p", true),
          snap(11, 10, "q", true), snap(12, 11, "file", false), snap(13, 13, "self", true)},
         true);
  EXPECT_EQ(l.orphans, (std::vector<uint64_t>{10, 11, 12, 13}));
  EXPECT_EQ(l.ns.count(), 2u);
  EXPECT_TRUE(l.ns.resolve("ok").ok());
}

TEST(NamespaceLoad, NoRootMeansAFreshRoot) {
  Loaded l;
  l.load({snap(2, 1, "a", true), snap(3, 2, "b", false)}, true);
  EXPECT_EQ(l.orphans, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(l.ns.count(), 0u);
  EXPECT_TRUE(l.ns.ensure_root(0, 0).ok());
  EXPECT_EQ(l.journal.calls, 1);
  EXPECT_EQ(l.ns.count(), 1u);
}

TEST(NamespaceLoad, ClearForgetsEverything) {
  Loaded l;
  l.ns.load_add(Namespace::make_loaded(snap(1, 1, "", true)));
  l.ns.load_add(Namespace::make_loaded(snap(2, 1, "a", false)));
  l.ns.load_clear();
  l.load({snap(1, 1, "", true), snap(3, 1, "b", false)}, false);
  EXPECT_EQ(l.ns.count(), 2u);
  EXPECT_FALSE(l.ns.resolve("a").ok());
  EXPECT_TRUE(l.ns.resolve("b").ok());
}

}  // namespace
}  // namespace kvfs
