// SPDX-License-Identifier: Apache-2.0
// BlockStore::retire_node: a node of a shared backing dir that is gone for
// good hands its files over to this one. Only a node's own daemon ever
// deletes its segments; retiring is the one exception, on purpose, and only
// for a node whose lock is free and whose log has been still for idle_s.
//
// Each of its files that this node has no version of is copied here as an
// ordinary file of this node (a tmp name, then a rename over the import, as
// vLLM stores), with its access time kept: from then on it counts against
// this node's capacity and LRU eviction takes it in turn. The copies have a
// newer mtime than the retired node's versions, so the other nodes pick them
// at their next pass. Then the retired node's segments are deleted; a peer
// still reading one gets a clean miss (ENOENT, ESTALE, EIO) and, looking
// the name up again, the copy. With drop, nothing is copied: its data goes.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <memory>

#include "core/backing/backing_nodes.h"
#include "core/backing/disk_layout.h"
#include "core/peers/peer_imports.h"
#include "core/peers/peer_log.h"
#include "core/segments/segment_store.h"
#include "core/store/block_store.h"
#include "core/util/log.h"

namespace kvfs {
Status BlockStore::copy_retired_file(const std::string& who, const PeerNodeFile& f,
                                     RetireResult* res) {
  const std::vector<std::string_view> parts = split_path(f.path);
  if (parts.empty()) return Status::Invalid("empty path");
  // Every lookup takes a kernel reference (the FUSE contract): give each back.
  std::vector<uint64_t> refs;
  struct Release {
    BlockStore* s;
    std::vector<uint64_t>* refs;
    ~Release() {
      for (uint64_t ino : *refs) s->forget(ino, 1);
    }
  } give_back{this, &refs};
  uint64_t parent = kRootIno;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    auto d = lookup(parent, parts[i]);  // a peer's directory is made here
    if (!d.ok()) return d.status();
    refs.push_back(d->ino);
    if (!S_ISDIR(d->mode)) return Status::NotDir(std::string(parts[i]));
    parent = d->ino;
  }
  const std::string name(parts.back());
  auto a = lookup(parent, name);
  if (!a.ok()) return a.status();
  refs.push_back(a->ino);
  {
    auto in = node(a->ino);
    if (!in.ok()) return in.status();
    if (!(*in)->peer || (*in)->peer->node != who) {
      ++res->files_kept;  // this node's own version, or another node's newer one
      return Status::OK();
    }
  }
  auto src = open(a->ino, O_RDONLY | O_NOATIME);
  if (!src.ok()) return src.status();
  const std::string tmp = ".kvfs-retire-" + std::to_string(a->ino);
  Attr ta;
  auto dst = create(parent, tmp, a->mode & 07777, O_CREAT | O_EXCL | O_WRONLY,
                    Caller{a->uid, a->gid}, &ta);
  if (!dst.ok()) {
    release(*src);
    return dst.status();
  }
  refs.push_back(ta.ino);
  Status st;
  for (uint64_t off = 0; off < a->size && st.ok();) {
    ReadResult rr;
    st = read(*src, off, std::min<uint64_t>(kBlockSize, a->size - off), &rr);
    if (!st.ok()) break;
    size_t got = 0;
    for (const iovec& v : rr.iov) {
      auto w = write(*dst, off + got, static_cast<const char*>(v.iov_base), v.iov_len);
      if (!w.ok()) {
        st = w.status();
        break;
      }
      got += v.iov_len;
    }
    if (got == 0 && st.ok()) st = Status::IOError("short read of " + f.path);
    off += got;
  }
  release(*src);
  if (st.ok()) st = closed(*dst);
  release(*dst);
  if (st.ok()) {
    SetAttrRequest at;  // its place in the LRU order is the one it had there
    at.set_atime = true;
    at.atime_ns = a->atime_ns;
    auto r = setattr(ta.ino, at, nullptr);
    if (!r.ok()) st = r.status();
  }
  if (st.ok()) st = rename(parent, tmp, parent, name, 0);
  if (!st.ok()) {
    (void)unlink(parent, tmp);
    return st;
  }
  if (auto in = node(ta.ino); in.ok()) (*in)->last_access_ns.store(a->atime_ns);
  ++res->files_copied;
  res->bytes_copied += a->size;
  return Status::OK();
}

