// SPDX-License-Identifier: Apache-2.0
// Fuzz target: sequences of filesystem operations against kvfs::BlockStore
// (no FUSE), checked against a plain in-memory model of names and contents.
//
// Each input is a program: one byte picks the operation, the next bytes its
// arguments (slots, names from a small alphabet so that operations collide,
// offsets near block boundaries, lengths up to a few MiB). A fresh store is
// opened on a temporary directory for every input. After every operation:
//   - a read returns exactly the model's bytes (full length, never short);
//   - an operation fails only if POSIX allows an error in the model's state,
//     and then with one of the allowed errors; it succeeds otherwise;
//   - after a reopen (Close + Open: everything written out and read back from
//     the segments and the index) the whole tree equals the model: names,
//     types, modes, sizes, contents, xattrs, symlink targets, device numbers.
// A mismatch aborts with a description of the operation.
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <array>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/store/block_store.h"

namespace {

using kvfs::BlockStore;
using kvfs::Status;
using Code = kvfs::Status::Code;
constexpr uint64_t kMiB = 1ull << 20;

// ---------------------------------------------------------------------------
// The model.

struct MNode {
  // kSpecial: a FIFO, socket or device node (type, rdev), metadata only.
  enum Kind { kFile, kDir, kLink, kSpecial } kind = kFile;
  std::string data;             // file contents, or the symlink's target
  uint32_t type = 0, rdev = 0;  // kSpecial
  uint32_t mode = 0644;
  std::map<std::string, std::string> xattrs;
};
using MRef = std::shared_ptr<MNode>;

// Parent directories and names are drawn from small sets so that operations
// meet each other: the same name as a file, then a directory, a rename onto
// a directory's own child, and so on.
const std::array<const char*, 5> kParents = {"", "a", "b", "a/b", "b/c"};
const std::array<const char*, 6> kNames = {"a", "b", "c", "d", "x.tmp", "y"};
const std::array<const char*, 3> kXattrs = {"user.a", "user.kv_crc32c", "user.c"};

std::string join(const std::string& dir, const std::string& name) {
  return dir.empty() ? name : dir + "/" + name;
}

const char* code_name(Code c) {
  switch (c) {
    case Code::kOk: return "OK";
    case Code::kNotFound: return "ENOENT";
    case Code::kExists: return "EEXIST";
    case Code::kNotDir: return "ENOTDIR";
    case Code::kIsDir: return "EISDIR";
    case Code::kNotEmpty: return "ENOTEMPTY";
    case Code::kNameTooLong: return "ENAMETOOLONG";
    case Code::kInvalid: return "EINVAL";
    case Code::kNoSpace: return "ENOSPC";
    case Code::kIOError: return "EIO";
    case Code::kCorruption: return "EIO(corruption)";
    case Code::kFileTooBig: return "EFBIG";
    case Code::kNoData: return "ENODATA";
    case Code::kRange: return "ERANGE";
    case Code::kPermission: return "EPERM";
    case Code::kAccess: return "EACCES";
    case Code::kBusy: return "EBUSY";
    case Code::kNotSupported: return "EOPNOTSUPP";
    case Code::kReadOnly: return "EROFS";
    case Code::kStale: return "ESTALE";
    case Code::kTimedOut: return "EIO(timeout)";
    case Code::kAtCapacity: return "ENOSPC(cap)";
  }
  return "?";
}

// Bytes of a write: a pure function of (seed, absolute offset), so that any
// mismatch shows where it came from.
void fill(char* p, size_t n, uint64_t off, uint8_t seed) {
  for (size_t i = 0; i < n; ++i) {
    uint64_t x = (off + i) * 0x9E3779B97F4A7C15ull + seed * 0x100000001B3ull;
    p[i] = static_cast<char>((x >> 29) ^ (x >> 47));
  }
}

// Input reader: returns zeros once the input is used up.
class Input {
 public:
  Input(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  bool empty() const { return n_ == 0; }
  uint8_t u8() {
    if (n_ == 0) return 0;
    --n_;
    return *p_++;
  }
  uint16_t u16() { return static_cast<uint16_t>(u8() | (u8() << 8)); }

 private:
  const uint8_t* p_;
  size_t n_;
};

// Offsets and sizes near the interesting places: 0, page and block edges.
uint64_t pick_offset(Input& in) {
  const uint8_t k = in.u8();
  const uint64_t r = in.u16();
  switch (k % 6) {
    case 0: return 0;
    case 1: return r % 8192;
    case 2: return (k / 6 % 4) * kMiB;  // a block boundary
    case 3: return (k / 6 % 4) * kMiB - (r % 4096 + 1) + ((k / 6 % 4) == 0 ? 4096 : 0);
    case 4: return (k / 6 % 4) * kMiB + r % 4096;
    default: return (r * 61) % (3 * kMiB);
  }
}

size_t pick_length(Input& in) {
  const uint8_t k = in.u8();
  const uint64_t r = in.u16();
  switch (k % 5) {
    case 0: return 1 + r % 64;
    case 1: return 1 + r % 8192;
    case 2: return 4096 * (1 + r % 64);
    case 3: return kMiB;
    default: return 1 + (r * 23) % (kMiB + kMiB / 4);
  }
}

struct Handle {
  kvfs::OpenFile* f = nullptr;
  MRef node;
  uint64_t ino = 0;
};

class Harness {
 public:
  Harness() {
    const char* base = std::getenv("KVFS_FUZZ_TMP");
    if (!base) base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
    std::string t = std::string(base) + "/kvfs-fuzz-XXXXXX";
    if (!::mkdtemp(t.data())) fail("mkdtemp: %s", std::strerror(errno));
    root_ = t;
    std::filesystem::create_directories(root_ + "/backing");
    open_store();
  }
  ~Harness() {
    close_handles();
    if (store_) {
      Status s = store_->Close();
      if (!s.ok()) fail("final Close: %s", s.ToString().c_str());
      store_.reset();
    }
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }

  void run(Input& in) {
    int ops = 0;
    static const bool trace = std::getenv("KVFS_FUZZ_TRACE") != nullptr;
    while (!in.empty() && ops++ < 256) {
      step(in);
      if (trace) std::fprintf(stderr, "  op %zu: %s\n", nops_, last_.c_str());
    }
    verify_all("end of input");
    reopen();
    verify_all("after the final reopen");
  }

 private:
  [[noreturn]] __attribute__((format(printf, 2, 3))) void fail(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::fprintf(stderr, "fuzz_ops: after %zu ops (last: %s): ", nops_, last_.c_str());
    std::vfprintf(stderr, fmt, ap);
    std::fprintf(stderr, "\n");
    va_end(ap);
    std::abort();
  }

  void open_store() {
    kvfs::StoreConfig c;
    c.backing_dir = root_ + "/backing";
    c.index_dir = root_ + "/index";
    c.ram_size = 128 * kMiB;
    c.ram_prefault = 0;
    c.segment_size = 4 * kMiB;
    c.flush_batch_bytes = 1 * kMiB;
    c.flush_threads = 2;
    c.capacity = 4ull << 30;  // no eviction: the model has none
    c.clean_tmp = false;
    c.clean_empty_dirs = false;
    auto s = BlockStore::Open(c);
    if (!s.ok()) fail("Open: %s", s.status().ToString().c_str());
    store_ = std::move(*s);
  }

  void reopen() {
    close_handles();
    Status s = store_->Close();
    if (!s.ok()) fail("Close: %s", s.ToString().c_str());
    store_.reset();
    lookups_.clear();  // the new store has no kernel references
    open_store();
  }

  void close_handles() {
    for (Handle& h : handles_)
      if (h.f) {
        store_->release(h.f);
        h = Handle{};
      }
  }

  // Succeeds iff allowed is empty; fails with one of the allowed codes.
  void expect(const Status& got, const std::vector<Code>& allowed) {
    if (allowed.size() == 0) {
      if (!got.ok()) fail("expected success, got %s", got.ToString().c_str());
      return;
    }
    for (Code c : allowed)
      if (got.code() == c) return;
    std::string want;
    for (Code c : allowed) want += std::string(want.empty() ? "" : "|") + code_name(c);
    fail(
        "expected %s, got %s", want.c_str(),
        got.ok() ? "success" : (std::string(code_name(got.code())) + " " + got.ToString()).c_str());
  }

  MRef model_get(const std::string& path) const {
    auto it = model_.find(path);
    return it == model_.end() ? nullptr : it->second;
  }
  bool model_has_children(const std::string& dir) const {
    auto it = model_.lower_bound(dir + "/");
    return it != model_.end() && it->first.compare(0, dir.size() + 1, dir + "/") == 0;
  }

