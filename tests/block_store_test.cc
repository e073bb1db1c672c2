// SPDX-License-Identifier: Apache-2.0
// BlockStore without FUSE: the data path, persistence, rebuild and damage.
#include "core/store/block_store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/backing/disk_layout.h"

namespace kvfs {
namespace {

namespace fs = std::filesystem;

std::string pattern(size_t n, uint64_t seed) {
  std::string s(n, '\0');
  std::mt19937_64 r(seed);
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(r() >> 13);
  return s;
}

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char t[] = "/tmp/kvfs-store-XXXXXX";
    root_ = ::mkdtemp(t);
    fs::create_directories(root_ + "/backing");
    open_store();
  }
  void TearDown() override {
    store_.reset();
    fs::remove_all(root_);
  }
  void open_store(uint64_t ram = 64 << 20, unsigned load_threads = 0) {
    store_.reset();
    StoreConfig c;
    c.load_threads = load_threads;
    c.backing_dir = root_ + "/backing";
    c.index_dir = root_ + "/index";
    c.ram_size = ram;
    c.segment_size = 8 << 20;
    c.flush_batch_bytes = 4 << 20;
    c.prefetch_bytes = prefetch_bytes_;
    auto s = BlockStore::Open(c);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
  }
  void reopen(uint64_t ram = 64 << 20) {
    ASSERT_TRUE(store_->Close().ok());
    open_store(ram);
  }
  uint64_t put(uint64_t parent, const std::string& name, const std::string& data) {
    Attr a;
    auto f = store_->create(parent, name, 0644, O_CREAT | O_WRONLY | O_TRUNC, Caller{}, &a);
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    if (!f.ok()) return 0;
    auto w = store_->write(*f, 0, data.data(), data.size());
    EXPECT_TRUE(w.ok());
    store_->release(*f);
    return a.ino;
  }
  std::string get(uint64_t parent, const std::string& name, Status* st = nullptr) {
    auto a = store_->lookup(parent, name);
    if (!a.ok()) {
      if (st) *st = a.status();
      return "<missing>";
    }
    auto f = store_->open(a->ino, O_RDONLY);
    EXPECT_TRUE(f.ok());
    std::string out;
    ReadResult rr;
    Status s = store_->read(*f, 0, a->size + 10, &rr);
    if (st) *st = s;
    for (auto& v : rr.iov) out.append(static_cast<char*>(v.iov_base), v.iov_len);
    store_->release(*f);
    return s.ok() ? out : "<error>";
  }

  std::string root_;
  uint64_t prefetch_bytes_ = StoreConfig{}.prefetch_bytes;
  std::unique_ptr<BlockStore> store_;
};

TEST_F(StoreTest, WriteReadInRam) {
  std::string d = pattern(3 * kBlockSize + 123, 1);
  put(kRootIno, "a", d);
  EXPECT_EQ(get(kRootIno, "a"), d);
}

TEST_F(StoreTest, SurvivesReopen) {
  auto dir = store_->mkdir(kRootIno, "d", 0750, Caller{1, 2});
  ASSERT_TRUE(dir.ok());
  std::string d1 = pattern(5 * kBlockSize + 7, 2), d2 = pattern(10, 3);
  put(dir->ino, "one", d1);
  put(kRootIno, "two", d2);
  ASSERT_TRUE(store_->setxattr(dir->ino, "user.k", "v", 0).ok());
  reopen();
  auto d = store_->lookup(kRootIno, "d");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->mode & 07777, 0750u);
  EXPECT_EQ(d->uid, 1u);
  EXPECT_EQ(get(d->ino, "one"), d1);
  EXPECT_EQ(get(kRootIno, "two"), d2);
  auto x = store_->getxattr(d->ino, "user.k");
  ASSERT_TRUE(x.ok());
  EXPECT_EQ(*x, "v");
}

