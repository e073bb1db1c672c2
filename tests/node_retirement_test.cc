// SPDX-License-Identifier: Apache-2.0
// Node retirement (core/retire/node_retirement.h): a node gone for good
// handed over to another, on real BlockStores of nodes sharing one backing
// dir (peer_files_fixture.h).
#include "core/retire/node_retirement.h"

#include <gtest/gtest.h>

#include "tests/peer_files_fixture.h"

namespace kvfs {
namespace {

using NodeRetirementTest = PeerFilesTest;

TEST_F(NodeRetirementTest, ANodeGoneForGoodIsRetiredIntoAnother) {
  const std::string d1 = pattern(2 * kMiB + 1, 21), d2 = pattern(kMiB, 22);
  BlockStore& a = node("a");
  put(a, dir(a, kRootIno, "m"), "x", d1);
  put(a, kRootIno, "y", d2);
  put(a, kRootIno, "mine", "a's");
  BlockStore& b = node("b");
  BlockStore& c = node("c");
  clock_.advance(1);
  put(b, kRootIno, "mine", "b's");
  const auto busy = Status::Code::kBusy;
  EXPECT_EQ(retire_node(b, "a", false, 0).status().code(), busy) << "a is running";
  ASSERT_EQ(get(c, kRootIno, "y"), d2);  // c reads a's copy of y
  close("a");
  EXPECT_EQ(retire_node(b, "a", false, 30).status().code(), busy) << "a's log changed just now";
  EXPECT_EQ(retire_node(b, "nobody", false, 0).status().code(), Status::Code::kNotFound);
  clock_.advance(31);
  auto r = retire_node(b, "a", false, 30);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->files_copied, 2u);
  EXPECT_EQ(r->bytes_copied, d1.size() + d2.size());
  EXPECT_EQ(r->files_kept, 1u) << "b's own 'mine'";
  EXPECT_EQ(r->files_lost, 0u);
  EXPECT_GE(r->segments_deleted, 1u);
  EXPECT_EQ(seg_of("a"), "") << "no segment of a is left";
  EXPECT_EQ(get(b, b.lookup(kRootIno, "m")->ino, "x"), d1);
  EXPECT_EQ(get(b, kRootIno, "y"), d2);
  EXPECT_EQ(get(b, kRootIno, "mine"), "b's");
  // b's own files now: in its index, under its cap, and read by the others.
  close("b");
  BlockStore& b2 = node("b");
  EXPECT_EQ(get(b2, kRootIno, "y"), d2);
  EXPECT_GE(b2.admin().stats().files, 3u);
  ASSERT_TRUE(c.admin().poll_peers().ok());
  EXPECT_EQ(get(c, kRootIno, "y"), d2) << "c's copy of a's y went; b's is found";
  EXPECT_EQ(get(c, c.lookup(kRootIno, "m")->ino, "x"), d1);
  EXPECT_EQ(get(c, kRootIno, "mine"), "b's");
}

TEST_F(NodeRetirementTest, ARetiredNodesDataCanBeDroppedInstead) {
  put(node("a"), kRootIno, "f", "a's");
  close("a");
  BlockStore& b = node("b");
  ASSERT_EQ(get(b, kRootIno, "f"), "a's");
  clock_.advance(31);
  auto r = retire_node(b, "a", /*drop=*/true, 30);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->files_copied, 0u);
  EXPECT_GE(r->segments_deleted, 1u);
  EXPECT_EQ(get(b, kRootIno, "f"), "<missing>");
  EXPECT_EQ(retire_node(b, "b", true, 0).status().code(), Status::Code::kInvalid);
}

}  // namespace
}  // namespace kvfs