  // Walks a directory path like the kernel does; both the model and the
  // store must agree on where it stops.
  bool walk(const std::string& dir, uint64_t* ino) {
    Code want = Code::kOk;
    {
      std::string prefix;
      size_t pos = 0;
      while (!dir.empty() && pos != std::string::npos) {
        size_t next = dir.find('/', pos);
        prefix = dir.substr(0, next);
        MRef n = model_get(prefix);
        if (!n) {
          want = Code::kNotFound;
          break;
        }
        if (n->kind != MNode::kDir) {
          // A symlink in the middle: the store has no path resolution of its
          // own, a lookup in a non-directory is ENOTDIR.
          want = Code::kNotDir;
          break;
        }
        pos = next == std::string::npos ? next : next + 1;
      }
    }
    uint64_t cur = kvfs::kRootIno;
    Status st;
    size_t pos = 0;
    while (!dir.empty() && pos != std::string::npos) {
      size_t next = dir.find('/', pos);
      std::string comp = dir.substr(pos, next == std::string::npos ? next : next - pos);
      auto a = store_->lookup(cur, comp);
      if (!a.ok()) {
        st = a.status();
        break;
      }
      ++lookups_[a->ino];
      cur = a->ino;
      pos = next == std::string::npos ? next : next + 1;
    }
    // A walk that ends on a non-directory is caught by the operation itself.
    if (st.ok() && want == Code::kNotDir) {
      MRef last = model_get(dir);
      if (last && last->kind != MNode::kDir) {
        *ino = cur;
        return true;  // the op below must then say ENOTDIR
      }
    }
    if (want == Code::kOk) {
      if (!st.ok()) fail("walk of '%s': %s", dir.c_str(), st.ToString().c_str());
      *ino = cur;
      return true;
    }
    expect(st, {want});
    return false;
  }
  // For operations on an entry of a directory whose walk ended on a file.
  bool parent_is_file(const std::string& dir) const {
    MRef n = model_get(dir);
    return !dir.empty() && n && n->kind != MNode::kDir;
  }

  kvfs::Result<kvfs::Attr> lookup_path(const std::string& dir, const std::string& name,
                                       bool* skip) {
    uint64_t p;
    *skip = false;
    if (!walk(dir, &p)) {
      *skip = true;
      return Status::NotFound();
    }
    auto a = store_->lookup(p, name);
    if (parent_is_file(dir)) {
      expect(a.status(), {Code::kNotDir});
      *skip = true;
      return a;
    }
    if (a.ok()) ++lookups_[a->ino];
    return a;
  }

  void step(Input& in) {
    ++nops_;
    const uint8_t op = in.u8();
    char buf[160];
    switch (op % 21) {
      case 0:
      case 1: op_create(in, buf); break;
      case 2: op_open(in, buf); break;
      case 3:
      case 4: op_write(in, buf); break;
      case 5: op_read(in, buf); break;
      case 6: op_truncate(in, buf); break;
      case 7: op_close(in, buf); break;
      case 8: op_rename(in, buf); break;
      case 9: op_unlink(in, buf, false); break;
      case 10: op_mkdir(in, buf); break;
      case 11: op_unlink(in, buf, true); break;
      case 12: op_xattr(in, buf); break;
      case 13: op_fsync(in, buf); break;
      case 14:
        last_ = "flush_all";
        expect(store_->flush_all(), {});
        break;
      case 15:
        last_ = "reopen";
        reopen();
        verify_all("after a reopen");
        break;
      case 16: op_stat(in, buf); break;
      case 17: op_cold(in, buf); break;
      case 18:
        // Split by the upper values of the byte, so that the committed
        // corpus (op 18) still makes symlinks.
        if ((op / 21) % 2)
          op_mknod(in, buf);
        else
          op_symlink(in, buf);
        break;
      case 19: op_chmod_forget(in, buf); break;
      case 20: op_stale_open(in, buf); break;
    }
  }

  Handle& slot(Input& in) { return handles_[in.u8() % handles_.size()]; }

  void op_create(Input& in, char* buf) {
    Handle& h = slot(in);
    std::string dir = kParents[in.u8() % kParents.size()];
    std::string name = kNames[in.u8() % kNames.size()];
    const uint8_t fl = in.u8();
    const bool excl = fl & 1, trunc = fl & 2;
    const uint32_t mode = (fl & 4) ? 0600 : 0644;
    std::snprintf(buf, 160, "create %s excl=%d trunc=%d", join(dir, name).c_str(), excl, trunc);
    last_ = buf;
    if (h.f) {
      store_->release(h.f);
      h = Handle{};
    }
    uint64_t p;
    if (!walk(dir, &p)) return;
    kvfs::Attr a;
    const int flags = O_CREAT | O_RDWR | (excl ? O_EXCL : 0) | (trunc ? O_TRUNC : 0);
    auto r = store_->create(p, name, mode, flags, kvfs::Caller{}, &a);
    if (parent_is_file(dir)) return expect(r.status(), {Code::kNotDir});
    const std::string path = join(dir, name);
    MRef n = model_get(path);
    if (n && excl) return expect(r.status(), {Code::kExists});
    if (n && n->kind == MNode::kDir) return expect(r.status(), {Code::kIsDir});
    if (n && (n->kind == MNode::kLink || n->kind == MNode::kSpecial)) {
      // O_CREAT on a symlink: the kernel follows it before asking us; a
      // FIFO or device it opens itself. The store refuses to open either as
      // a file.
      return expect(r.status(), {Code::kInvalid});
    }
    expect(r.status(), {});
    ++lookups_[a.ino];
    if (!n) {
      n = std::make_shared<MNode>();
      n->mode = mode;
      model_[path] = n;
    } else if (trunc) {
      n->data.clear();
    }
    if ((a.mode & S_IFMT) != S_IFREG) fail("create gave mode %o", a.mode);
    if (a.size != n->data.size()) fail("create: size %lu, model %zu", a.size, n->data.size());
    h = Handle{*r, n, a.ino};
  }