// Startup reads ranges of inode numbers on several threads: the tree and
// the data must come back the same as with one, whatever the split.
TEST_F(StoreTest, ParallelStartupLoadsTheSameTree) {
  std::vector<uint64_t> dirs, parent;
  for (int d = 0; d < 7; ++d) {
    auto m = store_->mkdir(kRootIno, "d" + std::to_string(d), 0755, Caller{});
    ASSERT_TRUE(m.ok());
    dirs.push_back(m->ino);
    // Subdirectories made late, so children get lower numbers than some
    // parents' siblings: the ranges cut across the tree.
  }
  for (int i = 0; i < 300; ++i) {
    if (i % 50 == 49) {
      auto m = store_->mkdir(dirs[i % dirs.size()], "sub" + std::to_string(i), 0755, Caller{});
      ASSERT_TRUE(m.ok());
      dirs.push_back(m->ino);
    }
    parent.push_back(dirs[(i * 7) % dirs.size()]);
    put(parent[i], "f" + std::to_string(i), pattern(100 + i, i));
  }
  ASSERT_TRUE(store_->unlink(parent[0], "f0").ok());
  ASSERT_TRUE(store_->flush_all().ok());
  // Every file and directory as (parent, name, ino, size).
  auto tree = [&] {
    std::vector<std::string> out;
    std::vector<uint64_t> todo{kRootIno};
    while (!todo.empty()) {
      uint64_t d = todo.back();
      todo.pop_back();
      auto ls = store_->admin().ls(d);
      EXPECT_TRUE(ls.ok());
      if (!ls.ok()) break;
      for (auto& e : *ls) {
        out.push_back(std::to_string(d) + "/" + e.name + " " + std::to_string(e.ino) + " " +
                      std::to_string(e.size));
        if (S_ISDIR(e.mode)) todo.push_back(e.ino);
      }
    }
    std::sort(out.begin(), out.end());
    return out;
  };
  auto before = tree();
  ASSERT_EQ(before.size(), 7u + 6u + 299u);
  auto max_ino = [&] {
    uint64_t m = 0;
    for (auto& line : before)
      m = std::max<uint64_t>(m, std::stoull(line.substr(line.find(' ') + 1)));
    return m;
  };
  for (unsigned threads : {1u, 3u, 8u}) {
    ASSERT_TRUE(store_->Close().ok());
    open_store(64 << 20, threads);
    EXPECT_EQ(tree(), before) << threads << " threads";
    for (int i = 1; i < 300; i += 37)
      EXPECT_EQ(get(parent[i], "f" + std::to_string(i)), pattern(100 + i, i))
          << threads << " threads";
    Status st;
    EXPECT_EQ(get(parent[0], "f0", &st), "<missing>");
    // New inodes get numbers above every loaded one.
    EXPECT_GT(put(kRootIno, "new" + std::to_string(threads), "x"), max_ino());
    ASSERT_TRUE(store_->flush_all().ok());
    before = tree();
  }
}

TEST_F(StoreTest, IndexRebuiltFromSegments) {
  std::string d1 = pattern(2 * kBlockSize, 4);
  put(kRootIno, "keep", d1);
  put(kRootIno, "gone", "x");
  put(kRootIno, "old", "renamed");
  ASSERT_TRUE(store_->flush_all().ok());
  ASSERT_TRUE(store_->unlink(kRootIno, "gone").ok());
  ASSERT_TRUE(store_->rename(kRootIno, "old", kRootIno, "new", 0).ok());
  ASSERT_TRUE(store_->Close().ok());
  store_.reset();
  fs::remove_all(root_ + "/index");
  open_store();
  EXPECT_TRUE(store_->rebuilt_index());
  EXPECT_EQ(get(kRootIno, "keep"), d1);
  EXPECT_EQ(get(kRootIno, "new"), "renamed");
  Status st;
  EXPECT_EQ(get(kRootIno, "gone", &st), "<missing>");
  EXPECT_EQ(get(kRootIno, "old", &st), "<missing>");
}

