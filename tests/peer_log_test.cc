// SPDX-License-Identifier: Apache-2.0
// PeerLog on its own (core/peers/peer_log.h): a follower of node "a"'s segment log,
// as node "b" runs it, over a real backing dir that a real BlockStore of
// node "a" writes (peer_files_fixture.h). What a pass costs the server (its
// listings and segment opens), that a head (disk_layout.h) spares the
// opens of segments that did not move, how quiet peers rest, that a sealed
// segment is left alone once read, and that a peer without a head is
// followed from the segment listing as before heads.
#include "core/peers/peer_log.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>

#include "core/backing/disk_layout.h"
#include "core/segments/segment_store.h"
#include "tests/fault_fs.h"
#include "tests/peer_files_fixture.h"

namespace kvfs {
namespace {

class PeerLogTest : public PeerFilesTest {
 protected:
  // Node b's follower, with no BlockStore of b around it.
  PeerLog& follower() {
    if (!log_) {
      StoreConfig c;
      c.backing_dir = root_ + "/backing";
      c.index_dir = root_ + "/index.b";
      c.node_id = "b";
      auto s = SegmentStore::Open(c, nullptr, &fs_);
      EXPECT_TRUE(s.ok()) << s.status().ToString();
      segs_ = std::move(*s);
      log_ = std::make_unique<PeerLog>(c.backing_dir, "b", segs_.get(), nullptr, &clock_);
    }
    return *log_;
  }
  void TearDown() override {
    log_.reset();
    segs_.reset();
    PeerFilesTest::TearDown();
  }
  // n passes of kind; what they cost.
  PeerStats passes(int n, PeerLog::Pass kind) {
    const PeerStats before = log_->stats();
    for (int i = 0; i < n; ++i) EXPECT_TRUE(log_->poll(kind).ok());
    PeerStats d = log_->stats();
    d.passes -= before.passes;
    d.listings -= before.listings;
    d.segment_opens -= before.segment_opens;
    d.head_listings -= before.head_listings;
    return d;
  }
  // node's head as it is in heads/ now.
  layout::NodeHead head_of(const std::string& node) {
    layout::NodeHead out;
    for (auto& e : std::filesystem::directory_iterator(layout::head_dir(root_ + "/backing")))
      if (auto h = layout::parse_head_name(e.path().filename().string()); h && h->node == node)
        out = *h;
    return out;
  }
  // How many of the segments node's head names now have an end that
  // before did not name.
  size_t moved_since(const std::string& node, const layout::NodeHead& before) {
    size_t moved = 0;
    for (const auto& [id, end] : head_of(node).open)
      moved += std::find(before.open.begin(), before.open.end(), std::make_pair(id, end)) ==
               before.open.end();
    return moved;
  }
  // What an older kvfs leaves: no head (its segments are followed from the
  // listing).
  void drop_head(const std::string& node) {
    for (auto& e : std::filesystem::directory_iterator(layout::head_dir(root_ + "/backing")))
      if (auto h = layout::parse_head_name(e.path().filename().string()); h && h->node == node)
        std::filesystem::remove(e.path());
  }

  // One follow pass of b while the open of each of segs (names in the
  // segment dir) fails with EIO, as on a server that stalls and gives up.
  Status pass_with_opens_failing(PeerLog& b, const std::set<std::string>& segs) {
    for (const std::string& n : segs)
      fs_.fail({.op = FaultFs::Op::kOpen, .err = EIO, .path_has = "/" + n});
    const uint64_t failed = fs_.failed(FaultFs::Op::kOpen);
    Status st = b.poll(PeerLog::Pass::kFollow);
    EXPECT_GT(fs_.failed(FaultFs::Op::kOpen), failed) << "no open of those segments was tried";
    fs_.heal();
    return st;
  }

  // How many of node's segments are sealed.
  size_t sealed_of(const std::string& node) {
    const std::string dir = layout::segment_dir(root_ + "/backing");
    size_t k = 0;
    for (const std::string& name : segments_of(node)) {
      struct stat st {};
      EXPECT_EQ(::stat((dir + "/" + name).c_str(), &st), 0);
      k += layout::segment_sealed(st.st_mode) ? 1 : 0;
    }
    return k;
  }

