// SPDX-License-Identifier: Apache-2.0
// SegmentStore::Open: taking a backing dir for one node. The node's locks,
// the superblock (made once for every node), the node's segments listed, the
// O_DIRECT probe.
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "core/backing/backing_nodes.h"
#include "core/backing/disk_layout.h"
#include "core/backing/mounts.h"
#include "core/config/config.h"
#include "core/segments/head_publisher.h"
#include "core/segments/segment_store.h"
#include "core/util/log.h"

namespace kvfs {
namespace {

// How many of its own unsealed segments a mount seals (the newest).
constexpr size_t kSealAtMount = 8;

std::string random_id() {
  std::random_device rd;
  char b[33];
  for (int i = 0; i < 4; ++i) std::snprintf(b + 8 * i, 9, "%08x", static_cast<unsigned>(rd()));
  return std::string(b, 32);
}

Result<std::string> read_superblock(const std::string& path, std::ifstream& in) {
  std::string line, id;
  int format = -1;
  while (std::getline(in, line)) {
    if (line.rfind("id=", 0) == 0) id = line.substr(3);
    if (line.rfind("format=", 0) == 0) format = std::atoi(line.c_str() + 7);
  }
  if (id.size() != 32 || id.find_first_not_of("0123456789abcdef") != std::string::npos)
    return Status::Corruption(path + " is not a kvfs superblock");
  if (format != layout::kSuperFormat)
    return Status::NotSupported(path + ": format " + std::to_string(format) +
                                " is not supported (this kvfs reads format " +
                                std::to_string(layout::kSuperFormat) + ")");
  return id;
}

// Reads or creates the superblock; returns the backing id. Nodes starting
// together on an empty dir may each write one: link() makes exactly one of
// them the superblock (put-if-absent, atomic on NFS too) and the others read
// it, so every node agrees on the id.
Result<std::string> load_superblock(const std::string& backing, const std::string& node) {
  const std::string path = layout::super_path(backing);
  if (std::ifstream in(path); in) return read_superblock(path, in);
  const std::string tmp = layout::super_tmp_path(backing, node);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Status::FromErrno(errno, "create " + tmp);
  const std::string body = std::string(layout::kSuperMagic) + "\nid=" + random_id() +
                           "\nformat=" + std::to_string(layout::kSuperFormat) + "\n";
  bool ok = ::write(fd, body.data(), body.size()) == ssize_t(body.size()) && ::fsync(fd) == 0;
  int e = errno;
  ::close(fd);
  if (!ok) {
    ::unlink(tmp.c_str());
    return Status::FromErrno(e, "write " + tmp);
  }
  const int lr = ::link(tmp.c_str(), path.c_str());
  e = errno;
  ::unlink(tmp.c_str());
  if (lr != 0 && e != EEXIST) return Status::FromErrno(e, "link " + tmp + " to " + path);
  KVFS_RETURN_IF_ERROR(SegmentStore::sync_dir(backing));
  std::ifstream in(path);
  if (!in) return Status::FromErrno(errno, "open " + path);
  return read_superblock(path, in);
}

using layout::LockHolder;

LockHolder read_holder(int fd) {
  char b[4096];
  const ssize_t n = ::pread(fd, b, sizeof(b), 0);
  return layout::parse_lock_holder(std::string_view(b, n > 0 ? size_t(n) : 0));
}

std::string describe(const LockHolder& h) {
  std::string d = "pid " + (h.pid.empty() ? std::string("?") : h.pid);
  if (!h.host.empty()) d += " on " + h.host;
  return d;
}

// Is the holder of a lock still serving its mount? Only a mount on this
// host can be checked (another host's holder is taken as live). No mount
// named: an offline tool (fsck), waited for. No host either: a kvfs that
// wrote only its pid, live if the backing dir is mounted here at all.
bool holder_mounted(const LockHolder& h, const std::string& backing) {
  if (h.pid.empty()) return false;  // not written yet: a holder starting
  if (!h.host.empty() && h.host != host_name()) return true;
  if (!h.host.empty() && h.mount.empty()) return false;
  for (const auto& m : read_mounts())
    if (m.fstype == "fuse.kvfs" && m.source == backing && (h.mount.empty() || m.target == h.mount))
      return true;
  return false;
}

Status refuse_if_shared(const std::string& backing) {
  auto marked = backing_is_shared(backing);
  if (!marked.ok()) return marked.status();
  if (!*marked) return Status::OK();
  return Status::Invalid("backing directory " + backing + " is shared by several nodes (" +
                         layout::kSharedMarkerName +
                         "): give this kvfs its node_id (kvfs-admin nodes lists them)");
}

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The exclusive flock of the dir's lock (a kvfs without node_id) or of a
// node's. Held by a kvfs whose mount is gone, the owner is exiting: it
// flushes and closes after umount(8) has returned, so a remount, fsck or
// rebuild-index right after an umount waits for it (bounded by lock_wait_s)
// instead of failing. Held by a kvfs that is still mounted, it is a real
// conflict: Busy, once it has stayed held for a moment (kvfs-admin nodes
// takes a shared lock for an instant to probe it). The dir's lock held
// shared is nodes: Busy as well (they do not exit for us). whose: "" for
// the dir's lock, else " of node 'x'".
Status take_lock(int fd, const std::string& path, const StoreConfig& cfg,
                 const std::string& whose) {
  const auto start = Clock::now();
  auto next_log = start;
  std::optional<Clock::time_point> shared_since;  // the dir's lock seen held shared only
  for (;;) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return Status::OK();
    const int e = errno;
    if (e != EWOULDBLOCK) return Status::FromErrno(e, "lock " + path);
    const double waited = since(start);
    if (whose.empty()) {
      KVFS_RETURN_IF_ERROR(refuse_if_shared(cfg.backing_dir));
      if (::flock(fd, LOCK_SH | LOCK_NB) == 0) {
        ::flock(fd, LOCK_UN);
        if (!shared_since) shared_since = Clock::now();
        if (since(*shared_since) >= 0.1)  // not a probe's instant: nodes
          return Status::Busy("backing directory " + cfg.backing_dir +
                              " is in use by nodes (kvfs with a node_id): give this kvfs its "
                              "node_id too (kvfs-admin nodes lists them)");
      } else {
        shared_since.reset();
      }
    }
    const LockHolder who = read_holder(fd);
    if (waited >= 0.1 && holder_mounted(who, cfg.backing_dir))
      return Status::Busy(
          "backing directory " + cfg.backing_dir + " is already in use by another kvfs" + whose +
          " (" + describe(who) + (who.mount.empty() ? "" : ", mounted at " + who.mount) + ")" +
          (whose.empty() ? "" : "; every kvfs sharing a backing dir needs its own node_id"));
    if (waited >= cfg.lock_wait_s)
      return Status::Busy("backing directory " + cfg.backing_dir +
                          " is still held by another kvfs" + whose + " (" + describe(who) +
                          ", not mounted) after " + std::to_string(int(waited)) + " s");
    if (Clock::now() >= next_log && waited >= 0.1) {
      spdlog::info("waiting for kvfs {} (unmounted, still flushing) to release {}", describe(who),
                   path);
      next_log = Clock::now() + std::chrono::seconds(10);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// kvfs.lock, shared (disk_layout.h). Held exclusively, it is a kvfs without
// node_id, which takes every segment as its own: Busy while it is mounted,
// waited for (lock_wait_s) while it exits after its umount.
Status take_shared_lock(int fd, const std::string& path, const StoreConfig& cfg) {
  const auto start = Clock::now();
  for (;;) {
    if (::flock(fd, LOCK_SH | LOCK_NB) == 0) return Status::OK();
    const int e = errno;
    if (e != EWOULDBLOCK) return Status::FromErrno(e, "lock " + path);
    const LockHolder who = read_holder(fd);
    const double waited = since(start);
    if ((waited >= 0.1 && holder_mounted(who, cfg.backing_dir)) || waited >= cfg.lock_wait_s)
      return Status::Busy("backing directory " + cfg.backing_dir +
                          " is held by a kvfs without node_id, which does not share it (" +
                          describe(who) + (who.mount.empty() ? "" : ", mounted at " + who.mount) +
                          "): stop it, or give it a backing dir of its own");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Written after the flock, text first and size last: a contender never
// reads a half-written holder, only the old one or none ("starting").
Status write_holder(int fd, const std::string& path, const StoreConfig& cfg) {
  const std::string text =
      layout::lock_holder_text({std::to_string(::getpid()), host_name(), cfg.mount_point});
  if (::pwrite(fd, text.data(), text.size(), 0) != ssize_t(text.size()) ||
      ::ftruncate(fd, off_t(text.size())) != 0)
    return Status::FromErrno(errno, "write " + path);
  return Status::OK();
}

// A node on a dir not yet marked shared: segments of another name were
// written by a kvfs without node_id that took them all as its own; this
// node would never list them, and its index would drop their files. Once
// the dir is marked (by this node unless read_only, or meanwhile by another
// that has written since), other names are nodes.
Status join_nodes(const std::string& backing, const std::string& node, bool read_only) {
  auto marked = backing_is_shared(backing);
  if (!marked.ok()) return marked.status();
  if (*marked) return Status::OK();
  const std::string seg_dir = layout::segment_dir(backing);
  std::string other;
  if (DIR* d = ::opendir(seg_dir.c_str())) {
    while (dirent* de = ::readdir(d)) {
      const auto parsed = layout::parse_segment_name(de->d_name);
      if (parsed && parsed->node != node) {
        other = parsed->node;
        break;
      }
    }
    ::closedir(d);
  } else if (errno != ENOENT) {
    return Status::FromErrno(errno, "opendir " + seg_dir);
  }
  if (!other.empty()) {
    marked = backing_is_shared(backing);
    if (!marked.ok()) return marked.status();
    if (*marked) return Status::OK();
    return Status::Invalid("backing directory " + backing + " holds segments of '" + other +
                           "' written by a kvfs without node_id, which owns them all; keep "
                           "mounting it without node_id (or with node_id=" +
                           other + " if they are all '" + other + "')");
  }
  if (read_only) return Status::OK();  // changes nothing, the mark included
  const std::string marker = layout::shared_marker_path(backing);
  const int fd = ::open(marker.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 && errno != EEXIST) return Status::FromErrno(errno, "create " + marker);
  if (fd >= 0) ::close(fd);
  return SegmentStore::sync_dir(backing);
}

}  // namespace

Status SegmentStore::sync_dir(const std::string& dir, BackingFs* fs) {
  if (!fs) fs = BackingFs::posix();
  const int fd = fs->open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
  if (fd < 0) return Status::FromErrno(-fd, "open " + dir);
  const int r = fs->fsync(fd);
  (void)fs->close(fd);
  return r == 0 ? Status::OK() : Status::FromErrno(-r, "fsync " + dir);
}

Result<std::unique_ptr<SegmentStore>> SegmentStore::Open(const StoreConfig& cfg, BackingIo* io,
                                                         BackingFs* fs) {
  std::unique_ptr<SegmentStore> s(new SegmentStore);
  s->io_ = io;
  if (fs) s->fs_ = fs;
  struct stat st;
  if (::stat(cfg.backing_dir.c_str(), &st) != 0)
    return Status::FromErrno(errno, "backing directory " + cfg.backing_dir);
  if (!S_ISDIR(st.st_mode)) return Status::NotDir("backing directory " + cfg.backing_dir);
  if (::access(cfg.backing_dir.c_str(), W_OK | X_OK) != 0 && !cfg.read_only)
    return Status::FromErrno(errno, "backing directory " + cfg.backing_dir + " is not writable");

  // Given a node_id, the node shares the dir: its own lock, kvfs.lock
  // shared, its own segments. Without one, it owns the dir, as kvfs did
  // before nodes: kvfs.lock exclusively, every segment (whatever name the
  // host gave it then). The locks come first: nothing is touched before.
  s->node_ = node_id_of(cfg);
  s->shared_ = !cfg.node_id.empty();
  const std::string top = layout::shared_lock_path(cfg.backing_dir);
  if (s->shared_) {
    s->shared_lock_fd_ = ::open(top.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC, 0600);
    if (s->shared_lock_fd_ < 0) return Status::FromErrno(errno, "open " + top);
    KVFS_RETURN_IF_ERROR(take_shared_lock(s->shared_lock_fd_, top, cfg));
    // Before the node's own files: a node refused here leaves no lock file.
    KVFS_RETURN_IF_ERROR(join_nodes(cfg.backing_dir, s->node_, cfg.read_only));
    const std::string lock_path = layout::lock_path(cfg.backing_dir, s->node_);
    s->lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (s->lock_fd_ < 0) return Status::FromErrno(errno, "open " + lock_path);
    KVFS_RETURN_IF_ERROR(take_lock(s->lock_fd_, lock_path, cfg, " of node '" + s->node_ + "'"));
    KVFS_RETURN_IF_ERROR(write_holder(s->lock_fd_, lock_path, cfg));
  } else {
    KVFS_RETURN_IF_ERROR(refuse_if_shared(cfg.backing_dir));  // before a wait for the nodes
    s->lock_fd_ = ::open(top.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (s->lock_fd_ < 0) return Status::FromErrno(errno, "open " + top);
    KVFS_RETURN_IF_ERROR(take_lock(s->lock_fd_, top, cfg, ""));
    KVFS_RETURN_IF_ERROR(refuse_if_shared(cfg.backing_dir));  // marked before we locked
    KVFS_RETURN_IF_ERROR(write_holder(s->lock_fd_, top, cfg));
  }

  auto id = load_superblock(cfg.backing_dir, s->node_);
  if (!id.ok()) return id.status();
  s->backing_id_ = *id;
  s->segment_size_ = cfg.segment_size;
  s->dir_ = layout::segment_dir(cfg.backing_dir);
  if (::mkdir(s->dir_.c_str(), 0700) != 0 && errno != EEXIST)
    return Status::FromErrno(errno, "mkdir " + s->dir_);

  DIR* d = ::opendir(s->dir_.c_str());
  if (!d) return Status::FromErrno(errno, "opendir " + s->dir_);
  std::vector<uint64_t> unsealed;  // own segments not sealed yet
  while (dirent* de = ::readdir(d)) {
    // Another node's segments are its own business: never listed, so never
    // caught up, counted, reclaimed or deleted here.
    const std::optional<layout::SegmentFileName> parsed = layout::parse_segment_name(de->d_name);
    if (!parsed && s->shared_) {
      // Its own segments in their grace: deleted later, and their ids are
      // never given again (a peer may still know one by its id).
      const auto r = layout::parse_retired_segment_name(de->d_name);
      struct stat rs;
      std::string p = s->dir_ + "/" + de->d_name;
      if (r && r->node == s->node_ && ::stat(p.c_str(), &rs) == 0 && S_ISREG(rs.st_mode)) {
        s->retire_later(std::move(p), static_cast<uint64_t>(rs.st_size), 0);
        s->next_id_ = std::max(s->next_id_, r->id + 1);
      }
      continue;
    }
    if (!parsed || (s->shared_ && parsed->node != s->node_)) continue;
    const uint64_t sid = parsed->id;
    std::string p = s->dir_ + "/" + de->d_name;
    struct stat ss;
    if (::stat(p.c_str(), &ss) != 0 || !S_ISREG(ss.st_mode)) continue;
    if (s->segs_.count(sid)) {
      ::closedir(d);
      return Status::Corruption("two segments with id " + std::to_string(sid) + " in " + s->dir_);
    }
    s->segs_[sid] = SegmentInfo{sid, static_cast<uint64_t>(ss.st_size), 0, false, p};
    s->next_id_ = std::max(s->next_id_, sid + 1);
    if (!layout::segment_sealed(ss.st_mode)) unsealed.push_back(sid);
  }
  ::closedir(d);
  // Segments a crash (or a kvfs before seals) left unsealed: this node never
  // appends to one again (a writer always starts a new segment), so they are
  // sealed now for the peers' sake (disk_layout.h). Only the newest few,
  // which are where a crash leaves them; older ones a peer checks in turn,
  // and sealing thousands would cost a mount that many round trips. A
  // read-only mount changes nothing.
  if (cfg.read_only) unsealed.clear();
  std::sort(unsealed.begin(), unsealed.end());
  for (size_t i = unsealed.size() > kSealAtMount ? unsealed.size() - kSealAtMount : 0;
       i < unsealed.size(); ++i) {
    const std::string& path = s->segs_[unsealed[i]].path;
    if (::chmod(path.c_str(), layout::kSealedSegmentMode) != 0)
      spdlog::warn("cannot seal segment {} (chmod): {}", path, std::strerror(errno));
  }

  s->made_id_ = s->next_id_ - 1;  // every id so far has (or had) its file

  // The head (disk_layout.h): no segment open yet. Without one peers follow
  // this node from the listing of segments/, as before heads.
  if (s->shared_ && !cfg.read_only) {
    SegmentStore* self = s.get();
    s->head_ = std::make_unique<HeadPublisher>(
        cfg.backing_dir, s->node_, io, [self] { return self->head_state(); }, s->fs_);
    if (Status st = s->head_->init(); !st.ok()) {
      spdlog::warn("this node's head in {}: {}; peers follow it from the segment listing",
                   layout::head_dir(cfg.backing_dir), st.ToString());
      s->head_.reset();
    }
  }

  // Probe O_DIRECT once: tmpfs before 6.6 and some NFS setups refuse it.
  if (cfg.direct_io) {
    std::string probe = layout::direct_probe_path(cfg.backing_dir, s->node_);
    int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
    if (fd >= 0) {
      void* b = nullptr;
      if (posix_memalign(&b, kAlign, kAlign) == 0) {
        std::memset(b, 0, kAlign);
        s->direct_io_ = ::pwrite(fd, b, kAlign, 0) == ssize_t(kAlign);
        std::free(b);
      }
      ::close(fd);
    }
    ::unlink(probe.c_str());
  }
  return s;
}

}  // namespace kvfs
