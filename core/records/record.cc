// SPDX-License-Identifier: Apache-2.0
#include "core/records/record.h"

#include <xxhash.h>

#include <cstring>

#include "core/util/buffer.h"

namespace kvfs {
namespace {

void put_u8(std::string* o, uint8_t v) {
  o->push_back(static_cast<char>(v));
}
void put_u32(std::string* o, uint32_t v) {
  char b[4];
  for (int i = 0; i < 4; ++i) b[i] = static_cast<char>(v >> (8 * i));
  o->append(b, 4);
}
void put_u64(std::string* o, uint64_t v) {
  char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>(v >> (8 * i));
  o->append(b, 8);
}
void put_str(std::string* o, std::string_view s) {
  put_u32(o, static_cast<uint32_t>(s.size()));
  o->append(s);
}

uint64_t load_u64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}
uint32_t load_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}
void store_u64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
void store_u32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>(v >> (8 * i));
}

// Bounds-checked reader over untrusted bytes.
class Reader {
 public:
  explicit Reader(std::string_view s) : s_(s) {}
  bool u8(uint8_t* v) {
    if (s_.size() < 1) return false;
    *v = static_cast<uint8_t>(s_[0]);
    s_.remove_prefix(1);
    return true;
  }
  bool u32(uint32_t* v) {
    if (s_.size() < 4) return false;
    *v = load_u32(s_.data());
    s_.remove_prefix(4);
    return true;
  }
  bool u64(uint64_t* v) {
    if (s_.size() < 8) return false;
    *v = load_u64(s_.data());
    s_.remove_prefix(8);
    return true;
  }
  bool i64(int64_t* v) {
    uint64_t u;
    if (!u64(&u)) return false;
    *v = static_cast<int64_t>(u);
    return true;
  }
  bool str(std::string* v, size_t max) {
    uint32_t n;
    if (!u32(&n) || n > max || s_.size() < n) return false;
    v->assign(s_.data(), n);
    s_.remove_prefix(n);
    return true;
  }
  bool empty() const { return s_.empty(); }
  size_t left() const { return s_.size(); }

 private:
  std::string_view s_;
};

// Version 2 is version 1 plus a trailing rdev (u32). Version 1 is still
// written whenever rdev is 0: segments and index entries written before
// device nodes existed decode unchanged, and so does all that is written now
// except device nodes.
constexpr uint8_t kSnapshotVersion = 1;
constexpr uint8_t kSnapshotVersionRdev = 2;
constexpr size_t kMaxName = 255;
constexpr size_t kMaxXattrName = 255;
constexpr size_t kMaxXattrValue = 64 * 1024;
constexpr size_t kMaxSymlink = 4096;

}  // namespace

uint64_t hash_bytes(const void* data, size_t len) {
  return XXH3_64bits(data, len);
}

void encode_snapshot(const InodeSnapshot& s, std::string* o) {
  put_u8(o, s.rdev != 0 ? kSnapshotVersionRdev : kSnapshotVersion);
  put_u64(o, s.ino);
  put_u64(o, s.seq);
  put_u64(o, s.parent);
  put_str(o, s.name);
  put_u32(o, s.mode);
  put_u32(o, s.uid);
  put_u32(o, s.gid);
  put_u64(o, s.size);
  put_u64(o, static_cast<uint64_t>(s.atime_ns));
  put_u64(o, static_cast<uint64_t>(s.mtime_ns));
  put_u64(o, static_cast<uint64_t>(s.ctime_ns));
  put_str(o, s.symlink);
  put_u32(o, static_cast<uint32_t>(s.xattrs.size()));
  for (const auto& [k, v] : s.xattrs) {
    put_str(o, k);
    put_str(o, v);
  }
  put_u32(o, static_cast<uint32_t>(s.extents.size()));
  for (const auto& be : s.extents) {
    put_u32(o, be.idx);
    put_u64(o, be.ext.seg);
    put_u64(o, be.ext.off);
    put_u32(o, be.ext.len);
    put_u64(o, be.ext.hash);
  }
  if (s.rdev != 0) put_u32(o, s.rdev);
}

