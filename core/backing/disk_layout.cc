// SPDX-License-Identifier: Apache-2.0
#include "core/backing/disk_layout.h"

#include <cctype>
#include <cinttypes>
#include <cstdio>

namespace kvfs::layout {
namespace {

constexpr size_t kIdDigits = 16;

std::string join(const std::string& dir, const char* name) {
  return dir + "/" + name;
}

constexpr std::string_view kAllOpen = "all";
constexpr size_t kNameMax = 255;

std::string hex(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof(b), "%" PRIx64, v);
  return b;
}

// Lower-case hex of at most 16 digits, nothing else.
std::optional<uint64_t> parse_hex(std::string_view s) {
  if (s.empty() || s.size() > 16) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else
      return std::nullopt;
    v = v << 4 | uint64_t(d);
  }
  return v;
}

}  // namespace

std::string super_path(const std::string& backing) {
  return join(backing, kSuperName);
}

std::string super_tmp_path(const std::string& backing, const std::string& node) {
  return join(backing, (std::string(kSuperName) + "." + node + ".tmp").c_str());
}

std::string lock_path(const std::string& backing, const std::string& node) {
  return join(backing, ("kvfs." + node + ".lock").c_str());
}

std::string shared_lock_path(const std::string& backing) {
  return join(backing, kSharedLockName);
}

std::string shared_marker_path(const std::string& backing) {
  return join(backing, kSharedMarkerName);
}

std::string direct_probe_path(const std::string& backing, const std::string& node) {
  return segment_dir(backing) + "/.direct_probe." + node;
}

std::string segment_dir(const std::string& backing) {
  return join(backing, kSegDir);
}

std::string head_dir(const std::string& backing) {
  return join(backing, kHeadDir);
}

std::string lock_holder_text(const LockHolder& h) {
  return h.pid + "\n" + h.host + "\n" + h.mount + "\n";
}

LockHolder parse_lock_holder(std::string_view text) {
  LockHolder h;
  std::string* fields[] = {&h.pid, &h.host, &h.mount};
  for (std::string* f : fields) {
    const size_t nl = text.find('\n');
    *f = std::string(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return h;
}

std::string segment_name(const std::string& node, uint64_t id) {
  char b[kIdDigits + 1];
  std::snprintf(b, sizeof(b), "%016" PRIx64, id);
  return node + "-" + b + kSegSuffix;
}

std::optional<SegmentFileName> parse_segment_name(std::string_view name) {
  const std::string_view suffix = kSegSuffix;
  // At least one character of node, then '-', the id and the suffix.
  const size_t tail = 1 + kIdDigits + suffix.size();
  if (name.size() <= tail || name.substr(name.size() - suffix.size()) != suffix ||
      name[name.size() - tail] != '-')
    return std::nullopt;
  const auto id = parse_hex(name.substr(name.size() - tail + 1, kIdDigits));
  if (!id || *id == 0) return std::nullopt;
  return SegmentFileName{std::string(name.substr(0, name.size() - tail)), *id};
}

namespace {
constexpr std::string_view kRetiredSuffix = ".retired";
}

std::string retired_segment_name(std::string_view segment_name) {
  return std::string(segment_name) + std::string(kRetiredSuffix);
}

std::optional<SegmentFileName> parse_retired_segment_name(std::string_view name) {
  if (name.size() <= kRetiredSuffix.size() ||
      name.substr(name.size() - kRetiredSuffix.size()) != kRetiredSuffix)
    return std::nullopt;
  return parse_segment_name(name.substr(0, name.size() - kRetiredSuffix.size()));
}

std::string head_name(const NodeHead& h) {
  std::string n = h.node + "." + hex(h.gen) + "." + hex(h.last_id);
  const size_t base = n.size();
  if (h.complete) {
    for (const auto& [id, valid] : h.open) n += "." + hex(id) + "-" + hex(valid);
    if (n.size() <= kNameMax) return n;
    n.resize(base);
  }
  return n + "." + std::string(kAllOpen);
}

std::optional<NodeHead> parse_head_name(std::string_view name) {
  NodeHead h;
  size_t dot = name.find('.');
  if (dot == 0 || dot == std::string_view::npos) return std::nullopt;
  h.node = std::string(name.substr(0, dot));
  for (char c : h.node)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')) return std::nullopt;
  name.remove_prefix(dot + 1);
  dot = name.find('.');
  auto gen = parse_hex(name.substr(0, dot));
  if (!gen) return std::nullopt;
  h.gen = *gen;
  if (dot == std::string_view::npos) return std::nullopt;
  name.remove_prefix(dot + 1);
  dot = name.find('.');
  auto last = parse_hex(name.substr(0, dot));
  if (!last) return std::nullopt;
  h.last_id = *last;
  while (dot != std::string_view::npos) {
    name.remove_prefix(dot + 1);
    dot = name.find('.');
    const std::string_view part = name.substr(0, dot);
    if (part == kAllOpen && dot == std::string_view::npos && h.open.empty()) {
      h.complete = false;
      break;
    }
    const size_t dash = part.find('-');
    if (dash == std::string_view::npos) return std::nullopt;
    auto id = parse_hex(part.substr(0, dash));
    auto valid = parse_hex(part.substr(dash + 1));
    if (!id || !valid || *id == 0) return std::nullopt;
    h.open.emplace_back(*id, *valid);
  }
  return h;
}

}  // namespace kvfs::layout
