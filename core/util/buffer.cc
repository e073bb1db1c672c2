// SPDX-License-Identifier: Apache-2.0
#include "core/util/buffer.h"

#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

namespace kvfs {
namespace {

constexpr int kClasses = 9;  // 4 KiB .. 1 MiB

int class_index(size_t cap) {
  int i = 0;
  for (size_t c = kAlign; c < cap; c <<= 1) ++i;
  return i;
}

// An idle buffer. A piece was cut from a larger one (split_locked): it is
// not the start of an allocation, so it never goes to free(); the memory
// of an unwanted piece goes back to the system with madvise instead, and
// the piece waits, cold, for a buffer of its class.
struct Idle {
  char* d;
  bool piece;
};

// Idle buffers of every size class. Small files get small buffers, and
// recycling them matters as much as recycling full blocks: fresh memory is
// mmap()ed and faulted in page by page.
struct Pool {
  std::mutex mu;
  std::array<std::vector<Idle>, kClasses> free;   // guarded by mu: touched
  std::array<std::vector<char*>, kClasses> cold;  // guarded by mu: pieces given back
  size_t free_bytes = 0;                          // guarded by mu: of `free`
  size_t max_free = 64u << 20;                    // guarded by mu
  // What the RAM tier's budget leaves unused right now, plus its reserve
  // (RamTier::idle_buffers); freed buffers beyond it go back to the system.
  std::atomic<size_t> limit{SIZE_MAX};
};

Pool& pool() {
  static Pool* p = new Pool;  // leaked: buffers may be freed during exit
  return *p;
}

// Gives the memory of an idle buffer of capacity cap back to the system;
// called with no lock held (a piece costs a syscall), a piece then waits
// in its cold list.
void give_back(const Idle& i, size_t cap) {
  if (!i.piece) {
    std::free(i.d);
    return;
  }
  ::madvise(i.d, cap, MADV_DONTNEED);
  Pool& p = pool();
  std::lock_guard g(p.mu);
  p.cold[class_index(cap)].push_back(i.d);
}

// Returns whether the pool kept the buffer (false: it went to the system).
bool release_memory(char* d, size_t cap, bool piece) {
  Pool& p = pool();
  {
    std::lock_guard g(p.mu);
    if (p.free_bytes + cap <= std::min(p.max_free, p.limit.load(std::memory_order_relaxed))) {
      p.free[class_index(cap)].push_back({d, piece});
      p.free_bytes += cap;
      return true;
    }
  }
  give_back({d, piece}, cap);
  return false;
}

// Frees idle buffers, largest first, until at most `keep` bytes stay; the
// caller gives back drop[c] (class c) with no lock held.
void trim_locked(Pool& p, size_t keep, std::array<std::vector<Idle>, kClasses>* drop) {
  for (int i = kClasses - 1; i >= 0 && p.free_bytes > keep; --i) {
    const size_t cap = kAlign << i;
    while (!p.free[i].empty() && p.free_bytes > keep) {
      (*drop)[i].push_back(p.free[i].back());
      p.free[i].pop_back();
      p.free_bytes -= cap;
    }
  }
}

void give_back_all(const std::array<std::vector<Idle>, kClasses>& drop) {
  for (int c = 0; c < kClasses; ++c)
    for (const Idle& i : drop[c]) give_back(i, kAlign << c);
}

// No idle buffer of class c: halves the smallest larger idle one that was
// touched already, down to c (a buddy split, never merged again), keeping
// one half of each size idle. Where first touch is slow (a VM), the
// mount-time prefault (1 MiB buffers) would otherwise help only files whose
// blocks are all full: a cold read of a small chunk would fault in a fresh
// buffer and run at a fraction of the link.
char* split_locked(Pool& p, int c) {
  int from = c + 1;
  while (from < kClasses && p.free[from].empty()) ++from;
  if (from == kClasses) return nullptr;
  char* d = p.free[from].back().d;
  p.free[from].pop_back();
  p.free_bytes -= kAlign << from;
  for (int i = from - 1; i >= c; --i) {
    const size_t half = kAlign << i;
    p.free[i].push_back({d + half, true});
    p.free_bytes += half;
  }
  return d;  // the first piece of class c
}

}  // namespace

Buffer::~Buffer() {
  release_memory(data_, capacity_, piece_);
}

size_t buffer_class(size_t bytes) {
  size_t c = kAlign;
  while (c < bytes && c < kBlockSize) c <<= 1;
  return c;
}

void BufferPool::set_max_free_bytes(size_t bytes) {
  Pool& p = pool();
  std::array<std::vector<Idle>, kClasses> drop;
  {
    std::lock_guard g(p.mu);
    p.max_free = bytes;
    trim_locked(p, bytes, &drop);
  }
  give_back_all(drop);
}

void BufferPool::set_limit(size_t bytes) {
  pool().limit.store(bytes, std::memory_order_relaxed);
}

void BufferPool::trim(size_t keep) {
  Pool& p = pool();
  std::array<std::vector<Idle>, kClasses> drop;
  {
    std::lock_guard g(p.mu);
    if (p.free_bytes <= keep) return;
    trim_locked(p, keep, &drop);
  }
  give_back_all(drop);
}

size_t BufferPool::free_bytes() {
  Pool& p = pool();
  std::lock_guard g(p.mu);
  return p.free_bytes;
}

size_t BufferPool::prefill(size_t bytes, const std::atomic<bool>* stop) {
  Pool& p = pool();
  // `bytes` in all, not a level kept up: the RAM tier takes buffers from the
  // pool as fast as this fills it, and topping it up again zeroed fresh
  // memory for every block a full tier read (half a million page faults in
  // one multi-round QA run), only for eviction to give it back.
  size_t touched = 0;
  while (touched + kBlockSize <= bytes && !stop->load(std::memory_order_relaxed)) {
    {
      std::lock_guard g(p.mu);
      if (p.free_bytes + kBlockSize > std::min(bytes, p.max_free)) break;
    }
    char* d = static_cast<char*>(std::aligned_alloc(kAlign, kBlockSize));
    if (d == nullptr) break;
    std::memset(d, 0, kBlockSize);
    touched += kBlockSize;
    // Refused once the RAM tier's own use leaves no room under its budget
    // and reserve (the limit): without this stop the loop allocated, zeroed and freed a
    // block forever, one core busy for the life of the mount.
    if (!release_memory(d, kBlockSize, false)) break;
  }
  return touched;
}

BufRef BufferPool::allocate(size_t min_capacity) {
  const size_t cap = buffer_class(min_capacity);
  const int c = class_index(cap);
  char* d = nullptr;
  bool piece = false;
  {
    Pool& p = pool();
    std::lock_guard g(p.mu);
    if (auto& v = p.free[c]; !v.empty()) {
      d = v.back().d;
      piece = v.back().piece;
      v.pop_back();
      p.free_bytes -= cap;
    } else if ((d = split_locked(p, c)) != nullptr) {
      piece = true;
    } else if (auto& cv = p.cold[c]; !cv.empty()) {
      d = cv.back();  // faults in again, like fresh memory, but reuses the piece
      cv.pop_back();
      piece = true;
    }
  }
  if (d == nullptr) {
    d = static_cast<char*>(std::aligned_alloc(kAlign, cap));
    if (d == nullptr) throw std::bad_alloc();
  }
  return BufRef(new Buffer(d, cap, piece));
}

}  // namespace kvfs