// FIFOs, sockets and device nodes are inodes without data: committed at
// creation like a directory, then changed, renamed and removed like any
// other, from the index and from the segments alone.
TEST_F(StoreTest, SpecialFilesSurviveReopenAndRebuild) {
  const Caller c{1000, 100};
  auto fifo = store_->mknod(kRootIno, "fifo", S_IFIFO | 0640, 0, c);
  ASSERT_TRUE(fifo.ok()) << fifo.status().ToString();
  EXPECT_EQ(fifo->rdev, 0u);
  auto chr = store_->mknod(kRootIno, "chr", S_IFCHR | 0600, 0x88012c, c);
  ASSERT_TRUE(chr.ok());
  EXPECT_EQ(chr->rdev, 0x88012cu);
  ASSERT_TRUE(store_->mknod(kRootIno, "blk", S_IFBLK | 0660, 0x700, c).ok());
  ASSERT_TRUE(store_->mknod(kRootIno, "sock", S_IFSOCK | 0755, 0, c).ok());
  ASSERT_TRUE(store_->mknod(kRootIno, "gone", S_IFIFO | 0600, 0, c).ok());
  // The device number of anything but a device means nothing: not kept.
  auto odd = store_->mknod(kRootIno, "odd", S_IFIFO | 0600, 1234, c);
  ASSERT_TRUE(odd.ok());
  EXPECT_EQ(odd->rdev, 0u);
  EXPECT_EQ(store_->mknod(kRootIno, "fifo", S_IFIFO | 0600, 0, c).status().code(),
            Status::Code::kExists);
  EXPECT_FALSE(store_->mknod(kRootIno, "bad", 0170000 | 0600, 0, c).ok());
  SetAttrRequest r;
  r.set_mode = true;
  r.mode = 0604;
  r.set_uid = true;
  r.uid = 7;
  ASSERT_TRUE(store_->setattr(chr->ino, r, nullptr).ok());
  ASSERT_TRUE(store_->rename(kRootIno, "blk", kRootIno, "blk2", 0).ok());
  ASSERT_TRUE(store_->unlink(kRootIno, "gone").ok());
  auto check = [&](const char* when) {
    SCOPED_TRACE(when);
    auto f = store_->lookup(kRootIno, "fifo");
    ASSERT_TRUE(f.ok());
    EXPECT_EQ(f->mode, S_IFIFO | 0640u);
    EXPECT_EQ(f->uid, 1000u);
    EXPECT_EQ(f->gid, 100u);
    auto d = store_->lookup(kRootIno, "chr");
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->mode, S_IFCHR | 0604u);
    EXPECT_EQ(d->uid, 7u);
    EXPECT_EQ(d->rdev, 0x88012cu);
    auto b = store_->lookup(kRootIno, "blk2");
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(b->mode, S_IFBLK | 0660u);
    EXPECT_EQ(b->rdev, 0x700u);
    auto s = store_->lookup(kRootIno, "sock");
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->mode, S_IFSOCK | 0755u);
    EXPECT_FALSE(store_->lookup(kRootIno, "blk").ok());
    EXPECT_FALSE(store_->lookup(kRootIno, "gone").ok());
    std::map<std::string, uint32_t> types;
    ASSERT_TRUE(store_
                    ->readdir(kRootIno, 2,
                              [&](std::string_view n, uint64_t, uint32_t mode, uint64_t) {
                                types[std::string(n)] = mode;
                                return true;
                              })
                    .ok());
    EXPECT_EQ(types, (std::map<std::string, uint32_t>{{"blk2", S_IFBLK},
                                                      {"chr", S_IFCHR},
                                                      {"fifo", S_IFIFO},
                                                      {"odd", S_IFIFO},
                                                      {"sock", S_IFSOCK}}));
  };
  check("in memory");
  reopen();
  check("after reopen");
  ASSERT_TRUE(store_->Close().ok());
  store_.reset();
  fs::remove_all(root_ + "/index");
  open_store();
  EXPECT_TRUE(store_->rebuilt_index());
  check("after rebuilding the index from the segments");
}

