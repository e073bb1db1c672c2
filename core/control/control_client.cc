// SPDX-License-Identifier: Apache-2.0
#include "core/control/control_client.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace kvfs::control {
namespace {

// Closes the descriptor on every path out of request_text().
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::string control_path(const std::string& mount_root) {
  const bool slash = !mount_root.empty() && mount_root.back() == '/';
  return mount_root + (slash ? "" : "/") + kControlName;
}

Result<std::string> find_control(const std::string& dir) {
  struct stat d0;
  if (::stat(dir.c_str(), &d0) != 0) return Status::FromErrno(errno, "stat " + dir);
  char buf[PATH_MAX];
  if (!::realpath(dir.c_str(), buf)) return Status::FromErrno(errno, "realpath " + dir);
  // Upwards until the device changes: a control file above the mount root
  // belongs to some other mount.
  for (std::string d = buf;;) {
    struct stat st;
    if (::stat(d.c_str(), &st) != 0 || st.st_dev != d0.st_dev) break;
    const std::string c = control_path(d);
    if (::access(c.c_str(), F_OK) == 0) return c;
    if (d == "/") break;
    const size_t slash = d.rfind('/');
    d = slash == 0 ? "/" : d.substr(0, slash);
  }
  return Status::NotFound(dir + " is not on a kvfs mount (no " + kControlName + " above it)");
}

Result<std::string> request_text(const std::string& ctl, std::string_view request) {
  if (request.size() > kMaxRequestBytes)
    return Status::Invalid("a control request of " + std::to_string(request.size()) +
                           " bytes is longer than " + std::to_string(kMaxRequestBytes));
  Fd f{::open(ctl.c_str(), O_RDWR | O_CLOEXEC)};
  if (f.fd < 0) return Status::FromErrno(errno, "cannot open " + ctl);
  ssize_t n;
  do {
    n = ::write(f.fd, request.data(), request.size());
  } while (n < 0 && errno == EINTR);
  if (n < 0) return Status::FromErrno(errno, "cannot send the request to " + ctl);
  if (size_t(n) != request.size())
    return Status::IOError("cannot send the request to " + ctl + ": short write (" +
                           std::to_string(n) + " of " + std::to_string(request.size()) + " bytes)");
  std::string reply;
  char buf[65536];
  for (;;) {
    const ssize_t r = ::pread(f.fd, buf, sizeof(buf), static_cast<off_t>(reply.size()));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Status::FromErrno(errno, "cannot read the reply from " + ctl);
    if (r == 0) return reply;
    if (reply.size() + size_t(r) > kMaxReplyBytes)
      return Status::Corruption("the reply from " + ctl + " is longer than " +
                                std::to_string(kMaxReplyBytes) + " bytes");
    reply.append(buf, size_t(r));
  }
}

Result<nlohmann::json> request(const std::string& ctl, std::string_view req) {
  auto text = request_text(ctl, req);
  if (!text.ok()) return text.status();
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded())
    return Status::Corruption("the daemon sent a reply that is not JSON: '" + text->substr(0, 200) +
                              "'");
  return j;
}

}  // namespace kvfs::control
