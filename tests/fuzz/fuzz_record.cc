// SPDX-License-Identifier: Apache-2.0
// Fuzz target: the on-disk record format (core/records/record.h) over hostile bytes.
//
// Every decoder must reject or accept any input without reading out of
// bounds, overflowing or allocating without bound; whatever it accepts must
// survive an encode/decode round trip unchanged. The first input byte picks
// the decoder; for headers and entries the harness can also fix up the
// checksums so that the fuzzer gets past them to the field checks.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "core/records/record.h"
#include "core/util/buffer.h"

namespace {

using kvfs::BlockExtent;
using kvfs::InodeSnapshot;
using kvfs::RecordEntry;
using kvfs::RecordHeader;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_record: %s\n", what);
  std::abort();
}

bool same_snapshot(const InodeSnapshot& a, const InodeSnapshot& b) {
  if (a.ino != b.ino || a.seq != b.seq || a.parent != b.parent || a.name != b.name ||
      a.mode != b.mode || a.uid != b.uid || a.gid != b.gid || a.size != b.size ||
      a.atime_ns != b.atime_ns || a.mtime_ns != b.mtime_ns || a.ctime_ns != b.ctime_ns ||
      a.symlink != b.symlink || a.xattrs != b.xattrs || a.rdev != b.rdev ||
      a.extents.size() != b.extents.size())
    return false;
  for (size_t i = 0; i < a.extents.size(); ++i)
    if (a.extents[i].idx != b.extents[i].idx || !(a.extents[i].ext == b.extents[i].ext))
      return false;
  return true;
}

// What decode_snapshot promises about a snapshot it accepts.
void check_snapshot(const InodeSnapshot& s) {
  if (s.ino == 0) fail("accepted a snapshot of inode 0");
  if (s.name.size() > 255) fail("accepted a name over 255 bytes");
  uint64_t prev = 0;
  for (size_t i = 0; i < s.extents.size(); ++i) {
    const BlockExtent& be = s.extents[i];
    if (i > 0 && be.idx <= prev) fail("accepted unsorted extents");
    if (be.ext.seg == 0 || be.ext.len == 0 || be.ext.len > kvfs::kBlockSize)
      fail("accepted an impossible extent");
    if (be.ext.off % kvfs::kAlign != 0) fail("accepted an unaligned extent");
    if (uint64_t(be.idx) * kvfs::kBlockSize + be.ext.len > s.size)
      fail("accepted an extent past the file size");
    prev = be.idx;
  }
}

void fuzz_snapshot(std::string_view in) {
  InodeSnapshot s;
  if (!kvfs::decode_snapshot(in, &s).ok()) return;
  check_snapshot(s);
  std::string enc;
  kvfs::encode_snapshot(s, &enc);
  InodeSnapshot t;
  if (!kvfs::decode_snapshot(enc, &t).ok()) fail("re-encoded snapshot does not decode");
  if (!same_snapshot(s, t)) fail("snapshot round trip changed it");
  // Without duplicate xattr names, the encoding is canonical.
  std::string enc2;
  kvfs::encode_snapshot(t, &enc2);
  if (enc2 != enc) fail("snapshot encoding is not stable");
}

void fuzz_entries(std::string_view in) {
  std::vector<RecordEntry> es;
  if (!kvfs::decode_entries(in, &es).ok()) return;
  for (const RecordEntry& e : es)
    if (e.kind == kvfs::EntryKind::kSnapshot) check_snapshot(e.snap);
  std::string enc;
  kvfs::encode_entries(es, &enc);
  std::vector<RecordEntry> back;
  if (!kvfs::decode_entries(enc, &back).ok()) fail("re-encoded entries do not decode");
  if (back.size() != es.size()) fail("entry count changed in a round trip");
  for (size_t i = 0; i < es.size(); ++i) {
    if (back[i].kind != es[i].kind) fail("entry kind changed in a round trip");
    if (es[i].kind == kvfs::EntryKind::kTombstone) {
      if (back[i].snap.ino != es[i].snap.ino || back[i].snap.seq != es[i].snap.seq)
        fail("tombstone changed in a round trip");
    } else if (!same_snapshot(back[i].snap, es[i].snap)) {
      fail("entry snapshot changed in a round trip");
    }
  }
}

void fuzz_header(const uint8_t* data, size_t size, bool fix_hash) {
  char h[kvfs::kRecordHeaderSize] = {};
  std::memcpy(h, data, size < sizeof(h) ? size : sizeof(h));
  if (fix_hash) {
    // Magic and checksum made right: the fuzzer explores the field checks.
    const uint32_t magic = kvfs::kRecordMagic;
    for (int i = 0; i < 4; ++i) h[i] = static_cast<char>(magic >> (8 * i));
    const uint64_t x = kvfs::hash_bytes(h, 56);
    for (int i = 0; i < 8; ++i) h[56 + i] = static_cast<char>(x >> (8 * i));
  }
  RecordHeader r;
  if (!kvfs::decode_header(h, &r).ok()) return;
  // An accepted header describes a record the scanner can step over safely.
  if (r.payload_len % kvfs::kAlign != 0) fail("accepted an unaligned payload");
  if (uint64_t(r.nblocks) * kvfs::kBlockSize < r.payload_len) fail("payload larger than blocks");
  const uint64_t start = r.payload_start();
  if (start < kvfs::kRecordHeaderSize + r.meta_len || start % kvfs::kAlign != 0)
    fail("payload start overlaps the entries or is unaligned");
  if (r.total_len() < start) fail("record length overflows");
  char again[kvfs::kRecordHeaderSize];
  kvfs::encode_header(r, again);
  RecordHeader r2;
  if (!kvfs::decode_header(again, &r2).ok()) fail("re-encoded header does not decode");
  if (r2.type != r.type || r2.meta_len != r.meta_len || r2.nblocks != r.nblocks ||
      r2.payload_len != r.payload_len || r2.meta_hash != r.meta_hash)
    fail("header round trip changed it");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t sel = data[0];
  ++data;
  --size;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  switch (sel % 5) {
    case 0: fuzz_snapshot(in); break;
    case 1: fuzz_entries(in); break;
    case 2: fuzz_header(data, size, false); break;
    case 3: fuzz_header(data, size, true); break;
    case 4: {
      // A whole record as the scanner meets it: header, then entries whose
      // hash the header carries.
      if (size < kvfs::kRecordHeaderSize) return 0;
      RecordHeader r;
      if (!kvfs::decode_header(reinterpret_cast<const char*>(data), &r).ok()) return 0;
      std::string_view rest = in.substr(kvfs::kRecordHeaderSize);
      if (r.meta_len > rest.size()) return 0;
      std::string_view meta = rest.substr(0, r.meta_len);
      if (kvfs::hash_bytes(meta.data(), meta.size()) != r.meta_hash) return 0;
      fuzz_entries(meta);
      break;
    }
  }
  return 0;
}
