// SPDX-License-Identifier: Apache-2.0
// SegmentStore and SegmentWriter on a real backing directory (no FUSE): what
// a record written and synced reads back as, what a damaged or torn one reads
// as, the locks that keep a second daemon of a node out while other nodes
// share the dir, preallocation, deletion and
// the live-bytes accounting the evictor decides by.
#include "core/segments/segment_store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "core/backing/disk_layout.h"
#include "core/config/config.h"

namespace kvfs {
namespace {

namespace fs = std::filesystem;

class SegmentStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char t[] = "/tmp/kvfs-segs-XXXXXX";
    root_ = ::mkdtemp(t);
    cfg_.backing_dir = root_;
    cfg_.segment_size = 4 << 20;
    auto s = SegmentStore::Open(cfg_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
  }
  void TearDown() override {
    store_.reset();
    fs::remove_all(root_);
  }

  static BufRef block(uint32_t len, char fill) {
    BufRef b = BufferPool::allocate(len);
    std::memset(b->data(), 0, align_up(len));
    std::memset(b->data(), fill, len);
    return b;
  }

  // One kFile record holding `blocks`, its snapshot pointing at them (as
  // the flusher writes it); returns their extents.
  std::vector<Extent> write_file(SegmentWriter& w, uint64_t ino, const std::vector<BufRef>& blocks,
                                 uint32_t len) {
    std::vector<SegmentWriter::Block> bs;
    RecordEntry e;
    e.snap.ino = ino;
    e.snap.seq = ino;
    e.snap.mode = S_IFREG | 0644;
    e.snap.size = uint64_t(blocks.size() - 1) * kBlockSize + len;
    for (size_t i = 0; i < blocks.size(); ++i) {
      bs.push_back({blocks[i], len});
      e.snap.extents.push_back({uint32_t(i), {w.id(), 0, len, hash_bytes(blocks[i]->data(), len)}});
    }
    std::vector<RecordEntry> es{e};
    Status s = w.append(RecordType::kFile, es, bs, [&](const std::vector<uint64_t>& o) {
      for (size_t i = 0; i < o.size(); ++i) es[0].snap.extents[i].ext.off = o[i];
    });
    EXPECT_TRUE(s.ok()) << s.ToString();
    std::vector<Extent> out;
    for (auto& be : es[0].snap.extents) out.push_back(be.ext);
    return out;
  }

