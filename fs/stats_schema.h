// SPDX-License-Identifier: Apache-2.0
// The one schema of the daemon's statistics: every number `kvfs-admin stats`
// shows is one row here (its path in the JSON reply, type, unit, help text,
// Prometheus name and labels, and how it is read from the store's
// snapshots). The daemon's JSON reply, the Prometheus text (fs/prom_text.h),
// `kvfs-admin stats --all` and the STATISTICS section of kvfs-admin(8) are
// all made from it, so a statistic is added in one place and cannot drift
// between them. Per-operation latency histograms are the one structured
// exception (fs/control.cc latency(), kLatencyOps).
//
// Owns nothing mutable: the tables are constants. Thread-safe.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>

#include "core/evict/evictor.h"
#include "core/recovery/recovery.h"
#include "core/store/block_store.h"

namespace kvfs::stats {

enum class Type { kGauge, kCounter };
// kFlag: a yes/no, a JSON bool (0/1 in Prometheus); kRatio: 0..1; the rest
// as named. Integers stay integers in the JSON (scripts compare them).
enum class Unit { kCount, kBytes, kSeconds, kRatio, kFlag };

// Everything the stats are read from, taken once per request so that one
// reply is one moment's view.
struct Snapshot {
  StoreStats store;
  EvictorStats evict;
  BackingIoStats backing;
  CatchUpStats catch_up;
  bool rebuilt_index = false;
  double io_timeout_s = 0;
};

// A value as the JSON holds it: an integer, a real or a bool (by Unit).
struct Value {
  uint64_t u = 0;
  double d = 0;
};

struct Def {
  const char* path;  // JSON pointer into the reply, e.g. "/ram/used_bytes"
  Type type;
  Unit unit;
  const char* help;  // one paragraph of plain text: Prometheus HELP, the man page
  // Prometheus: the metric family (nullptr: not exported) and this series'
  // labels besides mountpoint ("" or e.g. `result="hit"`). A family of
  // several series takes its HELP from family_help().
  const char* prom;
  const char* labels;
  Value (*get)(const Snapshot&);
};

// One field of each object under /peers/nodes (one per peer node).
struct NodeDef {
  const char* key;
  Unit unit;
  const char* help;
  const char* prom;  // a gauge labelled peer="NODE"; nullptr: JSON only
  Value (*get)(const PeerNodeStats&);
};

std::span<const Def> defs();
std::span<const NodeDef> node_defs();
const Def* find(std::string_view path);
// The HELP of a Prometheus family: its own text when it has several series,
// else its one series' help.
std::string family_help(std::string_view prom);

// The reply's statistics (the latency histograms are added by the caller).
nlohmann::json to_json(const Snapshot& s);
// The value at d.path in a reply as a number (a bool as 0/1); false if the
// reply lacks it (an older daemon).
bool number_at(const nlohmann::json& reply, const Def& d, double* out);

const char* unit_name(Unit u);

// The STATISTICS list of kvfs-admin(8), in roff: one entry per row and per
// peer-node field. man/kvfs-admin.8 holds it between two marker lines, and
// a unit test (stats_schema_test) keeps the page equal to it.
std::string man_list();

}  // namespace kvfs::stats
