// SPDX-License-Identifier: Apache-2.0
// kvfs-admin's output: human-readable sizes, times and names, values read out
// of the daemon's JSON replies, the `stats` table, config
// values, and atomic writes of an output file.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace kvfs::admin {

using json = nlohmann::json;

// 1536 -> "1.5 KiB".
std::string human_bytes(double b);
// Nanoseconds since the epoch -> "YYYY-MM-DD HH:MM:SS" local time; "-" if <= 0.
std::string local_time(int64_t ns);
// Names may hold any byte but '/' and NUL: keep terminals sane.
std::string printable(const std::string& s);

// The number at JSON pointer `ptr` in j; 0 when absent or not a number.
double num(const json& j, const char* ptr);
uint64_t unum(const json& j, const char* ptr);

// "30s", "10m", "2h", "1d", "90" (seconds), "1.5h".
std::optional<double> parse_duration(const std::string& s);

// Writes data to path atomically (a reader sees the old or the new file).
void write_atomically(const std::string& path, const std::string& data);

// `stats` as a table for the mount at `root`; with the previous reply and the
// seconds since it, counters also show their rate. It reads statistics by
// their schema paths only (std::logic_error for one the schema lacks).
std::string render_table(const std::string& root, const json& s, const json* prev, double dt);

// `stats --all`: every statistic of the schema (fs/stats_schema.h), one per
// line with its value and what it counts, then each peer node's.
std::string render_all(const json& s);

// `stats` in the Prometheus text format: fs/prom_text.h (shared with the
// daemon's /metrics).

// A runtime setting for `config`: sizes also in bytes.
std::string config_value(const std::string& k, const json& v);

}  // namespace kvfs::admin
