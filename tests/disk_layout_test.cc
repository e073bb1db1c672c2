// SPDX-License-Identifier: Apache-2.0
// The backing dir's names (core/backing/disk_layout.h): what the on-disk format
// fixes, checked literally so that a change to them cannot pass unnoticed.
#include "core/backing/disk_layout.h"

#include <gtest/gtest.h>

namespace kvfs::layout {
namespace {

TEST(DiskLayout, NamesAreTheFormatOnes) {
  EXPECT_EQ(super_path("/b"), "/b/kvfs.super");
  EXPECT_EQ(super_tmp_path("/b", "n1"), "/b/kvfs.super.n1.tmp");
  EXPECT_EQ(lock_path("/b", "n1"), "/b/kvfs.n1.lock");
  EXPECT_EQ(shared_lock_path("/b"), "/b/kvfs.lock");
  EXPECT_EQ(segment_dir("/b"), "/b/segments");
  EXPECT_EQ(direct_probe_path("/b", "n1"), "/b/segments/.direct_probe.n1");
  EXPECT_EQ(head_dir("/b"), "/b/heads");
  EXPECT_EQ(kSuperFormat, 1);
}

TEST(DiskLayout, SegmentNameRoundTrips) {
  EXPECT_EQ(segment_name("host-1", 0x2a), "host-1-000000000000002a.seg");
  for (const char* node : {"n", "host-1", "a-0000000000000001"})
    for (uint64_t id : {uint64_t(1), uint64_t(0xabcdef), ~uint64_t(0)}) {
      const auto parsed = parse_segment_name(segment_name(node, id));
      ASSERT_TRUE(parsed.has_value()) << node << " " << id;
      EXPECT_EQ(parsed->node, node);
      EXPECT_EQ(parsed->id, id);
    }
}

TEST(DiskLayout, OtherNamesAreNotSegments) {
  for (const char* n :
       {"", ".seg", "-0000000000000001.seg", "n-0000000000000000.seg", "n-000000000000001.seg",
        "n-00000000000000001.seg", "n-000000000000000A.seg", "n_0000000000000001.seg",
        "n-0000000000000001.se", "n-0000000000000001.seg.tmp", ".direct_probe.n"})
    EXPECT_FALSE(parse_segment_name(n).has_value()) << n;
}

TEST(DiskLayout, HeadNameRoundTrips) {
  NodeHead h{"host-1", 0x1f, true, 0x2c, {{0x2a, 0x3200000}, {0x2c, 0x1000}}};
  EXPECT_EQ(head_name(h), "host-1.1f.2c.2a-3200000.2c-1000");
  EXPECT_EQ(parse_head_name(head_name(h)), h);
  NodeHead idle{"n_2", 7, true, 9, {}};
  EXPECT_EQ(head_name(idle), "n_2.7.9");
  EXPECT_EQ(parse_head_name("n_2.7.9"), idle);
}

TEST(DiskLayout, AHeadThatWouldPassNameMaxSaysAllInstead) {
  NodeHead h{std::string(100, 'n'), 1, true, ~uint64_t(0), {}};
  for (uint64_t id = 1; id <= 8; ++id) h.open.emplace_back(~uint64_t(0) - id, ~uint64_t(0));
  const std::string name = head_name(h);
  EXPECT_LE(name.size(), 255u);
  EXPECT_EQ(name, std::string(100, 'n') + ".1.ffffffffffffffff.all");
  auto p = parse_head_name(name);
  ASSERT_TRUE(p.has_value());
  EXPECT_FALSE(p->complete);
  EXPECT_TRUE(p->open.empty());
  EXPECT_EQ(p->last_id, ~uint64_t(0));
}

TEST(DiskLayout, OtherNamesAreNotHeads) {
  for (const char* n :
       {"", ".", "n", "n.", ".1.2", "n.1", "n.1.", "n.g.1", "n.1.2.3", "n.1.2.3-", "n.1.2.0-5",
        "n.1.2.all.3-4", "n.1.2.3-4.all", "n.A.2", "n/x.1.2", "n.11111111111111111.2"})
    EXPECT_FALSE(parse_head_name(n).has_value()) << n;
}

TEST(DiskLayout, LockHolderTextRoundTripsAndToleratesLessText) {
  const LockHolder h{"123", "host-1", "/mnt/kv cache"};
  EXPECT_EQ(lock_holder_text(h), "123\nhost-1\n/mnt/kv cache\n");
  const LockHolder back = parse_lock_holder(lock_holder_text(h));
  EXPECT_EQ(back.pid, "123");
  EXPECT_EQ(back.host, "host-1");
  EXPECT_EQ(back.mount, "/mnt/kv cache");
  const LockHolder old = parse_lock_holder("456\n");  // a kvfs that wrote only its pid
  EXPECT_EQ(old.pid, "456");
  EXPECT_EQ(old.host, "");
  EXPECT_EQ(old.mount, "");
  EXPECT_EQ(parse_lock_holder("").pid, "");  // not written yet
}

}  // namespace
}  // namespace kvfs::layout
