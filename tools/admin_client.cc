// SPDX-License-Identifier: Apache-2.0
#include "tools/admin_client.h"

#include <sys/stat.h>
#include <sys/statfs.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "core/control/control_client.h"
#include "tools/admin_exit.h"

namespace kvfs::admin {
namespace {

namespace fs = std::filesystem;

constexpr long kFuseSuperMagic = 0x65735546;
using control::kControlName;

}  // namespace

Mount::Mount(const std::string& arg) : arg_(arg) {
  char buf[PATH_MAX];
  if (!::realpath(arg.c_str(), buf)) fail(kExitUnreachable, arg + ": " + errno_text(errno));
  root_ = buf;
  struct statfs sf;
  if (::statfs(root_.c_str(), &sf) != 0)
    fail(kExitUnreachable, "cannot reach " + arg + ": " + errno_text(errno));
  if (static_cast<long>(sf.f_type) != kFuseSuperMagic)
    fail(kExitUnreachable, arg + " is not a kvfs mount (not a FUSE filesystem)");
  ctl_ = control::control_path(root_);
  struct stat st;
  if (::stat(ctl_.c_str(), &st) != 0) {
    const int e = errno;
    if (e == ENOENT)
      fail(kExitUnreachable, arg + " is not a kvfs mount point (no " + kControlName +
                                 " at its root; give the mount point itself)");
    fail(kExitUnreachable,
         "cannot reach the kvfs daemon at " + arg + ": " + errno_text(e) +
             (e == EACCES ? " (mounted without allow_other by another user?)" : ""));
  }
  if (!S_ISREG(st.st_mode))
    fail(kExitUnreachable,
         arg + " is not a kvfs mount point (" + kControlName + " is not a control file)");
}

json Mount::request(const json& req) const {
  json r = request_raw(req);
  if (r.is_object() && r.contains("error")) {
    const int e = r.value("errno", 0);
    const json& err = r["error"];
    std::string text = err.is_string() ? err.get<std::string>() : err.dump();
    std::string msg = req.value("cmd", "request") + ": the daemon refused";
    // A bare status name ("NotFound") says less than strerror.
    if (e != 0 && text.find(' ') == std::string::npos) {
      msg += ": " + errno_text(e);
    } else {
      msg += ": " + text;
      if (e != 0) msg += " (" + errno_text(e) + ")";
    }
    if (req.contains("path")) msg += " [path '" + req["path"].get<std::string>() + "']";
    throw Failure{kExitRefused, msg};
  }
  return r;
}

json Mount::request_raw(const json& req) const {
  auto r = control::request(ctl_, req.dump());
  if (r.ok()) return std::move(*r);
  const Status& s = r.status();
  std::string msg = s.message().empty() ? s.ToString() : s.message();
  if (s.code() == Status::Code::kAccess) msg += " (is the mount shared with allow_other?)";
  fail(kExitUnreachable, msg);
}

std::string Mount::relative(const std::string& p) const {
  fs::path in(p);
  std::string rel;
  if (in.is_absolute()) {
    const std::string norm = in.lexically_normal().string();
    std::optional<std::string> r;
    for (const std::string& base : {root_, fs::absolute(arg_).lexically_normal().string()}) {
      std::string b = base;
      while (b.size() > 1 && b.back() == '/') b.pop_back();
      std::string n = norm;
      while (n.size() > 1 && n.back() == '/') n.pop_back();
      if (n == b) {
        r = "";
        break;
      }
      if (n.size() > b.size() && n.compare(0, b.size(), b) == 0 &&
          (b == "/" || n[b.size()] == '/')) {
        r = n.substr(b == "/" ? 1 : b.size() + 1);
        break;
      }
    }
    if (!r) fail(kExitUsage, p + " is not under the mount point " + root_);
    rel = *r;
  } else {
    rel = in.lexically_normal().string();
  }
  while (!rel.empty() && rel.back() == '/') rel.pop_back();
  if (rel == ".") rel.clear();
  if (rel == ".." || rel.rfind("../", 0) == 0)
    fail(kExitUsage, p + " is not under the mount point " + root_);
  return rel;
}

}  // namespace kvfs::admin
