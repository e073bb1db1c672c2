// SPDX-License-Identifier: Apache-2.0
// Nodes sharing one backing dir see each other's files (core/peers/peer_log.h,
// core/peers/peer_imports.cc), with the fixture of peer_files_fixture.h.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "tests/peer_files_fixture.h"
#include "tests/reconfigure_util.h"

namespace kvfs {
namespace {

TEST_F(PeerFilesTest, AFileCommittedOnOneNodeIsReadBitExactOnAnother) {
  BlockStore& a = node("a");
  BlockStore& b = node("b");
  const std::string d = pattern(3 * kMiB + 123, 1);
  put(a, dir(a, dir(a, kRootIno, "model"), "layer0"), "chunk", d);
  EXPECT_EQ(get(b, kRootIno, "model"), "<missing>") << "not polled yet: B has not seen it";
  ASSERT_TRUE(b.admin().poll_peers().ok());
  auto m = b.lookup(kRootIno, "model");
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(S_ISDIR(m->mode));
  auto l = b.lookup(m->ino, "layer0");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(get(b, l->ino, "chunk"), d);
  auto st = b.getattr(b.lookup(l->ino, "chunk")->ino);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->size, d.size());
  EXPECT_EQ(names(b, kRootIno), std::set<std::string>{"model"});
  const StoreStats s = b.admin().stats();
  // get() forgot it (the kernel's last reference): released, and the
  // stat's lookup imported it again.
  EXPECT_EQ(s.peer_imports, 2u);
  EXPECT_EQ(s.peer_releases, 1u);
  EXPECT_GE(s.peer_lookups, 1u);
  EXPECT_EQ(s.peer_read_bytes, d.size());
  ASSERT_EQ(s.peers.nodes.size(), 1u);
  EXPECT_EQ(s.peers.nodes[0].node, "a");
  EXPECT_EQ(s.peers.nodes[0].files, 1u);
  EXPECT_EQ(s.peers.nodes[0].bytes, d.size());
  EXPECT_EQ(s.peers.nodes[0].behind_bytes, 0u);
  // A's own view is untouched by B's reads.
  EXPECT_EQ(a.admin().stats().peer_imports, 0u);
}

TEST_F(PeerFilesTest, ReaddirShowsEveryNodesNames) {
  BlockStore& a = node("a");
  BlockStore& b = node("b");
  put(a, kRootIno, "from-a", "aaa");
  put(b, kRootIno, "from-b", "bbb");
  ASSERT_TRUE(a.admin().poll_peers().ok());
  ASSERT_TRUE(b.admin().poll_peers().ok());
  const std::set<std::string> both{"from-a", "from-b"};
  EXPECT_EQ(names(a, kRootIno), both);
  EXPECT_EQ(names(b, kRootIno), both);
  EXPECT_EQ(get(a, kRootIno, "from-b"), "bbb");
  EXPECT_EQ(get(b, kRootIno, "from-a"), "aaa");
}

TEST_F(PeerFilesTest, OnlyTheOwnerChangesAFile) {
  BlockStore& a = node("a");
  BlockStore& b = node("b");
  put(a, kRootIno, "f", "owned by a");
  ASSERT_TRUE(b.admin().poll_peers().ok());
  auto l = b.lookup(kRootIno, "f");
  ASSERT_TRUE(l.ok());
  const auto ro = Status::Code::kReadOnly;
  EXPECT_EQ(b.open(l->ino, O_WRONLY).status().code(), ro);
  EXPECT_EQ(b.open(l->ino, O_RDONLY | O_TRUNC).status().code(), ro);
  Attr at;
  EXPECT_EQ(b.create(kRootIno, "f", 0644, O_CREAT | O_WRONLY, Caller{}, &at).status().code(), ro);
  EXPECT_EQ(b.rename(kRootIno, "f", kRootIno, "g", 0).code(), ro);
  EXPECT_EQ(b.setxattr(l->ino, "user.x", "1", 0).code(), ro);
  SetAttrRequest trunc;
  trunc.set_size = true;
  EXPECT_EQ(b.setattr(l->ino, trunc, nullptr).status().code(), ro);
  SetAttrRequest touch;  // llm-d's touch of a hit is fine
  touch.set_atime = touch.atime_now = true;
  EXPECT_TRUE(b.setattr(l->ino, touch, nullptr).ok());
  EXPECT_TRUE(b.flush_all().ok());
  EXPECT_EQ(b.admin().stats().flushed_files, 0u) << "nothing of a's is written by b";
  EXPECT_EQ(get(b, kRootIno, "f"), "owned by a");
  EXPECT_EQ(get(a, kRootIno, "f"), "owned by a");
  // A rename over it is B's own file, which wins on B.
  put(b, kRootIno, "f.tmp", "b's version");
  ASSERT_TRUE(b.rename(kRootIno, "f.tmp", kRootIno, "f", 0).ok());
  EXPECT_EQ(get(b, kRootIno, "f"), "b's version");
  EXPECT_EQ(get(a, kRootIno, "f"), "owned by a");
}

TEST_F(PeerFilesTest, TheOwnersNewVersionAndRemovalReachThePeer) {
  BlockStore& a = node("a");
  BlockStore& b = node("b");
  put(a, kRootIno, "f", pattern(2 * kMiB, 2));
  ASSERT_TRUE(b.admin().poll_peers().ok());
  EXPECT_EQ(get(b, kRootIno, "f"), pattern(2 * kMiB, 2));
  auto held = b.lookup(kRootIno, "f");  // a kernel reference: dropped, not released
  ASSERT_TRUE(held.ok());
  const std::string v2 = pattern(kMiB + 7, 3);
  put(a, kRootIno, "f", v2);  // O_TRUNC in place: a newer snapshot of the same inode
  ASSERT_TRUE(b.admin().poll_peers().ok());
  EXPECT_EQ(get(b, kRootIno, "f"), v2);
  // tmp + rename over, as vLLM stores.
  const std::string v3 = pattern(kMiB, 4);
  put(a, kRootIno, "f.tmp", v3);
  ASSERT_TRUE(a.rename(kRootIno, "f.tmp", kRootIno, "f", 0).ok());
  ASSERT_TRUE(a.flush_all().ok());
  ASSERT_TRUE(b.admin().poll_peers().ok());
  EXPECT_EQ(get(b, kRootIno, "f"), v3);
  EXPECT_EQ(get(b, kRootIno, "f.tmp"), "<missing>");
  ASSERT_TRUE(a.unlink(kRootIno, "f").ok());
  ASSERT_TRUE(a.flush_all().ok());
  ASSERT_TRUE(b.admin().poll_peers().ok());
  EXPECT_EQ(get(b, kRootIno, "f"), "<missing>");
  EXPECT_GE(b.admin().stats().peer_drops, 1u);
  b.forget(held->ino, 1);
  // Stored again by its owner: back on the peer.
  put(a, kRootIno, "f", "again");
  ASSERT_TRUE(b.admin().poll_peers().ok());
  EXPECT_EQ(get(b, kRootIno, "f"), "again");
}

TEST_F(PeerFilesTest, AnOwnersTouchKeepsThePeersCopyAReplacementMakesItStale) {
  BlockStore& a = node("a");
  BlockStore& b = node("b");
  const std::string d = pattern(2 * kMiB, 8);
  const uint64_t ino_a = put(a, kRootIno, "f", d);
  ASSERT_TRUE(b.admin().poll_peers().ok());
  auto l = b.lookup(kRootIno, "f");
  ASSERT_TRUE(l.ok());
  // The owner touches it (a newer snapshot, the same bytes): the peer's
  // copy stays, and the kernel's inode for it still opens.
  SetAttrRequest touch;
  touch.set_atime = true;
  touch.atime_ns = 12345;
  ASSERT_TRUE(a.setattr(ino_a, touch, nullptr).ok());
  ASSERT_TRUE(a.flush_all().ok());
  ASSERT_TRUE(b.admin().poll_peers().ok());
  EXPECT_EQ(b.admin().stats().peer_drops, 0u);
  auto f = b.open(l->ino, O_RDONLY);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  b.release(*f);
  EXPECT_EQ(get(b, kRootIno, "f"), d);
  // Replaced by other bytes: the kernel's inode is stale (the VFS then
  // looks the name up again), the name gives the new version.
  put(a, kRootIno, "f", pattern(kMiB, 9));
  ASSERT_TRUE(b.admin().poll_peers().ok());
  EXPECT_EQ(b.open(l->ino, O_RDONLY).status().code(), Status::Code::kStale);
  EXPECT_EQ(get(b, kRootIno, "f"), pattern(kMiB, 9));
  b.forget(l->ino, 1);
}

TEST_F(PeerFilesTest, TheSameNameOnTwoNodesResolvesToOneWholeVersionEverywhereElse) {
  BlockStore& a = node("a");
  BlockStore& b = node("b");
  BlockStore& c = node("c");
  const std::string va = pattern(3 * kMiB, 5), vb = pattern(2 * kMiB + 1, 6);
  put(a, kRootIno, "same", va);
  clock_.advance(1);
  put(b, kRootIno, "same", vb);  // newer
  for (BlockStore* s : {&a, &b, &c}) ASSERT_TRUE(s->admin().poll_peers().ok());
  EXPECT_EQ(get(a, kRootIno, "same"), va) << "a node's own version wins on it";
  EXPECT_EQ(get(b, kRootIno, "same"), vb);
  EXPECT_EQ(get(c, kRootIno, "same"), vb) << "elsewhere the newest, whole";
  // Newer on the lower-named node now: the newest still wins, not a name.
  clock_.advance(1);
  const std::string va2 = pattern(kMiB + 3, 10);
  put(a, kRootIno, "same", va2);
  ASSERT_TRUE(c.admin().poll_peers().ok());
  EXPECT_EQ(get(c, kRootIno, "same"), va2);
  // The same mtime on both: the lowest node name, on every other node.
  BlockStore& d = node("d");
  const std::string vd = pattern(kMiB, 11);
  put(d, kRootIno, "tie", vd);
  put(b, kRootIno, "tie", pattern(kMiB, 12));
  for (BlockStore* s : {&a, &c}) ASSERT_TRUE(s->admin().poll_peers().ok());
  EXPECT_EQ(get(a, kRootIno, "tie"), pattern(kMiB, 12)) << "b before d";
  EXPECT_EQ(get(c, kRootIno, "tie"), pattern(kMiB, 12)) << "b before d";
}

TEST_F(PeerFilesTest, APeersDamagedOrVanishedSegmentIsAMissNeverOtherBytes) {
  BlockStore& a = node("a");
  put(a, kRootIno, "x", pattern(2 * kMiB, 7));
  close("a");
  BlockStore& b = node("b");
  ASSERT_TRUE(b.admin().poll_peers().ok());
  // Flip a byte of x's data in a's segment: a checksum error, not bytes.
  const std::string seg = seg_of("a");
  ASSERT_FALSE(seg.empty());
  {
    std::fstream f(seg, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(64 * 1024);
    char ch;
    f.read(&ch, 1);
    ch ^= 0x11;
    f.seekp(64 * 1024);
    f.write(&ch, 1);
  }
  const std::string got = get(b, kRootIno, "x");
  EXPECT_TRUE(got.rfind("<error", 0) == 0) << got.size() << " bytes served";
  EXPECT_GE(b.admin().stats().checksum_errors, 1u);
  // The segment deleted by hand: gone from the peer's view.
  fs::remove(seg);
  ASSERT_TRUE(b.admin().poll_peers().ok());
  EXPECT_EQ(get(b, kRootIno, "x"), "<missing>");
}

TEST_F(PeerFilesTest, AnUnlinkOnAnyNodeRemovesTheFileEverywhere) {
  BlockStore& a = node("a");
  BlockStore& b = node("b");
  BlockStore& c = node("c");
  const std::string d = pattern(2 * kMiB + 5, 11);
  const uint64_t ino = put(a, kRootIno, "f", d);
  put(a, kRootIno, "keep", "kept");
  ASSERT_TRUE(b.admin().poll_peers().ok());
  ASSERT_TRUE(c.admin().poll_peers().ok());
  ASSERT_EQ(get(b, kRootIno, "f"), d);
  ASSERT_EQ(get(c, kRootIno, "f"), d);
  // B unlinks a's file: gone on B at once, and its listing no longer has it.
  ASSERT_TRUE(b.unlink(kRootIno, "f").ok());
  EXPECT_EQ(get(b, kRootIno, "f"), "<missing>");
  EXPECT_EQ(names(b, kRootIno), (std::set<std::string>{"keep"}));
  EXPECT_EQ(b.unlink(kRootIno, "f").code(), Status::Code::kNotFound);
  ASSERT_TRUE(b.admin().poll_peers().ok());
  EXPECT_EQ(get(b, kRootIno, "f"), "<missing>") << "the owner has not removed it yet";
  ASSERT_TRUE(b.flush_all().ok());  // the unlink reaches b's log
  // C hides it on reading b's log; the owner removes it on reading it.
  ASSERT_TRUE(c.admin().poll_peers().ok());
  EXPECT_EQ(get(c, kRootIno, "f"), "<missing>");
  EXPECT_EQ(names(c, kRootIno), (std::set<std::string>{"keep"}));
  ASSERT_TRUE(a.admin().poll_peers().ok());
  EXPECT_EQ(get(a, kRootIno, "f"), "<missing>");
  EXPECT_EQ(get(a, kRootIno, "keep"), "kept");
  EXPECT_EQ(a.admin().stats().peer_unlinks_applied, 1u);
  EXPECT_EQ(b.admin().stats().peer_unlinks, 1u);
  EXPECT_FALSE(a.getattr(ino).ok()) << "a's inode went, not only its name";
  ASSERT_TRUE(a.flush_all().ok());
  ASSERT_TRUE(b.admin().poll_peers().ok());
  ASSERT_TRUE(c.admin().poll_peers().ok());
  EXPECT_EQ(get(b, kRootIno, "f"), "<missing>");
  EXPECT_EQ(get(c, kRootIno, "f"), "<missing>");
  // A later store of the name on any node brings it back everywhere.
  clock_.advance(1);
  put(c, kRootIno, "f", "c's");
  ASSERT_TRUE(a.admin().poll_peers().ok());
  ASSERT_TRUE(b.admin().poll_peers().ok());
  EXPECT_EQ(get(a, kRootIno, "f"), "c's");
  EXPECT_EQ(get(b, kRootIno, "f"), "c's");
}

TEST_F(PeerFilesTest, AnUnlinkLosesToTheOwnersNewerVersion) {
  BlockStore& a = node("a");
  BlockStore& b = node("b");
  BlockStore& c = node("c");
  put(a, kRootIno, "f", "v1");
  ASSERT_TRUE(b.admin().poll_peers().ok());
  ASSERT_EQ(get(b, kRootIno, "f"), "v1");
  ASSERT_TRUE(b.unlink(kRootIno, "f").ok());
  ASSERT_TRUE(b.flush_all().ok());
  // The owner writes the file again before it reads b's unlink of v1.
  clock_.advance(1);
  put(a, kRootIno, "f", "v2");
  ASSERT_TRUE(a.admin().poll_peers().ok());
  EXPECT_EQ(get(a, kRootIno, "f"), "v2");
  EXPECT_EQ(a.admin().stats().peer_unlinks_applied, 0u);
  ASSERT_TRUE(b.admin().poll_peers().ok());
  ASSERT_TRUE(c.admin().poll_peers().ok());
  EXPECT_EQ(get(b, kRootIno, "f"), "v2") << "b hid v1 only";
  EXPECT_EQ(get(c, kRootIno, "f"), "v2");
}

TEST_F(PeerFilesTest, AnUnlinkHoldsAcrossARestartUntilTheOwnerReturns) {
  const std::string d = pattern(kMiB + 3, 12);
  put(node("a"), kRootIno, "f", d);
  close("a");  // the owner is down
  BlockStore& b = node("b");
  ASSERT_EQ(get(b, kRootIno, "f"), d) << "a's flushed file stays readable";
  ASSERT_TRUE(b.unlink(kRootIno, "f").ok());
  close("b");
  EXPECT_EQ(get(node("b"), kRootIno, "f"), "<missing>") << "b's index kept the unlink";
  close("b");
  fs::remove_all(root_ + "/index.b");
  EXPECT_EQ(get(node("b"), kRootIno, "f"), "<missing>") << "a rebuild finds it in b's log";
  EXPECT_EQ(get(node("c"), kRootIno, "f"), "<missing>") << "c reads it in b's log";
  // The owner applies it at its mount, before serving anything.
  EXPECT_EQ(get(node("a"), kRootIno, "f"), "<missing>");
  ASSERT_TRUE(node("a").flush_all().ok());
  close("b");
  EXPECT_EQ(get(node("b"), kRootIno, "f"), "<missing>");
}

// The unlink of a peer's file outlives the reclaim of the segment that logged
// it, while its owner is down: reclamation carries the entry forward until
// the owner's log shows the file gone.
TEST_F(PeerFilesTest, AnUnlinkOutlivesTheReclaimOfItsSegmentUntilTheOwnerActs) {
  const std::string d = pattern(kMiB + 5, 13);
  put(node("a"), kRootIno, "f", d);
  close("a");
  BlockStore& b0 = node("b", 256 * kMiB, /*segment_grace=*/0);
  ASSERT_EQ(get(b0, kRootIno, "f"), d);
  ASSERT_TRUE(b0.unlink(kRootIno, "f").ok());
  // Files that fill b's first segment (the one with the unlink) and go.
  std::vector<uint64_t> gs;
  for (int i = 0; i < 6; ++i)
    gs.push_back(put(b0, kRootIno, "g" + std::to_string(i), pattern(4 * kMiB, 20 + i)));
  const std::set<std::string> first = segments_of("b");
  ASSERT_GE(first.size(), 2u) << "the files roll b onto a new segment";
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(b0.unlink(kRootIno, "g" + std::to_string(i)).ok());
    b0.forget(gs[i], 1);  // create's lookup: the kernel lets go of it
  }
  // Restarted, so that every segment is closed: each flusher keeps one
  // open, and which flusher the first one was (and whether its writer
  // rolled on) depends on the threads' timing. An open one is not reclaimed.
  close("b");
  BlockStore& b = node("b", 256 * kMiB, /*segment_grace=*/0);
  // A cap under what the segments take: the pass reclaims the empty ones.
  ASSERT_TRUE(kvfs::reconfigure_one(b, &StoreConfig::capacity, 16 * kMiB).ok());
  b.admin().evict_pass_now();
  const std::set<std::string> after = segments_of("b");
  ASSERT_FALSE(after.count(*first.begin())) << "b's first segment was reclaimed";
  // A node that never saw b's first segment learns of the unlink, and so
  // does the owner when it comes back.
  EXPECT_TRUE(get(node("c"), kRootIno, "f") == "<missing>");
  EXPECT_TRUE(get(node("a"), kRootIno, "f") == "<missing>") << "the owner applied it at its mount";
  ASSERT_TRUE(node("a").flush_all().ok());
  // Now the owner's log says so: a node rebuilt from the segments finds
  // the file gone there.
  ASSERT_TRUE(b.admin().poll_peers().ok());
  close("c");
  fs::remove_all(root_ + "/index.c");
  EXPECT_TRUE(get(node("c"), kRootIno, "f") == "<missing>");
}

// The owner's reclaimed segments leave the peers' listings at once (renamed)
// and are deleted only segment_grace later, across a restart too, unless the
// cap needs their room first; meanwhile a peer reads the owner's live files
// from their new place.
TEST_F(PeerFilesTest, AReclaimedSegmentIsDeletedAfterItsGraceOrWhenTheCapNeedsIt) {
  BlockStore& a = node("a", 128 * kMiB, 3600);
  BlockStore& b = node("b");
  auto content = [](int i) { return pattern(4 * kMiB, 100 + i); };
  auto bytes_of_a = [&] {
    uint64_t n = 0;
    for (auto& e : fs::directory_iterator(layout::segment_dir(root_ + "/backing")))
      if (e.path().filename().string().rfind("a-", 0) == 0) n += e.file_size();
    return n;
  };
  put(a, kRootIno, "f0", content(0));
  ASSERT_TRUE(b.admin().poll_peers().ok());
  ASSERT_TRUE(get(b, kRootIno, "f0") == content(0));
  // 3x the cap; f0 is read after every write, so it stays.
  for (int i = 1; i < 96; ++i) {
    clock_.advance(1);
    put(a, kRootIno, "f" + std::to_string(i), content(i));
    ASSERT_TRUE(get(a, kRootIno, "f0") == content(0)) << i;
    EXPECT_LE(bytes_of_a(), 136 * kMiB) << "the retired segments count in the cap, after " << i;
  }
  ASSERT_GT(a.admin().evictor_stats().evicted_capacity, 0u);
  EXPECT_GT(a.admin().evictor_stats().segments_deleted, 0u)
      << "graces cut short: the cap needed the room";
  // Whether a pass ends with retired segments left depends on how much
  // room the flushes asked for: write on until one does, then lift the
  // pressure, so that they only wait for their grace.
  int last = 95;
  for (int i = 96; i < 400; ++i) {
    if (a.admin().evictor_stats().segments_retiring > 0) {
      ASSERT_TRUE(kvfs::reconfigure_one(a, &StoreConfig::capacity, 1024 * kMiB).ok());
      if (a.admin().evictor_stats().segments_retiring > 0) break;
      ASSERT_TRUE(kvfs::reconfigure_one(a, &StoreConfig::capacity, 128 * kMiB).ok());
    }
    clock_.advance(1);
    put(a, kRootIno, "f" + std::to_string(i), content(i));
    ASSERT_TRUE(get(a, kRootIno, "f0") == content(0)) << i;
    last = i;
  }
  const EvictorStats e = a.admin().evictor_stats();
  ASSERT_GT(e.segments_retiring, 0u) << "the last ones reclaimed wait for their grace, in the room "
                                        "between the low watermark and the cap";
  EXPECT_GE(e.retiring_bytes, e.segments_retiring * kMiB);
  EXPECT_EQ(retired_of("a"), int(e.segments_retiring));
  // b no longer reads them, and finds a's live files where they are now.
  ASSERT_TRUE(b.admin().poll_peers().ok());
  EXPECT_TRUE(get(b, kRootIno, "f0") == content(0));
  EXPECT_TRUE(get(b, kRootIno, "f" + std::to_string(last)) == content(last));
  EXPECT_EQ(get(b, kRootIno, "f2"), "<missing>") << "evicted on a";
  // A restart (with room to spare) cuts the grace short: a new one begins.
  close("a");
  BlockStore& a2 = node("a", 1024 * kMiB, 3600);
  EXPECT_EQ(a2.admin().evictor_stats().segments_retiring, e.segments_retiring);
  a2.admin().evict_pass_now();
  EXPECT_EQ(retired_of("a"), int(e.segments_retiring)) << "still in their grace";
  clock_.advance(3601);
  a2.admin().evict_pass_now();
  EXPECT_EQ(retired_of("a"), 0);
  EXPECT_EQ(a2.admin().evictor_stats().segments_retiring, 0u);
  EXPECT_EQ(a2.admin().evictor_stats().segments_deleted, e.segments_retiring);
  EXPECT_TRUE(get(a2, kRootIno, "f0") == content(0));
  put(a2, kRootIno, "new", "after");  // no retired id is given again
  ASSERT_TRUE(b.admin().poll_peers().ok());
  EXPECT_EQ(get(b, kRootIno, "new"), "after");
  EXPECT_TRUE(get(b, kRootIno, "f0") == content(0));
}

TEST_F(PeerFilesTest, ARestartedNodeSeesWhatPeersWroteMeanwhile) {
  BlockStore& a = node("a");
  node("b");
  close("b");
  put(a, kRootIno, "while-b-was-down", "hello");
  // No poll: opening is enough (the first pass runs before Open returns).
  EXPECT_EQ(get(node("b"), kRootIno, "while-b-was-down"), "hello");
}

}  // namespace
}  // namespace kvfs