// A file a client removed stays readable through the inode the kernel still
// holds (an open that resolved the name just before the unlink or the
// rename), as on a local filesystem; its data goes when the kernel forgets
// it. An evicted file is different: its data is gone, so a reader misses and
// a writer gets ESTALE (the VFS looks the name up again and creates it).
TEST_F(StoreTest, RemovedFileOpensUntilTheKernelForgetsIt) {
  const std::string d = pattern(kBlockSize + 5, 9);
  const uint64_t victim = put(kRootIno, "victim", d);
  const uint64_t unlinked = put(kRootIno, "unlinked", "old bytes");
  put(kRootIno, "tmp", "new");
  ASSERT_TRUE(store_->rename(kRootIno, "tmp", kRootIno, "victim", 0).ok());
  ASSERT_TRUE(store_->unlink(kRootIno, "unlinked").ok());
  EXPECT_EQ(get(kRootIno, "victim"), "new");
  for (uint64_t ino : {victim, unlinked}) {
    auto f = store_->open(ino, O_RDWR | O_TRUNC);
    ASSERT_TRUE(f.ok()) << ino << ": " << f.status().ToString();
    store_->release(*f);
  }
  auto f = store_->open(victim, O_RDONLY);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ReadResult rr;
  ASSERT_TRUE(store_->read(*f, 0, d.size(), &rr).ok());
  EXPECT_EQ(rr.bytes, 0u) << "the O_TRUNC above emptied the removed file";
  store_->release(*f);
  // The kernel lets go: nothing can open the removed inodes any more.
  store_->forget(victim, UINT64_MAX);
  store_->forget(unlinked, UINT64_MAX);
  EXPECT_EQ(store_->open(victim, O_RDONLY).status().code(), Status::Code::kNotFound);
  EXPECT_EQ(store_->open(unlinked, O_WRONLY).status().code(), Status::Code::kNotFound);

  const uint64_t evicted = put(kRootIno, "evicted", d);
  EvictRequest r;
  r.kind = EvictRequest::Kind::kPath;
  r.ino = evicted;
  r.force = true;
  auto res = store_->admin().evict(r);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  ASSERT_EQ(res->files, 1u);
  EXPECT_EQ(store_->open(evicted, O_RDONLY).status().code(), Status::Code::kNotFound);
  EXPECT_EQ(store_->open(evicted, O_WRONLY | O_TRUNC).status().code(), Status::Code::kStale);
}

TEST_F(StoreTest, ColdReadsComeFromSegments) {
  // 32 MiB of data through a 16 MiB RAM tier.
  std::vector<std::string> data;
  for (int i = 0; i < 8; ++i) {
    data.push_back(pattern(4 * kBlockSize, 10 + i));
    put(kRootIno, "f" + std::to_string(i), data.back());
  }
  reopen(16 << 20);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(get(kRootIno, "f" + std::to_string(i)), data[i]);
  auto st = store_->admin().stats();
  EXPECT_GT(st.backing_reads, 0u);
  EXPECT_LE(st.ram.clean_bytes + st.ram.dirty_bytes, 16u << 20);
}