  void op_open(Input& in, char* buf) {
    Handle& h = slot(in);
    std::string dir = kParents[in.u8() % kParents.size()];
    std::string name = kNames[in.u8() % kNames.size()];
    const bool trunc = in.u8() & 1;
    std::snprintf(buf, 160, "open %s trunc=%d", join(dir, name).c_str(), trunc);
    last_ = buf;
    if (h.f) {
      store_->release(h.f);
      h = Handle{};
    }
    bool skip;
    auto a = lookup_path(dir, name, &skip);
    if (skip) return;
    MRef n = model_get(join(dir, name));
    if (!n) return expect(a.status(), {Code::kNotFound});
    expect(a.status(), {});
    auto r = store_->open(a->ino, O_RDWR | (trunc ? O_TRUNC : 0));
    if (n->kind == MNode::kDir) return expect(r.status(), {Code::kIsDir});
    if (n->kind == MNode::kLink || n->kind == MNode::kSpecial)
      return expect(r.status(), {Code::kInvalid});
    expect(r.status(), {});
    if (trunc) n->data.clear();
    h = Handle{*r, n, a->ino};
  }

  void op_write(Input& in, char* buf) {
    Handle& h = slot(in);
    const uint64_t off = pick_offset(in);
    const size_t len = pick_length(in);
    const uint8_t seed = in.u8();
    std::snprintf(buf, 160, "write ino %lu off=%lu len=%zu", h.ino, off, len);
    last_ = buf;
    if (!h.f) return;
    std::string data(len, '\0');
    fill(data.data(), len, off, seed);
    auto r = store_->write(h.f, off, data.data(), len);
    expect(r.status(), {});
    if (*r != len) fail("short write: %zu of %zu", *r, len);
    std::string& d = h.node->data;
    if (d.size() < off + len) d.resize(off + len, '\0');
    std::memcpy(d.data() + off, data.data(), len);
  }

  std::string read_all(kvfs::OpenFile* f, uint64_t off, size_t len, Status* st) {
    kvfs::ReadResult rr;
    *st = store_->read(f, off, len, &rr);
    std::string out;
    for (const iovec& v : rr.iov) out.append(static_cast<const char*>(v.iov_base), v.iov_len);
    if (st->ok() && out.size() != rr.bytes)
      fail("read: iovecs hold %zu bytes, result says %zu", out.size(), rr.bytes);
    return out;
  }

  void check_read(kvfs::OpenFile* f, const std::string& model, uint64_t off, size_t len,
                  const char* what) {
    Status st;
    std::string got = read_all(f, off, len, &st);
    if (!st.ok()) fail("%s: read failed: %s", what, st.ToString().c_str());
    const std::string want = off >= model.size() ? "" : model.substr(off, len);
    if (got.size() != want.size())
      fail("%s: read of %zu at %lu gave %zu bytes, model has %zu", what, len, off, got.size(),
           want.size());
    if (got != want) {
      size_t i = 0;
      while (got[i] == want[i]) ++i;
      fail("%s: read of %zu at %lu differs at byte %lu (got %02x, want %02x)", what, len, off,
           off + i, static_cast<unsigned char>(got[i]), static_cast<unsigned char>(want[i]));
    }
  }

  void op_read(Input& in, char* buf) {
    Handle& h = slot(in);
    const uint64_t off = pick_offset(in);
    const size_t len = pick_length(in) + (in.u8() & 1 ? 3 * kMiB : 0);
    std::snprintf(buf, 160, "read ino %lu off=%lu len=%zu", h.ino, off, len);
    last_ = buf;
    if (!h.f) return;
    check_read(h.f, h.node->data, off, len, "read");
  }

  void op_truncate(Input& in, char* buf) {
    const uint8_t how = in.u8();
    uint64_t size = pick_offset(in);
    if (how & 2) size = 0;
    kvfs::SetAttrRequest r;
    r.set_size = true;
    r.size = size;
    if (how & 1) {
      Handle& h = slot(in);
      std::snprintf(buf, 160, "ftruncate ino %lu to %lu", h.ino, size);
      last_ = buf;
      if (!h.f) return;
      auto a = store_->setattr(h.ino, r, h.f);
      expect(a.status(), {});
      h.node->data.resize(size, '\0');
      if (a->size != size) fail("ftruncate: attr size %lu", a->size);
      return;
    }
    std::string dir = kParents[in.u8() % kParents.size()];
    std::string name = kNames[in.u8() % kNames.size()];
    std::snprintf(buf, 160, "truncate %s to %lu", join(dir, name).c_str(), size);
    last_ = buf;
    bool skip;
    auto a = lookup_path(dir, name, &skip);
    if (skip) return;
    MRef n = model_get(join(dir, name));
    if (!n) return expect(a.status(), {Code::kNotFound});
    expect(a.status(), {});
    auto t = store_->setattr(a->ino, r, nullptr);
    if (n->kind == MNode::kDir) return expect(t.status(), {Code::kIsDir});
    if (n->kind == MNode::kLink || n->kind == MNode::kSpecial)
      return expect(t.status(), {Code::kInvalid});
    expect(t.status(), {});
    n->data.resize(size, '\0');
  }

