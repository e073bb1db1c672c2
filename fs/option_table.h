// SPDX-License-Identifier: Apache-2.0
// The FsConfig half of the option table, and the lookup that joins it with
// StoreConfig's half (core/config/option_table.h explains why there are two).
// Everything that lists or parses options goes through mount_options() or
// find_mount_option(): mount parsing, `kvfs-admin config`, `kvfs --help`.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/config/option_table.h"
#include "fs/options.h"

namespace kvfs {

struct FsOption {
  OptionSpec spec;
  FieldRef (*field)(FsConfig&);
};

const std::vector<FsOption>& fs_options();

// One row of the joined table: a store option or an fs option.
struct MountOption {
  const StoreOption* store = nullptr;
  const FsOption* fs = nullptr;

  const OptionSpec& spec() const { return store ? store->spec : fs->spec; }
  FieldRef field(MountConfig& c) const { return store ? store->field(c.store) : fs->field(c.fs); }
};

// Store options first, then fs options, each in its table's order.
const std::vector<MountOption>& mount_options();
const MountOption* find_mount_option(std::string_view name);

// The option list of `kvfs --help`, one "  name=METAVAR  doc (default X)"
// entry per valued option, then the flags.
std::string options_help();

}  // namespace kvfs