// One load that reads a block in pieces (NIXL's parallel extents, a header
// then the payload) reads it from the segment once, even when the RAM tier
// lets it go between the pieces (a small tier, many loads at once): its open
// holds the block for the rest.
TEST_F(StoreTest, ABlockReadInPiecesIsReadFromTheSegmentOnceThoughRamLetsItGo) {
  const std::string d = pattern(kBlockSize, 30);
  const uint64_t ino = put(kRootIno, "f", d);
  prefetch_bytes_ = 0;  // nothing read ahead: each read below is the client's
  reopen(16 << 20);
  auto tier_of_f = [&] {
    auto ls = store_->admin().ls(kRootIno);
    EXPECT_TRUE(ls.ok());
    if (!ls.ok()) return std::string("?");
    for (const LsEntry& e : *ls)
      if (e.name == "f") return e.tier;
    return std::string("?");
  };
  auto piece = [&](OpenFile* h, uint64_t off, uint64_t len) {
    ReadResult rr;
    EXPECT_TRUE(store_->read(h, off, len, &rr).ok());
    std::string out;
    for (auto& v : rr.iov) out.append(static_cast<char*>(v.iov_base), v.iov_len);
    return out;
  };
  auto f = store_->open(ino, O_RDWR);  // as the NIXL adapter opens a load
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(piece(*f, 0, kBlockSize / 4), d.substr(0, kBlockSize / 4));
  EXPECT_EQ(store_->admin().stats().held_bytes, kBlockSize);
  // Newer data through the 16 MiB tier: f's block leaves RAM.
  put(kRootIno, "new", pattern(24 * kBlockSize, 31));
  ASSERT_EQ(tier_of_f(), "backing");
  const uint64_t reads = store_->admin().stats().backing_reads;
  EXPECT_EQ(piece(*f, kBlockSize / 4, kBlockSize), d.substr(kBlockSize / 4));
  EXPECT_EQ(store_->admin().stats().backing_reads, reads) << "the rest of the block crossed again";
  EXPECT_EQ(store_->admin().stats().held_block_hits, 1u);
  // Another open reads it again: the RAM tier had let it go.
  auto g = store_->open(ino, O_RDONLY);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(piece(*g, kBlockSize / 4, kBlockSize), d.substr(kBlockSize / 4));
  EXPECT_EQ(store_->admin().stats().backing_reads, reads + 1);
  store_->release(*f);
  store_->release(*g);
  EXPECT_EQ(store_->admin().stats().held_bytes, 0u);
}

TEST_F(StoreTest, WritesLargerThanRamAreNotLost) {
  reopen(16 << 20);
  std::string d = pattern(40 * kBlockSize, 20);
  Attr a;
  auto f = store_->create(kRootIno, "big", 0644, O_CREAT | O_WRONLY, Caller{}, &a);
  ASSERT_TRUE(f.ok());
  for (size_t off = 0; off < d.size(); off += kBlockSize)
    ASSERT_TRUE(store_->write(*f, off, d.data() + off, kBlockSize).ok());
  EXPECT_LE(store_->admin().stats().ram.dirty_bytes, 17u << 20);
  store_->release(*f);
  EXPECT_EQ(get(kRootIno, "big"), d);
  reopen(16 << 20);
  EXPECT_EQ(get(kRootIno, "big"), d);
}

TEST_F(StoreTest, CorruptSegmentGivesEioAndDropsTheFile) {
  std::string d = pattern(3 * kBlockSize, 30), other = pattern(100, 31);
  put(kRootIno, "victim", d);
  ASSERT_TRUE(store_->flush_all().ok());
  put(kRootIno, "other", other);
  ASSERT_TRUE(store_->Close().ok());
  store_.reset();
  // Flip a byte in the middle of the largest segment (the victim's data).
  std::string seg;
  uintmax_t best = 0;
  for (auto& e : fs::directory_iterator(layout::segment_dir(root_ + "/backing")))
    if (e.file_size() > best) best = e.file_size(), seg = e.path();
  ASSERT_GT(best, 2 * kBlockSize);
  {
    std::fstream f(seg, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(best / 2));
    char c;
    f.read(&c, 1);
    c ^= 0x5a;
    f.seekp(static_cast<std::streamoff>(best / 2));
    f.write(&c, 1);
  }
  // Without read-ahead: a block read ahead meets the damage too, and counts
  // it, before or after the client's read (each read that fails is counted).
  prefetch_bytes_ = 0;
  open_store();
  Status st;
  EXPECT_EQ(get(kRootIno, "victim", &st), "<error>");
  EXPECT_EQ(st.code(), Status::Code::kIOError);
  EXPECT_FALSE(store_->lookup(kRootIno, "victim").ok()) << "a damaged file must become a miss";
  EXPECT_EQ(get(kRootIno, "other"), other);
  EXPECT_EQ(store_->admin().stats().checksum_errors, 1u);
}

