#include "core/buffer.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

namespace kvfs {
namespace {

struct Pool {
  std::mutex mu;
  std::vector<char*> free;  // guarded by mu; each kBlockSize bytes
  size_t max_free = 64u << 20;
};

Pool& pool() {
  static Pool* p = new Pool;  // leaked: buffers may be freed during exit
  return *p;
}

void release_memory(char* d, size_t cap) {
  if (cap == kBlockSize) {
    Pool& p = pool();
    std::lock_guard g(p.mu);
    if ((p.free.size() + 1) * kBlockSize <= p.max_free) {
      p.free.push_back(d);
      return;
    }
  }
  std::free(d);
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
    while (p.free.size() * kBlockSize > bytes) {
      drop.push_back(p.free.back());
      p.free.pop_back();
    }
  }
  for (char* d : drop) std::free(d);
}

size_t BufferPool::free_bytes() {
  Pool& p = pool();
  std::lock_guard g(p.mu);
  return p.free.size() * kBlockSize;
}

void BufferPool::prefill(size_t bytes, const std::atomic<bool>* stop) {
  Pool& p = pool();
  while (!stop->load(std::memory_order_relaxed)) {
    {
      std::lock_guard g(p.mu);
      if ((p.free.size() + 1) * kBlockSize > std::min(bytes, p.max_free)) return;
    }
    char* d = static_cast<char*>(std::aligned_alloc(kAlign, kBlockSize));
    if (d == nullptr) return;
    std::memset(d, 0, kBlockSize);
    std::lock_guard g(p.mu);
    p.free.push_back(d);
  }
}

BufRef BufferPool::allocate(size_t min_capacity) {
  size_t cap = buffer_class(min_capacity);
  char* d = nullptr;
  if (cap == kBlockSize) {
    Pool& p = pool();
    std::lock_guard g(p.mu);
    if (!p.free.empty()) {
      d = p.free.back();
      p.free.pop_back();
    }
  }
  if (d == nullptr) {
    d = static_cast<char*>(std::aligned_alloc(kAlign, cap));
    if (d == nullptr) throw std::bad_alloc();
  }
  return BufRef(new Buffer(d, cap));
}

}  // namespace kvfs