  std::string root_;
  StoreConfig cfg_;
  std::unique_ptr<SegmentStore> store_;
};

TEST_F(SegmentStoreTest, SyncedBlocksReadBackAndAreListed) {
  auto w = store_->new_writer();
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  const uint32_t len = 100000;  // not a multiple of 4 KiB
  auto ext = write_file(**w, 7, {block(len, 'a'), block(len, 'b')}, len);
  ASSERT_EQ(ext.size(), 2u);
  ASSERT_TRUE((*w)->sync().ok());
  EXPECT_EQ((*w)->log_state().records, 1u);
  for (int i = 0; i < 2; ++i) {
    BufRef dst = BufferPool::allocate(len);
    ASSERT_TRUE(store_->read_extent(ext[i], dst).ok());
    EXPECT_EQ(std::string(dst->data(), len), std::string(len, i == 0 ? 'a' : 'b'));
  }
  auto l = store_->list();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_TRUE(l[0].open);
  EXPECT_EQ(l[0].valid, (*w)->size());
  // While open, the file is allocated ahead of the writes; closing gives the
  // tail back.
  EXPECT_GE(fs::file_size(l[0].path), (*w)->size());
  const uint64_t size = (*w)->size();
  w->reset();
  EXPECT_EQ(fs::file_size(l[0].path), size);
  EXPECT_FALSE(store_->list()[0].open);
}

TEST_F(SegmentStoreTest, APauseIsCalledBetweenRunsOfWritesAndTheBytesStillLand) {
  auto w = store_->new_writer();
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  int pauses = 0;
  (*w)->set_pause({[] { return true; }, [&] { ++pauses; }});
  std::vector<BufRef> blocks;
  for (int i = 0; i < 20; ++i) blocks.push_back(block(kBlockSize, char('a' + i)));
  auto ext = write_file(**w, 9, blocks, kBlockSize);  // 20 MiB: three runs of writes
  ASSERT_TRUE((*w)->drain().ok());
  EXPECT_GE(pauses, 2);  // before the second and the third (or every 8 MiB of pwrite)
  (*w)->set_pause({});
  const int before = pauses;
  write_file(**w, 10, {block(kBlockSize, 'z')}, kBlockSize);
  ASSERT_TRUE((*w)->sync().ok());
  EXPECT_EQ(pauses, before);
  for (int i = 0; i < 20; ++i) {
    BufRef dst = BufferPool::allocate(kBlockSize);
    ASSERT_TRUE(store_->read_extent(ext[i], dst).ok());
    EXPECT_EQ(std::string(dst->data(), kBlockSize), std::string(kBlockSize, char('a' + i)));
  }
}

TEST_F(SegmentStoreTest, AMetadataRecordTakesItsOwnSizeNotAPreallocationStep) {
  // Metadata records never wait for room under the cap: a new segment
  // opened for one must not take a preallocation step (4 MiB) of it.
  auto w = store_->new_writer();
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  RecordEntry e;
  e.kind = EntryKind::kTombstone;
  e.snap.ino = 9;
  e.snap.seq = 9;
  std::vector<RecordEntry> es{e};
  ASSERT_TRUE((*w)->append(RecordType::kMeta, es, {}, nullptr).ok());
  ASSERT_TRUE((*w)->sync().ok());
  auto l = store_->list();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_TRUE(l[0].open);
  EXPECT_EQ(l[0].bytes, (*w)->size());
  EXPECT_EQ(store_->segment_bytes(), (*w)->size());
  EXPECT_EQ(fs::file_size(l[0].path), (*w)->size());
  EXPECT_LT((*w)->size(), uint64_t(64) << 10);
  // Data after it is still written ahead of a preallocation.
  write_file(**w, 7, {block(4096, 'a')}, 4096);
  ASSERT_TRUE((*w)->sync().ok());
  EXPECT_GE(fs::file_size(l[0].path), store_->prealloc_step());
}

TEST_F(SegmentStoreTest, ADamagedBlockIsCorruptionNeverOtherBytes) {
  auto w = store_->new_writer();
  ASSERT_TRUE(w.ok());
  auto ext = write_file(**w, 7, {block(8192, 'x')}, 8192);
  ASSERT_TRUE((*w)->sync().ok());
  const std::string path = store_->list()[0].path;
  w->reset();
  int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, "y", 1, static_cast<off_t>(ext[0].off + 100)), 1);
  ::close(fd);
  BufRef dst = BufferPool::allocate(8192);
  Status s = store_->read_extent(ext[0], dst);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  // An extent past the end of the file (a segment cut short) is corruption too.
  Extent past = ext[0];
  past.off += 1 << 20;
  EXPECT_EQ(store_->read_extent(past, dst).code(), Status::Code::kCorruption);
}

TEST_F(SegmentStoreTest, ScanStopsQuietlyAtATornTail) {
  auto w = store_->new_writer();
  ASSERT_TRUE(w.ok());
  write_file(**w, 1, {block(4096, 'a')}, 4096);
  ASSERT_TRUE((*w)->sync().ok());
  const uint64_t first_end = (*w)->size();
  write_file(**w, 2, {block(65536, 'b')}, 65536);
  ASSERT_TRUE((*w)->sync().ok());
  const uint64_t id = (*w)->id();
  const std::string path = store_->list()[0].path;
  w->reset();
  // A crash in the middle of the second record's payload.
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(first_end + 8192)), 0);
  std::vector<uint64_t> inos;
  uint64_t valid = 0;
  Status s = store_->scan(
      id,
      [&](uint64_t, const RecordHeader&, std::vector<RecordEntry>& es) {
        for (auto& e : es) inos.push_back(e.snap.ino);
      },
      &valid);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(inos, std::vector<uint64_t>{1});
  EXPECT_EQ(valid, first_end);
}