  void op_close(Input& in, char* buf) {
    Handle& h = slot(in);
    std::snprintf(buf, 160, "close ino %lu", h.ino);
    last_ = buf;
    if (!h.f) return;
    store_->release(h.f);
    h = Handle{};
  }

  void op_fsync(Input& in, char* buf) {
    Handle& h = slot(in);
    std::snprintf(buf, 160, "fsync ino %lu", h.ino);
    last_ = buf;
    if (!h.f) return;
    expect(store_->fsync(h.ino), {});
  }

  void op_rename(Input& in, char* buf) {
    std::string sd = kParents[in.u8() % kParents.size()];
    std::string sn = kNames[in.u8() % kNames.size()];
    std::string dd = kParents[in.u8() % kParents.size()];
    std::string dn = kNames[in.u8() % kNames.size()];
    const bool noreplace = in.u8() & 1;
    const std::string src = join(sd, sn), dst = join(dd, dn);
    std::snprintf(buf, 160, "rename %s -> %s%s", src.c_str(), dst.c_str(),
                  noreplace ? " NOREPLACE" : "");
    last_ = buf;
    uint64_t sp, dp;
    if (!walk(sd, &sp) || !walk(dd, &dp)) return;
    Status st = store_->rename(sp, sn, dp, dn, noreplace ? kvfs::kRenameNoReplace : 0);
    if (parent_is_file(sd) || parent_is_file(dd)) return expect(st, {Code::kNotDir});
    MRef s = model_get(src), d = model_get(dst);
    if (!s) return expect(st, {Code::kNotFound});
    if (src == dst) {
      // Same name, same file: POSIX says do nothing. With NOREPLACE, Linux
      // answers EEXIST before the filesystem is asked; either is right here.
      if (noreplace && !st.ok()) return expect(st, {Code::kExists});
      return expect(st, {});
    }
    std::vector<Code> errs;
    if (s->kind == MNode::kDir && dst.compare(0, src.size() + 1, src + "/") == 0)
      errs.push_back(Code::kInvalid);
    if (d) {
      if (noreplace) errs.push_back(Code::kExists);
      if (d->kind == MNode::kDir && s->kind != MNode::kDir) errs.push_back(Code::kIsDir);
      if (d->kind != MNode::kDir && s->kind == MNode::kDir) errs.push_back(Code::kNotDir);
      if (d->kind == MNode::kDir && model_has_children(dst)) {
        errs.push_back(Code::kNotEmpty);
        errs.push_back(Code::kExists);
      }
    }
    if (!errs.empty()) return expect(st, errs);
    expect(st, {});
    std::map<std::string, MRef> moved;
    for (auto it = model_.begin(); it != model_.end();) {
      if (it->first == src || it->first.compare(0, src.size() + 1, src + "/") == 0) {
        moved[dst + it->first.substr(src.size())] = it->second;
        it = model_.erase(it);
      } else {
        ++it;
      }
    }
    model_.erase(dst);
    for (auto& [k, v] : moved) model_[k] = v;
  }

  void op_unlink(Input& in, char* buf, bool dir_op) {
    std::string dir = kParents[in.u8() % kParents.size()];
    std::string name = kNames[in.u8() % kNames.size()];
    const std::string path = join(dir, name);
    std::snprintf(buf, 160, "%s %s", dir_op ? "rmdir" : "unlink", path.c_str());
    last_ = buf;
    uint64_t p;
    if (!walk(dir, &p)) return;
    Status st = dir_op ? store_->rmdir(p, name) : store_->unlink(p, name);
    if (parent_is_file(dir)) return expect(st, {Code::kNotDir});
    MRef n = model_get(path);
    if (!n) return expect(st, {Code::kNotFound});
    if (dir_op) {
      if (n->kind != MNode::kDir) return expect(st, {Code::kNotDir});
      if (model_has_children(path)) return expect(st, {Code::kNotEmpty, Code::kExists});
    } else if (n->kind == MNode::kDir) {
      return expect(st, {Code::kIsDir, Code::kPermission});
    }
    expect(st, {});
    model_.erase(path);
  }

