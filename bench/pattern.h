// SPDX-License-Identifier: Apache-2.0
// The deterministic file content shared by kvfs-bench and nullfs.
//
// A file's bytes are a fixed pseudo-random stream (the same for every file)
// whose first 8 bytes of every 4 KiB page are replaced by a stamp derived from
// the file's base name and the page number. Generating it is cheap (the base
// stream is built once and copied; only the stamps change per file), yet a
// block served from the wrong file, the wrong offset or stale memory fails the
// check.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace kvfs::bench {

inline constexpr size_t kPage = 4096;
inline constexpr uint64_t kBaseSeed = 0x6b7666735f62656eull;  // "kvfs_ben"

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// FNV-1a of the part after the last '/': the file's identity in the pattern.
inline uint64_t name_seed(std::string_view path) {
  const size_t slash = path.rfind('/');
  if (slash != std::string_view::npos) path.remove_prefix(slash + 1);
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : path) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

inline uint64_t stamp_word(uint64_t seed, uint64_t page) {
  return splitmix64(seed ^ splitmix64(page + 0x5851f42d4c957f2dull));
}

// Fills buf with the base stream (the content without stamps).
inline void fill_base(char* buf, size_t size) {
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    const uint64_t w = splitmix64(kBaseSeed + i / 8);
    std::memcpy(buf + i, &w, 8);
  }
  if (i < size) {
    const uint64_t w = splitmix64(kBaseSeed + i / 8);
    std::memcpy(buf + i, &w, size - i);
  }
}

// Writes the per-page stamps of `seed` over a buffer holding the base stream
// (or another file's content): the buffer then holds that file's content.
inline void apply_stamps(char* buf, size_t size, uint64_t seed) {
  for (size_t off = 0; off < size; off += kPage) {
    const uint64_t w = stamp_word(seed, off / kPage);
    std::memcpy(buf + off, &w, size - off < 8 ? size - off : 8);
  }
}

// Fills buf with the full content of a file of that seed.
inline void fill_content(char* buf, size_t size, uint64_t seed) {
  fill_base(buf, size);
  apply_stamps(buf, size, seed);
}

// Returns the offset of the first wrong byte, or -1 when all match. `base`
// holds the base stream of at least `size` bytes.
inline int64_t verify_content(const char* got, const char* base, size_t size, uint64_t seed) {
  for (size_t off = 0; off < size; off += kPage) {
    const size_t n = size - off < kPage ? size - off : kPage;
    const size_t sn = n < 8 ? n : 8;
    const uint64_t w = stamp_word(seed, off / kPage);
    if (std::memcmp(got + off, &w, sn) != 0 ||
        std::memcmp(got + off + sn, base + off + sn, n - sn) != 0) {
      for (size_t j = 0; j < n; ++j) {
        const char want = j < sn ? reinterpret_cast<const char*>(&w)[j] : base[off + j];
        if (got[off + j] != want) return static_cast<int64_t>(off + j);
      }
    }
  }
  return -1;
}

// Writes the stamps of file `seed` into buf, which holds the file's bytes
// [off, off + n) copied from the base stream: buf then holds that range of
// the file's content (any offset and length).
inline void apply_stamps_at(char* buf, size_t n, uint64_t seed, uint64_t off) {
  for (uint64_t p = off / kPage * kPage; p < off + n; p += kPage) {
    const uint64_t w = stamp_word(seed, p / kPage);
    const char* wb = reinterpret_cast<const char*>(&w);
    const uint64_t lo = p > off ? p : off, hi = p + 8 < off + n ? p + 8 : off + n;
    for (uint64_t b = lo; b < hi; ++b) buf[b - off] = wb[b - p];
  }
}

// Checks that got holds the bytes [off, off + n) of the file of `seed`.
// `base` holds the base stream from file offset 0 (at least off + n bytes).
// Returns the file offset of the first wrong byte, or -1 when all match.
inline int64_t verify_range(const char* got, const char* base, size_t n, uint64_t seed,
                            uint64_t off) {
  uint64_t pos = off;
  const uint64_t end = off + n;
  while (pos < end) {
    const uint64_t page = pos / kPage * kPage;
    const uint64_t stop = page + kPage < end ? page + kPage : end;
    if (pos < page + 8) {  // stamp bytes of this page inside the range
      const uint64_t w = stamp_word(seed, page / kPage);
      const char* wb = reinterpret_cast<const char*>(&w);
      const uint64_t hi = page + 8 < stop ? page + 8 : stop;
      for (uint64_t b = pos; b < hi; ++b)
        if (got[b - off] != wb[b - page]) return static_cast<int64_t>(b);
      pos = hi;
    }
    if (pos < stop && std::memcmp(got + (pos - off), base + pos, stop - pos) != 0) {
      for (uint64_t b = pos; b < stop; ++b)
        if (got[b - off] != base[b]) return static_cast<int64_t>(b);
    }
    pos = stop;
  }
  return -1;
}

}  // namespace kvfs::bench
