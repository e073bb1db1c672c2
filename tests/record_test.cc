// SPDX-License-Identifier: Apache-2.0
// The on-disk format: round trips and hostile bytes.
#include "core/records/record.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>

#include "core/util/buffer.h"

namespace kvfs {
namespace {

InodeSnapshot sample() {
  InodeSnapshot s;
  s.ino = 42;
  s.seq = 7;
  s.parent = 1;
  s.name = std::string("we\xff ird\nname", 12);
  s.mode = 0100644;
  s.uid = 1000;
  s.gid = 100;
  s.size = 3 * kBlockSize + 17;
  s.atime_ns = 1;
  s.mtime_ns = 2;
  s.ctime_ns = 3;
  s.xattrs["user.vllm.kv_crc32c"] = std::string("\x01\x00\x02", 3);
  s.extents.push_back({0, Extent{5, 4096, kBlockSize, 99}});
  s.extents.push_back({3, Extent{6, 8192, 17, 100}});
  return s;
}

TEST(Record, SnapshotRoundTrip) {
  InodeSnapshot s = sample();
  std::string enc;
  encode_snapshot(s, &enc);
  InodeSnapshot d;
  ASSERT_TRUE(decode_snapshot(enc, &d).ok());
  EXPECT_EQ(d.ino, s.ino);
  EXPECT_EQ(d.name, s.name);
  EXPECT_EQ(d.size, s.size);
  EXPECT_EQ(d.xattrs, s.xattrs);
  ASSERT_EQ(d.extents.size(), 2u);
  EXPECT_EQ(d.extents[1].idx, 3u);
  EXPECT_TRUE(d.extents[1].ext == s.extents[1].ext);
}

TEST(Record, EveryTruncationIsRejected) {
  std::string enc;
  encode_snapshot(sample(), &enc);
  for (size_t n = 0; n < enc.size(); ++n) {
    InodeSnapshot d;
    EXPECT_FALSE(decode_snapshot(std::string_view(enc.data(), n), &d).ok()) << n;
  }
}

TEST(Record, ExtentsMustFitTheFile) {
  InodeSnapshot s = sample();
  s.size = 3 * kBlockSize;  // the last extent now ends past the size
  std::string enc;
  encode_snapshot(s, &enc);
  InodeSnapshot d;
  EXPECT_FALSE(decode_snapshot(enc, &d).ok());
}

TEST(Record, HeaderRoundTripAndChecksum) {
  RecordHeader h;
  h.type = RecordType::kFile;
  h.meta_len = 300;
  h.nblocks = 2;
  h.payload_len = kBlockSize + 4096;
  h.meta_hash = 12345;
  char buf[kRecordHeaderSize];
  encode_header(h, buf);
  RecordHeader d;
  ASSERT_TRUE(decode_header(buf, &d).ok());
  EXPECT_EQ(d.meta_len, 300u);
  EXPECT_EQ(d.payload_len, h.payload_len);
  EXPECT_EQ(d.payload_start(), 4096u);
  for (size_t i = 0; i < kRecordHeaderSize; ++i) {
    char bad[kRecordHeaderSize];
    std::memcpy(bad, buf, sizeof(bad));
    bad[i] ^= 0x40;
    EXPECT_FALSE(decode_header(bad, &d).ok()) << "flipped byte " << i;
  }
}

TEST(Record, EntriesRoundTrip) {
  std::vector<RecordEntry> in;
  in.push_back({EntryKind::kSnapshot, sample()});
  RecordEntry t;
  t.kind = EntryKind::kTombstone;
  t.snap.ino = 9;
  t.snap.seq = 11;
  in.push_back(t);
  RecordEntry u;  // an unlink of another node's file
  u.kind = EntryKind::kPeerUnlink;
  u.snap.name = "node-b";
  u.snap.ino = 5;
  u.snap.seq = 12;
  u.snap.mtime_ns = 987654321;
  in.push_back(u);
  std::string enc;
  encode_entries(in, &enc);
  std::vector<RecordEntry> out;
  ASSERT_TRUE(decode_entries(enc, &out).ok());
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].snap.name, sample().name);
  EXPECT_EQ(out[0].kind, EntryKind::kSnapshot);
  EXPECT_EQ(out[1].kind, EntryKind::kTombstone);
  EXPECT_EQ(out[1].snap.seq, 11u);
  EXPECT_EQ(out[2].kind, EntryKind::kPeerUnlink);
  EXPECT_EQ(out[2].snap.name, "node-b");
  EXPECT_EQ(out[2].snap.ino, 5u);
  EXPECT_EQ(out[2].snap.mtime_ns, 987654321);
  enc.push_back('\x07');
  out.clear();
  EXPECT_FALSE(decode_entries(enc, &out).ok());
}