  void op_mkdir(Input& in, char* buf) {
    std::string dir = kParents[in.u8() % kParents.size()];
    std::string name = kNames[in.u8() % kNames.size()];
    const std::string path = join(dir, name);
    std::snprintf(buf, 160, "mkdir %s", path.c_str());
    last_ = buf;
    uint64_t p;
    if (!walk(dir, &p)) return;
    auto a = store_->mkdir(p, name, 0755, kvfs::Caller{});
    if (parent_is_file(dir)) return expect(a.status(), {Code::kNotDir});
    if (model_get(path)) return expect(a.status(), {Code::kExists});
    expect(a.status(), {});
    ++lookups_[a->ino];
    auto n = std::make_shared<MNode>();
    n->kind = MNode::kDir;
    n->mode = 0755;
    model_[path] = n;
  }

  void op_symlink(Input& in, char* buf) {
    std::string dir = kParents[in.u8() % kParents.size()];
    std::string name = kNames[in.u8() % kNames.size()];
    const std::string path = join(dir, name);
    std::string target = "../" + std::string(kNames[in.u8() % kNames.size()]);
    target.append(in.u8() % 40, 't');
    std::snprintf(buf, 160, "symlink %s -> %s", path.c_str(), target.c_str());
    last_ = buf;
    uint64_t p;
    if (!walk(dir, &p)) return;
    auto a = store_->symlink(p, name, target, kvfs::Caller{});
    if (parent_is_file(dir)) return expect(a.status(), {Code::kNotDir});
    if (model_get(path)) return expect(a.status(), {Code::kExists});
    expect(a.status(), {});
    ++lookups_[a->ino];
    auto n = std::make_shared<MNode>();
    n->kind = MNode::kLink;
    n->mode = 0777;
    n->data = target;
    model_[path] = n;
  }

  void op_mknod(Input& in, char* buf) {
    std::string dir = kParents[in.u8() % kParents.size()];
    std::string name = kNames[in.u8() % kNames.size()];
    const std::string path = join(dir, name);
    const uint8_t t = in.u8();
    static constexpr uint32_t kTypes[] = {S_IFIFO, S_IFSOCK, S_IFCHR, S_IFBLK};
    const uint32_t type = kTypes[t % 4];
    const uint32_t rdev = type == S_IFCHR || type == S_IFBLK ? t * 0x10101u + 1 : 0;
    const uint32_t mode = (t & 4) ? 0600 : 0644;
    std::snprintf(buf, 160, "mknod %s type %o rdev %x", path.c_str(), type, rdev);
    last_ = buf;
    uint64_t p;
    if (!walk(dir, &p)) return;
    auto a = store_->mknod(p, name, type | mode, rdev, kvfs::Caller{});
    if (parent_is_file(dir)) return expect(a.status(), {Code::kNotDir});
    if (model_get(path)) return expect(a.status(), {Code::kExists});
    expect(a.status(), {});
    ++lookups_[a->ino];
    auto n = std::make_shared<MNode>();
    n->kind = MNode::kSpecial;
    n->type = type;
    n->rdev = rdev;
    n->mode = mode;
    check_attr(*a, *n, path);
    model_[path] = n;
  }

  void op_xattr(Input& in, char* buf) {
    const uint8_t what = in.u8();
    std::string dir = kParents[in.u8() % kParents.size()];
    std::string name = kNames[in.u8() % kNames.size()];
    const std::string xn = kXattrs[in.u8() % kXattrs.size()];
    const std::string path = join(dir, name);
    std::snprintf(buf, 160, "xattr op %d on %s name %s", what % 6, path.c_str(), xn.c_str());
    last_ = buf;
    bool skip;
    auto a = lookup_path(dir, name, &skip);
    if (skip) return;
    MRef n = model_get(path);
    if (!n) return expect(a.status(), {Code::kNotFound});
    expect(a.status(), {});
    // The kernel refuses user.* xattrs on symlinks and special files before
    // asking us.
    if (n->kind == MNode::kLink || n->kind == MNode::kSpecial) return;
    const uint64_t ino = a->ino;
    switch (what % 6) {
      case 0:
      case 1: {  // set: plain, create or replace
        const int flags = (what / 6) % 3 == 1   ? XATTR_CREATE
                          : (what / 6) % 3 == 2 ? XATTR_REPLACE
                                                : 0;
        const uint8_t vl = in.u8();
        std::string v =
            vl == 255 ? std::string(64 * 1024 + 1, 'v') : std::string(vl % 80, 'a' + vl % 26);
        Status st = store_->setxattr(ino, xn, v, flags);
        const bool have = n->xattrs.count(xn) > 0;
        std::vector<Code> errs;
        if ((flags & XATTR_CREATE) && have) errs.push_back(Code::kExists);
        if ((flags & XATTR_REPLACE) && !have) errs.push_back(Code::kNoData);
        if (v.size() > 64 * 1024) {
          errs.push_back(Code::kNoSpace);
          errs.push_back(Code::kRange);
        }
        if (!errs.empty()) return expect(st, errs);
        expect(st, {});
        n->xattrs[xn] = v;
        break;
      }
      case 2: {
        auto g = store_->getxattr(ino, xn);
        auto it = n->xattrs.find(xn);
        if (it == n->xattrs.end()) return expect(g.status(), {Code::kNoData});
        expect(g.status(), {});
        if (*g != it->second) fail("getxattr %s: value differs", xn.c_str());
        break;
      }
      case 3: {
        Status st = store_->removexattr(ino, xn);
        if (!n->xattrs.count(xn)) return expect(st, {Code::kNoData});
        expect(st, {});
        n->xattrs.erase(xn);
        break;
      }
      default: check_xattrs(ino, *n, path); break;
    }
  }

