// SPDX-License-Identifier: Apache-2.0
// StoreAdmin on a real store without a mount: what statfs, `kvfs-admin
// stats` and `kvfs-admin ls` report as files come and go, resolve, and the
// refusals of a read-only mount. (Its runtime setter is option_table_test's;
// evict and housekeep's policies are evictor_test's.)
#include "core/store/store_admin.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>

#include "core/ram/ram_tier.h"
#include "core/store/block_store.h"

namespace kvfs {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kMiB = 1 << 20;

class StoreAdminTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char t[] = "/tmp/kvfs-admin-XXXXXX";
    root_ = ::mkdtemp(t);
    fs::create_directories(root_ + "/backing");
    open_store(false);
  }
  void TearDown() override {
    store_.reset();
    fs::remove_all(root_);
  }
  void open_store(bool read_only) {
    if (store_) {
      ASSERT_TRUE(store_->Close().ok());
    }
    store_.reset();
    StoreConfig c;
    c.backing_dir = root_ + "/backing";
    c.index_dir = root_ + "/index";
    c.ram_size = 64 * kMiB;
    c.segment_size = 8 * kMiB;
    c.capacity = 256 * kMiB;
    c.flush_batch_bytes = 4 * kMiB;
    c.prefetch_bytes = 0;  // ls must see only what was read
    c.read_only = read_only;
    auto s = BlockStore::Open(c);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
  }
  StoreAdmin& admin() { return store_->admin(); }
  // Creates parent/name with `bytes` bytes; the handle stays open if keep.
  uint64_t put(uint64_t parent, const std::string& name, size_t bytes, OpenFile** keep = nullptr) {
    Attr a;
    auto f = store_->create(parent, name, 0644, O_CREAT | O_WRONLY | O_TRUNC, Caller{}, &a);
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    if (!f.ok()) return 0;
    const std::string data(bytes, 'x');
    if (bytes) {
      EXPECT_TRUE(store_->write(*f, 0, data.data(), data.size()).ok());
    }
    if (keep) {
      *keep = *f;
    } else {
      EXPECT_TRUE(store_->closed(*f).ok());
      store_->release(*f);
    }
    return a.ino;
  }
  std::map<std::string, std::string> tiers(uint64_t dir) {
    std::map<std::string, std::string> out;
    auto ls = admin().ls(dir);
    EXPECT_TRUE(ls.ok()) << ls.status().ToString();
    if (ls.ok())
      for (auto& e : *ls) out[e.name] = e.tier;
    return out;
  }

  std::string root_;
  std::unique_ptr<BlockStore> store_;
};

TEST_F(StoreAdminTest, StatfsIsTheCapLessWhatTheSegmentsUseAndCountsTheInodes) {
  const StatFs before = admin().statfs();
  EXPECT_EQ(before.total_bytes, 256 * kMiB);
  EXPECT_EQ(before.free_bytes, before.avail_bytes);
  auto d = store_->mkdir(kRootIno, "d", 0755, Caller{});
  ASSERT_TRUE(d.ok());
  put(d->ino, "a", 3 * kMiB);
  put(kRootIno, "b", 100);
  ASSERT_TRUE(store_->flush_all().ok());
  const StatFs after = admin().statfs();
  const StoreStats st = admin().stats();
  EXPECT_EQ(after.total_bytes, 256 * kMiB);
  EXPECT_GE(st.segment_bytes, 3 * kMiB);
  EXPECT_EQ(after.free_bytes, 256 * kMiB - st.segment_bytes);
  EXPECT_EQ(after.files, before.files + 3);  // d, a, b
}