Status decode_snapshot(std::string_view in, InodeSnapshot* s) {
  Reader r(in);
  uint8_t ver;
  uint64_t a, m, c;
  uint32_t nx, ne;
  if (!r.u8(&ver) || (ver != kSnapshotVersion && ver != kSnapshotVersionRdev))
    return Status::Corruption("snapshot version");
  if (!r.u64(&s->ino) || !r.u64(&s->seq) || !r.u64(&s->parent) || !r.str(&s->name, kMaxName) ||
      !r.u32(&s->mode) || !r.u32(&s->uid) || !r.u32(&s->gid) || !r.u64(&s->size) || !r.u64(&a) ||
      !r.u64(&m) || !r.u64(&c) || !r.str(&s->symlink, kMaxSymlink) || !r.u32(&nx))
    return Status::Corruption("truncated snapshot");
  s->atime_ns = static_cast<int64_t>(a);
  s->mtime_ns = static_cast<int64_t>(m);
  s->ctime_ns = static_cast<int64_t>(c);
  if (s->ino == 0) return Status::Corruption("snapshot of inode 0");
  s->xattrs.clear();
  for (uint32_t i = 0; i < nx; ++i) {
    std::string k, v;
    if (!r.str(&k, kMaxXattrName) || !r.str(&v, kMaxXattrValue))
      return Status::Corruption("truncated xattr");
    s->xattrs.emplace(std::move(k), std::move(v));
  }
  if (!r.u32(&ne) || ne > r.left() / 32) return Status::Corruption("bad extent count");
  s->extents.clear();
  s->extents.reserve(ne);
  uint64_t prev = 0;
  for (uint32_t i = 0; i < ne; ++i) {
    BlockExtent be;
    if (!r.u32(&be.idx) || !r.u64(&be.ext.seg) || !r.u64(&be.ext.off) || !r.u32(&be.ext.len) ||
        !r.u64(&be.ext.hash))
      return Status::Corruption("truncated extent");
    if ((i > 0 && be.idx <= prev) || be.ext.seg == 0 || be.ext.len == 0 ||
        be.ext.len > kBlockSize || be.ext.off % kAlign != 0 ||
        uint64_t(be.idx) * kBlockSize + be.ext.len > s->size)
      return Status::Corruption("bad extent");
    prev = be.idx;
    s->extents.push_back(be);
  }
  s->rdev = 0;
  if (ver == kSnapshotVersionRdev && !r.u32(&s->rdev)) return Status::Corruption("truncated rdev");
  if (!r.empty()) return Status::Corruption("trailing bytes in snapshot");
  return Status::OK();
}

uint64_t RecordHeader::payload_start() const {
  return align_up(kRecordHeaderSize + meta_len);
}
uint64_t RecordHeader::total_len() const {
  return payload_start() + payload_len;
}

// Header layout: magic u32 | type u16 | version u16 | meta_len u32 | nblocks u32
// | payload_len u64 | meta_hash u64 | reserved (24 B) | header_hash u64.
void encode_header(const RecordHeader& h, char out[kRecordHeaderSize]) {
  std::memset(out, 0, kRecordHeaderSize);
  store_u32(out, kRecordMagic);
  out[4] = static_cast<char>(static_cast<uint16_t>(h.type));
  out[5] = static_cast<char>(static_cast<uint16_t>(h.type) >> 8);
  out[6] = 1;  // format version
  store_u32(out + 8, h.meta_len);
  store_u32(out + 12, h.nblocks);
  store_u64(out + 16, h.payload_len);
  store_u64(out + 24, h.meta_hash);
  store_u64(out + 56, hash_bytes(out, 56));
}

Status decode_header(const char in[kRecordHeaderSize], RecordHeader* h) {
  if (load_u32(in) != kRecordMagic) return Status::Corruption("bad record magic");
  if (load_u64(in + 56) != hash_bytes(in, 56)) return Status::Corruption("bad header checksum");
  uint16_t type = static_cast<uint16_t>(static_cast<unsigned char>(in[4]) |
                                        (static_cast<unsigned char>(in[5]) << 8));
  if (type < 1 || type > 3 || in[6] != 1) return Status::Corruption("unknown record type");
  h->type = static_cast<RecordType>(type);
  h->meta_len = load_u32(in + 8);
  h->nblocks = load_u32(in + 12);
  h->payload_len = load_u64(in + 16);
  h->meta_hash = load_u64(in + 24);
  if (h->meta_len > (64u << 20) || h->payload_len > (1ull << 44) || h->payload_len % kAlign != 0 ||
      uint64_t(h->nblocks) * kBlockSize < h->payload_len)
    return Status::Corruption("implausible record lengths");
  return Status::OK();
}

void encode_entries(const std::vector<RecordEntry>& entries, std::string* out) {
  for (const auto& e : entries) {
    put_u8(out, static_cast<uint8_t>(e.kind));
    if (e.kind == EntryKind::kTombstone) {
      put_u64(out, e.snap.ino);
      put_u64(out, e.snap.seq);
    } else {
      std::string body;
      encode_snapshot(e.snap, &body);
      put_str(out, body);
    }
  }
}

Status decode_entries(std::string_view in, std::vector<RecordEntry>* out) {
  Reader r(in);
  while (!r.empty()) {
    uint8_t kind;
    RecordEntry e;
    if (!r.u8(&kind)) return Status::Corruption("truncated entry");
    if (kind == static_cast<uint8_t>(EntryKind::kTombstone)) {
      e.kind = EntryKind::kTombstone;
      if (!r.u64(&e.snap.ino) || !r.u64(&e.snap.seq))
        return Status::Corruption("truncated tombstone");
    } else if (kind == static_cast<uint8_t>(EntryKind::kSnapshot) ||
               kind == static_cast<uint8_t>(EntryKind::kPeerUnlink)) {
      e.kind = static_cast<EntryKind>(kind);
      std::string body;
      if (!r.str(&body, 64u << 20)) return Status::Corruption("truncated snapshot entry");
      KVFS_RETURN_IF_ERROR(decode_snapshot(body, &e.snap));
    } else {
      return Status::Corruption("unknown entry kind");
    }
    out->push_back(std::move(e));
  }
  return Status::OK();
}

}  // namespace kvfs
