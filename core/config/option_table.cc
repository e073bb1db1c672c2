// SPDX-License-Identifier: Apache-2.0
#include "core/config/option_table.h"

#include <arpa/inet.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/config/config.h"

namespace kvfs {
namespace {

constexpr double kMiB = 1024.0 * 1024;
constexpr double kGiB = kMiB * 1024;
constexpr double kYear = 365 * 86400.0;

// spdlog's names; "warning" and "err" are its spellings too (and the daemon
// reports "warning" as the current level), so they read back.
const char* const kLevels[] = {"trace", "debug", "info",     "warn", "warning",
                               "error", "err",   "critical", "off"};

// Mount-time option order is --help's order: storage, then eviction.
const std::vector<StoreOption> kStoreOptions = {
    {{"ram_size", OptType::kSize, "1G", 16 * kMiB, kNoMax, true,
      "RAM tier capacity, dirty and clean data together (at most the machine's memory)"},
     [](StoreConfig& c) -> FieldRef { return &c.ram_size; }},
    {{"ram_prefault", OptType::kSize, "1G", 0, kNoMax, false,
      "RAM tier memory faulted in at mount, in the background (0 = off; at most ram_size)"},
     [](StoreConfig& c) -> FieldRef { return &c.ram_prefault; }},
    {{"prefetch", OptType::kSize, "256M", 0, kNoMax, true,
      "read cold blocks of a looked-up or opened file into RAM ahead of the client: bytes in "
      "flight or not yet taken at most, and a quarter of ram_size (0 = off)"},
     [](StoreConfig& c) -> FieldRef { return &c.prefetch_bytes; }},
    {{"prefetch_threads", OptType::kCount, "8", 1, 64, false,
      "reads ahead in flight at once (fills a high-latency link)"},
     [](StoreConfig& c) -> FieldRef { return &c.prefetch_threads; }},
    {{"segment_readahead", OptType::kSize, "6M", 0, 8 * kMiB, true,
      "after a client waited for a cold file's end, read this far ahead along its segment (the "
      "files it stored next), while no other read-ahead is in flight (0 = off)"},
     [](StoreConfig& c) -> FieldRef { return &c.segment_readahead; }},
    {{"segment_size", OptType::kSize, "256M", 4 * kMiB, 64 * kGiB, false,
      "a segment file is closed past this size"},
     [](StoreConfig& c) -> FieldRef { return &c.segment_size; }},
    {{"index_dir", OptType::kPath, nullptr, 0, 0, false, "RocksDB index location (local disk)",
      "/var/lib/kvfs/<id>"},
     [](StoreConfig& c) -> FieldRef { return &c.index_dir; }},
    // 0 in the struct is "not given": chosen for the backing fs at mount.
    {{"flush_threads", OptType::kCount, nullptr, 1, 64, false,
      "background flushers, each with its own open segment",
      "4 on a network filesystem (NFS, SMB, Ceph, Lustre, FUSE, ...), 2 on a local one",
      /*zero_is_unset=*/true},
     [](StoreConfig& c) -> FieldRef { return &c.flush_threads; }},
    {{"flush_pacing", OptType::kBool, "1", 0, 1, false,
      "size the flushers' batches in flight from the backing link's measured rate and round "
      "trips (at most flush_threads), and slow the flush while clients read; 0: flush_threads "
      "batches always"},
     [](StoreConfig& c) -> FieldRef { return &c.flush_pacing; }},
    {{"flush_batch", OptType::kSize, "64M", 1 * kMiB, kNoMax, false,
      "bytes per flush batch (one fdatasync each)"},
     [](StoreConfig& c) -> FieldRef { return &c.flush_batch_bytes; }},
    {{"max_file_size", OptType::kSize, "1T", 1 * kMiB, kNoMax, false,
      "largest file; writes past it get EFBIG"},
     [](StoreConfig& c) -> FieldRef { return &c.max_file_size; }},
    {{"io_timeout", OptType::kSeconds, "30", 0.1, 86400, true,
      "longest a client call waits for the backing dir; then EIO, and the stall is logged"},
     [](StoreConfig& c) -> FieldRef { return &c.io_timeout_s; }},
    {{"direct_io", OptType::kBool, "1", 0, 1, false,
      "O_DIRECT for segment I/O when the backing fs supports it"},
     [](StoreConfig& c) -> FieldRef { return &c.direct_io; }},
    {{"node_id", OptType::kName, nullptr, 0, 0, false,
      "this node's name in a backing dir shared by nodes (one per kvfs)",
      "none: owns the dir alone, its segments named after the host"},
     [](StoreConfig& c) -> FieldRef { return &c.node_id; }},
    {{"peer_poll", OptType::kSeconds, "0.2", 0.05, 60, false,
      "with node_id: how often the other nodes' segment logs are read for their new files"},
     [](StoreConfig& c) -> FieldRef { return &c.peer_poll_s; }},
    {{"segment_grace", OptType::kSeconds, "5", 0, 3600, false,
      "with node_id: how long a reclaimed segment stays (renamed) before it is deleted, so that "
      "the other nodes reading it have moved on"},
     [](StoreConfig& c) -> FieldRef { return &c.segment_grace_s; }},
    // 0 in the struct is "not given": 80 % of the space available at mount.
    {{"capacity", OptType::kSize, nullptr, 0, kNoMax, true,
      "cap on the bytes kept in the backing dir (at least two segments)",
      "80% of the space available at mount", /*zero_is_unset=*/true},
     [](StoreConfig& c) -> FieldRef { return &c.capacity; }},
    {{"high_watermark", OptType::kFraction, "0.95", 0, 1, false,
      "eviction starts above F * capacity"},
     [](StoreConfig& c) -> FieldRef { return &c.high_watermark; }},
    {{"low_watermark", OptType::kFraction, "0.85", 0, 1, false,
      "and stops at F * capacity (below high_watermark)"},
     [](StoreConfig& c) -> FieldRef { return &c.low_watermark; }},
    {{"evict_grace", OptType::kSeconds, "60", 0, kYear, true,
      "never evict a file used this recently"},
     [](StoreConfig& c) -> FieldRef { return &c.evict_grace_s; }},
    {{"reclaim_ratio", OptType::kFraction, "0.2", 0, 1, false, "reclaim segments less than F live"},
     [](StoreConfig& c) -> FieldRef { return &c.reclaim_ratio; }},
    {{"tmp_max_age", OptType::kSeconds, "3600", 0, kYear, false,
      "remove orphaned *.tmp/.o_direct_probe_* files older than this"},
     [](StoreConfig& c) -> FieldRef { return &c.tmp_max_age_s; }},
    {{"clean_tmp", OptType::kBool, "1", 0, 1, false, "that housekeeping on or off"},
     [](StoreConfig& c) -> FieldRef { return &c.clean_tmp; }},
    {{"clean_empty_dirs", OptType::kBool, "1", 0, 1, false,
      "remove directories emptied by eviction"},
     [](StoreConfig& c) -> FieldRef { return &c.clean_empty_dirs; }},
    {{"ro", OptType::kFlag, nullptr, 0, 0, false, "read-only: every change fails with EROFS",
      nullptr, false, /*flag_value=*/true, /*to_fuse=*/true},
     [](StoreConfig& c) -> FieldRef { return &c.read_only; }},
};

bool parse_bool(const std::string& v, bool* out) {
  if (v == "1" || v == "true" || v == "yes" || v == "on") return *out = true, true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return *out = false, true;
  return false;
}

bool parse_number(const std::string& v, double* out) {
  char* end = nullptr;
  errno = 0;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || errno != 0 || !std::isfinite(d)) return false;
  *out = d;
  return true;
}

// Numeric addresses only: a name could resolve differently at boot than when
// it was written.
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
  if (p.empty() || p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos)
    return false;
  const unsigned long n = std::strtoul(p.c_str(), nullptr, 10);
  if (n < 1 || n > 65535) return false;
  *host = h;
  *port = static_cast<unsigned>(n);
  return true;
}

