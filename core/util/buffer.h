// SPDX-License-Identifier: Apache-2.0
// Buffer: a 4 KiB-aligned byte array holding one block (at most 1 MiB) of a
// file. Aligned so that the same memory can be handed to O_DIRECT I/O.
//
// Freed buffers are recycled through a free list per size class: memory
// touched for the first time is far slower than a memcpy in VMs (figures in
// bench/README.md, "Why the code is as it is"), so reusing warm buffers
// keeps writes and cold reads at memcpy speed. A class with no idle
// buffer halves a larger idle one before it takes fresh memory (a buddy
// split; the pieces are not merged again, and an unwanted piece's memory
// goes back with madvise). The RamTier trims the free list to the part of
// its budget it does not use and a small reserve (trim,
// RamTier::idle_buffers), so idle and used buffers together stay within
// ram_size plus 16 to 32 MiB. Thread-safe.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace kvfs {

inline constexpr size_t kBlockSize = 1u << 20;  // one FUSE request, one record block
inline constexpr size_t kAlign = 4096;

inline constexpr uint64_t align_up(uint64_t v, uint64_t a = kAlign) {
  return (v + a - 1) / a * a;
}

class Buffer {
 public:
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  char* data() { return data_; }
  const char* data() const { return data_; }
  size_t capacity() const { return capacity_; }

 private:
  friend class BufferPool;
  Buffer(char* d, size_t c, bool piece) : data_(d), capacity_(c), piece_(piece) {}
  char* data_;
  size_t capacity_;
  bool piece_;  // cut from a larger buffer (never passed to free())
};

using BufRef = std::shared_ptr<Buffer>;
using ConstBufRef = std::shared_ptr<const Buffer>;

// Capacity classes: powers of two from 4 KiB to kBlockSize, so a small file
// does not pin a whole megabyte.
size_t buffer_class(size_t bytes);

class BufferPool {
 public:
  // Keeps at most max_free_bytes of idle full-size buffers.
  static void set_max_free_bytes(size_t bytes);
  // Contents are unspecified (recycled); callers zero what they expose.
  static BufRef allocate(size_t min_capacity);
  static size_t free_bytes();
  // Frees idle buffers until at most `keep` bytes stay in the free list.
  static void trim(size_t keep);
  // Freed buffers are kept only while the free list stays under this (the
  // RAM tier sets it to the part of its budget it does not use, plus a small
  // reserve: RamTier::idle_buffers).
  static void set_limit(size_t bytes);
  // Allocates and touches full-size buffers into the free list until it holds
  // `bytes`, it has touched `bytes` in all, or *stop becomes true: the RAM
  // tier's first blocks then cost a memcpy, not page faults. Returns the
  // bytes it touched. Run from a background thread.
  static size_t prefill(size_t bytes, const std::atomic<bool>* stop);
};

}  // namespace kvfs