// A crash can leave a record's header and entries written and its blocks
// not: inside the preallocated file they read as zeros. Only the block check
// (what a catch-up and a rebuild use) sees that the record is not whole; it
// skips that record and keeps the ones after it (a damaged block in the
// middle of a segment must not hide the rest).
TEST_F(SegmentStoreTest, ABlockCheckSkipsARecordWhoseBlocksNeverLanded) {
  auto w = store_->new_writer();
  ASSERT_TRUE(w.ok());
  write_file(**w, 1, {block(4096, 'a')}, 4096);
  auto ext = write_file(**w, 2, {block(65536, 'b'), block(65536, 'c')}, 65536);
  write_file(**w, 3, {block(4096, 'd')}, 4096);
  ASSERT_TRUE((*w)->sync().ok());
  const uint64_t id = (*w)->id(), end = (*w)->size();
  const std::string path = store_->list()[0].path;
  // The writer stays open, as a killed daemon's would: the file keeps its
  // preallocated size. The second block of the second record never landed.
  int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  const std::string zeros(65536, '\0');
  ASSERT_EQ(::pwrite(fd, zeros.data(), zeros.size(), static_cast<off_t>(ext[1].off)), 65536);
  ::close(fd);
  auto inos = [&](SegmentStore::Check c, uint64_t* valid, uint64_t* damaged) {
    std::vector<uint64_t> v;
    EXPECT_TRUE(store_
                    ->scan(
                        id,
                        [&](uint64_t, const RecordHeader&, std::vector<RecordEntry>& es) {
                          for (auto& e : es) v.push_back(e.snap.ino);
                        },
                        valid, 0, c, damaged)
                    .ok());
    return v;
  };
  uint64_t valid = 0, damaged = 0;
  const std::vector<uint64_t> all{1, 2, 3}, whole{1, 3};
  EXPECT_EQ(inos(SegmentStore::Check::kHeaders, &valid, &damaged), all);  // headers look whole
  EXPECT_EQ(damaged, 0u);
  EXPECT_EQ(inos(SegmentStore::Check::kBlocks, &valid, &damaged), whole);
  EXPECT_EQ(damaged, 1u);
  EXPECT_EQ(valid, end);
}

// disk_layout.h's seal: a segment is made writable by its owner, and its
// mode loses every write bit when the writer closes it for good.
mode_t mode_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

TEST_F(SegmentStoreTest, AClosedSegmentIsSealedAndAnOpenOneIsNot) {
  auto w = store_->new_writer();
  ASSERT_TRUE(w.ok());
  write_file(**w, 1, {block(4096, 'a')}, 4096);
  ASSERT_TRUE((*w)->sync().ok());
  const std::string path = store_->list()[0].path;
  EXPECT_EQ(mode_of(path), layout::kSegmentMode);
  EXPECT_FALSE(layout::segment_sealed(mode_of(path)));
  w->reset();
  EXPECT_EQ(mode_of(path), layout::kSealedSegmentMode);
  EXPECT_TRUE(layout::segment_sealed(mode_of(path)));
  // What it holds reads back as before.
  EXPECT_EQ(store_->list()[0].valid, fs::file_size(path));
}

TEST_F(SegmentStoreTest, AMountSealsTheNewestSegmentsACrashLeftOpen) {
  // Twelve closed segments, then made writable again by hand: what a crash
  // (the newest) or a kvfs before seals (all) leaves.
  std::vector<std::string> paths;
  for (int i = 0; i < 12; ++i) {
    auto w = store_->new_writer();
    ASSERT_TRUE(w.ok());
    write_file(**w, 1 + i, {block(4096, 'a' + i)}, 4096);
    ASSERT_TRUE((*w)->sync().ok());
  }
  for (const SegmentInfo& si : store_->list()) {
    ASSERT_EQ(::chmod(si.path.c_str(), layout::kSegmentMode), 0);
    paths.push_back(si.path);
  }
  std::sort(paths.begin(), paths.end());  // by id: the names are fixed-width hex
  store_.reset();
  auto again = SegmentStore::Open(cfg_);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  // The newest eight are sealed; the older four (a peer checks those in
  // turn) are left, so a mount over thousands costs no more than eight.
  for (size_t i = 0; i < paths.size(); ++i)
    EXPECT_EQ(layout::segment_sealed(mode_of(paths[i])), i >= 4) << paths[i];
}

