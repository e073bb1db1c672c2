#include "core/segment_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <liburing.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "core/disk_layout.h"
#include "core/log.h"
#include "core/mounts.h"

namespace kvfs {
namespace {

std::string random_id() {
  std::random_device rd;
  char b[33];
  for (int i = 0; i < 4; ++i) std::snprintf(b + 8 * i, 9, "%08x", static_cast<unsigned>(rd()));
  return std::string(b, 32);
}

Status fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "open " + dir);
  int r = ::fsync(fd);
  int e = errno;
  ::close(fd);
  return r == 0 ? Status::OK() : Status::FromErrno(e, "fsync " + dir);
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
  if (!ok) return Status::FromErrno(e, "write " + tmp);
  const int lr = ::link(tmp.c_str(), path.c_str());
  e = errno;
  ::unlink(tmp.c_str());
  if (lr != 0 && e != EEXIST) return Status::FromErrno(e, "link " + tmp + " to " + path);
  KVFS_RETURN_IF_ERROR(fsync_dir(backing));
  std::ifstream in(path);
  if (!in) return Status::FromErrno(errno, "open " + path);
  return read_superblock(path, in);
}

// The lock file's text: "<pid>\n<host>\n<mount point>\n".
struct LockHolder {
  std::string pid = "?", host, mount;
};

LockHolder lock_holder(int fd) {
  char b[4096] = {0};
  const ssize_t n = ::pread(fd, b, sizeof(b) - 1, 0);
  LockHolder h;
  std::istringstream in(std::string(b, n > 0 ? size_t(n) : 0));
  std::string line;
  if (std::getline(in, line) && !line.empty()) h.pid = line;
  std::getline(in, h.host);
  std::getline(in, h.mount);
  return h;
}

std::string describe(const LockHolder& h) {
  std::string d = "pid " + h.pid;
  if (!h.host.empty()) d += " on " + h.host;
  return d;
}

// Is the holder of a node's lock still serving its mount? Only a mount on
// this host can be checked (another host's holder is taken as live). No
// mount named: an offline tool (fsck), waited for. No host either: a kvfs
// that wrote only its pid, live if the backing dir is mounted here at all.
bool holder_mounted(const LockHolder& h, const std::string& backing) {
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  if (!h.host.empty() && h.host != host) return true;
  if (!h.host.empty() && h.mount.empty()) return false;
  for (const auto& m : read_mounts())
    if (m.fstype == "fuse.kvfs" && m.source == backing && (h.mount.empty() || m.target == h.mount))
      return true;
  return false;
}

// The flock of the node's lock file. Held by a kvfs whose mount is gone,
// the owner is exiting: it flushes and closes after umount(8) has returned,
// so a remount, fsck or rebuild-index right after an umount waits for it
// (bounded by lock_wait_s) instead of failing. Held by a kvfs that is still
// mounted, it is a real conflict: Busy at once.
Status take_lock(int fd, const std::string& path, const StoreConfig& cfg, const std::string& node) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto next_log = start;
  for (;;) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return Status::OK();
    const int e = errno;
    if (e != EWOULDBLOCK) return Status::FromErrno(e, "lock " + path);
    const LockHolder who = lock_holder(fd);
    if (holder_mounted(who, cfg.backing_dir))
      return Status::Busy("backing directory " + cfg.backing_dir +
                          " is already in use by another kvfs of node '" + node + "' (" +
                          describe(who) + (who.mount.empty() ? "" : ", mounted at " + who.mount) +
                          "); every kvfs sharing a backing dir needs its own node_id");
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (waited >= cfg.lock_wait_s)
      return Status::Busy("backing directory " + cfg.backing_dir +
                          " is still held by another kvfs of node '" + node + "' (" +
                          describe(who) + ", not mounted) after " + std::to_string(int(waited)) +
                          " s");
    if (Clock::now() >= next_log) {
      spdlog::info("waiting for kvfs {} (unmounted, still flushing) to release {}", describe(who),
                   path);
      next_log = Clock::now() + std::chrono::seconds(10);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// kvfs.lock, shared (disk_layout.h). Held exclusively, it is a kvfs that
// takes every segment as its own; it does not wait for nodes, nor they for it.
Status take_shared_lock(int fd, const std::string& path) {
  if (::flock(fd, LOCK_SH | LOCK_NB) == 0) return Status::OK();
  const int e = errno;
  if (e != EWOULDBLOCK) return Status::FromErrno(e, "lock " + path);
  return Status::Busy(path + " is held by a kvfs that does not share its backing dir (pid " +
                      lock_holder(fd).pid + "): stop it, or give it a backing dir of its own");
}

}  // namespace

