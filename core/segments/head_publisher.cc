// SPDX-License-Identifier: Apache-2.0
#include "core/segments/head_publisher.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/backing/backing_io.h"
#include "core/backing/disk_layout.h"
#include "core/util/log.h"

namespace kvfs {

HeadPublisher::HeadPublisher(std::string backing, std::string node, BackingIo* io, Source source,
                             BackingFs* fs)
    : dir_(layout::head_dir(backing)),
      node_(std::move(node)),
      io_(io),
      fs_(fs ? fs : BackingFs::posix()),
      source_(std::move(source)) {}

Status HeadPublisher::init() {
  if (const int r = fs_->mkdir(dir_, 0755); r < 0 && r != -EEXIST)
    return Status::FromErrno(-r, "mkdir " + dir_);
  std::vector<std::pair<uint64_t, std::string>> mine;  // (gen, name)
  std::vector<std::string> names;
  if (const int r = fs_->list(dir_, &names); r < 0) return Status::FromErrno(-r, "list " + dir_);
  for (const std::string& n : names)
    if (auto h = layout::parse_head_name(n); h && h->node == node_) mine.emplace_back(h->gen, n);
  std::sort(mine.begin(), mine.end());
  {
    std::lock_guard l(mu_);
    if (!mine.empty()) {
      gen_ = mine.back().first;
      current_ = mine.back().second;
    }
  }
  for (size_t i = 0; i + 1 < mine.size(); ++i) {
    const std::string path = dir_ + "/" + mine[i].second;
    if (const int r = fs_->unlink(path); r < 0 && r != -ENOENT)
      return Status::FromErrno(-r, "unlink " + path);
  }
  layout::NodeHead h = source_();
  h.node = node_;
  std::string name;
  {
    std::lock_guard l(mu_);
    h.gen = gen_ + 1;
    name = layout::head_name(h);
  }
  KVFS_RETURN_IF_ERROR(rename_to(name));
  std::lock_guard l(mu_);
  gen_ = h.gen;
  current_ = name;
  return Status::OK();
}

Status HeadPublisher::rename_to(const std::string& name) {
  std::string from;
  {
    std::lock_guard l(mu_);
    from = current_;
  }
  const std::string to = dir_ + "/" + name;
  auto op = io_ ? io_->track("rename of head " + name) : BackingIo::Op();
  if (!from.empty()) {
    const std::string old = dir_ + "/" + from;
    const int r = fs_->rename(old, to);
    if (r == 0) return Status::OK();
    if (r != -ENOENT) return Status::FromErrno(-r, "rename " + old + " to " + name);
    // Gone (removed by hand, or the dir wiped): made again below.
  }
  const int fd = fs_->open(to, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Status::FromErrno(-fd, "create " + to);
  (void)fs_->close(fd);
  return Status::OK();
}

void HeadPublisher::publish() {
  {
    std::lock_guard l(mu_);
    dirty_ = true;
    if (busy_) return;  // that thread publishes this change too, or leaves it pending
    busy_ = true;
  }
  // A few rounds at most: the caller is a flusher whose batch waits, and
  // other flushers may keep changing the state. What is left stays pending
  // for the next publish() or publish_pending().
  for (int round = 0;; ++round) {
    std::string name;
    {
      std::lock_guard l(mu_);
      if (!dirty_ || round == kMaxRounds) {
        busy_ = false;
        return;
      }
      dirty_ = false;
    }
    layout::NodeHead h = source_();  // after clearing dirty_: a change from now on is read again
    h.node = node_;
    {
      std::lock_guard l(mu_);
      h.gen = gen_;
      if (!current_.empty() && layout::head_name(h) == current_) continue;  // unchanged
      h.gen = gen_ + 1;
      name = layout::head_name(h);
    }
    if (Status s = rename_to(name); !s.ok()) {
      static LogLimiter limit;
      uint64_t held = 0;
      if (limit.allow(&held))
        spdlog::warn("publishing this node's head: {} ({} more like it)", s.ToString(), held);
      std::lock_guard l(mu_);
      // Tried again by publish_pending(). The rename may have happened all
      // the same (a reply lost): the next name gets a newer gen, so that a
      // peer finding both takes it.
      ++gen_;
      dirty_ = true;
      busy_ = false;
      return;
    }
    std::lock_guard l(mu_);
    gen_ = h.gen;
    current_ = std::move(name);
    ++renames_;
  }
}

void HeadPublisher::publish_pending() {
  {
    std::lock_guard l(mu_);
    if (!dirty_ || busy_) return;
  }
  publish();
}

uint64_t HeadPublisher::renames() const {
  std::lock_guard l(mu_);
  return renames_;
}

}  // namespace kvfs
