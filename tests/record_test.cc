// The on-disk format: round trips and hostile bytes.
#include "core/record.h"

#include <gtest/gtest.h>

#include <cstring>

#include "core/buffer.h"

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
  std::string enc;
  encode_entries(in, &enc);
  std::vector<RecordEntry> out;
  ASSERT_TRUE(decode_entries(enc, &out).ok());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].snap.name, sample().name);
  EXPECT_EQ(out[1].kind, EntryKind::kTombstone);
  EXPECT_EQ(out[1].snap.seq, 11u);
  enc.push_back('\x07');
  out.clear();
  EXPECT_FALSE(decode_entries(enc, &out).ok());
}

}  // namespace
}  // namespace kvfs
