#include "core/buffer.h"

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

// Idle buffers of every size class. Small files get small buffers, and
// recycling them matters as much as recycling full blocks: fresh memory is
// mmap()ed and faulted in page by page.
struct Pool {
  std::mutex mu;
  std::array<std::vector<char*>, kClasses> free;  // guarded by mu
  size_t free_bytes = 0;                          // guarded by mu
  size_t max_free = 64u << 20;                    // guarded by mu
  // What the RAM tier's budget leaves unused right now, plus its reserve
  // (RamTier::idle_buffers); freed buffers beyond it go back to the system.
  std::atomic<size_t> limit{SIZE_MAX};
};

Pool& pool() {
  static Pool* p = new Pool;  // leaked: buffers may be freed during exit
  return *p;
}

// Returns whether the pool kept the buffer (false: it went to the system).
bool release_memory(char* d, size_t cap) {
  Pool& p = pool();
  {
    std::lock_guard g(p.mu);
    if (p.free_bytes + cap <= std::min(p.max_free, p.limit.load(std::memory_order_relaxed))) {
      p.free[class_index(cap)].push_back(d);
      p.free_bytes += cap;
      return true;
    }
  }
  std::free(d);
  return false;
}

// Frees idle buffers, largest first, until at most `keep` bytes stay.
void trim_locked(Pool& p, size_t keep, std::vector<char*>* drop) {
  for (int i = kClasses - 1; i >= 0 && p.free_bytes > keep; --i) {
    const size_t cap = kAlign << i;
    while (!p.free[i].empty() && p.free_bytes > keep) {
      drop->push_back(p.free[i].back());
      p.free[i].pop_back();
      p.free_bytes -= cap;
    }
  }
}

}  // namespace

Buffer::~Buffer() {
  release_memory(data_, capacity_);
}

size_t buffer_class(size_t bytes) {
  size_t c = kAlign;
  while (c < bytes && c < kBlockSize) c <<= 1;
  return c;
}

void BufferPool::set_max_free_bytes(size_t bytes) {
  Pool& p = pool();
  std::vector<char*> drop;
  {
    std::lock_guard g(p.mu);
    p.max_free = bytes;
    trim_locked(p, bytes, &drop);
  }
  for (char* d : drop) std::free(d);
}

void BufferPool::set_limit(size_t bytes) {
  pool().limit.store(bytes, std::memory_order_relaxed);
}

void BufferPool::trim(size_t keep) {
  Pool& p = pool();
  std::vector<char*> drop;
  {
    std::lock_guard g(p.mu);
    if (p.free_bytes <= keep) return;
    trim_locked(p, keep, &drop);
  }
  for (char* d : drop) std::free(d);
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
    if (!release_memory(d, kBlockSize)) break;
  }
  return touched;
}

BufRef BufferPool::allocate(size_t min_capacity) {
  const size_t cap = buffer_class(min_capacity);
  char* d = nullptr;
  {
    Pool& p = pool();
    std::lock_guard g(p.mu);
    auto& v = p.free[class_index(cap)];
    if (!v.empty()) {
      d = v.back();
      v.pop_back();
      p.free_bytes -= cap;
    }
  }
  if (d == nullptr) {
    d = static_cast<char*>(std::aligned_alloc(kAlign, cap));
    if (d == nullptr) throw std::bad_alloc();
  }
  return BufRef(new Buffer(d, cap));
}

}  // namespace kvfs
