// SPDX-License-Identifier: Apache-2.0
// The table of kvfs's settings: each option's name, type, default, range,
// whether `kvfs-admin config` may change it while mounted, the field it fills
// and one line of doc. Mount parsing (fs/options.cc), the runtime `config`
// command (fs/control.cc), `kvfs --help` and the man page test all read it,
// so they cannot disagree.
//
// It comes in two halves because core must not know fs: store_options() here
// fills StoreConfig, fs_options() (fs/option_table.h) fills FsConfig, and
// fs's mount_options() joins them into one list with one lookup. The row
// type, the typed parser and the range check live here, so both halves parse
// and check alike, and StoreConfig::validate() can check its ranges from the
// table without reaching into fs.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "core/util/status.h"

namespace kvfs {

struct StoreConfig;

enum class OptType : uint8_t {
  kSize,      // bytes: "64M", "1.5T" (parse_size)
  kFraction,  // a number in [0, 1]
  kSeconds,   // a non-negative number, may be fractional
  kCount,     // a non-negative integer
  kBool,      // 0|1 (also true/false, yes/no, on/off)
  kPath,      // an absolute path
  kName,      // letters, digits, '-' and '_' (it becomes part of file names)
  kLevel,     // a log level: trace ... off
  kListen,    // PORT, ADDR:PORT or [V6ADDR]:PORT (numeric addresses only)
  kFlag,      // a word without a value
};

// The field an option fills: one typed pointer (two for kListen).
struct FieldRef {
  FieldRef(uint64_t* p) : u64(p) {}
  FieldRef(double* p) : f64(p) {}
  FieldRef(unsigned* p) : u32(p) {}
  FieldRef(bool* p) : flag(p) {}
  FieldRef(std::string* p) : str(p) {}
  FieldRef(std::string* host, unsigned* port) : u32(port), str(host) {}
  uint64_t* u64 = nullptr;
  double* f64 = nullptr;
  unsigned* u32 = nullptr;
  bool* flag = nullptr;
  std::string* str = nullptr;
};

inline constexpr double kNoMax = std::numeric_limits<double>::infinity();

struct OptionSpec {
  const char* name;
  OptType type;
  // The default as written after "name=", which parses back to the struct's
  // default (tests/option_table_test.cc checks it and the man page's).
  // nullptr: computed at mount; default_doc says how.
  const char* def;
  double min, max;  // inclusive; bytes for sizes. Numbers only.
  bool runtime;     // kvfs-admin config may change it while mounted
  const char* doc;  // one line for --help
  const char* default_doc = nullptr;
  // 0 is the struct's "not given, computed at mount" and cannot be written.
  bool zero_is_unset = false;
  // kFlag: the value it stores, and whether libfuse is given the word too.
  bool flag_value = true;
  bool to_fuse = false;
};

struct StoreOption {
  OptionSpec spec;
  FieldRef (*field)(StoreConfig&);
};

const std::vector<StoreOption>& store_options();
const StoreOption* find_store_option(std::string_view name);

// Parses `text` into the field; only the syntax is checked here (and that a
// flag has no value), ranges are validate()'s. Invalid on a bad value.
Status parse_option(const OptionSpec& spec, const std::string& text, bool has_value,
                    FieldRef field);
// The range of one field, as validate() checks it. Invalid when outside.
Status check_option(const OptionSpec& spec, FieldRef field);
// The value as one would write it after "name=" ("" for an unset one).
std::string option_text(const OptionSpec& spec, FieldRef field);
// "SIZE", "SEC", "0|1", ... for --help.
const char* option_metavar(const OptionSpec& spec);

}  // namespace kvfs