  void check_xattrs(uint64_t ino, const MNode& n, const std::string& path) {
    auto l = store_->listxattr(ino);
    expect(l.status(), {});
    std::set<std::string> got(l->begin(), l->end()), want;
    if (got.size() != l->size()) fail("listxattr of %s has duplicates", path.c_str());
    for (auto& [k, v] : n.xattrs) want.insert(k);
    if (got != want)
      fail("listxattr of %s: %zu names, model %zu", path.c_str(), got.size(), want.size());
    for (auto& [k, v] : n.xattrs) {
      auto g = store_->getxattr(ino, k);
      expect(g.status(), {});
      if (*g != v) fail("xattr %s of %s differs", k.c_str(), path.c_str());
    }
  }

  void op_stat(Input& in, char* buf) {
    std::string dir = kParents[in.u8() % kParents.size()];
    std::string name = kNames[in.u8() % kNames.size()];
    const std::string path = join(dir, name);
    std::snprintf(buf, 160, "stat %s", path.c_str());
    last_ = buf;
    bool skip;
    auto a = lookup_path(dir, name, &skip);
    if (skip) return;
    MRef n = model_get(path);
    if (!n) return expect(a.status(), {Code::kNotFound});
    expect(a.status(), {});
    check_attr(*a, *n, path);
    auto g = store_->getattr(a->ino);
    expect(g.status(), {});
    check_attr(*g, *n, path);
  }

  void check_attr(const kvfs::Attr& a, const MNode& n, const std::string& path) {
    const uint32_t type = n.kind == MNode::kDir       ? S_IFDIR
                          : n.kind == MNode::kLink    ? S_IFLNK
                          : n.kind == MNode::kSpecial ? n.type
                                                      : S_IFREG;
    if ((a.mode & S_IFMT) != type)
      fail("%s: type %o, model %o", path.c_str(), a.mode & S_IFMT, type);
    if (n.kind != MNode::kLink && (a.mode & 07777) != n.mode)
      fail("%s: mode %o, model %o", path.c_str(), a.mode & 07777, n.mode);
    if (n.kind != MNode::kDir && a.size != n.data.size())
      fail("%s: size %lu, model %zu", path.c_str(), a.size, n.data.size());
    if (a.rdev != n.rdev) fail("%s: rdev %x, model %x", path.c_str(), a.rdev, n.rdev);
  }

  // The kernel looked a name up, then the name was unlinked or replaced by a
  // rename, then the kernel's open of the inode it found arrives: the open
  // must fail (ENOENT) or give the file's complete old contents; never a
  // file of the old size without its data.
  void op_stale_open(Input& in, char* buf) {
    std::string dir = kParents[in.u8() % kParents.size()];
    std::string name = kNames[in.u8() % kNames.size()];
    std::string other = kNames[in.u8() % kNames.size()];
    const bool by_rename = in.u8() & 1;
    const std::string path = join(dir, name), from = join(dir, other);
    std::snprintf(buf, 160, "stale open of %s after %s", path.c_str(),
                  by_rename ? ("rename " + from + " over it").c_str() : "unlink");
    last_ = buf;
    if (skip_stale_open_) return;
    MRef n = model_get(path);
    MRef o = model_get(from);
    if (!n || n->kind != MNode::kFile) return;
    if (by_rename && (!o || o->kind != MNode::kFile || o == n)) return;
    bool skip;
    auto a = lookup_path(dir, name, &skip);
    if (skip) return;
    expect(a.status(), {});
    uint64_t p;
    if (!walk(dir, &p)) return;
    if (by_rename) {
      expect(store_->rename(p, other, p, name, 0), {});
      model_[path] = o;
      model_.erase(from);
    } else {
      expect(store_->unlink(p, name), {});
      model_.erase(path);
    }
    auto f = store_->open(a->ino, O_RDONLY);
    if (!f.ok()) return expect(f.status(), {Code::kNotFound});
    check_read(*f, n->data, 0, n->data.size() + 4096, "stale open");
    store_->release(*f);
  }