Result<std::unique_ptr<SegmentStore>> SegmentStore::Open(const StoreConfig& cfg, BackingIo* io) {
  std::unique_ptr<SegmentStore> s(new SegmentStore);
  s->io_ = io;
  struct stat st;
  if (::stat(cfg.backing_dir.c_str(), &st) != 0)
    return Status::FromErrno(errno, "backing directory " + cfg.backing_dir);
  if (!S_ISDIR(st.st_mode)) return Status::NotDir("backing directory " + cfg.backing_dir);
  if (::access(cfg.backing_dir.c_str(), W_OK | X_OK) != 0 && !cfg.read_only)
    return Status::FromErrno(errno, "backing directory " + cfg.backing_dir + " is not writable");

  s->node_ = node_id_of(cfg);
  // The locks come first: no file of the node is touched unless it is ours.
  const std::string shared_path = layout::shared_lock_path(cfg.backing_dir);
  s->shared_lock_fd_ = ::open(shared_path.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC, 0600);
  if (s->shared_lock_fd_ < 0) return Status::FromErrno(errno, "open " + shared_path);
  KVFS_RETURN_IF_ERROR(take_shared_lock(s->shared_lock_fd_, shared_path));
  const std::string lock_path = layout::lock_path(cfg.backing_dir, s->node_);
  s->lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (s->lock_fd_ < 0) return Status::FromErrno(errno, "open " + lock_path);
  KVFS_RETURN_IF_ERROR(take_lock(s->lock_fd_, lock_path, cfg, s->node_));
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  const std::string holder =
      std::to_string(::getpid()) + "\n" + host + "\n" + cfg.mount_point + "\n";
  if (::ftruncate(s->lock_fd_, 0) != 0 ||
      ::pwrite(s->lock_fd_, holder.data(), holder.size(), 0) != ssize_t(holder.size()))
    return Status::FromErrno(errno, "write " + lock_path);

  auto id = load_superblock(cfg.backing_dir, s->node_);
  if (!id.ok()) return id.status();
  s->backing_id_ = *id;
  s->segment_size_ = cfg.segment_size;
  s->dir_ = layout::segment_dir(cfg.backing_dir);
  if (::mkdir(s->dir_.c_str(), 0700) != 0 && errno != EEXIST)
    return Status::FromErrno(errno, "mkdir " + s->dir_);

  DIR* d = ::opendir(s->dir_.c_str());
  if (!d) return Status::FromErrno(errno, "opendir " + s->dir_);
  while (dirent* de = ::readdir(d)) {
    // Another node's segments are its own business: never listed, so never
    // caught up, counted, reclaimed or deleted here.
    const std::optional<layout::SegmentFileName> parsed = layout::parse_segment_name(de->d_name);
    if (!parsed || parsed->node != s->node_) continue;
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
  }
  ::closedir(d);

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

SegmentStore::ReadFd::~ReadFd() {
  if (fd >= 0) ::close(fd);
}

BackingIo::Op SegmentStore::track(std::string what) const {
  return io_ ? io_->track(std::move(what)) : BackingIo::Op();
}

SegmentStore::~SegmentStore() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
  if (shared_lock_fd_ >= 0) ::close(shared_lock_fd_);
}

std::string SegmentStore::seg_path(uint64_t id) const {
  return dir_ + "/" + layout::segment_name(node_, id);
}

Result<std::unique_ptr<SegmentWriter>> SegmentStore::new_writer() {
  uint64_t id;
  std::string path;
  {
    std::unique_lock l(mu_);
    id = next_id_++;
    path = seg_path(id);
    segs_[id] = SegmentInfo{id, 0, 0, true, path};
  }
  auto op = track("create of segment " + path);
  int flags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | (direct_io_ ? O_DIRECT : 0);
  int fd = ::open(path.c_str(), flags, 0600);
  if (fd < 0) {
    // Out of room or not: a missing or unusable segment dir is an I/O error
    // to the clients waiting on this flush, never ENOENT.
    const int e = errno;
    Status s = e == ENOSPC || e == EDQUOT
                   ? Status::FromErrno(e, "create segment " + path)
                   : Status::IOError("create segment " + path + ": " + std::strerror(e));
    std::unique_lock l(mu_);
    segs_.erase(id);
    return s;
  }
  if (Status s = fsync_dir(dir_); !s.ok()) {
    ::close(fd);
    return s;
  }
  return std::unique_ptr<SegmentWriter>(new SegmentWriter(this, id, fd));
}