const char* expected(OptType t) {
  switch (t) {
    case OptType::kSize: return "a size such as 512M, 64G or 10T";
    case OptType::kFraction: return "a fraction between 0 and 1";
    case OptType::kSeconds: return "seconds";
    case OptType::kCount: return "a number";
    case OptType::kBool: return "0 or 1";
    case OptType::kPath: return "an absolute path";
    case OptType::kName: return "letters, digits, '-' and '_'";
    case OptType::kLevel: return "trace, debug, info, warn, error, critical or off";
    case OptType::kListen:
      return "PORT, ADDR:PORT or [IPV6]:PORT with a numeric address, port 1-65535";
    case OptType::kFlag: return "no value";
  }
  return "";
}

std::string number_text(const OptionSpec& s, double v) {
  if (s.type == OptType::kSize) return format_size(static_cast<uint64_t>(v));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.10g", v);  // 31536000, not 3.1536e+07
  return buf;
}

}  // namespace

const std::vector<StoreOption>& store_options() {
  return kStoreOptions;
}

const StoreOption* find_store_option(std::string_view name) {
  for (const StoreOption& o : kStoreOptions)
    if (name == o.spec.name) return &o;
  return nullptr;
}

Status parse_option(const OptionSpec& s, const std::string& v, bool has_value, FieldRef f) {
  auto bad = [&] {
    return Status::Invalid(std::string("invalid value for option ") + s.name + " (" +
                           expected(s.type) + "): '" + v + "'");
  };
  if (s.type == OptType::kFlag) {
    if (has_value) return bad();
    *f.flag = s.flag_value;
    return Status::OK();
  }
  switch (s.type) {
    case OptType::kSize: {
      auto b = parse_size(v);
      // 0 would read as "not given" for a field whose 0 means "computed".
      if (!b || (s.zero_is_unset && *b == 0)) return bad();
      *f.u64 = *b;
      return Status::OK();
    }
    case OptType::kFraction:
    case OptType::kSeconds: {
      double d;
      if (!parse_number(v, &d) || d < 0) return bad();
      *f.f64 = d;
      return Status::OK();
    }
    case OptType::kCount:
      if (v.empty() || v.size() > 9 || v.find_first_not_of("0123456789") != std::string::npos)
        return bad();
      *f.u32 = static_cast<unsigned>(std::strtoul(v.c_str(), nullptr, 10));
      if (s.zero_is_unset && *f.u32 == 0) return bad();  // as for sizes
      return Status::OK();
    case OptType::kBool: return parse_bool(v, f.flag) ? Status::OK() : bad();
    case OptType::kPath:
      if (v.empty() || v[0] != '/') return bad();
      *f.str = v;
      return Status::OK();
    case OptType::kName: *f.str = v; return Status::OK();
    case OptType::kLevel:
      for (const char* l : kLevels)
        if (v == l) return *f.str = v, Status::OK();
      return bad();
    case OptType::kListen: return parse_listen(v, f.str, f.u32) ? Status::OK() : bad();
    case OptType::kFlag: break;
  }
  return bad();
}