Result<BlockStore::RetireResult> BlockStore::retire_node(const std::string& who, bool drop,
                                                         double idle_s) {
  KVFS_RETURN_IF_ERROR(check_writable());
  if (!peers_) return Status::Invalid("the backing dir is not shared by nodes: no node to retire");
  if (who == segs_->node()) return Status::Invalid("node " + who + " is this node");
  auto nodes = std::make_shared<std::vector<BackingNode>>();
  KVFS_RETURN_IF_ERROR(io_->run("listing of the nodes", [b = cfg_.backing_dir, nodes] {
    auto r = list_backing_nodes(b);
    if (!r.ok()) return r.status();
    *nodes = std::move(*r);
    return Status::OK();
  }));
  const BackingNode* n = nullptr;
  for (const BackingNode& x : *nodes)
    if (x.node == who) n = &x;
  if (!n) return Status::NotFound("no node " + who + " in " + cfg_.backing_dir);
  if (n->running)
    return Status::Busy("node " + who + " is running (pid " + n->pid + " on " + n->host +
                        "): only a node that is gone for good is retired");
  KVFS_RETURN_IF_ERROR(peers_->poll());
  const int64_t news = peers_->log().last_news_ns(who);
  const double quiet = news ? double(clock_->now_ns() - news) / 1e9 : 1e18;
  if (quiet < idle_s)
    return Status::Busy("node " + who + " wrote to its log " + std::to_string(int(quiet)) +
                        " s ago (less than " + std::to_string(int(idle_s)) + " s)");
  spdlog::warn("retiring node {}: {}", who,
               drop ? "deleting its data" : "copying its files here, then deleting its segments");
  RetireResult res;
  if (!drop) {
    for (const PeerNodeFile& f : peers_->log().files_of(who)) {
      if (Status s = copy_retired_file(who, f, &res); !s.ok()) {
        ++res.files_lost;
        spdlog::warn("retiring node {}: {} not copied: {}", who, f.path, s.ToString());
      }
    }
    // The copies are committed before the originals go.
    KVFS_RETURN_IF_ERROR(flush_all());
  }
  auto names = std::make_shared<std::vector<std::string>>();
  KVFS_RETURN_IF_ERROR(
      io_->run("listing of the segments", [d = layout::segment_dir(cfg_.backing_dir), names] {
        DIR* dir = ::opendir(d.c_str());
        if (!dir) return Status::FromErrno(errno, "list " + d);
        while (dirent* e = ::readdir(dir)) names->push_back(e->d_name);
        ::closedir(dir);
        return Status::OK();
      }));
  Status first;
  for (const std::string& name : *names) {
    auto p = layout::parse_segment_name(name);
    if (!p) p = layout::parse_retired_segment_name(name);  // its grace is long past
    if (!p || p->node != who) continue;
    const std::string path = layout::segment_dir(cfg_.backing_dir) + "/" + name;
    Status s = io_->run("delete of " + path, [path] {
      return ::unlink(path.c_str()) == 0 || errno == ENOENT ? Status::OK()
                                                            : Status::FromErrno(errno, path);
    });
    if (s.ok())
      ++res.segments_deleted;
    else if (first.ok())
      first = s;
  }
  // Forget them now, and move the imports to the copies.
  (void)peers_->poll();
  spdlog::warn(
      "retired node {}: {} files copied ({} bytes), {} kept here, {} lost, {} segments "
      "deleted",
      who, res.files_copied, res.bytes_copied, res.files_kept, res.files_lost,
      res.segments_deleted);
  if (!first.ok()) return first;
  return res;
}

}  // namespace kvfs
