// SPDX-License-Identifier: Apache-2.0
// Mount tests: read-ahead (the prefetch option) through a real mount. After
// a remount nothing is in RAM: looking a file up queues its cold blocks, a
// read returns the same bytes, and each block is read from the backing dir
// once, whether the client or the prefetcher got to it first. prefetch=0
// reads nothing ahead, and kvfs-admin config changes it at run time. Small
// files loaded in the order they were stored are read ahead along their
// segment (segment_readahead), with the right bytes. A load that reads a
// block in pieces (NIXL's parallel extents) gets the rest from the block its
// open holds.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/control/control_client.h"
#include "tests/mount_fixture.h"

namespace kvfs::test {
namespace {

constexpr size_t kMiB = 1 << 20;
constexpr size_t kFile = 8 * kMiB;  // 8 blocks

nlohmann::json stats(const KvfsMount& m) {
  auto r = control::request(control::control_path(m.mnt()), R"({"cmd":"stats"})");
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : nlohmann::json::object();
}
uint64_t num(const nlohmann::json& j, const char* ptr) {
  const auto p = nlohmann::json::json_pointer(ptr);
  return j.contains(p) ? j.at(p).get<uint64_t>() : ~0ull;
}

// Two files written and flushed, then a fresh mount: both only in segments.
void cold_files(KvfsMount& m, const std::string& opts, std::string* a, std::string* b) {
  ASSERT_TRUE(m.mount_ok(opts));
  *a = random_bytes(kFile, 1);
  *b = random_bytes(kFile, 2);
  ASSERT_TRUE(write_file(m.path("a.bin"), *a));
  ASSERT_TRUE(write_file(m.path("b.bin"), *b));
  m.unmount();
  ASSERT_TRUE(m.mount_ok(opts));
}

TEST(MountPrefetch, ALookedUpFileIsReadAheadAndEachBlockReadOnce) {
  KvfsMount m;
  std::string a, b;
  ASSERT_NO_FATAL_FAILURE(cold_files(m, "", &a, &b));
  const nlohmann::json s0 = stats(m);
  EXPECT_EQ(num(s0, "/prefetch/queued_blocks"), 0u);
  EXPECT_EQ(num(s0, "/backing/reads"), 0u);
  struct stat st;
  ASSERT_EQ(::stat(m.path("a.bin").c_str(), &st), 0);  // the lookup
  EXPECT_EQ(num(stats(m), "/prefetch/queued_blocks"), kFile / kMiB);
  std::string got;
  ASSERT_TRUE(read_file(m.path("a.bin"), &got));
  EXPECT_TRUE(got == a) << "wrong bytes";
  const nlohmann::json s1 = stats(m);
  // The prefetcher and the reader share one read per block.
  EXPECT_EQ(num(s1, "/backing/reads"), kFile / kMiB);
  EXPECT_EQ(num(s1, "/prefetch/wasted_blocks"), 0u);
  EXPECT_LE(num(s1, "/prefetch/reads"), kFile / kMiB);
  // b was never looked up: nothing of it was read.
  ASSERT_TRUE(read_file(m.path("b.bin"), &got));
  EXPECT_TRUE(got == b) << "wrong bytes";
  EXPECT_EQ(num(stats(m), "/backing/reads"), 2 * kFile / kMiB);
}

TEST(MountPrefetch, OffReadsNothingAheadAndIsARuntimeSetting) {
  KvfsMount m;
  std::string a, b;
  ASSERT_NO_FATAL_FAILURE(cold_files(m, "prefetch=0", &a, &b));
  std::string got;
  ASSERT_TRUE(read_file(m.path("a.bin"), &got));
  EXPECT_TRUE(got == a) << "wrong bytes";
  nlohmann::json s = stats(m);
  EXPECT_EQ(num(s, "/prefetch/queued_blocks"), 0u);
  EXPECT_EQ(num(s, "/prefetch/reads"), 0u);
  EXPECT_EQ(num(s, "/prefetch/budget_bytes"), 0u);
  EXPECT_EQ(num(s, "/backing/reads"), kFile / kMiB);
  auto r = control::request(control::control_path(m.mnt()),
                            R"({"cmd":"config","set":{"prefetch":"64M"}})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  s = stats(m);
  EXPECT_EQ(num(s, "/prefetch/budget_bytes"), 64 * kMiB);
  struct stat st;
  ASSERT_EQ(::stat(m.path("b.bin").c_str(), &st), 0);
  EXPECT_EQ(num(stats(m), "/prefetch/queued_blocks"), kFile / kMiB);
  ASSERT_TRUE(read_file(m.path("b.bin"), &got));
  EXPECT_TRUE(got == b) << "wrong bytes";
}

TEST(MountPrefetch, SmallFilesLoadedInStoreOrderAreReadAheadAlongTheSegment) {
  KvfsMount m;
  // One flusher: the files lie one after another in one segment.
  const std::string opts = "flush_threads=1";
  ASSERT_TRUE(m.mount_ok(opts));
  constexpr int kFiles = 32;
  constexpr size_t kChunk = kMiB / 2;  // one short block each
  std::vector<std::string> data;
  for (int i = 0; i < kFiles; ++i) {
    data.push_back(random_bytes(kChunk, 100 + i));
    ASSERT_TRUE(write_file(m.path("c" + std::to_string(i)), data.back()));
  }
  m.unmount();
  ASSERT_TRUE(m.mount_ok(opts));
  EXPECT_EQ(num(stats(m), "/prefetch/window_reads"), 0u);
  // As vLLM loads a prefix: each chunk looked up, then read, in order.
  for (int i = 0; i < kFiles; ++i) {
    struct stat st;
    ASSERT_EQ(::stat(m.path("c" + std::to_string(i)).c_str(), &st), 0);
    std::string got;
    ASSERT_TRUE(read_file(m.path("c" + std::to_string(i)), &got));
    ASSERT_TRUE(got == data[i]) << "wrong bytes in c" << i;
  }
  const nlohmann::json s = stats(m);
  EXPECT_GT(num(s, "/prefetch/window_reads"), 0u);
  EXPECT_GT(num(s, "/prefetch/window_hits"), 0u);
  EXPECT_EQ(num(s, "/prefetch/window_mismatches"), 0u);
  EXPECT_EQ(num(s, "/errors/checksum"), 0u);
  // A runtime setting: off, and it reads back.
  auto r = control::request(control::control_path(m.mnt()),
                            R"({"cmd":"config","set":{"segment_readahead":"0"}})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto c = control::request(control::control_path(m.mnt()), R"({"cmd":"config"})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_NE(c->dump().find("\"segment_readahead\""), std::string::npos) << c->dump();
}

// As the NIXL adapter loads a chunk: open read-write with O_DIRECT, extents
// read in any order. The block read first is held by the open; the other
// pieces of it never reach the RAM tier's lookup or the backing dir.
TEST(MountPrefetch, ABlockReadInPiecesIsServedByTheBlockItsOpenHolds) {
  KvfsMount m;
  std::string a, b;
  ASSERT_NO_FATAL_FAILURE(cold_files(m, "prefetch=0,segment_readahead=0", &a, &b));
  const int fd = ::open(m.path("a.bin").c_str(), O_RDWR | O_DIRECT | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  constexpr size_t kPiece = kMiB / 4;
  AlignedBuf buf(kMiB);
  for (size_t off : {kPiece, 0 * kPiece, 3 * kPiece, 2 * kPiece})
    ASSERT_EQ(::pread(fd, buf.data + off, kPiece, static_cast<off_t>(off)), ssize_t(kPiece));
  EXPECT_TRUE(std::memcmp(buf.data, a.data(), kMiB) == 0) << "wrong bytes";
  nlohmann::json s = stats(m);
  EXPECT_EQ(num(s, "/backing/reads"), 1u);
  EXPECT_EQ(num(s, "/cache/held_block_hits"), 3u);
  EXPECT_EQ(num(s, "/cache/held_bytes"), kMiB);
  ::close(fd);  // its release gives the block back (StoreTest.ABlockReadInPieces...)
}

}  // namespace
}  // namespace kvfs::test
