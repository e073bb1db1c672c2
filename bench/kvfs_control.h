// SPDX-License-Identifier: Apache-2.0
// kvfs's statistics for the benchmarks, through the control protocol's one
// client (core/control/control_client.h). The benchmarks only want the numbers when
// they are there, so failures become nullopt / "".
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/control/control_client.h"

namespace kvfs::bench {

// The control file of the kvfs mount holding dir ("" when dir is not on kvfs).
inline std::string find_kvfs_control(const std::string& dir) {
  auto c = control::find_control(dir);
  return c.ok() ? *c : "";
}

// Sends one request; nullopt when the file cannot be used or the reply is not JSON.
inline std::optional<nlohmann::json> kvfs_control(const std::string& ctl, const std::string& req) {
  auto j = control::request(ctl, req);
  if (!j.ok()) return std::nullopt;
  return std::move(*j);
}

// A numeric field by dotted path ("hits.ram"); 0 when absent.
inline double jnum(const nlohmann::json& j, const std::string& path) {
  const nlohmann::json* cur = &j;
  size_t start = 0;
  for (;;) {
    const size_t dot = path.find('.', start);
    const std::string k = path.substr(start, dot == std::string::npos ? dot : dot - start);
    if (!cur->is_object() || !cur->contains(k)) return 0;
    cur = &(*cur)[k];
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return cur->is_number() ? cur->get<double>() : 0;
}

}  // namespace kvfs::bench
