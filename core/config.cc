#include "core/config.h"

#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdlib>

namespace kvfs {

Status StoreConfig::validate() const {
  if (backing_dir.empty()) return Status::Invalid("backing directory not given");
  if (ram_size < (16ull << 20)) return Status::Invalid("ram_size must be at least 16M");
  if (segment_size < (4ull << 20) || segment_size > (64ull << 30))
    return Status::Invalid("segment_size must be between 4M and 64G");
  if (flush_threads < 1 || flush_threads > 64)
    return Status::Invalid("flush_threads must be between 1 and 64");
  if (flush_batch_bytes < (1ull << 20)) return Status::Invalid("flush batch must be at least 1M");
  if (max_file_size < (1ull << 20)) return Status::Invalid("max_file_size must be at least 1M");
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