TEST_F(StoreAdminTest, StatsCountOnlyWhatAClientCanStillOpen) {
  auto d = store_->mkdir(kRootIno, "d", 0755, Caller{});
  ASSERT_TRUE(d.ok());
  put(d->ino, "a", 1000);
  OpenFile* held = nullptr;
  put(kRootIno, "b", 2 * kMiB, &held);
  StoreStats st = admin().stats();
  EXPECT_EQ(st.files, 2u);
  EXPECT_EQ(st.dirs, 2u);  // the root and d
  EXPECT_EQ(st.logical_bytes, 1000 + 2 * kMiB);
  const uint64_t inodes = st.inodes;
  // Unlinked while open: its data stays for the handle, but it is no
  // longer a file of the store.
  ASSERT_TRUE(store_->unlink(kRootIno, "b").ok());
  st = admin().stats();
  EXPECT_EQ(st.files, 1u);
  EXPECT_EQ(st.logical_bytes, 1000u);
  EXPECT_EQ(st.inodes, inodes);  // still there for the handle
  EXPECT_TRUE(store_->closed(held).ok());
  store_->release(held);
  EXPECT_EQ(admin().stats().files, 1u);
}

TEST_F(StoreAdminTest, LsSaysWhereEachFilesBlocksAre) {
  auto d = store_->mkdir(kRootIno, "d", 0755, Caller{});
  ASSERT_TRUE(d.ok());
  put(kRootIno, "empty", 0);
  OpenFile* writing = nullptr;
  put(kRootIno, "f", 2 * kMiB, &writing);  // open for writing: never flushed yet
  auto t = tiers(kRootIno);
  EXPECT_EQ(t["d"], "-");
  EXPECT_EQ(t["empty"], "-");
  EXPECT_EQ(t["f"], "dirty");
  ASSERT_TRUE(store_->closed(writing).ok());
  store_->release(writing);
  ASSERT_TRUE(store_->flush_all().ok());
  // Written out: the buffers became the RAM tier's clean copies.
  EXPECT_EQ(tiers(kRootIno)["f"], "ram");
  store_->ram().drop_clean();
  EXPECT_EQ(tiers(kRootIno)["f"], "backing");
  // One of its two blocks read back: in RAM again, the other not.
  auto a = store_->lookup(kRootIno, "f");
  ASSERT_TRUE(a.ok());
  auto f = store_->open(a->ino, O_RDONLY);
  ASSERT_TRUE(f.ok());
  ReadResult rr;
  ASSERT_TRUE(store_->read(*f, 0, 4096, &rr).ok());
  store_->release(*f);
  EXPECT_EQ(tiers(kRootIno)["f"], "mixed");
  // The entries carry what stat would say.
  auto ls = admin().ls(kRootIno);
  ASSERT_TRUE(ls.ok());
  for (auto& e : *ls) {
    if (e.name != "f") continue;
    EXPECT_EQ(e.ino, a->ino);
    EXPECT_EQ(e.size, 2 * kMiB);
    EXPECT_TRUE(S_ISREG(e.mode));
    EXPECT_GT(e.last_access_ns, 0);
  }
  EXPECT_EQ(admin().ls(a->ino).status().code(), Status::Code::kNotDir);
}

TEST_F(StoreAdminTest, ResolveFindsAPathFromTheRoot) {
  auto d = store_->mkdir(kRootIno, "d", 0755, Caller{});
  ASSERT_TRUE(d.ok());
  const uint64_t a = put(d->ino, "a", 10);
  auto r = admin().resolve("d/a");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, a);
  r = admin().resolve("d");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, d->ino);
  EXPECT_EQ(admin().resolve("d/nope").status().code(), Status::Code::kNotFound);
  EXPECT_FALSE(admin().resolve("d/a/x").ok());
}

TEST_F(StoreAdminTest, AReadOnlyMountRefusesEvictionAndRemovesNothing) {
  put(kRootIno, "a", 1000);
  ASSERT_TRUE(store_->flush_all().ok());
  open_store(true);
  EvictRequest all;
  all.kind = EvictRequest::Kind::kAll;
  all.force = true;
  EXPECT_EQ(admin().evict(all).status().code(), Status::Code::kReadOnly);
  EXPECT_EQ(admin().housekeep(), 0u);
  admin().flush_async();  // nothing to write, and nothing may be
  EXPECT_EQ(admin().stats().files, 1u);
  EXPECT_TRUE(store_->lookup(kRootIno, "a").ok());
}

}  // namespace
}  // namespace kvfs
