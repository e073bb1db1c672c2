// SPDX-License-Identifier: Apache-2.0
#include "tools/admin_online.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "core/config/config.h"
#include "fs/prom_text.h"
#include "tools/admin_client.h"
#include "tools/admin_exit.h"
#include "tools/admin_format.h"

#ifndef KVFS_VERSION
#define KVFS_VERSION "unknown"
#endif

namespace kvfs::admin {

// ---------------------------------------------------------------------------
// stats

int cmd_stats(const StatsOpts& o) {
  std::unique_ptr<Mount> m;
  try {
    m = std::make_unique<Mount>(o.mount);
  } catch (const Failure&) {
    if (o.prometheus && !o.output.empty()) {
      char buf[PATH_MAX];
      write_atomically(o.output,
                       prom::render_down(::realpath(o.mount.c_str(), buf) ? buf : o.mount));
    }
    throw;
  }
  std::string version;
  if (o.prometheus) version = m->request({{"cmd", "version"}}).value("version", "unknown");
  json prev;
  auto prev_t = std::chrono::steady_clock::now();
  const bool clear =
      o.watch > 0 && !o.json_out && !o.prometheus && !o.all && o.output.empty() && ::isatty(1) == 1;
  for (bool first = true;; first = false) {
    json s;
    try {
      s = m->request({{"cmd", "stats"}});
    } catch (const Failure&) {
      if (o.prometheus && !o.output.empty())
        write_atomically(o.output, prom::render_down(m->root()));
      throw;
    }
    const auto now = std::chrono::steady_clock::now();
    std::string text;
    if (o.json_out) {
      text = o.watch > 0 ? s.dump() + "\n" : s.dump(2) + "\n";
    } else if (o.prometheus) {
      text = prom::render(m->root(), s, version);
    } else if (o.all) {
      text = render_all(s);
    } else {
      const double dt = std::chrono::duration<double>(now - prev_t).count();
      text = render_table(m->root(), s, first ? nullptr : &prev, dt);
      if (o.watch > 0 && !clear)
        text = "--- " + local_time(std::time(nullptr) * 1000000000ll) + "\n" + text;
    }
    if (!o.output.empty()) {
      write_atomically(o.output, text);
    } else {
      if (clear) std::fputs("\033[H\033[2J", stdout);
      std::fputs(text.c_str(), stdout);
      if (o.prometheus && o.watch > 0) std::fputc('\n', stdout);
      std::fflush(stdout);
    }
    if (o.watch <= 0) return kExitOk;
    prev = std::move(s);
    prev_t = now;
    std::this_thread::sleep_for(std::chrono::duration<double>(o.watch));
  }
}

// ---------------------------------------------------------------------------
// evict, flush, ls, config, version

int cmd_evict(const EvictOpts& o) {
  Mount m(o.mount);
  json req{{"cmd", "evict"}, {"force", o.force}, {"dry_run", o.dry_run}};
  if (!o.path.empty()) {
    req["mode"] = "path";
    req["path"] = m.relative(o.path);
    if (req["path"].get<std::string>().empty())
      fail(kExitUsage, "--path needs a file; use --prefix or --all for the whole mount");
  } else if (!o.prefix.empty()) {
    req["mode"] = "prefix";
    req["path"] = m.relative(o.prefix);
    // "DIR/" means that directory only; without the slash it is a prefix of
    // names (model_r1 also takes model_r10).
    req["dir_only"] = o.prefix.back() == '/';
  } else if (o.all) {
    req["mode"] = "all";
  } else if (!o.to_size.empty()) {
    auto b = parse_size(o.to_size);
    if (!b) fail(kExitUsage, "--to-size: '" + o.to_size + "' is not a size (e.g. 500G, 2T)");
    req["mode"] = "to_size";
    req["bytes"] = *b;
  } else {
    auto d = parse_duration(o.older_than);
    if (!d)
      fail(kExitUsage, "--older-than: '" + o.older_than + "' is not a duration (e.g. 30s, 2h, 1d)");
    req["mode"] = "older_than";
    req["seconds"] = *d;
  }
  json r = m.request(req);
  const uint64_t files = unum(r, "/files"), bytes = unum(r, "/bytes"),
                 skipped = unum(r, "/skipped");
  std::printf("%s %llu files (%llu bytes)", o.dry_run ? "would evict" : "evicted",
              static_cast<unsigned long long>(files), static_cast<unsigned long long>(bytes));
  if (skipped > 0)
    std::printf("; %llu skipped (open, dirty or used within evict_grace%s)",
                static_cast<unsigned long long>(skipped), o.force ? "" : "; --force takes them");
  std::printf("\n");
  return kExitOk;
}

int cmd_flush(const std::string& mount, bool wait) {
  Mount m(mount);
  m.request({{"cmd", "flush"}, {"wait", wait}});
  std::printf(wait ? "flushed: every dirty file is in the backing dir\n"
                   : "flush queued (use --wait to wait for it)\n");
  return kExitOk;
}

int cmd_retire(const RetireOpts& o) {
  Mount m(o.mount);
  json r = m.request({{"cmd", "retire"}, {"node", o.node}, {"drop", o.drop}, {"idle_s", o.idle_s}});
  if (o.json_out) {
    std::printf("%s\n", r.dump(2).c_str());
    return kExitOk;
  }
  std::printf(
      "retired node %s: %llu files copied here (%s), %llu kept (a version here already), "
      "%llu lost, %llu segments deleted\n",
      printable(o.node).c_str(), (unsigned long long)r.value("files_copied", 0ull),
      human_bytes(double(r.value("bytes_copied", 0ull))).c_str(),
      (unsigned long long)r.value("files_kept", 0ull),
      (unsigned long long)r.value("files_lost", 0ull),
      (unsigned long long)r.value("segments_deleted", 0ull));
  return r.value("files_lost", 0ull) ? kExitProblems : kExitOk;
}

int cmd_ls(const LsOpts& o) {
  Mount m(o.mount);
  const std::string rel = m.relative(o.path);
  json r = m.request_raw({{"cmd", "ls"}, {"path", rel}});
  std::string only;  // a file: list its parent and keep its entry
  if (r.contains("error") && r.value("errno", 0) == ENOTDIR && !rel.empty()) {
    const auto slash = rel.rfind('/');
    only = slash == std::string::npos ? rel : rel.substr(slash + 1);
    r = m.request(
        {{"cmd", "ls"}, {"path", slash == std::string::npos ? "" : rel.substr(0, slash)}});
  } else if (r.contains("error")) {
    r = m.request({{"cmd", "ls"}, {"path", rel}});  // fails with the daemon's message
  }
  json entries = r.value("entries", json::array());
  if (!only.empty()) {
    json keep = json::array();
    for (auto& e : entries)
      if (e.value("name", "") == only) keep.push_back(e);
    entries = keep;
  }
  std::sort(entries.begin(), entries.end(),
            [](const json& a, const json& b) { return a.value("name", "") < b.value("name", ""); });
  if (o.json_out) {
    std::printf("%s\n", json{{"entries", entries}}.dump(2).c_str());
    return kExitOk;
  }
  std::vector<std::array<std::string, 4>> rows;
  rows.push_back({"NAME", "TIER", "SIZE", "LAST ACCESS"});
  for (auto& e : entries) {
    const bool dir = e.value("type", "") == "dir";
    const uint64_t size = e.value("size", uint64_t(0));
    rows.push_back({printable(e.value("name", "")) + (dir ? "/" : ""), e.value("tier", "-"),
                    dir ? "-" : (o.bytes ? std::to_string(size) : human_bytes(double(size))),
                    local_time(e.value("last_access_ns", int64_t(0)))});
  }
  size_t w[3] = {0, 0, 0};
  for (auto& row : rows)
    for (int i = 0; i < 3; ++i) w[i] = std::max(w[i], row[i].size());
  for (auto& row : rows)
    std::printf("%-*s  %-*s  %*s  %s\n", int(w[0]), row[0].c_str(), int(w[1]), row[1].c_str(),
                int(w[2]), row[2].c_str(), row[3].c_str());
  return kExitOk;
}

int cmd_config(const std::string& mount, const std::vector<std::string>& args) {
  Mount m(mount);
  json set = json::array();  // [key, value] pairs: applied in this order
  std::set<std::string> set_keys;
  std::vector<std::string> get;
  for (const std::string& a : args) {
    const auto eq = a.find('=');
    if (eq == std::string::npos) {
      get.push_back(a);
    } else {
      if (eq == 0) fail(kExitUsage, "config: '" + a + "' has no key");
      set.push_back({a.substr(0, eq), a.substr(eq + 1)});
      set_keys.insert(a.substr(0, eq));
    }
  }
  if (!set.empty() && !get.empty()) fail(kExitUsage, "config: either read keys or set KEY=VALUE");
  json r =
      set.empty() ? m.request({{"cmd", "config"}}) : m.request({{"cmd", "config"}, {"set", set}});
  if (!get.empty()) {
    for (const std::string& k : get) {
      if (!r.contains(k)) {
        std::string known;
        for (auto& [key, v] : r.items()) known += (known.empty() ? "" : ", ") + key;
        fail(kExitUsage, "config: unknown setting '" + k + "' (known: " + known + ")");
      }
      // One raw value per line: easy to use from scripts.
      const json& v = r[k];
      std::printf("%s\n", v.is_string() ? v.get<std::string>().c_str() : v.dump().c_str());
    }
    return kExitOk;
  }
  size_t w = 0;
  for (auto& [k, v] : r.items()) w = std::max(w, k.size());
  if (r.contains("changed"))
    for (const json& c : r["changed"])
      std::printf("changed %s: %s -> %s\n", c.value("key", "").c_str(),
                  config_value(c.value("key", ""), c.value("old", json())).c_str(),
                  c.value("value", "").c_str());
  for (auto& [k, v] : r.items()) {
    if (k == "changed" || (!set.empty() && !set_keys.count(k))) continue;
    std::printf("%-*s = %s\n", int(w), k.c_str(), config_value(k, v).c_str());
  }
  return kExitOk;
}

int cmd_version(const std::string& mount) {
  std::printf("kvfs-admin %s\n", KVFS_VERSION);
  if (!mount.empty()) {
    Mount m(mount);
    json r = m.request({{"cmd", "version"}});
    std::printf("kvfs daemon %s at %s\n", r.value("version", "unknown").c_str(), m.root().c_str());
  }
  return kExitOk;
}

}  // namespace kvfs::admin
