// SPDX-License-Identifier: Apache-2.0
// nullfs: the "FUSE ceiling" reference for kvfs-bench.
//
// A multithreaded FUSE low-level daemon that does as little as a daemon can:
// one regular file `blob` in the root whose content is a fixed buffer in
// memory (the kvfs-bench pattern for the name "blob"), served with
// fuse_reply_buf, and a namespace in which files and directories can be
// created, written (the data is dropped, only the size is kept), renamed and
// removed: enough for the vLLM store pattern (access, mkdir -p, O_EXCL create,
// one write, close, rename). Reads of files other than `blob` return zeros.
//
// Its settings match kvfs's: 16 worker threads, 1 MiB max_write and
// readahead, splice off, 10 s entry and attribute timeouts, keep_cache.
//
//   nullfs MOUNTPOINT SIZE [-f] [--v32-loop] [-o FUSE_OPTIONS]
//
// SIZE is the size of `blob` in bytes (K, M, G suffixes: powers of 1024).
// Returns once mounted unless -f; `fusermount3 -u MOUNTPOINT` stops it.
//
// FUSE_USE_VERSION is 312, not 34: below 312, libfuse 3.14's header maps
// fuse_session_loop_mt() to fuse_session_loop_mt_32(), which reads its config
// argument as the old struct {int clone_fd; unsigned max_idle_threads;}. Given
// a config from fuse_loop_cfg_create() (the 3.12 struct, which starts with a
// version id), it runs with clone_fd on, max_idle_threads 0 and 10 threads:
// every request then creates a worker thread (clone3), opens and clones
// /dev/fuse, mmaps a fresh 1 MiB receive buffer that the payload copy faults
// in, and the worker exits again. --v32-loop reproduces exactly that call, to
// measure what it costs.
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "bench/pattern.h"

// The libfuse 3.2 entry point, for --v32-loop (see the top of the file).
extern "C" int fuse_session_loop_mt_32(struct fuse_session* se, struct fuse_loop_config* config);

namespace {

constexpr fuse_ino_t kRootIno = FUSE_ROOT_ID;
constexpr fuse_ino_t kBlobIno = 2;
constexpr double kTimeout = 10.0;
constexpr unsigned kThreads = 16;
constexpr size_t kMaxIo = 1u << 20;

struct Node {
  mode_t mode = 0;
  uint64_t size = 0;
  uint64_t nlookup = 0;
  unsigned nlink = 1;
  unsigned open = 0;
  struct timespec mtime {};
};

struct State {
  std::mutex mu;
  std::unordered_map<fuse_ino_t, Node> nodes;                      // guarded by mu
  std::map<std::pair<fuse_ino_t, std::string>, fuse_ino_t> dents;  // guarded by mu
  fuse_ino_t next_ino = 3;                                         // guarded by mu
  char* blob = nullptr;
  uint64_t blob_size = 0;
  char* zeros = nullptr;  // kMaxIo zero bytes for reads of written files
};

State* g = nullptr;

struct timespec now() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return ts;
}

void fill_attr(fuse_ino_t ino, const Node& n, struct stat* st) {
  std::memset(st, 0, sizeof(*st));
  st->st_ino = ino;
  st->st_mode = n.mode;
  st->st_nlink = n.nlink;
  st->st_size = static_cast<off_t>(n.size);
  st->st_blksize = static_cast<blksize_t>(kMaxIo);
  st->st_blocks = static_cast<blkcnt_t>((n.size + 511) / 512);
  st->st_mtim = st->st_ctim = st->st_atim = n.mtime;
}

// Caller holds g->mu.
void reply_entry_locked(fuse_req_t req, fuse_ino_t ino, Node& n) {
  fuse_entry_param e;
  std::memset(&e, 0, sizeof(e));
  e.ino = ino;
  e.generation = 1;
  e.attr_timeout = kTimeout;
  e.entry_timeout = kTimeout;
  fill_attr(ino, n, &e.attr);
  ++n.nlookup;
  fuse_reply_entry(req, &e);
}

// Caller holds g->mu. Drops a node nobody can reach any more.
void maybe_free_locked(fuse_ino_t ino) {
  auto it = g->nodes.find(ino);
  if (it == g->nodes.end() || ino == kRootIno || ino == kBlobIno) return;
  if (it->second.nlink == 0 && it->second.nlookup == 0 && it->second.open == 0) g->nodes.erase(it);
}