void SegmentStore::reserve_ids_through(uint64_t id) {
  std::unique_lock l(mu_);
  next_id_ = std::max(next_id_, id + 1);
}

void SegmentStore::note_size(uint64_t id, uint64_t bytes) {
  std::unique_lock l(mu_);
  // An open segment is preallocated: it takes at least that much space.
  if (auto it = segs_.find(id); it != segs_.end())
    it->second.bytes = it->second.open ? std::max(it->second.bytes, bytes) : bytes;
}

Result<std::shared_ptr<SegmentStore::ReadFd>> SegmentStore::read_fd(uint64_t id) {
  std::string path;
  {
    std::shared_lock l(mu_);
    if (auto it = read_fds_.find(id); it != read_fds_.end()) return it->second;
    auto it = segs_.find(id);
    if (it == segs_.end())
      return Status::Corruption("segment " + std::to_string(id) + " is missing");
    path = it->second.path;
  }
  // Opened without the lock: an open on a stalled NFS server blocks.
  auto f = std::make_shared<ReadFd>();
  f->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (direct_io_ ? O_DIRECT : 0));
  if (f->fd < 0) return Status::FromErrno(errno, "open segment " + path);
  std::unique_lock l(mu_);
  if (auto it = read_fds_.find(id); it != read_fds_.end()) return it->second;  // raced: theirs
  if (segs_.count(id)) read_fds_[id] = f;  // else deleted meanwhile: use it once
  return f;
}

namespace {

Status read_into(int fd, const Extent& ext, char* dst) {
  const size_t want = align_up(ext.len);
  size_t got = 0;
  while (got < ext.len) {
    ssize_t r = ::pread(fd, dst + got, want - got, static_cast<off_t>(ext.off + got));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "read segment " + std::to_string(ext.seg));
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  if (got < ext.len)
    return Status::Corruption("short segment " + std::to_string(ext.seg) + " at offset " +
                              std::to_string(ext.off));
  if (hash_bytes(dst, ext.len) != ext.hash)
    return Status::Corruption("checksum mismatch in segment " + std::to_string(ext.seg) +
                              " at offset " + std::to_string(ext.off));
  return Status::OK();
}

}  // namespace

Status SegmentStore::read_extent(const Extent& ext, const BufRef& dst) {
  if (!dst || dst->capacity() < align_up(ext.len))
    return Status::Invalid("read buffer too small for extent");
  // The call owns its buffer and descriptor: left behind by the deadline, it
  // may finish later without touching memory or a file someone else reuses.
  auto body = [this, ext, dst]() -> Status {
    auto f = read_fd(ext.seg);
    if (!f.ok()) return f.status();
    return read_into((*f)->fd, ext, dst->data());
  };
  if (!io_) return body();
  return io_->run("read of segment " + std::to_string(ext.seg), std::move(body));
}

uint64_t SegmentStore::prealloc_step() const {
  return std::clamp<uint64_t>(segment_size_ / 8, 4u << 20, 32u << 20);
}

std::vector<SegmentInfo> SegmentStore::list() const {
  std::shared_lock l(mu_);
  std::vector<SegmentInfo> v;
  for (auto& [id, info] : segs_) v.push_back(info);
  std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.id < b.id; });
  return v;
}

bool SegmentStore::has_segment(uint64_t id) const {
  std::shared_lock l(mu_);
  return segs_.count(id) != 0;
}

uint64_t SegmentStore::used_bytes() const {
  std::shared_lock l(mu_);
  uint64_t n = 0;
  for (auto& [id, info] : segs_) n += info.bytes;
  return n;
}

void SegmentStore::add_live(const Extent& e) {
  std::unique_lock l(mu_);
  if (auto it = segs_.find(e.seg); it != segs_.end()) it->second.live += align_up(e.len);
}

void SegmentStore::remove_live(const Extent& e) {
  std::unique_lock l(mu_);
  if (auto it = segs_.find(e.seg); it != segs_.end()) {
    const uint64_t n = align_up(e.len);
    it->second.live = it->second.live > n ? it->second.live - n : 0;
  }
}

