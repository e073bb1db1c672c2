// SPDX-License-Identifier: Apache-2.0
// kvfs-admin: looks into and steers a mounted kvfs, and checks or repairs an
// unmounted backing directory.
//
// Online commands talk to the daemon through the hidden control file at the
// mount root (the protocol: core/control/control_client.h). The daemon decides who
// may change what (root or the user who mounted); this tool only reports its
// answer.
// Offline commands (fsck, rebuild-index) use the core library directly; the
// node's lock makes them refuse while the node's daemon runs. nodes only
// reads the backing dir.
//
// Exit status: 0 ok, 1 usage, 2 not a kvfs mount / cannot reach the daemon /
// backing dir unusable, 3 the daemon refused the request (its errno is shown),
// 4 fsck found problems.
//
// The parts: admin_main.cc (command line), admin_client.* (the control file),
// admin_online.* (stats, evict, flush, ls, config, version), admin_format.*
// (output), admin_offline.* (fsck, rebuild-index), admin_nodes.* (nodes),
// admin_exit.h (exit codes).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "tools/admin_exit.h"
#include "tools/admin_nodes.h"
#include "tools/admin_offline.h"
#include "tools/admin_online.h"

#ifndef KVFS_VERSION
#define KVFS_VERSION "unknown"
#endif