// Caller holds g->mu. Removes the name (and its link), returning its inode.
fuse_ino_t unlink_locked(fuse_ino_t parent, const std::string& name) {
  auto it = g->dents.find({parent, name});
  if (it == g->dents.end()) return 0;
  const fuse_ino_t ino = it->second;
  g->dents.erase(it);
  if (auto n = g->nodes.find(ino); n != g->nodes.end() && n->second.nlink > 0) --n->second.nlink;
  maybe_free_locked(ino);
  return ino;
}

bool dir_empty_locked(fuse_ino_t dir) {
  auto it = g->dents.lower_bound({dir, std::string()});
  return it == g->dents.end() || it->first.first != dir;
}

void nf_init(void*, fuse_conn_info* conn) {
  conn->max_write = kMaxIo;
  conn->max_readahead = kMaxIo;
  conn->max_background = 64;
  conn->congestion_threshold = 48;
  auto want = [conn](unsigned cap) {
    if (conn->capable & cap) conn->want |= cap;
  };
  want(FUSE_CAP_ASYNC_READ);
  want(FUSE_CAP_ASYNC_DIO);
  want(FUSE_CAP_ATOMIC_O_TRUNC);
  want(FUSE_CAP_PARALLEL_DIROPS);
  conn->want &= ~(FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
  conn->want &= ~(FUSE_CAP_WRITEBACK_CACHE | FUSE_CAP_AUTO_INVAL_DATA);
}

void nf_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  std::lock_guard l(g->mu);
  auto it = g->dents.find({parent, name});
  if (it == g->dents.end()) {
    fuse_entry_param e;
    std::memset(&e, 0, sizeof(e));
    e.entry_timeout = kTimeout;  // negative entry, as kvfs does
    fuse_reply_entry(req, &e);
    return;
  }
  reply_entry_locked(req, it->second, g->nodes[it->second]);
}

void forget_one(fuse_ino_t ino, uint64_t n) {
  auto it = g->nodes.find(ino);
  if (it == g->nodes.end()) return;
  it->second.nlookup = it->second.nlookup > n ? it->second.nlookup - n : 0;
  maybe_free_locked(ino);
}

void nf_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  {
    std::lock_guard l(g->mu);
    forget_one(ino, nlookup);
  }
  fuse_reply_none(req);
}

void nf_forget_multi(fuse_req_t req, size_t count, fuse_forget_data* f) {
  {
    std::lock_guard l(g->mu);
    for (size_t i = 0; i < count; ++i) forget_one(f[i].ino, f[i].nlookup);
  }
  fuse_reply_none(req);
}

void nf_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  struct stat st;
  {
    std::lock_guard l(g->mu);
    auto it = g->nodes.find(ino);
    if (it == g->nodes.end()) return (void)fuse_reply_err(req, ENOENT);
    fill_attr(ino, it->second, &st);
  }
  fuse_reply_attr(req, &st, kTimeout);
}

void nf_setattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info*) {
  struct stat st;
  {
    std::lock_guard l(g->mu);
    auto it = g->nodes.find(ino);
    if (it == g->nodes.end()) return (void)fuse_reply_err(req, ENOENT);
    Node& n = it->second;
    if ((to_set & FUSE_SET_ATTR_SIZE) && ino != kBlobIno)
      n.size = static_cast<uint64_t>(attr->st_size);
    if (to_set & FUSE_SET_ATTR_MODE) n.mode = (n.mode & S_IFMT) | (attr->st_mode & 07777);
    n.mtime = now();
    fill_attr(ino, n, &st);
  }
  fuse_reply_attr(req, &st, kTimeout);
}

void make_node(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
               fuse_file_info* fi) {
  std::lock_guard l(g->mu);
  auto p = g->nodes.find(parent);
  if (p == g->nodes.end()) return (void)fuse_reply_err(req, ENOENT);
  if (!S_ISDIR(p->second.mode)) return (void)fuse_reply_err(req, ENOTDIR);
  auto it = g->dents.find({parent, name});
  fuse_ino_t ino;
  if (it != g->dents.end()) {
    if (!fi || (fi->flags & O_EXCL)) return (void)fuse_reply_err(req, EEXIST);
    ino = it->second;
    Node& n = g->nodes[ino];
    if (S_ISDIR(n.mode)) return (void)fuse_reply_err(req, EISDIR);
    if ((fi->flags & O_TRUNC) && ino != kBlobIno) n.size = 0;
  } else {
    ino = g->next_ino++;
    Node n;
    n.mode = mode;
    n.nlink = S_ISDIR(mode) ? 2 : 1;
    n.mtime = now();
    g->nodes[ino] = n;
    g->dents[{parent, name}] = ino;
  }
  Node& n = g->nodes[ino];
  if (!fi) return reply_entry_locked(req, ino, n);
  ++n.open;
  fi->keep_cache = 1;
  fuse_entry_param e;
  std::memset(&e, 0, sizeof(e));
  e.ino = ino;
  e.generation = 1;
  e.attr_timeout = kTimeout;
  e.entry_timeout = kTimeout;
  fill_attr(ino, n, &e.attr);
  ++n.nlookup;
  fuse_reply_create(req, &e, fi);
}