  // Pushes clean blocks out of RAM, so that the next reads come from the
  // segments (and their checksums).
  void op_cold(Input& in, char* buf) {
    last_ = "cold: flush_all, shrink the RAM tier, regrow it";
    (void)in;
    expect(store_->flush_all(), {});
    kvfs::StoreConfig c = store_->admin().live_config();
    c.ram_size = 16 * kMiB;
    expect(store_->admin().reconfigure(c), {});
    c.ram_size = 128 * kMiB;
    expect(store_->admin().reconfigure(c), {});
    (void)buf;
  }

  void op_chmod_forget(Input& in, char* buf) {
    const uint8_t k = in.u8();
    if (k & 1) {
      last_ = "forget every lookup";
      for (auto& [ino, n] : lookups_) store_->forget(ino, n);
      lookups_.clear();
      return;
    }
    std::string dir = kParents[in.u8() % kParents.size()];
    std::string name = kNames[in.u8() % kNames.size()];
    const std::string path = join(dir, name);
    const uint32_t mode = (k & 2) ? 0640 : 0604;
    std::snprintf(buf, 160, "chmod %s %o", path.c_str(), mode);
    last_ = buf;
    bool skip;
    auto a = lookup_path(dir, name, &skip);
    if (skip) return;
    MRef n = model_get(path);
    if (!n) return expect(a.status(), {Code::kNotFound});
    expect(a.status(), {});
    if (n->kind == MNode::kLink) return;
    kvfs::SetAttrRequest r;
    r.set_mode = true;
    r.mode = mode;
    auto t = store_->setattr(a->ino, r, nullptr);
    expect(t.status(), {});
    n->mode = mode;
  }

  // The whole tree, read back through readdir/lookup/read.
  void verify_all(const char* when) {
    last_ = std::string("verify ") + when;
    verify_dir("", kvfs::kRootIno);
  }

  void verify_dir(const std::string& dir, uint64_t ino) {
    std::map<std::string, std::pair<uint64_t, uint32_t>> got;
    Status st =
        store_->readdir(ino, 0, [&](std::string_view name, uint64_t i, uint32_t mode, uint64_t) {
          if (name != "." && name != "..") {
            if (!got.emplace(std::string(name), std::make_pair(i, mode)).second)
              fail("readdir of '%s' lists %.*s twice", dir.c_str(), int(name.size()), name.data());
          }
          return true;
        });
    expect(st, {});
    std::set<std::string> want;
    for (auto it = model_.lower_bound(dir.empty() ? "" : dir + "/"); it != model_.end(); ++it) {
      if (!dir.empty() && it->first.compare(0, dir.size() + 1, dir + "/") != 0) break;
      std::string rest = it->first.substr(dir.empty() ? 0 : dir.size() + 1);
      if (rest.find('/') == std::string::npos) want.insert(rest);
    }
    for (const auto& w : want)
      if (!got.count(w))
        fail("%s: '%s' is missing from readdir", last_.c_str(), join(dir, w).c_str());
    for (const auto& [g, v] : got)
      if (!want.count(g))
        fail("%s: readdir shows '%s', not in the model", last_.c_str(), join(dir, g).c_str());
    for (const auto& name : want) {
      const std::string path = join(dir, name);
      const MNode& n = *model_get(path);
      auto a = store_->lookup(ino, name);
      expect(a.status(), {});
      ++lookups_[a->ino];
      check_attr(*a, n, path);
      if (n.kind != MNode::kLink) check_xattrs(a->ino, n, path);
      if (n.kind == MNode::kDir) {
        verify_dir(path, a->ino);
      } else if (n.kind == MNode::kLink) {
        auto t = store_->readlink(a->ino);
        expect(t.status(), {});
        if (*t != n.data) fail("symlink %s: target differs", path.c_str());
      } else if (n.kind == MNode::kSpecial) {
        expect(store_->open(a->ino, O_RDONLY).status(), {Code::kInvalid});
      } else {
        auto f = store_->open(a->ino, O_RDONLY);
        expect(f.status(), {});
        check_read(*f, n.data, 0, n.data.size() + 4096, path.c_str());
        store_->release(*f);
      }
    }
  }

  std::string root_;
  std::unique_ptr<BlockStore> store_;
  std::map<std::string, MRef> model_;
  std::array<Handle, 4> handles_;
  std::map<uint64_t, uint64_t> lookups_;
  size_t nops_ = 0;
  // KVFS_FUZZ_SKIP=stale-open: leave out a known failure to look for others.
  const bool skip_stale_open_ = [] {
    const char* e = std::getenv("KVFS_FUZZ_SKIP");
    return e && std::strstr(e, "stale-open");
  }();
  std::string last_ = "open";
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (!std::getenv("KVFS_FUZZ_LOG")) spdlog::set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static bool init = [] { return LLVMFuzzerInitialize(nullptr, nullptr) == 0; }();
  (void)init;
  Input in(data, size);
  Harness h;
  h.run(in);
  return 0;
}
