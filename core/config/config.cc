// SPDX-License-Identifier: Apache-2.0
#include "core/config/config.h"

#include <sys/vfs.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/config/option_table.h"

namespace kvfs {

uint64_t machine_memory() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
}

uint64_t available_memory() {
  FILE* f = std::fopen("/proc/meminfo", "re");
  if (!f) return 0;
  char line[256];
  unsigned long long kib = 0;
  bool found = false;
  while (!found && std::fgets(line, sizeof(line), f))
    found = std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1;
  std::fclose(f);
  return found ? uint64_t(kib) << 10 : 0;
}

bool on_network_fs(const std::string& dir) {
  struct statfs s;
  if (::statfs(dir.c_str(), &s) != 0) return false;
  // From linux/magic.h and the filesystems' own sources (not all are there).
  static constexpr uint32_t kRemote[] = {
      0x6969,      // NFS (and pNFS)
      0x517B,      // SMB
      0xFE534D42,  // SMB2
      0xFF534D42,  // CIFS
      0x00C36400,  // Ceph
      0x0BD00BD0,  // Lustre
      0x47504653,  // GPFS (IBM Storage Scale)
      0x19830326,  // BeeGFS
      0x01021997,  // 9p
      0x6B414653,  // AFS (kAFS)
      0x5346414F,  // AFS (OpenAFS)
      0x65735546,  // FUSE: most backing dirs behind FUSE are remote (and nfsemu)
  };
  const auto type = static_cast<uint32_t>(s.f_type);
  for (uint32_t t : kRemote)
    if (type == t) return true;
  return false;
}

unsigned default_flush_threads(const std::string& backing_dir) {
  return on_network_fs(backing_dir) ? 4 : 2;
}

Status StoreConfig::validate() const {
  if (backing_dir.empty()) return Status::Invalid("backing directory not given");
  StoreConfig c = *this;  // the table's fields point into a mutable config
  for (const StoreOption& o : store_options())
    KVFS_RETURN_IF_ERROR(check_option(o.spec, o.field(c)));
  // Dirty data lives only in the RAM tier until flushed: one the machine
  // cannot hold ends in an OOM kill that loses it.
  if (const uint64_t mem = machine_memory(); mem && ram_size > mem)
    return Status::Invalid("ram_size " + format_size(ram_size) + " is more than this machine's " +
                           std::to_string(mem >> 20) + "M of memory");
  if (capacity != 0 && capacity < 2 * segment_size)
    return Status::Invalid("capacity must be at least two segments (" +
                           format_size(2 * segment_size) + ")");
  if (!(low_watermark > 0 && low_watermark < high_watermark && high_watermark <= 1))
    return Status::Invalid("watermarks must satisfy 0 < low_watermark < high_watermark <= 1");
  return Status::OK();
}

std::optional<uint64_t> parse_size(const std::string& s) {
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || end == s.c_str() || v < 0 || !std::isfinite(v)) return std::nullopt;
  std::string suffix(end);
  double mult = 1;
  if (suffix.size() > 1 && (suffix.back() == 'B' || suffix.back() == 'b') && suffix.size() <= 3)
    suffix.pop_back();  // "64MB", "64MiB" -> "64M"/"64Mi"
  if (suffix.size() == 2 && (suffix[1] == 'i' || suffix[1] == 'I')) suffix.pop_back();
  if (suffix.size() > 1) return std::nullopt;
  if (!suffix.empty()) {
    switch (std::toupper(static_cast<unsigned char>(suffix[0]))) {
      case 'K': mult = 1024.0; break;
      case 'M': mult = 1024.0 * 1024; break;
      case 'G': mult = 1024.0 * 1024 * 1024; break;
      case 'T': mult = 1024.0 * 1024 * 1024 * 1024; break;
      default: return std::nullopt;
    }
  }
  double bytes = v * mult;
  if (bytes >= 1.8e19) return std::nullopt;
  if (suffix.empty() && std::floor(v) != v) return std::nullopt;
  return static_cast<uint64_t>(bytes);
}

std::string format_size(uint64_t b) {
  static const char* const units[] = {"", "K", "M", "G", "T"};
  int u = 0;
  while (u < 4 && b >= 1024 && b % 1024 == 0) {
    b /= 1024;
    ++u;
  }
  return std::to_string(b) + units[u];
}

std::string default_index_dir(const std::string& backing_id, const std::string& node_id) {
  const std::string leaf = node_id.empty() ? backing_id : backing_id + "." + node_id;
  if (geteuid() == 0) return "/var/lib/kvfs/" + leaf;
  if (const char* x = std::getenv("XDG_STATE_HOME"); x && *x)
    return std::string(x) + "/kvfs/" + leaf;
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.local/state/kvfs/" + leaf;
}

bool is_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
}

bool is_name(const std::string& v) {
  for (char c : v)
    if (!is_name_char(c)) return false;
  return true;
}

std::string host_name() {
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  return host;
}

std::string node_id_of_host(const std::string& host) {
  std::string n;
  for (char c : host)
    if (is_name_char(c)) n += c;
  return n.empty() ? "node" : n;
}

std::string default_node_id() {
  return node_id_of_host(host_name());
}

std::string node_id_of(const StoreConfig& cfg) {
  return cfg.node_id.empty() ? default_node_id() : cfg.node_id;
}

}  // namespace kvfs
