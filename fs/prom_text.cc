// SPDX-License-Identifier: Apache-2.0
// The Prometheus text format of the daemon's stats (see fs/prom_text.h).
#include "fs/prom_text.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>
#include <vector>

#include "fs/stats_schema.h"

namespace kvfs::prom {

namespace {

using json = nlohmann::json;

std::string escape(const std::string& v) {
  std::string o;
  for (char c : v) {
    if (c == '\\')
      o += "\\\\";
    else if (c == '"')
      o += "\\\"";
    else if (c == '\n')
      o += "\\n";
    else
      o += c;
  }
  return o;
}

}  // namespace

std::string number(double v) {
  if (std::floor(v) == v && std::fabs(v) < 1e15) {
    char b[32];
    std::snprintf(b, sizeof(b), "%.0f", v);
    return b;
  }
  char b[64];
  std::snprintf(b, sizeof(b), "%.9g", v);
  return b;
}

std::string render(const std::string& mnt, const json& s, const std::string& version) {
  std::string o;
  const std::string ml = "mountpoint=\"" + escape(mnt) + "\"";
  o += "# HELP kvfs_up 1 if the kvfs daemon answered.\n# TYPE kvfs_up gauge\n";
  o += "kvfs_up{" + ml + "} 1\n";
  o += "# HELP kvfs_info The kvfs daemon's version.\n# TYPE kvfs_info gauge\n";
  o += "kvfs_info{" + ml + ",version=\"" + escape(version) + "\"} 1\n";
  // One family at a time, in the order of its first row in the schema;
  // its series are the rows that name it, wherever they sit.
  std::vector<std::string_view> done;
  for (const stats::Def& first : stats::defs()) {
    if (!first.prom) continue;
    const std::string_view fam = first.prom;
    if (std::find(done.begin(), done.end(), fam) != done.end()) continue;
    done.push_back(fam);
    std::string body;
    for (const stats::Def& d : stats::defs()) {
      double v = 0;
      if (!d.prom || fam != d.prom || !stats::number_at(s, d, &v)) continue;
      body += std::string(fam) + "{" + ml + (*d.labels ? std::string(",") + d.labels : "") + "} " +
              number(v) + "\n";
    }
    if (body.empty()) continue;
    o += "# HELP " + std::string(fam) + " " + stats::family_help(fam) + "\n# TYPE " +
         std::string(fam) + (first.type == stats::Type::kCounter ? " counter\n" : " gauge\n") +
         body;
  }
  // Per peer node: how far behind its log this node is, and what it holds.
  const json::json_pointer pn("/peers/nodes");
  if (s.contains(pn) && s.at(pn).is_array() && !s.at(pn).empty()) {
    for (const stats::NodeDef& g : stats::node_defs()) {
      if (!g.prom) continue;
      o += std::string("# HELP ") + g.prom + " " + g.help + "\n# TYPE " + g.prom + " gauge\n";
      for (const json& n : s.at(pn)) {
        if (!n.contains(g.key) || !n[g.key].is_number()) continue;
        o += std::string(g.prom) + "{" + ml + ",peer=\"" + escape(n.value("node", "")) + "\"} " +
             number(n[g.key].get<double>()) + "\n";
      }
    }
  }
  // Latencies: one histogram per FUSE operation. Buckets in the JSON are
  // cumulative already (the daemon's snapshot), the last one is +Inf.
  std::string hb;
  for (const char* op : kLatencyOps) {
    const json::json_pointer p(std::string("/latency/") + op);
    if (!s.contains(p)) continue;
    const json& h = s.at(p);
    if (!h.contains("buckets") || !h["buckets"].is_array()) continue;
    const std::string ls = ml + ",op=\"" + op + "\"";
    uint64_t inf = 0;
    for (const json& b : h["buckets"]) {
      const std::string le = b.value("le", std::string());
      inf = b.value("count", uint64_t(0));
      hb += "kvfs_op_latency_seconds_bucket{" + ls + ",le=\"" + le + "\"} " + std::to_string(inf) +
            "\n";
    }
    hb += "kvfs_op_latency_seconds_sum{" + ls + "} " + number(h.value("sum_seconds", 0.0)) + "\n";
    hb += "kvfs_op_latency_seconds_count{" + ls + "} " + std::to_string(inf) + "\n";
  }
  if (!hb.empty())
    o += "# HELP kvfs_op_latency_seconds FUSE operation latency, by operation.\n"
         "# TYPE kvfs_op_latency_seconds histogram\n" +
         hb;
  return o;
}

std::string render_down(const std::string& mnt) {
  return "# HELP kvfs_up 1 if the kvfs daemon answered.\n# TYPE kvfs_up gauge\n"
         "kvfs_up{mountpoint=\"" +
         escape(mnt) + "\"} 0\n";
}

}  // namespace kvfs::prom