void nf_mkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  make_node(req, parent, name, S_IFDIR | (mode & 07777), nullptr);
}

void nf_create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
               fuse_file_info* fi) {
  make_node(req, parent, name, S_IFREG | (mode & 07777), fi);
}

void nf_unlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  std::lock_guard l(g->mu);
  auto it = g->dents.find({parent, name});
  if (it == g->dents.end()) return (void)fuse_reply_err(req, ENOENT);
  if (S_ISDIR(g->nodes[it->second].mode)) return (void)fuse_reply_err(req, EISDIR);
  unlink_locked(parent, name);
  fuse_reply_err(req, 0);
}

void nf_rmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  std::lock_guard l(g->mu);
  auto it = g->dents.find({parent, name});
  if (it == g->dents.end()) return (void)fuse_reply_err(req, ENOENT);
  const fuse_ino_t ino = it->second;
  if (!S_ISDIR(g->nodes[ino].mode)) return (void)fuse_reply_err(req, ENOTDIR);
  if (!dir_empty_locked(ino)) return (void)fuse_reply_err(req, ENOTEMPTY);
  g->nodes[ino].nlink = 1;
  unlink_locked(parent, name);
  fuse_reply_err(req, 0);
}

void nf_rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent,
               const char* newname, unsigned int flags) {
  std::lock_guard l(g->mu);
  if (flags & ~RENAME_NOREPLACE) return (void)fuse_reply_err(req, EINVAL);
  auto it = g->dents.find({parent, name});
  if (it == g->dents.end()) return (void)fuse_reply_err(req, ENOENT);
  const fuse_ino_t ino = it->second;
  auto dst = g->dents.find({newparent, newname});
  if (dst != g->dents.end()) {
    if (dst->second == ino) return (void)fuse_reply_err(req, 0);
    if (flags & RENAME_NOREPLACE) return (void)fuse_reply_err(req, EEXIST);
    const Node& d = g->nodes[dst->second];
    if (S_ISDIR(d.mode) && !dir_empty_locked(dst->second))
      return (void)fuse_reply_err(req, ENOTEMPTY);
    unlink_locked(newparent, newname);
  }
  g->dents.erase({parent, name});
  g->dents[{newparent, newname}] = ino;
  fuse_reply_err(req, 0);
}

void nf_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  {
    std::lock_guard l(g->mu);
    auto it = g->nodes.find(ino);
    if (it == g->nodes.end()) return (void)fuse_reply_err(req, ENOENT);
    if (S_ISDIR(it->second.mode)) return (void)fuse_reply_err(req, EISDIR);
    if ((fi->flags & O_TRUNC) && (fi->flags & O_ACCMODE) != O_RDONLY && ino != kBlobIno)
      it->second.size = 0;
    ++it->second.open;
  }
  fi->keep_cache = 1;
  fuse_reply_open(req, fi);
}

void nf_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  if (off < 0) return (void)fuse_reply_err(req, EINVAL);
  const uint64_t o = static_cast<uint64_t>(off);
  if (ino == kBlobIno) {
    if (o >= g->blob_size) return (void)fuse_reply_buf(req, nullptr, 0);
    const size_t n = static_cast<size_t>(std::min<uint64_t>(size, g->blob_size - o));
    fuse_reply_buf(req, g->blob + o, n);
    return;
  }
  uint64_t fsize;
  {
    std::lock_guard l(g->mu);
    auto it = g->nodes.find(ino);
    if (it == g->nodes.end()) return (void)fuse_reply_err(req, ENOENT);
    fsize = it->second.size;
  }
  if (o >= fsize) return (void)fuse_reply_buf(req, nullptr, 0);
  size_t n = static_cast<size_t>(std::min<uint64_t>(size, fsize - o));
  if (n <= kMaxIo) return (void)fuse_reply_buf(req, g->zeros, n);
  std::vector<char> z(n, 0);
  fuse_reply_buf(req, z.data(), n);
}