TEST_F(StoreTest, TruncateIntoAFlushedBlock) {
  std::string d = pattern(2 * kBlockSize + 500, 40);
  uint64_t ino = put(kRootIno, "t", d);
  ASSERT_TRUE(store_->flush_all().ok());
  SetAttrRequest r;
  r.set_size = true;
  r.size = kBlockSize + 10;
  ASSERT_TRUE(store_->setattr(ino, r, nullptr).ok());
  r.size = 2 * kBlockSize;
  ASSERT_TRUE(store_->setattr(ino, r, nullptr).ok());
  std::string want = d.substr(0, kBlockSize + 10) + std::string(kBlockSize - 10, '\0');
  EXPECT_EQ(get(kRootIno, "t"), want);
  reopen();
  EXPECT_EQ(get(kRootIno, "t"), want);
}

TEST_F(StoreTest, RenameOverCommittedTargetSurvivesReopen) {
  put(kRootIno, "dest", "old contents");
  ASSERT_TRUE(store_->flush_all().ok());
  put(kRootIno, "dest.tmp", "new contents");
  ASSERT_TRUE(store_->rename(kRootIno, "dest.tmp", kRootIno, "dest", 0).ok());
  reopen();
  EXPECT_EQ(get(kRootIno, "dest"), "new contents");
  Status st;
  EXPECT_EQ(get(kRootIno, "dest.tmp", &st), "<missing>");
}

TEST_F(StoreTest, FsyncMakesOneFileDurable) {
  Attr a;
  auto f = store_->create(kRootIno, "s", 0600, O_CREAT | O_WRONLY, Caller{}, &a);
  ASSERT_TRUE(f.ok());
  std::string d = pattern(kBlockSize + 3, 50);
  ASSERT_TRUE(store_->write(*f, 0, d.data(), d.size()).ok());
  ASSERT_TRUE(store_->fsync(a.ino).ok());
  EXPECT_EQ(store_->admin().stats().flushed_files, 1u);
  store_->release(*f);
}

TEST_F(StoreTest, NamesAndErrors) {
  Attr a;
  std::string n255(255, 'x'), n256(256, 'x');
  auto f = store_->create(kRootIno, n255, 0644, O_CREAT | O_EXCL | O_WRONLY, Caller{}, &a);
  ASSERT_TRUE(f.ok());
  store_->release(*f);
  EXPECT_EQ(store_->create(kRootIno, n255, 0644, O_CREAT | O_EXCL, Caller{}, &a).status().code(),
            Status::Code::kExists);
  EXPECT_EQ(store_->create(kRootIno, n256, 0644, O_CREAT, Caller{}, &a).status().code(),
            Status::Code::kNameTooLong);
  ASSERT_TRUE(store_->mkdir(kRootIno, "d", 0755, Caller{}).ok());
  auto d = store_->lookup(kRootIno, "d");
  ASSERT_TRUE(store_->mkdir(d->ino, "e", 0755, Caller{}).ok());
  EXPECT_EQ(store_->rmdir(kRootIno, "d").code(), Status::Code::kNotEmpty);
  EXPECT_EQ(store_->rename(kRootIno, "d", d->ino, "inside", 0).code(), Status::Code::kInvalid);
  EXPECT_EQ(store_->unlink(kRootIno, "d").code(), Status::Code::kIsDir);
  EXPECT_EQ(store_->rmdir(kRootIno, n255).code(), Status::Code::kNotDir);
}

}  // namespace
}  // namespace kvfs
