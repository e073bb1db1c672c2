// SPDX-License-Identifier: Apache-2.0
// What a node keeps of the peers' files it made visible (imports,
// core/peers/peer_imports.cc): an import nothing references any more is
// released and found again by the next lookup, so imports stay bounded by
// what is in use; an unlink or a rename of a peer's name imports it first;
// a peer's directory rename reaches the imports below it. Fixture:
// peer_files_fixture.h.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "tests/peer_files_fixture.h"

namespace kvfs {
namespace {

TEST_F(PeerFilesTest, AnImportTheKernelForgotIsReleasedAndFoundAgainFromRam) {
  BlockStore& a = node("a");
  BlockStore& b = node("b");
  const std::string d = pattern(2 * kMiB + 5, 21);
  put(a, kRootIno, "f", d);
  ASSERT_TRUE(b.admin().poll_peers().ok());
  const uint64_t inodes_before = b.admin().stats().inodes;
  auto l = b.lookup(kRootIno, "f");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(b.admin().stats().inodes, inodes_before + 1);
  auto f = b.open(l->ino, O_RDONLY);
  ASSERT_TRUE(f.ok());
  ReadResult rr;
  ASSERT_TRUE(b.read(*f, 0, d.size(), &rr).ok());
  rr = {};
  // Forgotten while open: it stays (the open handle reads on) until closed.
  b.forget(l->ino, 1);
  EXPECT_EQ(b.admin().stats().peer_releases, 0u);
  b.release(*f);
  StoreStats s = b.admin().stats();
  EXPECT_EQ(s.peer_releases, 1u);
  EXPECT_EQ(s.inodes, inodes_before) << "nothing of it is left in the namespace";
  EXPECT_EQ(b.getattr(l->ino).status().code(), Status::Code::kNotFound);
  // Found again under a new inode number, its blocks still in RAM.
  const uint64_t reads = s.backing_reads;
  EXPECT_EQ(get(b, kRootIno, "f"), d);
  s = b.admin().stats();
  EXPECT_EQ(s.backing_reads, reads) << "served from the blocks cached by extent";
  EXPECT_EQ(s.peer_imports, 2u);
}

TEST_F(PeerFilesTest, WhatAListingImportedGoesAMinuteLaterUnlessLookedUp) {
  BlockStore& a = node("a");
  BlockStore& b = node("b");
  for (const char* n : {"x", "y", "z"}) put(a, kRootIno, n, n);
  ASSERT_TRUE(b.admin().poll_peers().ok());
  const std::set<std::string> all{"x", "y", "z"};
  EXPECT_EQ(names(b, kRootIno), all);
  EXPECT_EQ(b.admin().stats().peer_imports, 3u);
  auto y = b.lookup(kRootIno, "y");  // the kernel keeps this one
  ASSERT_TRUE(y.ok());
  clock_.advance(30);
  EXPECT_EQ(names(b, kRootIno), all);
  EXPECT_EQ(b.admin().stats().peer_releases, 0u) << "not a minute yet";
  clock_.advance(31);
  // The next pass over the peers' logs lets x and z go; a listing shows
  // every name still.
  ASSERT_TRUE(b.admin().poll_peers().ok());
  EXPECT_EQ(b.admin().stats().peer_releases, 2u);
  EXPECT_EQ(names(b, kRootIno), all);
  const StoreStats s = b.admin().stats();
  EXPECT_EQ(s.peer_imports, 5u) << "x and z made visible again for this listing";
  EXPECT_EQ(get(b, kRootIno, "y"), "y");
  EXPECT_EQ(get(b, kRootIno, "x"), "x");
  b.forget(y->ino, 1);
}

TEST_F(PeerFilesTest, AnUnlinkOrRenameOfAPeersNameNotImportedYetWorksAsAfterALookup) {
  BlockStore& a = node("a");
  BlockStore& b = node("b");
  put(a, kRootIno, "f", "a's");
  put(a, kRootIno, "g", "a's too");
  ASSERT_TRUE(b.admin().poll_peers().ok());
  const uint64_t inodes = b.admin().stats().inodes;
  // Not looked up here first: refused as after a lookup, and nothing stays.
  EXPECT_EQ(b.rename(kRootIno, "f", kRootIno, "h", 0).code(), Status::Code::kReadOnly);
  EXPECT_EQ(b.admin().stats().inodes, inodes);
  EXPECT_EQ(b.admin().stats().peer_releases, 1u);
  ASSERT_TRUE(b.unlink(kRootIno, "g").ok());
  EXPECT_EQ(get(b, kRootIno, "g"), "<missing>");
  EXPECT_EQ(get(b, kRootIno, "f"), "a's");
  // A peer's directory is no file: unlink says so and makes nothing here.
  const uint64_t d = dir(a, kRootIno, "d");
  put(a, d, "x", "x");
  ASSERT_TRUE(b.admin().poll_peers().ok());
  EXPECT_EQ(b.unlink(kRootIno, "d").code(), Status::Code::kNotFound);
  EXPECT_EQ(b.admin().stats().peer_dirs, 0u);
}

TEST_F(PeerFilesTest, APeersDirectoryRenameReachesTheImportsBelowIt) {
  BlockStore& a = node("a");
  BlockStore& b = node("b");
  const uint64_t da = dir(a, dir(a, kRootIno, "m"), "d");
  put(a, da, "f", "in d");
  ASSERT_TRUE(b.admin().poll_peers().ok());
  auto m = b.lookup(kRootIno, "m");
  ASSERT_TRUE(m.ok());
  auto d = b.lookup(m->ino, "d");
  ASSERT_TRUE(d.ok());
  auto f = b.lookup(d->ino, "f");  // held by the kernel: only a peer's change drops it
  ASSERT_TRUE(f.ok());
  const uint64_t ma = a.lookup(kRootIno, "m")->ino;
  ASSERT_TRUE(a.rename(ma, "d", ma, "e", 0).ok());
  ASSERT_TRUE(a.flush_all().ok());
  ASSERT_TRUE(b.admin().poll_peers().ok());
  EXPECT_EQ(get(b, d->ino, "f"), "<missing>") << "still visible under the old name";
  auto e = b.lookup(m->ino, "e");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(get(b, e->ino, "f"), "in d");
  EXPECT_GE(b.admin().stats().peer_drops, 1u);
  b.forget(f->ino, 1);
}

}  // namespace
}  // namespace kvfs