void nf_write(fuse_req_t req, fuse_ino_t ino, const char*, size_t size, off_t off,
              fuse_file_info*) {
  if (off < 0) return (void)fuse_reply_err(req, EINVAL);
  if (ino != kBlobIno) {
    std::lock_guard l(g->mu);
    auto it = g->nodes.find(ino);
    if (it == g->nodes.end()) return (void)fuse_reply_err(req, ENOENT);
    it->second.size = std::max<uint64_t>(it->second.size, static_cast<uint64_t>(off) + size);
  }
  fuse_reply_write(req, size);
}

void nf_flush(fuse_req_t req, fuse_ino_t, fuse_file_info*) {
  fuse_reply_err(req, 0);
}

void nf_release(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  {
    std::lock_guard l(g->mu);
    auto it = g->nodes.find(ino);
    if (it != g->nodes.end() && it->second.open > 0) --it->second.open;
    maybe_free_locked(ino);
  }
  fuse_reply_err(req, 0);
}

void nf_fsync(fuse_req_t req, fuse_ino_t, int, fuse_file_info*) {
  fuse_reply_err(req, 0);
}

void nf_opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  std::lock_guard l(g->mu);
  auto it = g->nodes.find(ino);
  if (it == g->nodes.end()) return (void)fuse_reply_err(req, ENOENT);
  if (!S_ISDIR(it->second.mode)) return (void)fuse_reply_err(req, ENOTDIR);
  fuse_reply_open(req, fi);
}

// Offsets: 1 = after ".", 2 = after "..", 2 + k = after the k-th child.
void nf_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  std::vector<char> buf(size);
  size_t used = 0;
  auto add = [&](const char* name, fuse_ino_t child, mode_t mode, off_t next) {
    struct stat st;
    std::memset(&st, 0, sizeof(st));
    st.st_ino = child;
    st.st_mode = mode;
    const size_t need = fuse_add_direntry(req, nullptr, 0, name, nullptr, 0);
    if (used + need > size) return false;
    fuse_add_direntry(req, buf.data() + used, size - used, name, &st, next);
    used += need;
    return true;
  };
  std::lock_guard l(g->mu);
  off_t pos = 0;
  if (off <= pos && !add(".", ino, S_IFDIR, 1)) return (void)fuse_reply_buf(req, buf.data(), used);
  ++pos;
  if (off <= pos && !add("..", kRootIno, S_IFDIR, 2))
    return (void)fuse_reply_buf(req, buf.data(), used);
  ++pos;
  for (auto it = g->dents.lower_bound({ino, std::string()});
       it != g->dents.end() && it->first.first == ino; ++it, ++pos) {
    if (off > pos) continue;
    if (!add(it->first.second.c_str(), it->second, g->nodes[it->second].mode, pos + 1)) break;
  }
  fuse_reply_buf(req, buf.data(), used);
}

void nf_releasedir(fuse_req_t req, fuse_ino_t, fuse_file_info*) {
  fuse_reply_err(req, 0);
}

void nf_fsyncdir(fuse_req_t req, fuse_ino_t, int, fuse_file_info*) {
  fuse_reply_err(req, 0);
}

void nf_statfs(fuse_req_t req, fuse_ino_t) {
  struct statvfs v;
  std::memset(&v, 0, sizeof(v));
  v.f_bsize = 4096;
  v.f_frsize = 4096;
  v.f_blocks = v.f_bfree = v.f_bavail = 1ull << 30;
  v.f_files = v.f_ffree = 1ull << 30;
  v.f_namemax = 255;
  fuse_reply_statfs(req, &v);
}

void nf_access(fuse_req_t req, fuse_ino_t ino, int) {
  std::lock_guard l(g->mu);
  fuse_reply_err(req, g->nodes.count(ino) ? 0 : ENOENT);
}

void nf_setxattr(fuse_req_t req, fuse_ino_t, const char*, const char*, size_t, int) {
  fuse_reply_err(req, 0);  // dropped, like the data
}

void nf_getxattr(fuse_req_t req, fuse_ino_t, const char*, size_t) {
  fuse_reply_err(req, ENODATA);
}

void nf_listxattr(fuse_req_t req, fuse_ino_t, size_t size) {
  if (size == 0) return (void)fuse_reply_xattr(req, 0);
  fuse_reply_buf(req, nullptr, 0);
}

bool parse_size(const char* s, uint64_t* out) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s, &end, 10);
  if (errno || end == s) return false;
  uint64_t mult = 1;
  switch (*end) {
    case 'k':
    case 'K':
      mult = 1ull << 10;
      ++end;
      break;
    case 'm':
    case 'M':
      mult = 1ull << 20;
      ++end;
      break;
    case 'g':
    case 'G':
      mult = 1ull << 30;
      ++end;
      break;
    default: break;
  }
  if (*end != '\0') return false;
  *out = v * mult;
  return true;
}