  FaultFs fs_;  // under the follower's segment store: its opens fail on cue
  std::unique_ptr<SegmentStore> segs_;
  std::unique_ptr<PeerLog> log_;
};

TEST_F(PeerLogTest, EveryPassCountsItsListingAndOpensAndTime) {
  put(node("a"), kRootIno, "f", "from a");
  PeerLog& b = follower();
  const PeerStats one = passes(1, PeerLog::Pass::kFull);
  EXPECT_EQ(one.passes, 1u);
  EXPECT_EQ(one.listings, 1u);
  EXPECT_GE(one.segment_opens, 1u);  // a's segment with the file
  ASSERT_TRUE(b.find("f").has_value());
  EXPECT_EQ(b.find("f")->node, "a");
  const PeerStats s = b.stats();
  EXPECT_GT(s.pass_seconds, 0);
  EXPECT_GT(s.slowest_pass_seconds, 0);
  EXPECT_LE(s.slowest_pass_seconds, s.pass_seconds);
}

TEST_F(PeerLogTest, AQuietPeerRestsAndIsStillSeenWithinARestPeriod) {
  BlockStore& a = node("a");
  put(a, kRootIno, "f1", "one");
  PeerLog& b = follower();
  ASSERT_GE(passes(1, PeerLog::Pass::kFull).segment_opens, 1u);  // a's segments, each read once
  const size_t named = head_of("a").open.size();                 // what a appends to
  ASSERT_GE(named, 1u);
  // Quiet for a while: a comes to rest, so that over a rest period only one
  // pass lists heads/, and nothing else is listed or opened (a's head does
  // not move).
  passes(2 * 5, PeerLog::Pass::kFollow);
  const PeerStats rested = passes(2 * 5, PeerLog::Pass::kFollow);
  EXPECT_EQ(rested.passes, 10u);
  EXPECT_EQ(rested.head_listings, 2u);
  EXPECT_EQ(rested.listings, 0u);
  EXPECT_EQ(rested.segment_opens, 0u);
  // Explicit passes look at every peer and past its head: they list the
  // dir and open what a's head names.
  const PeerStats full = passes(10, PeerLog::Pass::kFull);
  EXPECT_EQ(full.listings, 10u);
  EXPECT_EQ(full.head_listings, 10u);
  EXPECT_EQ(full.segment_opens, 10 * named);

  // a writes again while b's follower rests: seen within one rest period
  // (5 passes), and a full pass sees it at once.
  passes(2 * 5, PeerLog::Pass::kFollow);
  put(a, kRootIno, "f2", "two");
  int took = 0;
  while (!b.find("f2") && took < 5) {
    ASSERT_TRUE(b.poll(PeerLog::Pass::kFollow).ok());
    ++took;
  }
  EXPECT_TRUE(b.find("f2").has_value()) << "not seen within a rest period";
  passes(2 * 5, PeerLog::Pass::kFollow);
  put(a, kRootIno, "f3", "three");
  ASSERT_TRUE(b.poll(PeerLog::Pass::kFull).ok());
  EXPECT_TRUE(b.find("f3").has_value());
}

TEST_F(PeerLogTest, AnActivePeerIsSeenByTheNextPassWhichOpensOnlyWhatMoved) {
  BlockStore& a = node("a");
  put(a, kRootIno, "first", "first");  // a is known (a node not known yet is a lone node's news)
  PeerLog& b = follower();
  ASSERT_TRUE(b.poll().ok());
  uint64_t listings = 0;
  for (int i = 0; i < 12; ++i) {
    const std::string name = "f" + std::to_string(i);
    const layout::NodeHead before = head_of("a");
    put(a, kRootIno, name, name);
    // The segments whose end moved (the file's, and any other batch a's
    // flushers synced meanwhile), no other: a's head says which.
    const size_t moved = moved_since("a", before);
    ASSERT_GE(moved, 1u) << name;
    const PeerStats d = passes(1, PeerLog::Pass::kFollow);
    EXPECT_EQ(d.head_listings, 1u) << name;
    EXPECT_EQ(d.segment_opens, moved) << name;
    listings += d.listings;
    EXPECT_TRUE(b.find(name).has_value()) << name << " not seen by the next pass";
  }
  // The segment dir only now and then (for what a deleted), not every pass.
  EXPECT_LE(listings, 12u / 5 + 1);
}

TEST_F(PeerLogTest, APeerWithoutAHeadIsFollowedFromTheListingEveryPass) {
  BlockStore& a = node("a");
  put(a, kRootIno, "first", "first");
  drop_head("a");
  PeerLog& b = follower();
  ASSERT_TRUE(b.poll().ok());
  for (int i = 0; i < 6; ++i) {
    const std::string name = "f" + std::to_string(i);
    put(a, kRootIno, name, name);
    drop_head("a");  // as an older kvfs: it never had one
    const PeerStats d = passes(1, PeerLog::Pass::kFollow);
    EXPECT_EQ(d.listings, 1u) << name;
    EXPECT_GE(d.segment_opens, 1u) << name;
    EXPECT_TRUE(b.find(name).has_value()) << name << " not seen by the next pass";
  }
}

TEST_F(PeerLogTest, ASealedSegmentIsReadOnceAndNeverOpenedAgain) {
  // 8 MiB segments hold at most two of these files, and a's writers (up to
  // four) keep at most one segment each open: at least four are sealed,
  // whichever writer took which file.
  BlockStore& a = node("a");
  constexpr int kBig = 16;
  for (int i = 0; i < kBig; ++i) put(a, kRootIno, "big" + std::to_string(i), pattern(4 * kMiB, i));
  const size_t n = segments_of("a").size();
  const size_t open = n - sealed_of("a");
  ASSERT_GE(n - open, 4u);
  PeerLog& b = follower();
  EXPECT_EQ(passes(1, PeerLog::Pass::kFull).segment_opens, n);  // each read once
  // The sealed ones (disk_layout.h) are never opened again, even by a full
  // pass; one a's writer still has open is opened every pass.
  EXPECT_EQ(passes(10, PeerLog::Pass::kFull).segment_opens, 10 * open);
  for (int i = 0; i < kBig; ++i) {
    auto f = b.find("big" + std::to_string(i));
    ASSERT_TRUE(f.has_value()) << i;
    EXPECT_EQ(f->snap.size, 4 * kMiB);
  }
  // Small files go to a segment a's writer keeps open: that one is opened
  // every pass, and each new file in it is seen by the next pass.
  size_t unsealed = 0;
  for (int i = 0; i < 3; ++i) {
    const std::string name = "small" + std::to_string(i);
    put(a, kRootIno, name, name);
    unsealed = segments_of("a").size() - sealed_of("a");
    ASSERT_GE(unsealed, 1u);
    EXPECT_EQ(passes(1, PeerLog::Pass::kFull).segment_opens, unsealed) << name;
    EXPECT_TRUE(b.find(name).has_value()) << name;
  }
  // a closes it (an unmount seals its open segment): read once more, then
  // never again.
  close("a");
  EXPECT_EQ(sealed_of("a"), segments_of("a").size());
  EXPECT_EQ(passes(1, PeerLog::Pass::kFull).segment_opens, unsealed);
  EXPECT_EQ(passes(10, PeerLog::Pass::kFull).segment_opens, 0u);
  EXPECT_TRUE(b.find("small2").has_value());
}

// A segment leaves a's head when a closes it; b's one look at it (to its
// end) fails: it is tried again at the next pass, not given up.
TEST_F(PeerLogTest, AFailedLastReadOfASegmentThatLeftTheHeadIsTriedAgain) {
  BlockStore& a = node("a");
  put(a, kRootIno, "f1", "one");
  PeerLog& b = follower();
  ASSERT_TRUE(b.poll().ok());
  ASSERT_TRUE(b.find("f1").has_value());
  put(a, kRootIno, "f2", "two");
  const std::set<std::string> segs = segments_of("a");
  close("a");  // every writer closes: out of a's head
  EXPECT_FALSE(pass_with_opens_failing(b, segs).ok());
  ASSERT_TRUE(b.poll(PeerLog::Pass::kFollow).ok());
  EXPECT_TRUE(b.find("f2").has_value());
}

// A segment this node read before a head named it (here: while its node
// had none; in a fleet: new, before its first sync), then written and
// closed between two passes, so that no head this node listed named it:
// the next move of the head has it looked at once more.
TEST_F(PeerLogTest, ASegmentReadBeforeAHeadNamedItIsLookedAtWhenThatHeadMoves) {
  BlockStore& a = node("a");
  put(a, kRootIno, "f1", "one");
  drop_head("a");
  PeerLog& b = follower();
  ASSERT_TRUE(b.poll().ok());  // a's segments read, by the listing
  ASSERT_TRUE(b.find("f1").has_value());
  put(a, kRootIno, "f2", "two");  // a's head comes back, naming them
  close("a");                     // and they leave it, sealed
  ASSERT_TRUE(head_of("a").open.empty());
  ASSERT_TRUE(b.poll(PeerLog::Pass::kFollow).ok());
  EXPECT_TRUE(b.find("f2").has_value()) << "a segment that left the head unseen was not read";
}

// The same, when the look that the head's move owes fails (a stalled
// server): it is owed until a read succeeds, though the head stays put.
TEST_F(PeerLogTest, ALookThatAHeadsMoveOwesIsTriedAgainUntilItSucceeds) {
  BlockStore& a = node("a");
  put(a, kRootIno, "f1", "one");
  drop_head("a");
  PeerLog& b = follower();
  ASSERT_TRUE(b.poll().ok());
  put(a, kRootIno, "f2", "two");
  const std::set<std::string> segs = segments_of("a");
  close("a");
  EXPECT_FALSE(pass_with_opens_failing(b, segs).ok());
  ASSERT_TRUE(b.poll(PeerLog::Pass::kFollow).ok());
  EXPECT_TRUE(b.find("f2").has_value());
}

// A listing of segments/ that fails (a stalled server) is made again at the
// next pass: the new segment it was for is not missed.
TEST_F(PeerLogTest, AFailedListingIsMadeAgainAtTheNextPass) {
  put(node("a"), kRootIno, "f1", "one");
  PeerLog& b = follower();
  ASSERT_TRUE(b.poll().ok());
  ASSERT_TRUE(b.find("f1").has_value());
  close("a");
  put(node("a"), kRootIno, "f2", "two");  // in a new segment: a's head's last id moves
  fs_.fail({.op = FaultFs::Op::kList, .err = EIO, .path_has = "/segments", .times = 1});
  EXPECT_FALSE(b.poll(PeerLog::Pass::kFollow).ok());
  EXPECT_EQ(fs_.failed(FaultFs::Op::kList), 1u) << "the pass did not list segments/";
  EXPECT_FALSE(b.find("f2").has_value());
  ASSERT_TRUE(b.poll(PeerLog::Pass::kFollow).ok());
  EXPECT_TRUE(b.find("f2").has_value());
}

// A closed segment whose seal failed (a backing fs that refuses chmod)
// stays unsealed: once read to its end it is not looked at again at each
// move of its node's head, only the segments that moved are.
TEST_F(PeerLogTest, AClosedSegmentWhoseSealFailedIsNotReopenedAtEveryMove) {
  put(node("a"), kRootIno, "f1", "one");
  const std::set<std::string> closed = segments_of("a");
  close("a");
  BlockStore& a = node("a");  // (a mount seals what it finds unsealed: after it)
  const std::string dir = layout::segment_dir(root_ + "/backing");
  for (const std::string& n : closed) ASSERT_EQ(::chmod((dir + "/" + n).c_str(), 0600), 0);
  PeerLog& b = follower();
  ASSERT_TRUE(b.poll().ok());
  put(a, kRootIno, "f2", "two");
  ASSERT_TRUE(b.poll(PeerLog::Pass::kFollow).ok());  // owed once more: nothing new in them
  for (int i = 3; i < 8; ++i) {
    const std::string name = "f" + std::to_string(i);
    const layout::NodeHead before = head_of("a");
    put(a, kRootIno, name, name);
    const size_t moved = moved_since("a", before);
    const PeerStats d = passes(1, PeerLog::Pass::kFollow);
    EXPECT_EQ(d.segment_opens, moved) << name;
    EXPECT_TRUE(b.find(name).has_value()) << name;
  }
}

// A head that stopped moving (its node's renames fail, or it went back to a
// kvfs without heads) while the node writes on: the listing shows a segment
// newer than the head knows, and the node is followed without it.
TEST_F(PeerLogTest, AStaleHeadIsNoticedAndItsNodeFollowedWithoutIt) {
  BlockStore& a = node("a");
  put(a, kRootIno, "f1", "one");
  PeerLog& b = follower();
  ASSERT_TRUE(b.poll().ok());
  layout::NodeHead frozen = head_of("a");
  close("a");
  BlockStore& again = node("a");  // new segments from here on
  // The old head outranks the live one, as if every rename since failed.
  frozen.gen = head_of("a").gen + 1000;
  const std::string hd = layout::head_dir(root_ + "/backing");
  ::close(::open((hd + "/" + layout::head_name(frozen)).c_str(), O_CREAT | O_WRONLY, 0644));
  put(again, kRootIno, "f2", "f2");
  // A listing shows a segment newer than the head says; the head does not
  // move for ten passes: stale, and a is followed from the listing.
  for (int i = 0; i < 12; ++i) ASSERT_TRUE(b.poll(PeerLog::Pass::kFull).ok());
  EXPECT_TRUE(b.find("f2").has_value());
  for (int i = 3; i < 6; ++i) {
    const std::string name = "f" + std::to_string(i);
    put(again, kRootIno, name, name);
    ASSERT_TRUE(b.poll(PeerLog::Pass::kFollow).ok());
    EXPECT_TRUE(b.find(name).has_value()) << name;
  }
}

TEST_F(PeerLogTest, OldUnsealedSegmentsAreCheckedAFewAPassInTurn) {
  BlockStore& a = node("a");  // 8 MiB segments
  for (int i = 0; i < 30; ++i) put(a, kRootIno, "big" + std::to_string(i), pattern(4 * kMiB, i));
  const size_t n = segments_of("a").size();
  ASSERT_GT(n, 9u) << "a should have more segments than the newest eight";
  // As a dir written before seals has them (or a node whose chmod failed):
  // a peer cannot know that a's old segments are closed.
  const std::string dir = layout::segment_dir(root_ + "/backing");
  for (const std::string& name : segments_of("a"))
    ASSERT_EQ(::chmod((dir + "/" + name).c_str(), layout::kSegmentMode), 0);
  PeerLog& b = follower();
  passes(2, PeerLog::Pass::kFull);  // all new, then all grown since the first look
  // Nothing changes now: each pass opens what a's head names and one of the
  // older ones in turn (a node with up to 25 old segments), never all.
  const size_t named = head_of("a").open.size();
  const PeerStats d = passes(static_cast<int>(n), PeerLog::Pass::kFull);
  EXPECT_EQ(d.segment_opens, n * (named + 1));
  for (int i = 0; i < 30; ++i) {
    auto f = b.find("big" + std::to_string(i));
    ASSERT_TRUE(f.has_value()) << i;
    EXPECT_EQ(f->snap.size, 4 * kMiB);
  }
}

TEST_F(PeerLogTest, ALoneNodeListsOnlyOncePerRestPeriod) {
  PeerLog& b = follower();
  passes(2 * 5, PeerLog::Pass::kFollow);
  const PeerStats d = passes(2 * 5, PeerLog::Pass::kFollow);
  EXPECT_EQ(d.listings, 2u);
  EXPECT_EQ(d.segment_opens, 0u);
  // A node that joins is seen at the next listing.
  put(node("a"), kRootIno, "new", "joined");
  int took = 0;
  while (!b.find("new") && took < 5) {
    ASSERT_TRUE(b.poll(PeerLog::Pass::kFollow).ok());
    ++took;
  }
  EXPECT_TRUE(b.find("new").has_value());
}

// The follower's pause: peer_poll; longer after a slow pass, and after one
// that opened many segments (a fleet whose every node writes), within
// bounds.
TEST(PeerLogPause, GrowsWithASlowPassOrManyOpensWithinBounds) {
  EXPECT_DOUBLE_EQ(PeerLog::follow_pause_s(0.2, 0.001, 0), 0.2);
  EXPECT_DOUBLE_EQ(PeerLog::follow_pause_s(0.2, 0.001, 2), 0.2);    // two nodes: as set
  EXPECT_DOUBLE_EQ(PeerLog::follow_pause_s(0.2, 0.001, 8), 0.4);    // 20 opens a second
  EXPECT_DOUBLE_EQ(PeerLog::follow_pause_s(0.2, 0.001, 500), 0.5);  // at most half a second
  EXPECT_DOUBLE_EQ(PeerLog::follow_pause_s(0.2, 1.0, 0), 2.0);      // a slow pass: twice it
  EXPECT_DOUBLE_EQ(PeerLog::follow_pause_s(0.2, 60, 0), 5.0);       // at most 5 s
  EXPECT_DOUBLE_EQ(PeerLog::follow_pause_s(2, 0.001, 500), 2.0);    // a longer peer_poll
}

}  // namespace
}  // namespace kvfs