namespace kvfs::admin {
namespace {

constexpr const char* kFooter = R"(
Exit status: 0 ok, 1 usage, 2 not a kvfs mount / cannot reach the daemon /
backing dir unusable, 3 the daemon refused the request, 4 fsck found problems.
See kvfs-admin(8).)";

int run(int argc, char** argv) {
  CLI::App app{"kvfs-admin: inspect and steer a mounted kvfs; check or repair a backing dir",
               "kvfs-admin"};
  app.footer(kFooter);
  app.require_subcommand(1);
  app.set_version_flag("-V,--version", std::string("kvfs-admin ") + KVFS_VERSION);

  StatsOpts so;
  auto* stats = app.add_subcommand("stats", "show the daemon's counters");
  stats->add_option("MOUNT", so.mount, "kvfs mount point")->required();
  auto* fj = stats->add_flag("--json", so.json_out, "print the daemon's JSON");
  auto* fp = stats->add_flag("--prometheus", so.prometheus,
                             "Prometheus text format (node_exporter textfile collector)");
  auto* fa = stats->add_flag("--all", so.all, "every statistic, one per line, with what it counts");
  fj->excludes(fp);
  fa->excludes(fj);
  fa->excludes(fp);
  stats->add_option("--watch", so.watch, "repeat every SECONDS")
      ->check(CLI::PositiveNumber)
      ->type_name("SECONDS");
  stats->add_option("-o,--output", so.output, "write to FILE atomically instead of stdout")
      ->type_name("FILE");

  EvictOpts eo;
  auto* evict = app.add_subcommand("evict", "remove files from the cache now");
  evict->add_option("MOUNT", eo.mount, "kvfs mount point")->required();
  auto* mode = evict->add_option_group("mode", "what to evict (exactly one)");
  mode->add_option("--path", eo.path, "one file (absolute, or relative to MOUNT)");
  mode->add_option("--prefix", eo.prefix,
                   "a directory's subtree, or (no such path) every name in its "
                   "directory that starts with it; DIR/ is the directory only");
  mode->add_flag("--all", eo.all, "every file");
  mode->add_option("--to-size", eo.to_size, "least recently used files until SIZE is left")
      ->type_name("SIZE");
  mode->add_option("--older-than", eo.older_than, "files not used for DURATION (30s 10m 2h 1d)")
      ->type_name("DURATION");
  mode->require_option(1);
  evict->add_flag("--force", eo.force, "also open, dirty and recently used files");
  evict->add_flag("--dry-run", eo.dry_run, "only report what would be evicted");

  std::string flush_mount;
  bool flush_wait = false;
  auto* flush = app.add_subcommand("flush", "write every dirty file to the backing dir");
  flush->add_option("MOUNT", flush_mount, "kvfs mount point")->required();
  flush->add_flag("--wait", flush_wait, "return once everything is written and committed");

  LsOpts lo;
  auto* ls = app.add_subcommand("ls", "list a directory with tier, size and last access");
  ls->add_option("MOUNT", lo.mount, "kvfs mount point")->required();
  ls->add_option("PATH", lo.path, "directory or file (absolute, or relative to MOUNT)");
  ls->add_flag("--json", lo.json_out, "print JSON");
  ls->add_flag("--bytes", lo.bytes, "exact sizes in bytes");

  std::string config_mount;
  std::vector<std::string> config_args;
  auto* config = app.add_subcommand("config", "show or change runtime settings");
  config->add_option("MOUNT", config_mount, "kvfs mount point")->required();
  config->add_option("KEY[=VALUE]", config_args,
                     "setting to show, or to change (capacity, ram_size, evict_grace, io_timeout, "
                     "log_level)");

  std::string version_mount;
  auto* version = app.add_subcommand("version", "print the version (and the daemon's)");
  version->add_option("MOUNT", version_mount, "also ask the daemon at MOUNT");

  OfflineOpts fo;
  auto* fsck = app.add_subcommand("fsck", "check an unmounted backing dir and its index");
  fsck->add_option("BACKING_DIR", fo.backing, "backing directory")->required();
  fsck->add_option("--index-dir", fo.index_dir,
                   "index location (default /var/lib/kvfs/<id>[.<node>])")
      ->type_name("DIR");
  fsck->add_option("--node-id", fo.node_id,
                   "in a dir shared by nodes: the node whose segments and index")
      ->type_name("NAME");

  OfflineOpts ro;
  auto* rebuild =
      app.add_subcommand("rebuild-index", "recreate the index of an unmounted backing dir");
  rebuild->add_option("BACKING_DIR", ro.backing, "backing directory")->required();
  rebuild
      ->add_option("--index-dir", ro.index_dir,
                   "index location (default /var/lib/kvfs/<id>[.<node>])")
      ->type_name("DIR");
  rebuild
      ->add_option("--node-id", ro.node_id,
                   "in a dir shared by nodes: the node whose segments and index")
      ->type_name("NAME");

  NodesOpts no;
  auto* nodes = app.add_subcommand("nodes", "list the nodes sharing a backing dir");
  nodes->add_option("BACKING_DIR", no.backing, "backing directory")->required();
  nodes->add_flag("--json", no.json_out, "print JSON");

  RetireOpts rt;
  auto* retire = app.add_subcommand(
      "retire-node", "hand the files of a node gone for good over to the node at MOUNT");
  retire->add_option("MOUNT", rt.mount, "kvfs mount point of a live node")->required();
  retire->add_option("NODE", rt.node, "the node to retire")->required();
  retire->add_flag("--drop", rt.drop, "delete its data instead of copying its files here");
  retire
      ->add_option("--idle", rt.idle_s,
                   "refuse if its log changed within this many seconds (default 30)")
      ->type_name("SECONDS")
      ->check(CLI::NonNegativeNumber);
  retire->add_flag("--json", rt.json_out, "print JSON");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitUsage;
  }

  if (*stats) return cmd_stats(so);
  if (*evict) return cmd_evict(eo);
  if (*flush) return cmd_flush(flush_mount, flush_wait);
  if (*ls) return cmd_ls(lo);
  if (*config) return cmd_config(config_mount, config_args);
  if (*version) return cmd_version(version_mount);
  if (*nodes) return cmd_nodes(no);
  if (*retire) return cmd_retire(rt);
  if (*fsck) {
    setup_logging();
    return cmd_fsck(fo);
  }
  if (*rebuild) {
    setup_logging();
    return cmd_rebuild_index(ro);
  }
  return kExitUsage;
}

}  // namespace
}  // namespace kvfs::admin

int main(int argc, char** argv) {
  try {
    return kvfs::admin::run(argc, argv);
  } catch (const kvfs::admin::Failure& f) {
    std::fflush(stdout);
    std::fprintf(stderr, "kvfs-admin: %s\n", f.msg.c_str());
    return f.code;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "kvfs-admin: %s\n", e.what());
    return kvfs::admin::kExitUnreachable;
  }
}
