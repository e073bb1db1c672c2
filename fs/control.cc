// SPDX-License-Identifier: Apache-2.0
#include "fs/control.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/block_store.h"
#include "core/log.h"
#include "fs/errno_map.h"
#include "fs/option_table.h"
#include "fs/options.h"
#include "fs/prom_text.h"

namespace kvfs {
namespace {

using json = nlohmann::json;

// The "type" of an `ls` entry (kvfs-admin ls, kvfs(8)).
const char* type_name(uint32_t mode) {
  switch (mode & S_IFMT) {
    case S_IFDIR: return "dir";
    case S_IFLNK: return "symlink";
    case S_IFIFO: return "fifo";
    case S_IFSOCK: return "socket";
    case S_IFCHR: return "chardev";
    case S_IFBLK: return "blockdev";
    default: return "file";
  }
}

json error(const Status& s) {
  return json{{"error", s.message().empty() ? s.ToString() : s.message()}, {"errno", to_errno(s)}};
}

// p50/p99 for people (kvfs-admin's table, bench/); cumulative fixed buckets
// and the sum for Prometheus. "le" is a string so that "+Inf" fits in JSON.
json latency(const LatencyHistogram& h) {
  const PromSnapshot snap = h.prom_snapshot();
  json buckets = json::array();
  for (size_t i = 0; i < snap.cumulative.size(); ++i)
    buckets.push_back({{"le", i < kPromBounds.size() ? prom::number(kPromBounds[i] / 1e9) : "+Inf"},
                       {"count", snap.cumulative[i]}});
  return json{{"count", h.count()},
              {"p50_us", h.percentile_ns(0.50) / 1000.0},
              {"p99_us", h.percentile_ns(0.99) / 1000.0},
              {"sum_seconds", snap.sum_ns / 1e9},
              {"buckets", buckets}};
}

// The other nodes of a shared backing dir, as this node follows them.
json peers_json(const StoreStats& s) {
  json nodes = json::array();
  for (const PeerNodeStats& n : s.peers.nodes)
    nodes.push_back({{"node", n.node},
                     {"segments", n.segments},
                     {"segment_bytes", n.segment_bytes},
                     {"files", n.files},
                     {"bytes", n.bytes},
                     {"read_bytes", n.read_bytes},
                     {"behind_bytes", n.behind_bytes},
                     {"lag_seconds", n.lag_s},
                     {"max_seq", n.max_seq}});
  return {{"file_hits", s.peer_lookups},
          {"read_bytes", s.peer_read_bytes},
          {"imported_files", s.peer_imports},
          {"dropped_imports", s.peer_drops},
          {"released_imports", s.peer_releases},
          {"unlinks_sent", s.peer_unlinks},
          {"unlinks_applied", s.peer_unlinks_applied},
          {"dirs_made", s.peer_dirs},
          {"passes", s.peers.passes},
          {"records", s.peers.records},
          {"entries", s.peers.entries},
          {"pass_errors", s.peers.errors},
          {"nodes", nodes}};
}

json stats_json(BlockStore& st, OpLatencies& lat) {
  StoreStats s = st.stats();
  EvictorStats e = st.evictor_stats();
  uint64_t dir_used = s.segment_bytes;
  for (const PeerNodeStats& n : s.peers.nodes) dir_used += n.segment_bytes;
  const BackingIoStats b = st.backing_io_stats();
  const uint64_t ram_used = s.ram.clean_bytes + s.ram.dirty_bytes;
  return json{
      {"files", s.files},
      {"directories", s.dirs},
      {"logical_bytes", s.logical_bytes},
      {"ram",
       {{"used_bytes", ram_used},
        {"capacity_bytes", s.ram.capacity},
        {"dirty_bytes", s.ram.dirty_bytes},
        {"clean_bytes", s.ram.clean_bytes},
        {"cached_blocks", s.ram.entries},
        {"evicted_blocks", s.ram.evictions},
        {"admitted_blocks", s.ram.admitted},
        {"backpressure_waits", s.ram.backpressure_waits}}},
      {"backing",
       {{"used_bytes", s.segment_bytes},
        // This node's segments and every peer's: the whole shared dir.
        {"dir_used_bytes", dir_used},
        {"capacity_bytes", s.capacity},
        {"live_bytes", s.live_bytes},
        {"segments", s.segments},
        {"live_ratio", s.segment_bytes ? double(s.live_bytes) / double(s.segment_bytes) : 1.0},
        {"read_bytes", s.backing_read_bytes},
        {"reads", s.backing_reads},
        {"written_bytes", s.flushed_bytes + e.reclaim_copied_bytes},
        // A stalled backing dir: some call into it has not returned within
        // io_timeout (stalled_flag is the same as a number, for Prometheus).
        {"stalled", b.stalled},
        {"stalled_flag", b.stalled ? 1 : 0},
        {"stalls", b.stalls},
        {"stalled_seconds", b.stalled_seconds},
        {"timeouts", b.timeouts},
        {"calls_in_flight", b.in_flight},
        {"oldest_call_seconds", b.oldest_s},
        {"io_timeout", st.io_timeout()}}},
      // hits (1 MiB blocks) and misses (lookups) predate "cache" and count
      // different things; they stay for existing readers (bench/, tests).
      {"hits", {{"ram", s.ram_block_hits}, {"backing", s.backing_reads}}},
      {"misses", s.negative_lookups},
      {"cache",
       {{"file_hits", s.file_lookups},
        {"file_misses", s.negative_lookups},
        // Hits by origin: files this node owns, files a peer owns.
        {"own_file_hits", s.file_lookups - std::min(s.file_lookups, s.peer_lookups)},
        {"peer_file_hits", s.peer_lookups},
        {"ram_hit_bytes", s.ram_hit_bytes},
        {"ram_miss_bytes", s.ram_miss_bytes},
        {"held_block_hits", s.held_block_hits},
        {"held_bytes", s.held_bytes}}},
      {"prefetch",
       {{"budget_bytes", s.prefetch.budget_bytes},
        {"pending_bytes", s.prefetch.pending_bytes},
        {"queued_blocks", s.prefetch.queued},
        {"reads", s.prefetch.reads},
        {"read_bytes", s.prefetch.read_bytes},
        {"used_blocks", s.ram.prefetch_used},
        {"wasted_blocks", s.ram.prefetch_wasted},
        {"cancelled_blocks", s.prefetch.cancelled},
        {"over_budget_blocks", s.prefetch.over_budget},
        {"no_room_blocks", s.prefetch.no_room},
        {"joined_reads", s.joined_reads},
        // Read-ahead along segments, across files (segment_windows.h).
        {"window_reads", s.windows.reads},
        {"window_read_bytes", s.windows.read_bytes},
        {"window_hits", s.windows.hits},
        {"window_hit_bytes", s.windows.hit_bytes},
        {"window_mismatches", s.windows.mismatches},
        {"windows_unused", s.windows.unused}}},
      {"peers", peers_json(s)},
      {"dirty_bytes", s.ram.dirty_bytes},
      {"flush",
       {{"queued", s.queued},
        {"batches", s.flush_batches},
        {"files", s.flushed_files},
        {"bytes", s.flushed_bytes}}},
      {"evictions",
       {{"capacity", e.evicted_capacity},
        {"admin", e.evicted_admin},
        {"tmp", e.evicted_tmp},
        {"reclaim", e.evicted_reclaim},
        {"bytes", e.evicted_bytes},
        {"dirs_removed", e.dirs_removed},
        {"segments_deleted", e.segments_deleted},
        {"segments_retiring", e.segments_retiring},
        {"retiring_bytes", e.retiring_bytes},
        {"reclaim_copied_bytes", e.reclaim_copied_bytes}}},
      {"index",
       {{"rebuilt", st.rebuilt_index()},
        {"caught_up_segments", st.catch_up_stats().segments},
        {"caught_up_records", st.catch_up_stats().records},
        {"caught_up_bytes", st.catch_up_stats().bytes},
        {"caught_up_entries", st.catch_up_stats().applied},
        {"caught_up_seconds", st.catch_up_stats().seconds}}},
      {"errors",
       {{"checksum", s.checksum_errors},
        {"io", s.io_errors},
        {"enospc", s.enospc_errors + e.enospc},
        {"dropped_files", s.dropped_files}}},
      {"latency",
       {{"lookup", latency(lat.lookup)},
        {"read", latency(lat.read)},
        {"write", latency(lat.write)},
        {"create", latency(lat.create)},
        {"rename", latency(lat.rename)},
        {"flush", latency(lat.flush)}}},
  };
}

// The settings now: the store's live ones, and the log level as last set.
MountConfig live_config(BlockStore& st, const FsConfig& cfg) {
  MountConfig c{st.live_config(), cfg};
  c.fs.log_level = spdlog::level::to_string_view(spdlog::get_level()).data();
  return c;
}

// Sizes in bytes and seconds as numbers, so scripts need not parse units.
json field_json(const OptionSpec& s, FieldRef f) {
  switch (s.type) {
    case OptType::kSize: return *f.u64;
    case OptType::kFraction:
    case OptType::kSeconds: return *f.f64;
    case OptType::kCount: return *f.u32;
    case OptType::kBool:
    case OptType::kFlag: return *f.flag;
    case OptType::kListen: return option_text(s, f);
    default: return *f.str;
  }
}

// Every valued option of the table, plus the backing dir (an argument).
json config_json(BlockStore& st, const FsConfig& cfg) {
  MountConfig c = live_config(st, cfg);
  json r = json::object();
  for (const MountOption& o : mount_options())
    if (o.spec().type != OptType::kFlag) r[o.spec().name] = field_json(o.spec(), o.field(c));
  r["backing_dir"] = c.store.backing_dir;
  return r;
}

// How each runtime option of the table takes effect; validate() has already
// passed the whole candidate, so apply() only fails if the store refuses.
struct RuntimeSetter {
  const char* name;
  Status (*apply)(BlockStore&, const MountConfig&);
};

const RuntimeSetter kRuntimeSetters[] = {
    {"ram_size",
     [](BlockStore& st, const MountConfig& c) { return st.set_ram_size(c.store.ram_size); }},
    {"capacity",
     [](BlockStore& st, const MountConfig& c) { return st.set_capacity(c.store.capacity); }},
    {"evict_grace", [](BlockStore& st,
                       const MountConfig& c) { return st.set_evict_grace(c.store.evict_grace_s); }},
    {"io_timeout",
     [](BlockStore& st, const MountConfig& c) { return st.set_io_timeout(c.store.io_timeout_s); }},
    {"prefetch",
     [](BlockStore& st, const MountConfig& c) { return st.set_prefetch(c.store.prefetch_bytes); }},
    {"segment_readahead",
     [](BlockStore& st, const MountConfig& c) {
       return st.set_segment_readahead(c.store.segment_readahead);
     }},
    {"log_level",
     [](BlockStore&, const MountConfig& c) {
       spdlog::set_level(spdlog::level::from_str(c.fs.log_level));
       spdlog::info("log level set to {}", c.fs.log_level);
       return Status::OK();
     }},
};

const RuntimeSetter* find_setter(const std::string& key) {
  for (const RuntimeSetter& r : kRuntimeSetters)
    if (key == r.name) return &r;
  return nullptr;
}

// kvfs-admin config K=V...: every value is parsed into a copy of the live
// settings, the copy is validated as a whole, then the settings are applied
// in the order given; nothing changes unless all are valid. "set" is a list
// of [key, value] pairs (an object, from older clients, is taken in its own
// order).
json set_config(BlockStore& st, const FsConfig& cfg, const json& set) {
  std::vector<std::pair<std::string, std::string>> kv;
  auto text = [](const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
  if (set.is_array()) {
    for (const json& p : set) {
      if (!p.is_array() || p.size() != 2 || !p[0].is_string())
        return error(Status::Invalid("config: 'set' takes [key, value] pairs"));
      kv.emplace_back(p[0].get<std::string>(), text(p[1]));
    }
  } else {
    for (auto& [k, v] : set.items()) kv.emplace_back(k, text(v));
  }
  MountConfig cand = live_config(st, cfg);
  std::vector<const RuntimeSetter*> setters;
  for (auto& [k, v] : kv) {
    const MountOption* o = find_mount_option(k);
    if (!o || o->spec().type == OptType::kFlag)
      return error(Status::Invalid("unknown setting '" + k + "'"));
    if (!o->spec().runtime)
      return error(
          Status::Invalid("'" + k + "' is a mount option: it cannot change while mounted"));
    const RuntimeSetter* r = find_setter(k);
    if (!r) return error(Status::NotSupported("no runtime setter for '" + k + "'"));
    if (Status s = parse_option(o->spec(), v, true, o->field(cand)); !s.ok()) return error(s);
    setters.push_back(r);
  }
  if (Status s = cand.validate(); !s.ok()) return error(s);
  const json before = config_json(st, cfg);
  json changed = json::array();
  for (size_t i = 0; i < setters.size(); ++i) {
    if (Status s = setters[i]->apply(st, cand); !s.ok()) {
      json e = error(s);
      e["changed"] = changed;  // what was applied before the refusal
      return e;
    }
    const std::string& key = kv[i].first;
    changed.push_back({{"key", key}, {"old", before.value(key, json())}, {"value", kv[i].second}});
  }
  spdlog::info("config: {} setting(s) changed: {}", setters.size(), changed.dump());
  json r = config_json(st, cfg);
  r["changed"] = changed;
  return r;
}

json evict(BlockStore& st, const json& req) {
  EvictRequest r;
  const std::string mode = req.value("mode", "");
  r.force = req.value("force", false);
  r.dry_run = req.value("dry_run", false);
  auto ino_of = [&](const std::string& p) -> Result<uint64_t> {
    auto r = st.resolve(p);
    if (!r.ok() && r.status().code() == Status::Code::kNotFound)
      return Status::NotFound("no such file or directory: '" + p + "'");
    return r;
  };
  const std::string path = req.value("path", "");
  if (mode == "prefix" && !path.empty() && !req.value("dir_only", false) && !ino_of(path).ok()) {
    // Not an existing path: a prefix of names, as users type it (`--prefix
    // model_r0` for vLLM's <model>_<hash>_r<rank>/ directories): every file
    // whose name in that directory starts with it, a directory's whole
    // subtree when its name does. A path that exists keeps meaning exactly
    // that subtree (`--prefix sub` never takes `subway`).
    const size_t slash = path.rfind('/');
    const std::string dir = slash == std::string::npos ? "" : path.substr(0, slash);
    const std::string stem = path.substr(slash == std::string::npos ? 0 : slash + 1);
    auto parent = ino_of(dir);
    if (!parent.ok()) return error(parent.status());
    std::vector<std::pair<uint64_t, bool>> matches;  // ino, is a directory
    Status ls =
        st.readdir(*parent, 0, [&](std::string_view name, uint64_t ino, uint32_t mode, uint64_t) {
          if (name != "." && name != ".." && name.substr(0, stem.size()) == stem)
            matches.push_back({ino, mode == S_IFDIR});
          return true;
        });
    if (!ls.ok())
      return error(ls.code() == Status::Code::kNotDir
                       ? Status::NotDir("'" + dir + "' is not a directory")
                       : ls);
    if (matches.empty())
      return error(Status::NotFound("no file or directory name in '" +
                                    (dir.empty() ? std::string("/") : dir) + "' starts with '" +
                                    stem + "'"));
    uint64_t files = 0, bytes = 0, skipped = 0;
    for (const auto& [ino, is_dir] : matches) {
      r.kind = is_dir ? EvictRequest::Kind::kPrefix : EvictRequest::Kind::kPath;
      r.ino = ino;
      auto res = st.evict(r);
      if (!res.ok()) {
        if (res.status().code() == Status::Code::kNotFound) continue;  // gone meanwhile
        return error(res.status());
      }
      files += res->files;
      bytes += res->bytes;
      skipped += res->skipped;
    }
    return json{{"files", files}, {"bytes", bytes}, {"skipped", skipped}, {"dry_run", r.dry_run}};
  }
  if (mode == "path" || mode == "prefix") {
    auto ino = ino_of(path);
    if (!ino.ok()) return error(ino.status());
    r.kind = mode == "path" ? EvictRequest::Kind::kPath : EvictRequest::Kind::kPrefix;
    r.ino = *ino;
  } else if (mode == "all") {
    r.kind = EvictRequest::Kind::kAll;
  } else if (mode == "to_size") {
    r.kind = EvictRequest::Kind::kToSize;
    r.target_bytes = req.value("bytes", uint64_t(0));
  } else if (mode == "older_than") {
    r.kind = EvictRequest::Kind::kOlderThan;
    r.older_than_s = req.value("seconds", 0.0);
  } else {
    return error(Status::Invalid("unknown evict mode '" + mode + "'"));
  }
  auto res = st.evict(r);
  if (!res.ok()) return error(res.status());
  return json{{"files", res->files},
              {"bytes", res->bytes},
              {"skipped", res->skipped},
              {"dry_run", r.dry_run}};
}

}  // namespace

std::string metrics_text(BlockStore& st, OpLatencies& lat, const std::string& mountpoint) {
  return prom::render(mountpoint, stats_json(st, lat), KVFS_VERSION);
}

std::string control_execute(BlockStore& st, const FsConfig& cfg, OpLatencies& lat,
                            const std::string& request, uint32_t uid) {
  json reply;
  try {
    json req = json::parse(request);
    const std::string cmd = req.value("cmd", "");
    const bool privileged = uid == 0 || uid == ::getuid();
    auto deny = [&] {
      spdlog::warn("control: uid {} refused '{}'", uid, cmd);
      return error(Status::Permission("'" + cmd + "' is for root or the user who mounted"));
    };
    if (cmd == "version") {
      reply = json{{"version", KVFS_VERSION}};
    } else if (cmd == "stats") {
      reply = stats_json(st, lat);
    } else if (cmd == "evict") {
      reply = (!req.value("dry_run", false) && !privileged) ? deny() : evict(st, req);
    } else if (cmd == "flush") {
      if (!privileged) {
        reply = deny();
      } else if (req.value("wait", false)) {
        Status s = st.flush_all();
        reply = s.ok() ? json{{"flushed", true}} : error(s);
      } else {
        st.flush_async();
        reply = json{{"queued", true}};
      }
    } else if (cmd == "retire") {
      if (!privileged) {
        reply = deny();
      } else {
        auto r = st.retire_node(req.value("node", ""), req.value("drop", false),
                                req.value("idle_s", 30.0));
        reply = !r.ok() ? error(r.status())
                        : json{{"files_copied", r->files_copied},
                               {"bytes_copied", r->bytes_copied},
                               {"files_kept", r->files_kept},
                               {"files_lost", r->files_lost},
                               {"segments_deleted", r->segments_deleted}};
      }
    } else if (cmd == "housekeep") {
      reply = privileged ? json{{"removed", st.housekeep()}} : deny();
    } else if (cmd == "ls") {
      auto ino = st.resolve(req.value("path", ""));
      if (!ino.ok()) {
        reply = error(
            ino.status().code() == Status::Code::kNotFound
                ? Status::NotFound("no such file or directory: '" + req.value("path", "") + "'")
                : ino.status());
      } else {  // ls() of a file is NotDir; no getattr: inspecting is no use
        auto ls = st.ls(*ino);
        if (!ls.ok()) {
          reply = error(ls.status());
        } else {
          json arr = json::array();
          for (auto& e : *ls)
            arr.push_back({{"name", e.name},
                           {"type", type_name(e.mode)},
                           {"size", e.size},
                           {"tier", e.tier},
                           {"last_access_ns", e.last_access_ns}});
          reply = json{{"entries", arr}};
        }
      }
    } else if (cmd == "config") {
      if (req.contains("set")) {
        if (!privileged) {
          reply = deny();
        } else {
          reply = set_config(st, cfg, req["set"]);
        }
      } else {
        reply = config_json(st, cfg);
      }
    } else {
      reply = error(Status::Invalid("unknown command '" + cmd + "'"));
    }
  } catch (const std::exception& e) {
    reply = error(Status::Invalid(std::string("bad request: ") + e.what()));
  }
  // Names may hold any byte: replace invalid UTF-8 rather than fail.
  return reply.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace kvfs