uint64_t SegmentStore::live_bytes() const {
  std::shared_lock l(mu_);
  uint64_t n = 0;
  for (auto& [id, info] : segs_) n += info.live;
  return n;
}

std::string SegmentStore::forget_segment(uint64_t id) {
  std::unique_lock l(mu_);
  auto it = segs_.find(id);
  if (it == segs_.end()) return "";
  std::string path = std::move(it->second.path);
  segs_.erase(it);
  read_fds_.erase(id);  // closed by the last read still using it
  return path;
}

Status SegmentStore::unlink_segment(const std::string& path) {
  if (path.empty()) return Status::OK();
  auto body = [path]() -> Status {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT)
      return Status::FromErrno(errno, "unlink " + path);
    return Status::OK();
  };
  if (!io_) return body();
  return io_->run("unlink of " + path, std::move(body));
}

void SegmentStore::set_log_state(uint64_t id, uint64_t valid, const SegmentLogState& applied) {
  std::unique_lock l(mu_);
  if (auto it = segs_.find(id); it != segs_.end()) {
    it->second.valid = valid;
    it->second.applied = applied.end;
    it->second.min_seq = applied.min_seq;
    it->second.max_seq = applied.max_seq;
  }
}

void SegmentStore::note_applied(uint64_t id, uint64_t applied) {
  std::unique_lock l(mu_);
  if (auto it = segs_.find(id); it != segs_.end())
    it->second.applied = std::max(it->second.applied, applied);
}

uint64_t SegmentStore::applied(uint64_t id) const {
  std::shared_lock l(mu_);
  auto it = segs_.find(id);
  return it == segs_.end() ? 0 : it->second.applied;
}

uint64_t SegmentStore::min_seq_except(uint64_t except) const {
  std::shared_lock l(mu_);
  uint64_t m = UINT64_MAX;
  for (auto& [id, info] : segs_)
    if (id != except && info.min_seq != 0) m = std::min(m, info.min_seq);
  return m;
}

namespace {

// Whether every block that the entries place in [start, end) of segment id
// reads back with its hash.
bool blocks_intact(int fd, uint64_t id, uint64_t start, uint64_t end,
                   const std::vector<RecordEntry>& entries, std::string* buf) {
  for (const RecordEntry& e : entries)
    for (const BlockExtent& b : e.snap.extents) {
      const Extent& x = b.ext;
      if (x.seg != id || x.off < start || x.off + x.len > end) continue;
      buf->resize(x.len);
      if (::pread(fd, buf->data(), x.len, static_cast<off_t>(x.off)) != ssize_t(x.len) ||
          hash_bytes(buf->data(), x.len) != x.hash)
        return false;
    }
  return true;
}

}  // namespace

Status SegmentStore::scan(uint64_t id, const RecordFn& fn, uint64_t* valid_bytes, uint64_t from,
                          Check check, uint64_t* damaged) {
  std::string path;
  {
    std::shared_lock l(mu_);
    auto it = segs_.find(id);
    if (it == segs_.end()) return Status::NotFound("segment " + std::to_string(id));
    path = it->second.path;
  }
  auto op = track("scan of segment " + path);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "open " + path);
  struct stat st;
  ::fstat(fd, &st);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  uint64_t off = from;
  std::string meta, block;
  while (off + kRecordHeaderSize <= size) {
    char hdr[kRecordHeaderSize];
    if (::pread(fd, hdr, sizeof(hdr), static_cast<off_t>(off)) != ssize_t(sizeof(hdr))) break;
    RecordHeader h;
    if (!decode_header(hdr, &h).ok() || off + h.total_len() > size) break;
    meta.resize(h.meta_len);
    if (h.meta_len > 0 &&
        ::pread(fd, meta.data(), h.meta_len, static_cast<off_t>(off + kRecordHeaderSize)) !=
            ssize_t(h.meta_len))
      break;
    if (hash_bytes(meta.data(), meta.size()) != h.meta_hash) break;
    std::vector<RecordEntry> entries;
    if (!decode_entries(meta, &entries).ok()) break;
    if (check == Check::kBlocks &&
        !blocks_intact(fd, id, off, off + h.total_len(), entries, &block)) {
      if (damaged) ++*damaged;
    } else {
      fn(off, h, entries);
    }
    off += h.total_len();
  }
  ::close(fd);
  if (valid_bytes) *valid_bytes = off;
  return Status::OK();
}

}  // namespace kvfs
