// Reading kvfs's statistics through its control file, MNT/.kvfs-control:
// open O_RDWR, write a JSON request, pread the JSON reply from offset 0.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "bench/bench_util.h"

namespace kvfs::bench {

// The control file of the kvfs mount holding dir ("" when dir is not on
// kvfs): the nearest .kvfs-control at or above dir on the same device.
inline std::string find_kvfs_control(const std::string& dir) {
  struct stat d0;
  if (::stat(dir.c_str(), &d0) != 0) return "";
  char buf[PATH_MAX];
  if (!::realpath(dir.c_str(), buf)) return "";
  std::string d = buf;
  for (;;) {
    struct stat st;
    if (::stat(d.c_str(), &st) != 0 || st.st_dev != d0.st_dev) return "";
    const std::string c = (d == "/" ? "" : d) + "/.kvfs-control";
    if (::access(c.c_str(), F_OK) == 0) return c;
    if (d == "/") return "";
    d = parent_of(d);
  }
}

// Sends one request; nullopt when the file cannot be used or the reply is not JSON.
inline std::optional<nlohmann::json> kvfs_control(const std::string& ctl, const std::string& req) {
  const int fd = ::open(ctl.c_str(), O_RDWR);
  if (fd < 0) return std::nullopt;
  if (::write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    ::close(fd);
    return std::nullopt;
  }
  std::string out;
  char b[65536];
  for (off_t off = 0;;) {
    const ssize_t r = ::pread(fd, b, sizeof(b), off);
    if (r <= 0) break;
    out.append(b, static_cast<size_t>(r));
    off += r;
  }
  ::close(fd);
  auto j = nlohmann::json::parse(out, nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  return j;
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
