// SPDX-License-Identifier: Apache-2.0
#include "core/backing/backing_nodes.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <string_view>

#include "core/backing/disk_layout.h"
#include "core/config/config.h"

namespace kvfs {
namespace {

// "kvfs.<node>.lock" -> node; "" for any other name (kvfs.lock included).
std::string lock_node(const std::string& name) {
  const std::string pre = "kvfs.", suf = ".lock";
  if (name.size() <= pre.size() + suf.size() || name.compare(0, pre.size(), pre) != 0 ||
      name.compare(name.size() - suf.size(), suf.size(), suf) != 0)
    return "";
  return name.substr(pre.size(), name.size() - pre.size() - suf.size());
}

void probe_lock(const std::string& path, BackingNode* n) {
  LockProbe p = probe_lock_file(path);
  n->pid = std::move(p.pid), n->host = std::move(p.host), n->mount = std::move(p.mount);
  n->running = p.held;
}

}  // namespace

LockProbe probe_lock_file(const std::string& path) {
  LockProbe p;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return p;
  char b[4096];
  const ssize_t got = ::pread(fd, b, sizeof(b), 0);
  const layout::LockHolder h =
      layout::parse_lock_holder(std::string_view(b, got > 0 ? size_t(got) : 0));
  p.pid = h.pid, p.host = h.host, p.mount = h.mount;
  // Shared: it conflicts only with the holder's exclusive lock.
  if (::flock(fd, LOCK_SH | LOCK_NB) == 0)
    ::flock(fd, LOCK_UN);
  else
    p.held = errno == EWOULDBLOCK;
  ::close(fd);
  return p;
}

std::vector<std::string> lock_files(const std::string& backing) {
  std::vector<std::string> v;
  if (::access(layout::shared_lock_path(backing).c_str(), F_OK) == 0)
    v.push_back(layout::shared_lock_path(backing));
  if (DIR* d = ::opendir(backing.c_str())) {
    while (dirent* de = ::readdir(d))
      if (std::string node = lock_node(de->d_name); !node.empty())
        v.push_back(layout::lock_path(backing, node));
    ::closedir(d);
  }
  return v;
}

Result<bool> backing_is_shared(const std::string& backing) {
  const std::string marker = layout::shared_marker_path(backing);
  if (::access(marker.c_str(), F_OK) == 0) return true;
  if (errno == ENOENT) return false;
  return Status::FromErrno(errno, "access " + marker);
}

Result<std::vector<BackingNode>> list_backing_nodes(const std::string& backing) {
  std::map<std::string, BackingNode> nodes;
  auto at = [&](const std::string& name) -> BackingNode& {
    BackingNode& n = nodes[name];
    n.node = name;
    return n;
  };
  const std::string seg_dir = layout::segment_dir(backing);
  if (DIR* d = ::opendir(seg_dir.c_str())) {
    while (dirent* de = ::readdir(d)) {
      const auto parsed = layout::parse_segment_name(de->d_name);
      if (!parsed) continue;
      struct stat st;
      // A segment deleted while we look is simply not counted.
      if (::stat((seg_dir + "/" + de->d_name).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      BackingNode& n = at(parsed->node);
      ++n.segments;
      n.bytes += uint64_t(st.st_size);
    }
    ::closedir(d);
  } else if (errno != ENOENT) {
    return Status::FromErrno(errno, "opendir " + seg_dir);
  }
  DIR* d = ::opendir(backing.c_str());
  if (!d) return Status::FromErrno(errno, "opendir " + backing);
  std::vector<std::string> locks;
  while (dirent* de = ::readdir(d))
    if (std::string node = lock_node(de->d_name); !node.empty()) locks.push_back(node);
  ::closedir(d);
  for (const std::string& node : locks) probe_lock(layout::lock_path(backing, node), &at(node));
  auto shared = backing_is_shared(backing);
  if (!shared.ok()) return shared.status();
  if (!*shared) {
    BackingNode owner;
    probe_lock(layout::shared_lock_path(backing), &owner);
    if (owner.running && !owner.host.empty()) {
      BackingNode& n = at(node_id_of_host(owner.host));
      n.running = true;
      n.pid = owner.pid, n.host = owner.host, n.mount = owner.mount;
    }
  }
  std::vector<BackingNode> v;
  for (auto& [_, n] : nodes) v.push_back(std::move(n));
  return v;
}

}  // namespace kvfs
