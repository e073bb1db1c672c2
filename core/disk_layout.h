// The backing directory's layout: every name kvfs gives a file there, and the
// segment file name format, so that the store, the daemon's start-up checks,
// kvfs-admin and the tests cannot drift apart. Renaming anything here is a
// change of the on-disk format.
//
//   <backing>/kvfs.super                       id and format (written via kvfs.super.tmp)
//   <backing>/kvfs.lock                        flock()ed by the owning daemon; holds its pid
//   <backing>/segments/<node>-<16 hex id>.seg  append-only segment files (record.h)
//   <backing>/segments/.direct_probe           O_DIRECT probe, written at open
//
// Constants and pure functions only: thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kvfs::layout {

inline constexpr const char* kSuperName = "kvfs.super";
// The superblock is written to this name and renamed over kSuperName.
inline constexpr const char* kSuperTmpName = "kvfs.super.tmp";
inline constexpr const char* kSuperMagic = "kvfs-superblock";  // its first line
inline constexpr int kSuperFormat = 1;                         // what this kvfs reads and writes
inline constexpr const char* kLockName = "kvfs.lock";
inline constexpr const char* kSegDir = "segments";
inline constexpr const char* kSegSuffix = ".seg";
inline constexpr const char* kDirectProbeName = ".direct_probe";  // in kSegDir

std::string super_path(const std::string& backing);
std::string lock_path(const std::string& backing);
std::string segment_dir(const std::string& backing);

// "<node>-<id as 16 lower-case hex digits>.seg". node must not be empty.
std::string segment_name(const std::string& node, uint64_t id);

// The id in a segment file name; nullopt for any other name (id 0 is never
// handed out, so it is not a segment either).
std::optional<uint64_t> parse_segment_name(std::string_view name);

}  // namespace kvfs::layout
