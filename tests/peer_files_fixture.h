// SPDX-License-Identifier: Apache-2.0
// The fixture of the tests of nodes sharing one backing dir
// (peer_files_test.cc, peer_imports_test.cc): BlockStores of several
// node_ids in one process over one dir, each with its own index, the peers'
// logs read by poll_peers() (what the poll thread does) so that nothing
// waits on time.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>

#include "core/backing/disk_layout.h"
#include "core/store/block_store.h"
#include "core/util/clock.h"

namespace kvfs {

namespace fs = std::filesystem;
inline constexpr size_t kMiB = 1 << 20;

inline std::string pattern(size_t n, uint64_t seed) {
  std::string s(n, '\0');
  std::mt19937_64 r(seed);
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(r() >> 13);
  return s;
}

class PeerFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char t[] = "/tmp/kvfs-peers-XXXXXX";
    root_ = ::mkdtemp(t);
    fs::create_directories(root_ + "/backing");
  }
  void TearDown() override {
    for (auto& [n, s] : nodes_)
      if (s) {
        EXPECT_TRUE(s->Close().ok());
      }
    nodes_.clear();
    fs::remove_all(root_);
  }
  // capacity 0: the default below.
  BlockStore& node(const std::string& id, uint64_t capacity = 0, double segment_grace = 5) {
    auto& s = nodes_[id];
    if (!s) {
      StoreConfig c;
      c.backing_dir = root_ + "/backing";
      c.index_dir = root_ + "/index." + id;
      c.node_id = id;
      c.ram_size = 64 << 20;
      c.ram_prefault = 0;
      c.segment_size = 8 << 20;
      c.flush_batch_bytes = 4 << 20;
      c.capacity = capacity ? capacity : 256 << 20;
      if (capacity) c.evict_grace_s = 0;  // the tests that give one evict
      c.peer_poll_s = 60;                 // the tests poll themselves
      c.segment_grace_s = segment_grace;
      auto r = BlockStore::Open(c, &clock_);
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      if (r.ok()) s = std::move(*r);
    }
    return *s;
  }
  void close(const std::string& id) {
    ASSERT_TRUE(nodes_[id]->Close().ok());
    nodes_.erase(id);
  }
  static uint64_t put(BlockStore& s, uint64_t parent, const std::string& name,
                      const std::string& data) {
    Attr a;
    auto f = s.create(parent, name, 0644, O_CREAT | O_WRONLY | O_TRUNC, Caller{}, &a);
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    if (!f.ok()) return 0;
    EXPECT_TRUE(s.write(*f, 0, data.data(), data.size()).ok());
    EXPECT_TRUE(s.closed(*f).ok());
    s.release(*f);
    EXPECT_TRUE(s.flush_all().ok());
    return a.ino;
  }
  static uint64_t dir(BlockStore& s, uint64_t parent, const std::string& name) {
    auto a = s.lookup(parent, name);
    if (a.ok()) return a->ino;
    auto m = s.mkdir(parent, name, 0755, Caller{});
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.ok() ? m->ino : 0;
  }
  // The file's bytes, "<missing>" or "<error CODE>".
  static std::string get(BlockStore& s, uint64_t parent, const std::string& name) {
    auto a = s.lookup(parent, name);
    if (!a.ok()) return "<missing>";
    auto f = s.open(a->ino, O_RDONLY);
    if (!f.ok()) return "<error " + f.status().ToString() + ">";
    ReadResult rr;
    Status st = s.read(*f, 0, a->size + 10, &rr);
    std::string out;
    for (auto& v : rr.iov) out.append(static_cast<char*>(v.iov_base), v.iov_len);
    s.release(*f);
    s.forget(a->ino, 1);
    return st.ok() ? out : "<error " + st.ToString() + ">";
  }
  static std::set<std::string> names(BlockStore& s, uint64_t dir) {
    std::set<std::string> out;
    EXPECT_TRUE(s.readdir(dir, 0, [&](std::string_view n, uint64_t, uint32_t, uint64_t) {
                   if (n != "." && n != "..") out.insert(std::string(n));
                   return true;
                 }).ok());
    return out;
  }
  // The node's largest segment (the one with the data).
  std::string seg_of(const std::string& id) {
    std::string best;
    uintmax_t most = 0;
    for (auto& e : fs::directory_iterator(layout::segment_dir(root_ + "/backing"))) {
      auto p = layout::parse_segment_name(e.path().filename().string());
      if (p && p->node == id && e.file_size() > most) most = e.file_size(), best = e.path();
    }
    return best;
  }

  // The names of node id's live segment files.
  std::set<std::string> segments_of(const std::string& id) {
    std::set<std::string> out;
    for (auto& e : fs::directory_iterator(layout::segment_dir(root_ + "/backing"))) {
      auto p = layout::parse_segment_name(e.path().filename().string());
      if (p && p->node == id) out.insert(e.path().filename().string());
    }
    return out;
  }

  // The segment files of node id in their grace before deletion.
  int retired_of(const std::string& id) {
    int n = 0;
    for (auto& e : fs::directory_iterator(layout::segment_dir(root_ + "/backing"))) {
      auto p = layout::parse_retired_segment_name(e.path().filename().string());
      if (p && p->node == id) ++n;
    }
    return n;
  }

  std::string root_;
  ManualClock clock_;
  std::map<std::string, std::unique_ptr<BlockStore>> nodes_;
};

}  // namespace kvfs