int usage() {
  std::fprintf(stderr, "usage: nullfs MOUNTPOINT SIZE [-f] [--v32-loop] [-o FUSE_OPTIONS]\n");
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> pos;
  std::string extra;
  bool foreground = false, v32_loop = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-f") {
      foreground = true;
    } else if (a == "--v32-loop") {
      v32_loop = true;
    } else if (a == "-o" && i + 1 < argc) {
      extra += std::string(",") + argv[++i];
    } else if (a == "-h" || a == "--help") {
      usage();
      return 0;
    } else if (!a.empty() && a[0] == '-') {
      return usage();
    } else {
      pos.push_back(a);
    }
  }
  uint64_t size = 0;
  if (pos.size() != 2 || !parse_size(pos[1].c_str(), &size)) return usage();

  static State state;
  g = &state;
  g->blob_size = size;
  g->blob = static_cast<char*>(std::aligned_alloc(
      kvfs::bench::kPage, (size + kvfs::bench::kPage) & ~(kvfs::bench::kPage - 1)));
  g->zeros = static_cast<char*>(std::aligned_alloc(kvfs::bench::kPage, kMaxIo));
  if (!g->blob || !g->zeros) {
    std::fprintf(stderr, "nullfs: out of memory\n");
    return 1;
  }
  // Writing the content also touches every page: reads never fault.
  kvfs::bench::fill_content(g->blob, size, kvfs::bench::name_seed("blob"));
  std::memset(g->zeros, 0, kMaxIo);
  Node root;
  root.mode = S_IFDIR | 0755;
  root.nlink = 2;
  root.nlookup = 1;
  root.mtime = now();
  g->nodes[kRootIno] = root;
  Node blob;
  blob.mode = S_IFREG | 0644;
  blob.size = size;
  blob.mtime = now();
  g->nodes[kBlobIno] = blob;
  g->dents[{kRootIno, "blob"}] = kBlobIno;

  fuse_lowlevel_ops ops{};
  ops.init = nf_init;
  ops.lookup = nf_lookup;
  ops.forget = nf_forget;
  ops.forget_multi = nf_forget_multi;
  ops.getattr = nf_getattr;
  ops.setattr = nf_setattr;
  ops.mkdir = nf_mkdir;
  ops.unlink = nf_unlink;
  ops.rmdir = nf_rmdir;
  ops.rename = nf_rename;
  ops.open = nf_open;
  ops.read = nf_read;
  ops.write = nf_write;
  ops.flush = nf_flush;
  ops.release = nf_release;
  ops.fsync = nf_fsync;
  ops.opendir = nf_opendir;
  ops.readdir = nf_readdir;
  ops.releasedir = nf_releasedir;
  ops.fsyncdir = nf_fsyncdir;
  ops.statfs = nf_statfs;
  ops.access = nf_access;
  ops.setxattr = nf_setxattr;
  ops.getxattr = nf_getxattr;
  ops.listxattr = nf_listxattr;
  ops.create = nf_create;

  std::string opts = "fsname=nullfs,subtype=nullfs" + extra;
  std::vector<std::string> av_s = {"nullfs", "-o", opts};
  std::vector<char*> av;
  for (auto& s : av_s) av.push_back(s.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(av.size()), av.data());
  fuse_session* se = fuse_session_new(&args, &ops, sizeof(ops), nullptr);
  if (!se) return 1;
  if (fuse_set_signal_handlers(se) != 0) return 1;
  if (fuse_session_mount(se, pos[0].c_str()) != 0) {
    std::fprintf(stderr, "nullfs: cannot mount on %s\n", pos[0].c_str());
    fuse_session_destroy(se);
    return 3;
  }
  fuse_daemonize(foreground ? 1 : 0);
  fuse_loop_config* lc = fuse_loop_cfg_create();
  fuse_loop_cfg_set_max_threads(lc, kThreads);
  fuse_loop_cfg_set_idle_threads(lc, kThreads);
  const int rc = v32_loop ? fuse_session_loop_mt_32(se, lc) : fuse_session_loop_mt(se, lc);
  fuse_loop_cfg_destroy(lc);
  fuse_session_unmount(se);
  fuse_remove_signal_handlers(se);
  fuse_session_destroy(se);
  return rc == 0 ? 0 : 1;
}
