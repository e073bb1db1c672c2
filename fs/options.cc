#include "fs/options.h"

#include <arpa/inet.h>

#include <climits>
#include <cstdlib>
#include <cstring>

namespace kvfs {
namespace {

bool parse_uint(const std::string& v, unsigned* out) {
  if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos || v.size() > 9)
    return false;
  *out = static_cast<unsigned>(std::strtoul(v.c_str(), nullptr, 10));
  return true;
}

bool parse_seconds(const std::string& v, double* out) {
  char* end = nullptr;
  double d = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(d >= 0) || d > 86400 * 365) return false;
  *out = d;
  return true;
}

bool parse_bool(const std::string& v, bool* out) {
  if (v == "1" || v == "true" || v == "yes" || v == "on") return *out = true, true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return *out = false, true;
  return false;
}

// metrics=PORT, metrics=ADDR:PORT, metrics=[V6ADDR]:PORT. Numeric addresses
// only: a name could resolve differently at boot than when it was written.
bool parse_listen(const std::string& v, std::string* host, unsigned* port) {
  std::string h = "127.0.0.1", p = v;
  if (auto c = v.rfind(':'); c != std::string::npos) {
    h = v.substr(0, c);
    p = v.substr(c + 1);
    if (h.size() >= 2 && h.front() == '[' && h.back() == ']') {
      h = h.substr(1, h.size() - 2);
      in6_addr a6;
      if (inet_pton(AF_INET6, h.c_str(), &a6) != 1) return false;
    } else {
      in_addr a4;
      if (inet_pton(AF_INET, h.c_str(), &a4) != 1) return false;
    }
  }
  unsigned n = 0;
  if (!parse_uint(p, &n) || n < 1 || n > 65535) return false;
  *host = h;
  *port = n;
  return true;
}

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

Status apply_option(const std::string& opt, ParsedArgs* a) {
  auto eq = opt.find('=');
  std::string key = opt.substr(0, eq);
  std::string val = eq == std::string::npos ? "" : opt.substr(eq + 1);
  const bool has_val = eq != std::string::npos;
  auto bad = [&](const char* what) {
    return Status::Invalid("invalid value for option " + key + " (" + what + "): '" + val + "'");
  };
  auto size = [&](uint64_t* out) -> Status {
    auto s = parse_size(val);
    if (!s) return bad("a size such as 512M, 64G or 10T");
    *out = *s;
    return Status::OK();
  };
  StoreConfig& st = a->store;
  FsConfig& fs = a->fs;
  if (key == "ram_size") return size(&st.ram_size);
  if (key == "segment_size") return size(&st.segment_size);
  if (key == "ram_prefault") return size(&st.ram_prefault);
  if (key == "flush_batch") return size(&st.flush_batch_bytes);
  if (key == "max_file_size") return size(&st.max_file_size);
  if (key == "capacity") {
    // 0 would read as "not given" (the default, 80 % of the free space).
    KVFS_RETURN_IF_ERROR(size(&st.capacity));
    return st.capacity > 0 ? Status::OK() : bad("a size of at least two segments");
  }
  if (key == "high_watermark" || key == "low_watermark" || key == "reclaim_ratio") {
    double d;
    if (!parse_seconds(val, &d) || d > 1) return bad("a fraction between 0 and 1");
    (key == "high_watermark"  ? st.high_watermark
     : key == "low_watermark" ? st.low_watermark
                              : st.reclaim_ratio) = d;
    return Status::OK();
  }
  if (key == "evict_grace")
    return parse_seconds(val, &st.evict_grace_s) ? Status::OK() : bad("seconds");
  if (key == "io_timeout")
    return parse_seconds(val, &st.io_timeout_s) ? Status::OK() : bad("seconds");
  if (key == "tmp_max_age")
    return parse_seconds(val, &st.tmp_max_age_s) ? Status::OK() : bad("seconds");
  if (key == "clean_tmp") return parse_bool(val, &st.clean_tmp) ? Status::OK() : bad("0 or 1");
  if (key == "clean_empty_dirs")
    return parse_bool(val, &st.clean_empty_dirs) ? Status::OK() : bad("0 or 1");
  if (key == "index_dir") {
    if (val.empty() || val[0] != '/') return bad("an absolute path");
    st.index_dir = val;
    return Status::OK();
  }
  if (key == "node_id") {
    st.node_id = val;
    return Status::OK();
  }
  if (key == "threads") return parse_uint(val, &fs.threads) ? Status::OK() : bad("a number");
  if (key == "flush_threads")
    return parse_uint(val, &st.flush_threads) ? Status::OK() : bad("a number");
  if (key == "direct_io") return parse_bool(val, &st.direct_io) ? Status::OK() : bad("0 or 1");
  if (key == "invalidate") return parse_bool(val, &fs.invalidate) ? Status::OK() : bad("0 or 1");
  if (key == "entry_timeout")
    return parse_seconds(val, &fs.entry_timeout) ? Status::OK() : bad("seconds");
  if (key == "attr_timeout")
    return parse_seconds(val, &fs.attr_timeout) ? Status::OK() : bad("seconds");
  if (key == "negative_timeout")
    return parse_seconds(val, &fs.negative_timeout) ? Status::OK() : bad("seconds");
  if (key == "log_file") {
    if (val.empty() || val[0] != '/') return bad("an absolute path");
    fs.log_file = val;
    return Status::OK();
  }
  if (key == "metrics")
    return parse_listen(val, &fs.metrics_host, &fs.metrics_port)
               ? Status::OK()
               : bad("PORT, ADDR:PORT or [IPV6]:PORT with a numeric address, port 1-65535");
  if (key == "log_level") {
    static const char* const levels[] = {"trace", "debug",    "info", "warn",
                                         "error", "critical", "off"};
    for (const char* l : levels)
      if (val == l) {
        fs.log_level = val;
        return Status::OK();
      }
    return bad("trace, debug, info, warn, error, critical or off");
  }
  if (key == "ro" && !has_val) {
    st.read_only = true;
    fs.fuse_opts.push_back("ro");
    return Status::OK();
  }
  if (key == "allow_other" && !has_val) {
    fs.allow_other = true;
    fs.fuse_opts.push_back("allow_other");
    return Status::OK();
  }
  if (key == "default_permissions" && !has_val) {
    fs.default_permissions = true;
    return Status::OK();
  }
  if (key == "no_default_permissions" && !has_val) {
    fs.default_permissions = false;
    return Status::OK();
  }
  if (key == "debug" && !has_val) {
    fs.debug = true;
    return Status::OK();
  }
  if (fuse_passthrough(key)) {
    fs.fuse_opts.push_back(opt);
    return Status::OK();
  }
  if (ignored(key)) return Status::OK();
  return Status::Invalid("unknown mount option '" + key + "' (see kvfs --help)");
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
  if (threads < 1 || threads > 1024) return Status::Invalid("threads must be between 1 and 1024");
  if (mountpoint.empty()) return Status::Invalid("mount point not given");
  return Status::OK();
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
  a.fs.mountpoint = realpath(pos[1].c_str(), buf) ? buf : pos[1];

  KVFS_RETURN_IF_ERROR(a.store.validate());
  KVFS_RETURN_IF_ERROR(a.fs.validate());
  return a;
}