TEST_F(SegmentStoreTest, AReadOnlyMountSealsNothing) {
  {
    auto w = store_->new_writer();
    ASSERT_TRUE(w.ok());
    write_file(**w, 1, {block(4096, 'a')}, 4096);
    ASSERT_TRUE((*w)->sync().ok());
  }
  const std::string path = store_->list().at(0).path;
  ASSERT_EQ(::chmod(path.c_str(), layout::kSegmentMode), 0);  // as a crash leaves it
  store_.reset();
  StoreConfig ro = cfg_;
  ro.read_only = true;
  auto again = SegmentStore::Open(ro);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_FALSE(layout::segment_sealed(mode_of(path)));
}

TEST_F(SegmentStoreTest, ASecondOwnerIsRefusedAndAReopenListsTheSegments) {
  StoreConfig impatient = cfg_;
  impatient.lock_wait_s = 0;  // not mounted anywhere: it would wait for the holder to exit
  auto other = SegmentStore::Open(impatient);
  EXPECT_EQ(other.status().code(), Status::Code::kBusy) << other.status().ToString();
  {
    auto w = store_->new_writer();
    ASSERT_TRUE(w.ok());
    write_file(**w, 1, {block(4096, 'a')}, 4096);
    ASSERT_TRUE((*w)->sync().ok());
  }
  const std::string id = store_->backing_id();
  store_.reset();
  auto again = SegmentStore::Open(cfg_);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ((*again)->backing_id(), id);  // the same dir, known by its super
  ASSERT_EQ((*again)->list().size(), 1u);
  const uint64_t old_id = (*again)->list()[0].id;
  auto w = (*again)->new_writer();
  ASSERT_TRUE(w.ok());
  EXPECT_GT((*w)->id(), old_id);  // ids are never reused
  EXPECT_EQ((*again)->list().size(), 2u);
}

TEST_F(SegmentStoreTest, NodesShareTheDirEachListingOnlyItsOwnSegments) {
  store_.reset();  // SetUp's store owns the dir (no node_id)
  StoreConfig a = cfg_, b = cfg_;
  a.node_id = "n-a";  // '-' in a node name: the id is the last 16 digits
  b.node_id = "other-node";
  a.lock_wait_s = b.lock_wait_s = 0;
  auto na = SegmentStore::Open(a);
  ASSERT_TRUE(na.ok()) << na.status().ToString();
  auto nb = SegmentStore::Open(b);
  ASSERT_TRUE(nb.ok()) << nb.status().ToString();  // another node: no conflict
  EXPECT_TRUE((*na)->shared());
  EXPECT_EQ((*nb)->backing_id(), (*na)->backing_id());
  for (auto* s : {na->get(), nb->get()}) {
    auto w = s->new_writer();
    ASSERT_TRUE(w.ok());
    EXPECT_EQ((*w)->id(), 1u);  // ids are per node: the file names differ
    write_file(**w, 1, {block(4096, s == na->get() ? 'a' : 'b')}, 4096);
    ASSERT_TRUE((*w)->sync().ok());
  }
  ASSERT_EQ((*na)->list().size(), 1u);
  ASSERT_EQ((*nb)->list().size(), 1u);
  EXPECT_EQ(fs::path((*na)->list()[0].path).filename(), layout::segment_name("n-a", 1));
  EXPECT_EQ(fs::path((*nb)->list()[0].path).filename(), layout::segment_name("other-node", 1));
  // A second store of a node is refused while the first holds it.
  auto twin = SegmentStore::Open(b);
  EXPECT_EQ(twin.status().code(), Status::Code::kBusy) << twin.status().ToString();
  EXPECT_NE(twin.status().message().find("node 'other-node'"), std::string::npos);
  nb->reset();
  na->reset();
  auto again = SegmentStore::Open(b);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ASSERT_EQ((*again)->list().size(), 1u);
  EXPECT_EQ(fs::path((*again)->list()[0].path).filename(), layout::segment_name("other-node", 1));
}

