#include "core/config.h"

#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdlib>

namespace kvfs {

uint64_t machine_memory() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
}

// The same rules for mount options and for `kvfs-admin config` at runtime.
Status check_ram_size(uint64_t bytes) {
  if (bytes < (16ull << 20)) return Status::Invalid("ram_size must be at least 16M");
  // Dirty data lives only here until flushed: a RAM tier the machine cannot
  // hold ends in an OOM kill that loses it.
  if (const uint64_t mem = machine_memory(); mem && bytes > mem)
    return Status::Invalid("ram_size " + format_size(bytes) + " is more than this machine's " +
                           std::to_string(mem >> 20) + "M of memory");
  return Status::OK();
}

Status check_capacity(uint64_t bytes, uint64_t segment_size) {
  if (bytes < 2 * segment_size)
    return Status::Invalid("capacity must be at least two segments (" +
                           format_size(2 * segment_size) + ")");
  return Status::OK();
}

Status check_io_timeout(double seconds) {
  if (!(seconds >= 0.1 && seconds <= 86400))
    return Status::Invalid("io_timeout must be between 0.1 and 86400 seconds");
  return Status::OK();
}

Status StoreConfig::validate() const {
  if (backing_dir.empty()) return Status::Invalid("backing directory not given");
  KVFS_RETURN_IF_ERROR(check_ram_size(ram_size));
  if (capacity != 0) KVFS_RETURN_IF_ERROR(check_capacity(capacity, segment_size));
  if (!(low_watermark > 0 && low_watermark < high_watermark && high_watermark <= 1))
    return Status::Invalid("watermarks must satisfy 0 < low_watermark < high_watermark <= 1");
  if (segment_size < (4ull << 20) || segment_size > (64ull << 30))
    return Status::Invalid("segment_size must be between 4M and 64G");
  if (flush_threads < 1 || flush_threads > 64)
    return Status::Invalid("flush_threads must be between 1 and 64");
  if (flush_batch_bytes < (1ull << 20)) return Status::Invalid("flush batch must be at least 1M");
  if (max_file_size < (1ull << 20)) return Status::Invalid("max_file_size must be at least 1M");
  KVFS_RETURN_IF_ERROR(check_io_timeout(io_timeout_s));
  for (char c : node_id)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_')
      return Status::Invalid("node_id may hold only letters, digits, '-' and '_'");
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

std::string default_index_dir(const std::string& backing_id) {
  if (geteuid() == 0) return "/var/lib/kvfs/" + backing_id;
  if (const char* x = std::getenv("XDG_STATE_HOME"); x && *x)
    return std::string(x) + "/kvfs/" + backing_id;
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.local/state/kvfs/" + backing_id;
}

}  // namespace kvfs
