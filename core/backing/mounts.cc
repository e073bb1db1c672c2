// SPDX-License-Identifier: Apache-2.0
#include "core/backing/mounts.h"

#include <cctype>
#include <fstream>
#include <sstream>

namespace kvfs {
namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape(const std::string& s) {
  std::string o;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1]))) {
      o += static_cast<char>(std::stoi(s.substr(i + 1, 3), nullptr, 8));
      i += 3;
    } else {
      o += s[i];
    }
  }
  return o;
}

}  // namespace

std::vector<MountEntry> read_mounts() {
  std::vector<MountEntry> v;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    // id parent major:minor root target options [optional...] - fstype source super
    std::istringstream ls(line);
    std::string f, root, target;
    ls >> f >> f >> f >> root >> target;
    std::string w;
    while (ls >> w && w != "-") {
    }
    MountEntry m;
    m.target = unescape(target);
    ls >> m.fstype >> m.source;
    m.source = unescape(m.source);
    v.push_back(std::move(m));
  }
  return v;
}

bool path_within(const std::string& path, const std::string& dir) {
  if (dir == "/") return true;
  return path == dir || (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 &&
                         path[dir.size()] == '/');
}

}  // namespace kvfs