// The head (disk_layout.h) names what a node appends to, as its writers
// sync and close; a store without a node_id, or read-only, has none.
TEST_F(SegmentStoreTest, ANodesHeadNamesItsOpenSegmentsAsTheyAreSyncedAndClosed) {
  auto heads = [&] {
    std::vector<std::string> out;
    if (fs::exists(root_ + "/heads"))
      for (auto& e : fs::directory_iterator(root_ + "/heads")) out.push_back(e.path().filename());
    return out;
  };
  EXPECT_TRUE(heads().empty());  // SetUp's store owns the dir: no head
  store_.reset();
  fs::remove_all(root_);
  ASSERT_TRUE(fs::create_directory(root_));
  StoreConfig a = cfg_;
  a.node_id = "na";
  auto s = SegmentStore::Open(a);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(heads(), std::vector<std::string>{"na.1.0"});
  auto w = (*s)->new_writer();
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(heads(), std::vector<std::string>{"na.1.0"});  // nothing complete in it yet
  write_file(**w, 1, {block(4096, 'x')}, 4096);
  ASSERT_TRUE((*w)->sync().ok());
  const uint64_t end = (*w)->size();
  ASSERT_EQ(heads().size(), 1u);
  auto h = layout::parse_head_name(heads()[0]);
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->last_id, 1u);
  EXPECT_EQ(h->open, (std::vector<std::pair<uint64_t, uint64_t>>{{1, end}}));
  w->reset();  // closed (and sealed): out of the head
  h = layout::parse_head_name(heads().at(0));
  ASSERT_TRUE(h.has_value());
  EXPECT_TRUE(h->open.empty());
  EXPECT_EQ(h->last_id, 1u);
  EXPECT_EQ((*s)->head_renames(), 2u);
  s->reset();
  // Read-only: the head stays as the node left it.
  StoreConfig ro = a;
  ro.read_only = true;
  const auto before = heads();
  auto r = SegmentStore::Open(ro);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(heads(), before);
  EXPECT_EQ((*r)->head_renames(), 0u);
}

TEST_F(SegmentStoreTest, NodesStartingTogetherOnAnEmptyDirAgreeOnOneSuperblock) {
  for (int round = 0; round < 20; ++round) {
    char t[] = "/tmp/kvfs-segs-race-XXXXXX";
    const std::string dir = ::mkdtemp(t);
    constexpr int kNodes = 4;
    std::vector<std::unique_ptr<SegmentStore>> stores(kNodes);
    std::vector<std::string> errors(kNodes);
    std::vector<std::thread> ts;
    std::atomic<int> ready{0};
    for (int i = 0; i < kNodes; ++i)
      ts.emplace_back([&, i] {
        ready.fetch_add(1);
        while (ready.load() < kNodes) {
        }  // all at once: the link() race is the point
        StoreConfig c = cfg_;
        c.backing_dir = dir;
        c.node_id = "n" + std::to_string(i);
        auto s = SegmentStore::Open(c);
        if (s.ok())
          stores[i] = std::move(*s);
        else
          errors[i] = s.status().ToString();
      });
    for (auto& t : ts) t.join();
    for (int i = 0; i < kNodes; ++i) {
      ASSERT_TRUE(stores[i]) << errors[i];
      EXPECT_EQ(stores[i]->backing_id(), stores[0]->backing_id()) << "round " << round;
    }
    stores.clear();
    // Only the superblock, the locks, the mark, segments/ and heads/: no tmp
    // file.
    for (auto& e : fs::directory_iterator(dir)) {
      const std::string n = e.path().filename().string();
      EXPECT_TRUE(n == "kvfs.super" || n == "kvfs.lock" || n == "kvfs.shared" || n == "segments" ||
                  n == "heads" ||
                  (n.rfind("kvfs.n", 0) == 0 && n.size() > 5 && n.substr(n.size() - 5) == ".lock"))
          << n;
    }
    fs::remove_all(dir);
  }
}