// The bytes of a version 1 snapshot as kvfs wrote them before device nodes
// (no rdev), spelled out field by field rather than made by the encoder
// under test.
std::string old_format_fifo() {
  std::string b;
  auto u8 = [&](uint8_t v) { b.push_back(static_cast<char>(v)); };
  auto u32 = [&](uint32_t v) {
    for (int i = 0; i < 4; ++i) u8(static_cast<uint8_t>(v >> (8 * i)));
  };
  auto u64 = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i) u8(static_cast<uint8_t>(v >> (8 * i)));
  };
  u8(1);    // version
  u64(77);  // ino
  u64(5);   // seq
  u64(1);   // parent
  u32(4);   // name
  b += "pipe";
  u32(010640);  // mode
  u32(1000);    // uid
  u32(100);     // gid
  u64(0);       // size
  u64(11);      // atime
  u64(12);      // mtime
  u64(13);      // ctime
  u32(0);       // symlink
  u32(1);       // xattrs
  u32(6);
  b += "user.k";
  u32(1);
  b += "v";
  u32(0);  // extents
  return b;
}

TEST(Record, OldFormatDecodesWithRdevZero) {
  InodeSnapshot d;
  d.rdev = 99;  // must be reset by the decoder
  ASSERT_TRUE(decode_snapshot(old_format_fifo(), &d).ok());
  EXPECT_EQ(d.ino, 77u);
  EXPECT_EQ(d.name, "pipe");
  EXPECT_EQ(d.mode, 010640u);
  EXPECT_EQ(d.ctime_ns, 13);
  EXPECT_EQ(d.xattrs.at("user.k"), "v");
  EXPECT_EQ(d.rdev, 0u);
  // Without an rdev the encoder still writes exactly the old bytes, so that
  // what is written now stays readable by the version before.
  std::string enc;
  encode_snapshot(d, &enc);
  EXPECT_EQ(enc, old_format_fifo());
  // An old snapshot never carried trailing bytes: they are still corruption.
  std::string extra = old_format_fifo() + std::string(4, '\x01');
  EXPECT_FALSE(decode_snapshot(extra, &d).ok());
}

TEST(Record, DeviceNumberRoundTrip) {
  InodeSnapshot s = sample();
  s.mode = S_IFCHR | 0620;
  s.size = 0;
  s.extents.clear();
  s.rdev = 0x00c12345;  // major and minor above 8 bits
  std::string enc;
  encode_snapshot(s, &enc);
  EXPECT_EQ(enc[0], 2) << "a device node is a version 2 snapshot";
  InodeSnapshot d;
  ASSERT_TRUE(decode_snapshot(enc, &d).ok());
  EXPECT_EQ(d.rdev, s.rdev);
  EXPECT_EQ(d.mode, s.mode);
  EXPECT_EQ(d.name, s.name);
  EXPECT_EQ(d.xattrs, s.xattrs);
  std::string again;
  encode_snapshot(d, &again);
  EXPECT_EQ(again, enc);
  for (size_t n = 0; n < enc.size(); ++n)
    EXPECT_FALSE(decode_snapshot(std::string_view(enc.data(), n), &d).ok()) << n;
  EXPECT_FALSE(decode_snapshot(enc + "x", &d).ok());
  // Through the record entries, as segments and the index carry it.
  std::vector<RecordEntry> out;
  std::string ents;
  encode_entries({{EntryKind::kSnapshot, s}}, &ents);
  ASSERT_TRUE(decode_entries(ents, &out).ok());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].snap.rdev, s.rdev);
  // An unknown version stays corruption.
  enc[0] = 3;
  EXPECT_FALSE(decode_snapshot(enc, &d).ok());
}

}  // namespace
}  // namespace kvfs
