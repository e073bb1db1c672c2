// SPDX-License-Identifier: Apache-2.0
// The statistics schema (fs/stats_schema.h) against what is made from it:
// the daemon's JSON, the Prometheus text and the STATISTICS list of
// kvfs-admin(8).
#include "fs/stats_schema.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "fs/prom_text.h"

namespace kvfs {
namespace {

using json = nlohmann::json;

// A snapshot whose every field holds a different value, so that a row
// reading the wrong field shows.
stats::Snapshot distinct_snapshot() {
  stats::Snapshot s;
  uint64_t next = 1000;
  auto fill = [&](auto&... f) { ((f = next += 7), ...); };
  StoreStats& t = s.store;
  fill(t.files, t.dirs, t.inodes, t.logical_bytes, t.segments, t.segment_bytes, t.backing_reads,
       t.backing_read_bytes, t.joined_reads, t.flushed_files, t.flushed_bytes, t.flush_batches,
       t.checksum_errors, t.io_errors, t.enospc_errors, t.dropped_files, t.queued, t.capacity,
       t.live_bytes, t.ram_block_hits, t.negative_lookups, t.file_lookups, t.peer_lookups,
       t.peer_read_bytes, t.peer_imports, t.peer_drops, t.peer_dirs, t.peer_releases,
       t.peer_unlinks, t.peer_unlinks_applied, t.ram_hit_bytes, t.ram_miss_bytes, t.held_block_hits,
       t.held_bytes);
  t.file_lookups += 100000;  // the peer hits are some of these
  fill(t.ram.capacity, t.ram.clean_bytes, t.ram.dirty_bytes, t.ram.entries, t.ram.evictions,
       t.ram.backpressure_waits, t.ram.prefetch_used, t.ram.prefetch_wasted, t.ram.admitted);
  fill(t.prefetch.budget_bytes, t.prefetch.pending_bytes, t.prefetch.queued, t.prefetch.reads,
       t.prefetch.read_bytes, t.prefetch.cancelled, t.prefetch.over_budget, t.prefetch.no_room);
  fill(t.windows.reads, t.windows.read_bytes, t.windows.hits, t.windows.hit_bytes,
       t.windows.mismatches, t.windows.unused);
  fill(t.peers.passes, t.peers.records, t.peers.entries, t.peers.errors);
  PeerNodeStats n;
  n.node = "node-b";
  fill(n.segments, n.segment_bytes, n.files, n.bytes, n.read_bytes, n.behind_bytes, n.max_seq);
  n.lag_s = 0.25;
  t.peers.nodes.push_back(n);
  EvictorStats& e = s.evict;
  fill(e.evicted_capacity, e.evicted_admin, e.evicted_tmp, e.evicted_reclaim, e.evicted_bytes,
       e.dirs_removed, e.segments_deleted, e.segments_retiring, e.retiring_bytes,
       e.reclaim_copied_bytes, e.enospc);
  fill(s.backing.stalls, s.backing.timeouts, s.backing.in_flight);
  s.backing.stalled = true;
  s.backing.stalled_seconds = 1.5;
  s.backing.oldest_s = 2.75;
  fill(s.catch_up.segments, s.catch_up.records, s.catch_up.bytes, s.catch_up.applied);
  s.catch_up.seconds = 0.125;
  s.rebuilt_index = true;
  s.io_timeout_s = 30;
  return s;
}

TEST(StatsSchema, RowsAreWellFormed) {
  std::set<std::string> paths;
  std::map<std::string, stats::Type> family_type;
  std::map<std::string, std::set<std::string>> family_labels;
  const std::regex prom_name("kvfs_[a-z0-9_]+");
  for (const stats::Def& d : stats::defs()) {
    EXPECT_EQ(d.path[0], '/') << d.path;
    EXPECT_TRUE(paths.insert(d.path).second) << "twice: " << d.path;
    EXPECT_GT(std::string(d.help).size(), 10u) << d.path;
    if (!d.prom) continue;
    const std::string p = d.prom;
    EXPECT_TRUE(std::regex_match(p, prom_name)) << p;
    const bool total = p.size() > 6 && p.compare(p.size() - 6, 6, "_total") == 0;
    EXPECT_EQ(total, d.type == stats::Type::kCounter) << p << ": counters, and only they, _total";
    auto [it, fresh] = family_type.emplace(p, d.type);
    EXPECT_TRUE(fresh || it->second == d.type) << p << ": one type per family";
    EXPECT_TRUE(family_labels[p].insert(d.labels).second) << p << ": labels repeat";
  }
  for (const auto& [fam, labels] : family_labels) {
    if (labels.size() > 1) {
      EXPECT_FALSE(labels.count("")) << fam << ": every series of a family needs a label";
    }
    EXPECT_FALSE(stats::family_help(fam).empty()) << fam;
  }
  for (const stats::NodeDef& d : stats::node_defs()) {
    if (d.prom) {
      EXPECT_EQ(family_type.count(d.prom), 0u) << d.prom;
    }
  }
  EXPECT_EQ(stats::find("/ram/used_bytes")->unit, stats::Unit::kBytes);
  EXPECT_EQ(stats::find("/no/such"), nullptr);
}

// Every row reaches the JSON at its path, in the JSON type its unit says,
// with the value its getter reads.
TEST(StatsSchema, JsonHoldsEveryRow) {
  const stats::Snapshot snap = distinct_snapshot();
  const json r = stats::to_json(snap);
  std::set<double> seen;
  for (const stats::Def& d : stats::defs()) {
    const json::json_pointer p(d.path);
    ASSERT_TRUE(r.contains(p)) << d.path;
    const json& v = r.at(p);
    switch (d.unit) {
      case stats::Unit::kFlag: EXPECT_TRUE(v.is_boolean()) << d.path; break;
      case stats::Unit::kSeconds:
      case stats::Unit::kRatio: EXPECT_TRUE(v.is_number_float()) << d.path; break;
      default: EXPECT_TRUE(v.is_number_unsigned()) << d.path;
    }
    double got = -1;
    ASSERT_TRUE(stats::number_at(r, d, &got)) << d.path;
    EXPECT_EQ(got, d.get(snap).d) << d.path;
  }
  // The sums and differences the schema computes.
  EXPECT_EQ(r["ram"]["used_bytes"], snap.store.ram.clean_bytes + snap.store.ram.dirty_bytes);
  EXPECT_EQ(r["backing"]["dir_used_bytes"],
            snap.store.segment_bytes + snap.store.peers.nodes[0].segment_bytes);
  EXPECT_EQ(r["errors"]["enospc"], snap.store.enospc_errors + snap.evict.enospc);
  EXPECT_EQ(r["cache"]["own_file_hits"], snap.store.file_lookups - snap.store.peer_lookups);
  EXPECT_EQ(r["backing"]["stalled"], true);
  EXPECT_EQ(r["backing"]["stalled_flag"], 1u);
  const json& node = r["peers"]["nodes"][0];
  EXPECT_EQ(node["node"], "node-b");
  EXPECT_EQ(node["segments"], snap.store.peers.nodes[0].segments);
  EXPECT_EQ(node["lag_seconds"], 0.25);
  EXPECT_EQ(node.size(), stats::node_defs().size() + 1);
}

// Each exported row is one sample line of its family; a family's HELP and
// TYPE come once, before all of its samples.
TEST(StatsSchema, PrometheusTextHasEveryExportedRow) {
  const stats::Snapshot snap = distinct_snapshot();
  const std::string text = prom::render("/m", stats::to_json(snap), "9.9");
  for (const stats::Def& d : stats::defs()) {
    if (!d.prom) continue;
    const std::string line = std::string(d.prom) + "{mountpoint=\"/m\"" +
                             (*d.labels ? std::string(",") + d.labels : "") + "} " +
                             prom::number(d.get(snap).d) + "\n";
    EXPECT_NE(text.find(line), std::string::npos) << line;
  }
  std::istringstream in(text);
  std::map<std::string, int> helps;
  std::set<std::string> closed;
  std::string current;
  for (std::string l; std::getline(in, l);) {
    if (l.rfind("# HELP ", 0) == 0) {
      const std::string fam = l.substr(7, l.find(' ', 7) - 7);
      EXPECT_EQ(++helps[fam], 1) << fam;
      if (!current.empty()) closed.insert(current);
      current = fam;
      continue;
    }
    if (l.empty() || l[0] == '#') continue;
    const std::string name = l.substr(0, l.find('{'));
    EXPECT_EQ(closed.count(name), 0u) << "samples of " << name << " apart";
    EXPECT_EQ(name.rfind(current, 0), 0u) << l;
  }
  EXPECT_NE(text.find("kvfs_peer_lag_seconds{mountpoint=\"/m\",peer=\"node-b\"} 0.25\n"),
            std::string::npos);
  EXPECT_NE(text.find("# TYPE kvfs_errors_total counter\n"), std::string::npos);
}

// kvfs-admin(8)'s STATISTICS list is the schema's, between its markers.
// KVFS_UPDATE_DOCS=1 rewrites the page.
TEST(StatsSchema, ManPageListsTheSchema) {
  const std::string path = std::string(KVFS_SOURCE_DIR) + "/man/kvfs-admin.8";
  std::ifstream f(path);
  ASSERT_TRUE(f) << path;
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string page = ss.str();
  const std::string begin = ".\\\" BEGIN generated from fs/stats_schema.cc\n";
  const std::string end = ".\\\" END generated\n";
  const size_t b = page.find(begin), e = page.find(end);
  ASSERT_NE(b, std::string::npos);
  ASSERT_NE(e, std::string::npos);
  const std::string want = stats::man_list();
  const std::string have = page.substr(b + begin.size(), e - b - begin.size());
  if (have != want && std::getenv("KVFS_UPDATE_DOCS")) {
    std::ofstream(path) << page.substr(0, b + begin.size()) << want << page.substr(e);
    return;
  }
  EXPECT_EQ(have, want) << "run with KVFS_UPDATE_DOCS=1 to rewrite " << path;
}

}  // namespace
}  // namespace kvfs
