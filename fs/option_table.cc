// SPDX-License-Identifier: Apache-2.0
#include "fs/option_table.h"

namespace kvfs {
namespace {

constexpr double kYear = 365 * 86400.0;

const std::vector<FsOption> kFsOptions = {
    {{"threads", OptType::kCount, "16", 1, 1024, false, "FUSE worker threads"},
     [](FsConfig& c) -> FieldRef { return &c.threads; }},
    {{"entry_timeout", OptType::kSeconds, "10", 0, kYear, false, "kernel name cache"},
     [](FsConfig& c) -> FieldRef { return &c.entry_timeout; }},
    {{"attr_timeout", OptType::kSeconds, "10", 0, kYear, false, "kernel attribute cache"},
     [](FsConfig& c) -> FieldRef { return &c.attr_timeout; }},
    {{"negative_timeout", OptType::kSeconds, "10", 0, kYear, false,
      "kernel cache of absent names (0.2 with node_id unless given: a peer's new file shows)"},
     [](FsConfig& c) -> FieldRef { return &c.negative_timeout; }},
    {{"log_level", OptType::kLevel, "info", 0, 0, true, "trace|debug|info|warn|error|critical|off"},
     [](FsConfig& c) -> FieldRef { return &c.log_level; }},
    {{"log_file", OptType::kPath, nullptr, 0, 0, false, "log to this file",
      "syslog; stderr with -f"},
     [](FsConfig& c) -> FieldRef { return &c.log_file; }},
    {{"invalidate", OptType::kBool, "0", 0, 1, false,
      "tell the kernel at once about evicted names (else they expire after entry_timeout)"},
     [](FsConfig& c) -> FieldRef { return &c.invalidate; }},
    {{"metrics", OptType::kListen, nullptr, 0, 0, false,
      "serve Prometheus metrics at http://ADDR:PORT/metrics (ADDR defaults to 127.0.0.1)", "off"},
     [](FsConfig& c) -> FieldRef {
       return {&c.metrics_host, &c.metrics_port};
     }},
    {{"allow_other", OptType::kFlag, nullptr, 0, 0, false, "let other users use the mount", nullptr,
      false, /*flag_value=*/true, /*to_fuse=*/true},
     [](FsConfig& c) -> FieldRef { return &c.allow_other; }},
    {{"default_permissions", OptType::kFlag, nullptr, 0, 0, false,
      "the kernel checks permissions against mode and owner (the default)"},
     [](FsConfig& c) -> FieldRef { return &c.default_permissions; }},
    {{"no_default_permissions", OptType::kFlag, nullptr, 0, 0, false, "turns those checks off",
      nullptr, false, /*flag_value=*/false},
     [](FsConfig& c) -> FieldRef { return &c.default_permissions; }},
    {{"debug", OptType::kFlag, nullptr, 0, 0, false,
      "debug logging, as with -d, and libfuse's debug output"},
     [](FsConfig& c) -> FieldRef { return &c.debug; }},
};

std::vector<MountOption> join() {
  std::vector<MountOption> all;
  for (const StoreOption& o : store_options()) all.push_back({&o, nullptr});
  for (const FsOption& o : kFsOptions) all.push_back({nullptr, &o});
  return all;
}

// "  name=METAVAR" in 23 columns, then the doc wrapped at 79.
void help_entry(const OptionSpec& s, std::string* out) {
  std::string head = "  " + std::string(s.name);
  if (s.type != OptType::kFlag) head += "=" + std::string(option_metavar(s));
  std::string doc = s.doc;
  if (s.def) doc += " (default " + std::string(s.def) + ")";
  if (s.default_doc) doc += " (default " + std::string(s.default_doc) + ")";
  if (s.runtime) doc += " *";
  const size_t col = 25, width = 79;
  std::string line = head;
  if (head.size() + 1 <= col) {
    line += std::string(col - head.size(), ' ');
  } else {
    *out += head + "\n";
    line = std::string(col, ' ');
  }
  size_t used = line.size();
  bool first = true;
  for (size_t i = 0; i < doc.size();) {
    size_t j = doc.find(' ', i);
    if (j == std::string::npos) j = doc.size();
    const std::string word = doc.substr(i, j - i);
    if (!first && used + 1 + word.size() > width) {
      *out += line + "\n";
      line = std::string(col, ' ');
      used = col;
      first = true;
    }
    if (!first) line += ' ', ++used;
    line += word;
    used += word.size();
    first = false;
    i = j + 1;
  }
  *out += line + "\n";
}

}  // namespace

const std::vector<FsOption>& fs_options() {
  return kFsOptions;
}

const std::vector<MountOption>& mount_options() {
  static const std::vector<MountOption> all = join();
  return all;
}

const MountOption* find_mount_option(std::string_view name) {
  for (const MountOption& o : mount_options())
    if (name == o.spec().name) return &o;
  return nullptr;
}

std::string options_help() {
  std::string out =
      "kvfs options (sizes take K, M, G, T suffixes; * = also at run time,\n"
      "with kvfs-admin config):\n";
  for (const MountOption& o : mount_options())
    if (o.spec().type != OptType::kFlag) help_entry(o.spec(), &out);
  out += "\nwords without a value:\n";
  for (const MountOption& o : mount_options())
    if (o.spec().type == OptType::kFlag) help_entry(o.spec(), &out);
  return out;
}

}  // namespace kvfs