Status check_option(const OptionSpec& s, FieldRef f) {
  double v;
  switch (s.type) {
    case OptType::kSize:
      if (s.zero_is_unset && *f.u64 == 0) return Status::OK();
      v = static_cast<double>(*f.u64);
      break;
    case OptType::kFraction:
    case OptType::kSeconds: v = *f.f64; break;
    case OptType::kCount:
      if (s.zero_is_unset && *f.u32 == 0) return Status::OK();
      v = *f.u32;
      break;
    case OptType::kName:
      if (!is_name(*f.str))
        return Status::Invalid(std::string(s.name) + " may hold only letters, digits, '-' and '_'");
      // A host name's limit; the backing dir's file names carry it
      // (disk_layout.h), and NAME_MAX must hold them.
      if (f.str->size() > 64)
        return Status::Invalid(std::string(s.name) + " is longer than 64 characters");
      return Status::OK();
    case OptType::kPath:
      if (!f.str->empty() && (*f.str)[0] != '/')
        return Status::Invalid(std::string(s.name) + " must be an absolute path");
      return Status::OK();
    default: return Status::OK();
  }
  if (v >= s.min && v <= s.max) return Status::OK();
  std::string range = s.max == kNoMax
                          ? "at least " + number_text(s, s.min)
                          : "between " + number_text(s, s.min) + " and " + number_text(s, s.max);
  return Status::Invalid(std::string(s.name) + " must be " + range + " (not " + number_text(s, v) +
                         ")");
}

std::string option_text(const OptionSpec& s, FieldRef f) {
  switch (s.type) {
    case OptType::kSize: return s.zero_is_unset && *f.u64 == 0 ? "" : format_size(*f.u64);
    case OptType::kFraction:
    case OptType::kSeconds: return number_text(s, *f.f64);
    case OptType::kCount: return s.zero_is_unset && *f.u32 == 0 ? "" : std::to_string(*f.u32);
    case OptType::kBool: return *f.flag ? "1" : "0";
    case OptType::kFlag: return *f.flag == s.flag_value ? "1" : "0";
    case OptType::kListen:
      if (*f.u32 == 0) return "";
      return (f.str->find(':') != std::string::npos ? "[" + *f.str + "]" : *f.str) + ":" +
             std::to_string(*f.u32);
    default: return *f.str;
  }
}

const char* option_metavar(const OptionSpec& s) {
  switch (s.type) {
    case OptType::kSize: return "SIZE";
    case OptType::kFraction: return "F";
    case OptType::kSeconds: return "SEC";
    case OptType::kCount: return "N";
    case OptType::kBool: return "0|1";
    case OptType::kPath: return "PATH";
    case OptType::kName: return "NAME";
    case OptType::kLevel: return "LEVEL";
    case OptType::kListen: return "[ADDR:]PORT";
    case OptType::kFlag: return "";
  }
  return "";
}

}  // namespace kvfs
