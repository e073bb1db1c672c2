// SPDX-License-Identifier: Apache-2.0
#include "fs/options.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <string>

#include "fs/option_table.h"

namespace kvfs {
namespace {

// fstab and mount(8) words that mean nothing to kvfs itself.
bool ignored(const std::string& key) {
  static const char* const words[] = {
      "defaults", "auto",        "noauto",     "nofail",   "_netdev",       "user",
      "users",    "nouser",      "owner",      "group",    "nodev",         "dev",
      "nosuid",   "suid",        "exec",       "noexec",   "atime",         "noatime",
      "relatime", "strictatime", "nodiratime", "diratime", "lazytime",      "async",
      "rw",       "loop",        "sync",       "dirsync",  "nostrictatime", "setuid"};
  for (const char* w : words)
    if (key == w) return true;
  return key.rfind("x-", 0) == 0 || key.rfind("comment", 0) == 0;
}

// Options libfuse understands at mount time that kvfs passes through.
bool fuse_passthrough(const std::string& key) {
  static const char* const words[] = {"fsname",    "subtype",      "max_read",   "blkdev",
                                      "blksize",   "auto_unmount", "allow_root", "context",
                                      "fscontext", "defcontext",   "rootcontext"};
  for (const char* w : words)
    if (key == w) return true;
  return false;
}

// A table option, else a libfuse option passed through, else an fstab word.
Status apply_option(const std::string& opt, ParsedArgs* a) {
  const auto eq = opt.find('=');
  const std::string key = opt.substr(0, eq);
  const bool has_val = eq != std::string::npos;
  if (const MountOption* o = find_mount_option(key)) {
    KVFS_RETURN_IF_ERROR(
        parse_option(o->spec(), has_val ? opt.substr(eq + 1) : "", has_val, o->field(*a)));
    if (o->spec().to_fuse) a->fs.fuse_opts.push_back(key);
    if (key == "negative_timeout") a->negative_timeout_given = true;
    return Status::OK();
  }
  if (fuse_passthrough(key)) {
    a->fs.fuse_opts.push_back(opt);
    return Status::OK();
  }
  if (ignored(key)) return Status::OK();
  return Status::Invalid("unknown mount option '" + key + "' (see kvfs --help)");
}

// The absolute, resolved mount point. A dead FUSE mount there (its daemon
// killed) fails realpath with ENOTCONN: its parent is resolved instead, so
// that the path matches /proc/self/mountinfo and the mount can be cleared.
std::string resolve_mountpoint(const std::string& p) {
  char buf[PATH_MAX];
  if (realpath(p.c_str(), buf)) return buf;
  if (errno != ENOTCONN && errno != ECONNABORTED) return p;
  std::string dir = p, base = p;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const size_t slash = dir.rfind('/');
  base = slash == std::string::npos ? dir : dir.substr(slash + 1);
  dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : dir.substr(0, slash));
  if (base.empty() || base == "." || base == ".." || !realpath(dir.c_str(), buf)) return p;
  const std::string parent = buf;
  return (parent == "/" ? "" : parent) + "/" + base;
}

}  // namespace

std::vector<std::string> split_options(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      cur += s[++i];
    } else if (s[i] == ',') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += s[i];
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

Status FsConfig::validate() const {
  FsConfig c = *this;  // the table's fields point into a mutable config
  for (const FsOption& o : fs_options()) KVFS_RETURN_IF_ERROR(check_option(o.spec, o.field(c)));
  if (mountpoint.empty()) return Status::Invalid("mount point not given");
  return Status::OK();
}

Status MountConfig::validate() const {
  KVFS_RETURN_IF_ERROR(store.validate());
  return fs.validate();
}

Result<ParsedArgs> parse_args(int argc, char** argv) {
  ParsedArgs a;
  std::vector<std::string> pos;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      a.help = true;
    } else if (arg == "-V" || arg == "--version") {
      a.version = true;
    } else if (arg == "-f") {
      a.fs.foreground = true;
    } else if (arg == "-d") {
      a.fs.foreground = true;
      a.fs.debug = true;
    } else if (arg == "-s") {
      a.fs.threads = 1;
    } else if (arg.rfind("-o", 0) == 0) {
      std::string opts = arg.size() > 2 ? arg.substr(2) : "";
      if (opts.empty()) {
        if (++i >= argc) return Status::Invalid("-o needs an argument");
        opts = argv[i];
      }
      for (const auto& o : split_options(opts)) KVFS_RETURN_IF_ERROR(apply_option(o, &a));
    } else if (!arg.empty() && arg[0] == '-' && arg != "-") {
      return Status::Invalid("unknown argument '" + arg + "' (see kvfs --help)");
    } else {
      pos.push_back(arg);
    }
  }
  if (a.help || a.version) return a;
  if (pos.size() != 2)
    return Status::Invalid("expected BACKING_DIR and MOUNTPOINT (see kvfs --help)");
  char buf[PATH_MAX];
  a.store.backing_dir = realpath(pos[0].c_str(), buf) ? buf : pos[0];
  a.fs.mountpoint = resolve_mountpoint(pos[1]);
  if (!a.store.node_id.empty() && !a.negative_timeout_given)
    a.fs.negative_timeout = std::min(a.fs.negative_timeout, 0.2);

  KVFS_RETURN_IF_ERROR(a.validate());
  return a;
}

const char* usage_text() {
  static const std::string text =
      std::string(R"(usage: kvfs BACKING_DIR MOUNTPOINT [-o OPTION[,OPTION...]] [-f] [-d]

Mounts a KV-cache filesystem at MOUNTPOINT: a RAM tier in front of segment
files packed into BACKING_DIR. Returns once the mount is ready.

  -f                     stay in the foreground, log to stderr
  -d                     foreground with debug logging (implies -f)
  -s                     single-threaded (one FUSE worker)
  -h, --help             this text
  -V, --version          version

)") + options_help() +
      R"(
FUSE options passed to libfuse: allow_root, fsname=NAME, subtype=NAME,
auto_unmount, max_read=N, blksize=N, context=CTX, ... fstab words (defaults,
noauto, nofail, _netdev, x-systemd.*, ...) are accepted and ignored.
)";
  return text.c_str();
}

}  // namespace kvfs
