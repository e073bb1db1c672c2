// SPDX-License-Identifier: Apache-2.0
#include "core/retire/node_retirement.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <string_view>
#include <vector>

#include "core/backing/backing_io.h"
#include "core/backing/backing_nodes.h"
#include "core/backing/disk_layout.h"
#include "core/peers/peer_log.h"
#include "core/store/block_store.h"
#include "core/util/clock.h"
#include "core/util/log.h"

namespace kvfs {
namespace {

// Copies who's version of f here, over its import (see the header).
Status copy_file(BlockStore& s, const std::string& who, const PeerNodeFile& f, RetireResult* res) {
  const std::vector<std::string_view> parts = split_path(f.path);
  if (parts.empty()) return Status::Invalid("empty path");
  // Every lookup takes a kernel reference (the FUSE contract): give each back.
  std::vector<uint64_t> refs;
  struct Release {
    BlockStore& s;
    std::vector<uint64_t>& refs;
    ~Release() {
      for (uint64_t ino : refs) s.forget(ino, 1);
    }
  } give_back{s, refs};
  uint64_t parent = kRootIno;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    auto d = s.lookup(parent, parts[i]);  // a peer's directory is made here
    if (!d.ok()) return d.status();
    refs.push_back(d->ino);
    if (!S_ISDIR(d->mode)) return Status::NotDir(std::string(parts[i]));
    parent = d->ino;
  }
  const std::string name(parts.back());
  auto a = s.lookup(parent, name);
  if (!a.ok()) return a.status();
  refs.push_back(a->ino);
  auto owner = s.peer_owner(a->ino);
  if (!owner.ok()) return owner.status();
  if (*owner != who) {
    ++res->files_kept;  // this node's own version, or another node's newer one
    return Status::OK();
  }
  auto src = s.open(a->ino, O_RDONLY | O_NOATIME);
  if (!src.ok()) return src.status();
  const std::string tmp = ".kvfs-retire-" + std::to_string(a->ino);
  Attr ta;
  auto dst = s.create(parent, tmp, a->mode & 07777, O_CREAT | O_EXCL | O_WRONLY,
                      Caller{a->uid, a->gid}, &ta);
  if (!dst.ok()) {
    s.release(*src);
    return dst.status();
  }
  refs.push_back(ta.ino);
  Status st;
  for (uint64_t off = 0; off < a->size && st.ok();) {
    ReadResult rr;
    st = s.read(*src, off, std::min<uint64_t>(kBlockSize, a->size - off), &rr);
    if (!st.ok()) break;
    size_t got = 0;
    for (const iovec& v : rr.iov) {
      auto w = s.write(*dst, off + got, static_cast<const char*>(v.iov_base), v.iov_len);
      if (!w.ok()) {
        st = w.status();
        break;
      }
      got += v.iov_len;
    }
    if (got == 0 && st.ok()) st = Status::IOError("short read of " + f.path);
    off += got;
  }
  s.release(*src);
  if (st.ok()) st = s.closed(*dst);
  s.release(*dst);
  if (st.ok()) {
    SetAttrRequest at;  // its place in the LRU order is the one it had there
    at.set_atime = true;
    at.atime_ns = a->atime_ns;
    auto r = s.setattr(ta.ino, at, nullptr);
    if (!r.ok()) st = r.status();
  }
  if (st.ok()) st = s.rename(parent, tmp, parent, name, 0);
  if (!st.ok()) {
    (void)s.unlink(parent, tmp);
    return st;
  }
  (void)s.set_lru_time(ta.ino, a->atime_ns);
  ++res->files_copied;
  res->bytes_copied += a->size;
  return Status::OK();
}

}  // namespace