const char* usage_text() {
  return R"(usage: kvfs BACKING_DIR MOUNTPOINT [-o OPTION[,OPTION...]] [-f] [-d]

Mounts a KV-cache filesystem at MOUNTPOINT: a RAM tier in front of segment
files packed into BACKING_DIR. Returns once the mount is ready.

  -f                     stay in the foreground, log to stderr
  -d                     foreground with debug logging (implies -f)
  -s                     single-threaded (one FUSE worker)
  -h, --help             this text
  -V, --version          version

kvfs options (sizes take K, M, G, T suffixes):
  ram_size=SIZE          RAM tier capacity (default 1G)
  ram_prefault=SIZE      RAM tier memory faulted in at mount, in the
                         background (default 1G or ram_size; 0 = off)
  segment_size=SIZE      segment file size (default 256M)
  index_dir=PATH         RocksDB index location (default /var/lib/kvfs/<id>)
  threads=N              FUSE worker threads (default 16)
  flush_threads=N        background flushers (default 2)
  flush_batch=SIZE       bytes per flush batch / fdatasync (default 64M)
  max_file_size=SIZE     largest file; writes past it get EFBIG (default 1T)
  direct_io=0|1          O_DIRECT for segment I/O when supported (default 1)
  node_id=NAME           node name in segment file names (default: hostname)
  entry_timeout=SEC      kernel name cache (default 10)
  attr_timeout=SEC       kernel attribute cache (default 10)
  negative_timeout=SEC   kernel cache of absent names (default 10)
  log_level=LEVEL        trace|debug|info|warn|error|critical|off (default info)
  log_file=PATH          log to this file (default: syslog; stderr with -f)
  capacity=SIZE          cap on the backing dir (default 80% of the space
                         available to kvfs at mount)
  high_watermark=F       eviction starts above F * capacity (default 0.95)
  low_watermark=F        and stops at F * capacity (default 0.85)
  evict_grace=SEC        never evict a file used this recently (default 60)
  io_timeout=SEC         longest a client call waits for the backing dir;
                         then EIO, and the stall is logged (default 30)
  reclaim_ratio=F        reclaim segments less than F live (default 0.2)
  tmp_max_age=SEC        remove orphaned *.tmp/.o_direct_probe_* after (3600)
  clean_tmp=0|1          that housekeeping on or off (default 1)
  clean_empty_dirs=0|1   remove directories emptied by eviction (default 1)
  invalidate=0|1         tell the kernel at once about evicted names
                         (default 0: they expire after entry_timeout)
  metrics=[ADDR:]PORT    serve Prometheus metrics at http://ADDR:PORT/metrics
                         (default off; ADDR defaults to 127.0.0.1)

FUSE options: allow_other, allow_root, ro, fsname=NAME, subtype=NAME,
auto_unmount. The kernel checks permissions against each file's mode and
owner (default_permissions) unless no_default_permissions is given. fstab words (defaults, noauto, nofail, _netdev,
x-systemd.*, ...) are accepted and ignored.
)";
}

}  // namespace kvfs
