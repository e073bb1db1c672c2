// SPDX-License-Identifier: Apache-2.0
// The Prometheus text format of the daemon's stats (see fs/prom_text.h).
#include "fs/prom_text.h"

#include <cmath>
#include <cstdio>
#include <utility>
#include <vector>

namespace kvfs::prom {

namespace {

using json = nlohmann::json;

struct PromMetric {
  const char* name;
  const char* type;
  const char* help;
  // label set (besides mountpoint) -> JSON pointer into the stats reply
  std::vector<std::pair<std::string, std::string>> series;
  double scale = 1.0;
};

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

const std::vector<PromMetric>& prom_metrics() {
  static const std::vector<PromMetric> m = [] {
    std::vector<PromMetric> v = {
        {"kvfs_files", "gauge", "Regular files in the namespace.", {{"", "/files"}}},
        {"kvfs_directories", "gauge", "Directories in the namespace.", {{"", "/directories"}}},
        {"kvfs_logical_bytes", "gauge", "Sum of the sizes of all files.", {{"", "/logical_bytes"}}},
        {"kvfs_ram_used_bytes",
         "gauge",
         "File data held in the RAM tier (dirty and clean).",
         {{"", "/ram/used_bytes"}}},
        {"kvfs_ram_capacity_bytes",
         "gauge",
         "RAM tier capacity (ram_size).",
         {{"", "/ram/capacity_bytes"}}},
        {"kvfs_ram_dirty_bytes",
         "gauge",
         "RAM tier bytes not yet written to the backing dir.",
         {{"", "/ram/dirty_bytes"}}},
        {"kvfs_ram_clean_bytes",
         "gauge",
         "RAM tier bytes that are cached copies of segment data.",
         {{"", "/ram/clean_bytes"}}},
        {"kvfs_ram_cached_blocks",
         "gauge",
         "Clean blocks in the RAM tier's cache.",
         {{"", "/ram/cached_blocks"}}},
        {"kvfs_ram_evicted_blocks_total",
         "counter",
         "Clean blocks dropped from the RAM tier to make room.",
         {{"", "/ram/evicted_blocks"}}},
        {"kvfs_ram_backpressure_waits_total",
         "counter",
         "Writes that waited for the flushers because RAM was full of dirty data.",
         {{"", "/ram/backpressure_waits"}}},
        {"kvfs_backing_used_bytes",
         "gauge",
         "Bytes of all segment files in the backing dir.",
         {{"", "/backing/used_bytes"}}},
        {"kvfs_backing_stalled",
         "gauge",
         "1 while a call into the backing dir has not returned within io_timeout.",
         {{"", "/backing/stalled_flag"}}},
        {"kvfs_backing_stalls_total",
         "counter",
         "Stalls of the backing dir since mount.",
         {{"", "/backing/stalls"}}},
        {"kvfs_backing_stalled_seconds_total",
         "counter",
         "Time the backing dir has been stalled since mount.",
         {{"", "/backing/stalled_seconds"}}},
        {"kvfs_backing_timeouts_total",
         "counter",
         "Client calls that failed with EIO after io_timeout on a stalled backing dir.",
         {{"", "/backing/timeouts"}}},
        {"kvfs_backing_calls_in_flight",
         "gauge",
         "Calls into the backing dir not yet returned.",
         {{"", "/backing/calls_in_flight"}}},
        {"kvfs_backing_capacity_bytes",
         "gauge",
         "Capacity kvfs may use in the backing dir.",
         {{"", "/backing/capacity_bytes"}}},
        {"kvfs_backing_live_bytes",
         "gauge",
         "Segment bytes that some file still points at.",
         {{"", "/backing/live_bytes"}}},
        {"kvfs_backing_segments",
         "gauge",
         "Segment files in the backing dir.",
         {{"", "/backing/segments"}}},
        {"kvfs_backing_live_ratio",
         "gauge",
         "Live fraction of the segment bytes.",
         {{"", "/backing/live_ratio"}}},
        {"kvfs_backing_read_bytes_total",
         "counter",
         "Bytes read from the backing dir.",
         {{"", "/backing/read_bytes"}}},
        {"kvfs_backing_reads_total",
         "counter",
         "Block reads from the backing dir.",
         {{"", "/backing/reads"}}},
        {"kvfs_backing_written_bytes_total",
         "counter",
         "Bytes written to the backing dir (flushes and reclamation copies).",
         {{"", "/backing/written_bytes"}}},
        // Hits and misses in one unit each: lookups of files (a name found
        // that is a regular file vs a name that does not exist), and bytes
        // handed to readers (from RAM vs read from the backing dir).
        {"kvfs_file_lookups_total",
         "counter",
         "Lookups of file names, by result: hit (a file) or miss (no such name).",
         {{"result=\"hit\"", "/cache/file_hits"}, {"result=\"miss\"", "/cache/file_misses"}}},
        {"kvfs_file_hits_total",
         "counter",
         "File lookups that found a file, by its owner: this node (own) or another node (peer).",
         {{"origin=\"own\"", "/cache/own_file_hits"},
          {"origin=\"peer\"", "/cache/peer_file_hits"}}},
        {"kvfs_peer_read_bytes_total",
         "counter",
         "Bytes returned to readers from files other nodes own.",
         {{"", "/peers/read_bytes"}}},
        {"kvfs_peer_imported_files_total",
         "counter",
         "Files of other nodes made visible here (by lookup or readdir).",
         {{"", "/peers/imported_files"}}},
        {"kvfs_peer_released_files_total",
         "counter",
         "Files of other nodes let go here once nothing referenced them (found again on lookup).",
         {{"", "/peers/released_imports"}}},
        {"kvfs_peer_unlinks_total",
         "counter",
         "Unlinks across nodes: of other nodes' files here (sent), of this node's files by "
         "another node (applied).",
         {{"dir=\"sent\"", "/peers/unlinks_sent"}, {"dir=\"applied\"", "/peers/unlinks_applied"}}},
        {"kvfs_peer_log_pass_errors_total",
         "counter",
         "Passes over the other nodes' segment logs that met an error.",
         {{"", "/peers/pass_errors"}}},
        {"kvfs_read_served_bytes_total",
         "counter",
         "Bytes returned to readers, by the tier that held them (ram: hit, backing: miss).",
         {{"tier=\"ram\"", "/cache/ram_hit_bytes"}, {"tier=\"backing\"", "/cache/ram_miss_bytes"}}},
        {"kvfs_held_block_hits_total",
         "counter",
         "Block reads served by a block their open had read part of before.",
         {{"", "/cache/held_block_hits"}}},
        {"kvfs_held_bytes",
         "gauge",
         "Bytes of blocks open files hold for the rest of a read in pieces.",
         {{"", "/cache/held_bytes"}}},
        {"kvfs_ram_block_hits_total",
         "counter",
         "1 MiB blocks found in the RAM tier by reads.",
         {{"", "/hits/ram"}}},
        {"kvfs_prefetch_reads_total",
         "counter",
         "Blocks read ahead into the RAM tier (a lookup, an open or a cold read of the file).",
         {{"", "/prefetch/reads"}}},
        {"kvfs_prefetch_blocks_total",
         "counter",
         "Blocks read ahead, by fate: used (a client read them), wasted (left RAM unread), "
         "cancelled (evicted or rewritten before the read), over_budget (not queued), "
         "no_room (not read: only blocks written or kept could have made room).",
         {{"fate=\"used\"", "/prefetch/used_blocks"},
          {"fate=\"wasted\"", "/prefetch/wasted_blocks"},
          {"fate=\"cancelled\"", "/prefetch/cancelled_blocks"},
          {"fate=\"over_budget\"", "/prefetch/over_budget_blocks"},
          {"fate=\"no_room\"", "/prefetch/no_room_blocks"}}},
        {"kvfs_prefetch_pending_bytes",
         "gauge",
         "Bytes queued or being read ahead now.",
         {{"", "/prefetch/pending_bytes"}}},
        {"kvfs_prefetch_window_reads_total",
         "counter",
         "Windows of a segment read ahead across files (after a cold read of a file's end).",
         {{"", "/prefetch/window_reads"}}},
        {"kvfs_prefetch_window_hits_total",
         "counter",
         "Blocks served from a segment window (their hash checked), and windows dropped unused.",
         {{"fate=\"hit\"", "/prefetch/window_hits"},
          {"fate=\"mismatch\"", "/prefetch/window_mismatches"},
          {"fate=\"unused_window\"", "/prefetch/windows_unused"}}},
        {"kvfs_joined_reads_total",
         "counter",
         "Cold reads that waited for a read of the same block already in flight.",
         {{"", "/prefetch/joined_reads"}}},
        {"kvfs_dirty_bytes",
         "gauge",
         "Bytes waiting to be flushed to the backing dir.",
         {{"", "/dirty_bytes"}}},
        {"kvfs_flush_queued", "gauge", "Files queued for the flushers.", {{"", "/flush/queued"}}},
        {"kvfs_flush_batches_total",
         "counter",
         "Flush batches (one fdatasync each).",
         {{"", "/flush/batches"}}},
        {"kvfs_flushed_files_total", "counter", "Files flushed.", {{"", "/flush/files"}}},
        {"kvfs_flushed_bytes_total", "counter", "Bytes flushed.", {{"", "/flush/bytes"}}},
        {"kvfs_evicted_files_total",
         "counter",
         "Files evicted, by reason.",
         {{"reason=\"capacity\"", "/evictions/capacity"},
          {"reason=\"admin\"", "/evictions/admin"},
          {"reason=\"tmp\"", "/evictions/tmp"},
          {"reason=\"reclaim\"", "/evictions/reclaim"}}},
        {"kvfs_evicted_bytes_total",
         "counter",
         "Bytes of the files evicted.",
         {{"", "/evictions/bytes"}}},
        {"kvfs_evicted_dirs_total",
         "counter",
         "Directories removed after eviction emptied them.",
         {{"", "/evictions/dirs_removed"}}},
        {"kvfs_segments_deleted_total",
         "counter",
         "Segment files deleted.",
         {{"", "/evictions/segments_deleted"}}},
        {"kvfs_segments_retiring_bytes",
         "gauge",
         "Bytes of reclaimed segments in their grace before deletion (shared dirs).",
         {{"", "/evictions/retiring_bytes"}}},
        {"kvfs_reclaim_copied_bytes_total",
         "counter",
         "Bytes copied forward by segment reclamation.",
         {{"", "/evictions/reclaim_copied_bytes"}}},
        {"kvfs_errors_total",
         "counter",
         "Errors, by kind.",
         {{"kind=\"checksum\"", "/errors/checksum"},
          {"kind=\"io\"", "/errors/io"},
          {"kind=\"enospc\"", "/errors/enospc"}}},
        {"kvfs_dropped_files_total",
         "counter",
         "Files dropped because their data failed a checksum or could not be read.",
         {{"", "/errors/dropped_files"}}},
    };
    return v;
  }();
  return m;
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
  for (const PromMetric& m : prom_metrics()) {
    std::string body;
    for (const auto& [labels, ptr] : m.series) {
      const json::json_pointer p(ptr);
      if (!s.contains(p) || !s.at(p).is_number()) continue;
      body += std::string(m.name) + "{" + ml + (labels.empty() ? "" : "," + labels) + "} " +
              number(s.at(p).get<double>() * m.scale) + "\n";
    }
    if (body.empty()) continue;
    o += std::string("# HELP ") + m.name + " " + m.help + "\n# TYPE " + m.name + " " + m.type +
         "\n" + body;
  }
  // Per peer node: how far behind its log this node is, and what it holds.
  const json::json_pointer pn("/peers/nodes");
  if (s.contains(pn) && s.at(pn).is_array() && !s.at(pn).empty()) {
    struct PeerGauge {
      const char* name;
      const char* key;
      const char* help;
    };
    static const PeerGauge gauges[] = {
        {"kvfs_peer_lag_seconds", "lag_seconds",
         "Seconds since this node last read the whole of a peer's segment log."},
        {"kvfs_peer_behind_bytes", "behind_bytes",
         "Bytes of records a peer has begun and this node has not read complete."},
        {"kvfs_peer_files", "files", "Regular files a peer has, as this node has read its log."},
        {"kvfs_peer_bytes", "bytes", "Bytes of those files."},
        {"kvfs_peer_log_read_bytes", "read_bytes", "Bytes of a peer's segments read so far."},
    };
    for (const PeerGauge& g : gauges) {
      o += std::string("# HELP ") + g.name + " " + g.help + "\n# TYPE " + g.name + " gauge\n";
      for (const json& n : s.at(pn)) {
        if (!n.contains(g.key) || !n[g.key].is_number()) continue;
        o += std::string(g.name) + "{" + ml + ",peer=\"" + escape(n.value("node", "")) + "\"} " +
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