Result<RetireResult> retire_node(BlockStore& s, const std::string& who, bool drop, double idle_s) {
  KVFS_RETURN_IF_ERROR(s.check_writable());
  PeerLog* log = s.peer_log();
  if (!log) return Status::Invalid("the backing dir is not shared by nodes: no node to retire");
  if (who == s.node_id()) return Status::Invalid("node " + who + " is this node");
  const std::string& backing = s.config().backing_dir;
  BackingIo& io = s.backing_io();
  auto nodes = std::make_shared<std::vector<BackingNode>>();
  KVFS_RETURN_IF_ERROR(io.run("listing of the nodes", [backing, nodes] {
    auto r = list_backing_nodes(backing);
    if (!r.ok()) return r.status();
    *nodes = std::move(*r);
    return Status::OK();
  }));
  const BackingNode* n = nullptr;
  for (const BackingNode& x : *nodes)
    if (x.node == who) n = &x;
  if (!n) return Status::NotFound("no node " + who + " in " + backing);
  if (n->running)
    return Status::Busy("node " + who + " is running (pid " + n->pid + " on " + n->host +
                        "): only a node that is gone for good is retired");
  KVFS_RETURN_IF_ERROR(s.admin().poll_peers());
  const int64_t news = log->last_news_ns(who);
  const double quiet = news ? double(s.clock().now_ns() - news) / 1e9 : 1e18;
  if (quiet < idle_s)
    return Status::Busy("node " + who + " wrote to its log " + std::to_string(int(quiet)) +
                        " s ago (less than " + std::to_string(int(idle_s)) + " s)");
  spdlog::warn("retiring node {}: {}", who,
               drop ? "deleting its data" : "copying its files here, then deleting its segments");
  RetireResult res;
  if (!drop) {
    for (const PeerNodeFile& f : log->files_of(who)) {
      if (Status st = copy_file(s, who, f, &res); !st.ok()) {
        ++res.files_lost;
        spdlog::warn("retiring node {}: {} not copied: {}", who, f.path, st.ToString());
      }
    }
    // The copies are committed before the originals go.
    KVFS_RETURN_IF_ERROR(s.flush_all());
  }
  const std::string dir = layout::segment_dir(backing);
  auto names = std::make_shared<std::vector<std::string>>();
  KVFS_RETURN_IF_ERROR(io.run("listing of the segments", [dir, names] {
    DIR* d = ::opendir(dir.c_str());
    if (!d) return Status::FromErrno(errno, "list " + dir);
    while (dirent* e = ::readdir(d)) names->push_back(e->d_name);
    ::closedir(d);
    return Status::OK();
  }));
  Status first;
  for (const std::string& name : *names) {
    auto p = layout::parse_segment_name(name);
    if (!p) p = layout::parse_retired_segment_name(name);  // its grace is long past
    if (!p || p->node != who) continue;
    const std::string path = dir + "/" + name;
    Status st = io.run("delete of " + path, [path] {
      return ::unlink(path.c_str()) == 0 || errno == ENOENT ? Status::OK()
                                                            : Status::FromErrno(errno, path);
    });
    if (st.ok())
      ++res.segments_deleted;
    else if (first.ok())
      first = st;
  }
  // Its head (disk_layout.h) goes too, so that no peer goes on looking for
  // the segments it names.
  const std::string heads = layout::head_dir(backing);
  auto head_names = std::make_shared<std::vector<std::string>>();
  if (io.run("listing of the heads", [heads, head_names] {
          DIR* d = ::opendir(heads.c_str());
          if (!d) return errno == ENOENT ? Status::OK() : Status::FromErrno(errno, "list " + heads);
          while (dirent* e = ::readdir(d)) head_names->push_back(e->d_name);
          ::closedir(d);
          return Status::OK();
        }).ok())
    for (const std::string& name : *head_names) {
      auto h = layout::parse_head_name(name);
      if (!h || h->node != who) continue;
      const std::string path = heads + "/" + name;
      (void)io.run("delete of " + path, [path] {
        return ::unlink(path.c_str()) == 0 || errno == ENOENT ? Status::OK()
                                                              : Status::FromErrno(errno, path);
      });
    }
  // Forget them now, and move the imports to the copies.
  (void)s.admin().poll_peers();
  spdlog::warn(
      "retired node {}: {} files copied ({} bytes), {} kept here, {} lost, {} segments "
      "deleted",
      who, res.files_copied, res.bytes_copied, res.files_kept, res.files_lost,
      res.segments_deleted);
  if (!first.ok()) return first;
  return res;
}

}  // namespace kvfs