TEST_F(SegmentStoreTest, AKvfsWithoutNodeIdOwnsTheDirAloneWithEverySegment) {
  StoreConfig node = cfg_;
  node.node_id = "late";
  node.lock_wait_s = 0;
  // SetUp's store (no node_id) holds kvfs.lock exclusively: no node joins.
  auto s = SegmentStore::Open(node);
  EXPECT_EQ(s.status().code(), Status::Code::kBusy);
  EXPECT_NE(s.status().message().find("does not share"), std::string::npos)
      << s.status().ToString();
  EXPECT_FALSE(store_->shared());
  {
    auto w = store_->new_writer();
    ASSERT_TRUE(w.ok());
    write_file(**w, 1, {block(4096, 'a')}, 4096);
    ASSERT_TRUE((*w)->sync().ok());
  }
  store_.reset();
  // A segment of the host's earlier name is the owner's too.
  fs::copy_file(root_ + "/segments/" + layout::segment_name(default_node_id(), 1),
                root_ + "/segments/" + layout::segment_name("oldhost", 7));
  StoreConfig solo = cfg_;
  solo.lock_wait_s = 0;
  auto owner = SegmentStore::Open(solo);
  ASSERT_TRUE(owner.ok()) << owner.status().ToString();
  EXPECT_EQ((*owner)->list().size(), 2u);
  owner->reset();
  // No node may mark such a dir shared (the owner's segments would be lost).
  s = SegmentStore::Open(node);
  EXPECT_EQ(s.status().code(), Status::Code::kInvalid);
  EXPECT_NE(s.status().message().find("without node_id"), std::string::npos)
      << s.status().ToString();
  EXPECT_FALSE(fs::exists(layout::shared_marker_path(root_)));
  // An empty dir the first node marks shared; no kvfs without node_id then.
  fs::remove_all(root_ + "/segments");
  auto first = SegmentStore::Open(node);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(fs::exists(layout::shared_marker_path(root_)));
  auto refused = SegmentStore::Open(solo);
  EXPECT_EQ(refused.status().code(), Status::Code::kInvalid);
  EXPECT_NE(refused.status().message().find("shared by several nodes"), std::string::npos)
      << refused.status().ToString();
  first->reset();
  // A read-only node marks nothing, and joins no dir that a kvfs without
  // node_id owns; a kvfs without node_id starting beside such a node is
  // told at once, not after lock_wait_s.
  fs::remove(layout::shared_marker_path(root_));
  StoreConfig ro = node;
  ro.read_only = true;
  auto reader = SegmentStore::Open(ro);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  EXPECT_FALSE(fs::exists(layout::shared_marker_path(root_)));
  StoreConfig patient = solo;
  patient.lock_wait_s = 30;
  auto beside = SegmentStore::Open(patient);
  EXPECT_EQ(beside.status().code(), Status::Code::kBusy);
  EXPECT_NE(beside.status().message().find("in use by nodes"), std::string::npos)
      << beside.status().ToString();
  reader->reset();
  {
    // Only its name matters to a node deciding whether it may join.
    std::ofstream(root_ + "/segments/" + layout::segment_name("oldhost", 9)) << "x";
  }
  auto joined = SegmentStore::Open(ro);
  EXPECT_EQ(joined.status().code(), Status::Code::kInvalid) << joined.status().ToString();
  fs::remove(root_ + "/segments/" + layout::segment_name("oldhost", 9));
  first = SegmentStore::Open(node);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  // The owner's lock is out of reach while a node holds it shared.
  const int fd = ::open(layout::shared_lock_path(root_).c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  EXPECT_NE(::flock(fd, LOCK_EX | LOCK_NB), 0);
  ::close(fd);
}

TEST_F(SegmentStoreTest, LiveBytesAndDeletion) {
  auto w = store_->new_writer();
  ASSERT_TRUE(w.ok());
  auto ext = write_file(**w, 1, {block(5000, 'a'), block(4096, 'b')}, 5000);
  ASSERT_TRUE((*w)->sync().ok());
  w->reset();
  for (auto& e : ext) store_->add_live(e);
  EXPECT_EQ(store_->live_bytes(), 2 * align_up(5000));
  EXPECT_EQ(store_->list()[0].live, 2 * align_up(5000));
  store_->remove_live(ext[0]);
  store_->remove_live(ext[1]);
  EXPECT_EQ(store_->live_bytes(), 0u);
  const std::string path = store_->forget_segment(ext[0].seg);
  ASSERT_FALSE(path.empty());
  EXPECT_FALSE(store_->has_segment(ext[0].seg));
  BufRef dst = BufferPool::allocate(5000);
  EXPECT_FALSE(store_->read_extent(ext[0], dst).ok());  // no read starts on it
  ASSERT_TRUE(store_->unlink_segment(path).ok());
  EXPECT_FALSE(fs::exists(path));
  EXPECT_EQ(store_->used_bytes(), 0u);
}

}  // namespace
}  // namespace kvfs
