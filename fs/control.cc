// SPDX-License-Identifier: Apache-2.0
#include "fs/control.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/retire/node_retirement.h"
#include "core/store/block_store.h"
#include "core/util/log.h"
#include "fs/errno_map.h"
#include "fs/option_table.h"
#include "fs/options.h"
#include "fs/prom_text.h"
#include "fs/stats_schema.h"

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

// The statistics of the schema (fs/stats_schema.h), all from one moment,
// and the latency histograms.
json stats_json(BlockStore& st, OpLatencies& lat) {
  stats::Snapshot snap;
  snap.store = st.admin().stats();
  snap.evict = st.admin().evictor_stats();
  snap.backing = st.admin().backing_io_stats();
  snap.catch_up = st.catch_up_stats();
  snap.rebuilt_index = st.rebuilt_index();
  snap.io_timeout_s = st.admin().live_config().io_timeout_s;
  json r = stats::to_json(snap);
  r["latency"] = json{{"lookup", latency(lat.lookup)}, {"read", latency(lat.read)},
                      {"write", latency(lat.write)},   {"create", latency(lat.create)},
                      {"rename", latency(lat.rename)}, {"flush", latency(lat.flush)}};
  return r;
}

// The settings now: the store's live ones, and the log level as last set.
MountConfig live_config(BlockStore& st, const FsConfig& cfg) {
  MountConfig c{st.admin().live_config(), cfg};
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

// kvfs-admin config K=V...: every value is parsed into a copy of the live
// settings, the copy is validated as a whole, then applied at once; nothing
// changes unless all are valid. "set" is a list of [key, value] pairs (an
// object, from older clients, is taken in its own order).
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
  for (auto& [k, v] : kv) {
    const MountOption* o = find_mount_option(k);
    if (!o || o->spec().type == OptType::kFlag)
      return error(Status::Invalid("unknown setting '" + k + "'"));
    if (!o->spec().runtime)
      return error(
          Status::Invalid("'" + k + "' is a mount option: it cannot change while mounted"));
    // The store's options go to StoreAdmin::reconfigure; of the FUSE side's
    // only the log level is applied here.
    if (!find_store_option(k) && k != "log_level")
      return error(Status::NotSupported("no runtime setter for '" + k + "'"));
    if (Status s = parse_option(o->spec(), v, true, o->field(cand)); !s.ok()) return error(s);
  }
  if (Status s = cand.validate(); !s.ok()) return error(s);
  const json before = config_json(st, cfg);
  if (Status s = st.admin().reconfigure(cand.store); !s.ok()) return error(s);
  if (cand.fs.log_level != before.value("log_level", "")) {
    spdlog::set_level(spdlog::level::from_str(cand.fs.log_level));
    spdlog::info("log level set to {}", cand.fs.log_level);
  }
  json changed = json::array();
  for (auto& [k, v] : kv)
    changed.push_back({{"key", k}, {"old", before.value(k, json())}, {"value", v}});
  spdlog::info("config: {} setting(s) changed: {}", kv.size(), changed.dump());
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
    auto r = st.admin().resolve(p);
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
      auto res = st.admin().evict(r);
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
  auto res = st.admin().evict(r);
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
        st.admin().flush_async();
        reply = json{{"queued", true}};
      }
    } else if (cmd == "retire") {
      if (!privileged) {
        reply = deny();
      } else {
        auto r = retire_node(st, req.value("node", ""), req.value("drop", false),
                             req.value("idle_s", 30.0));
        reply = !r.ok() ? error(r.status())
                        : json{{"files_copied", r->files_copied},
                               {"bytes_copied", r->bytes_copied},
                               {"files_kept", r->files_kept},
                               {"files_lost", r->files_lost},
                               {"segments_deleted", r->segments_deleted}};
      }
    } else if (cmd == "housekeep") {
      reply = privileged ? json{{"removed", st.admin().housekeep()}} : deny();
    } else if (cmd == "ls") {
      auto ino = st.admin().resolve(req.value("path", ""));
      if (!ino.ok()) {
        reply = error(
            ino.status().code() == Status::Code::kNotFound
                ? Status::NotFound("no such file or directory: '" + req.value("path", "") + "'")
                : ino.status());
      } else {  // ls() of a file is NotDir; no getattr: inspecting is no use
        auto ls = st.admin().ls(*ino);
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
