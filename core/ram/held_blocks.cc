// SPDX-License-Identifier: Apache-2.0
// HeldBlocks (held_blocks.h): one block per open for a read in pieces.
#include "core/ram/held_blocks.h"

#include <algorithm>

namespace kvfs {

ConstBufRef HeldBlocks::find_locked(const HeldBlock& h, const ExtentKey& key) {
  if (!h.buf || !(h.key == key)) return nullptr;
  hits_.fetch_add(1, std::memory_order_relaxed);
  return h.buf;
}

void HeldBlocks::hold_locked(HeldBlock* h, const ExtentKey& key, ConstBufRef buf) {
  const uint64_t add = buf->capacity();
  if (bytes_.fetch_add(add) + add > limit()) {
    bytes_.fetch_sub(add);
    return;  // keeps what it held
  }
  unhold_locked(h);
  h->buf = std::move(buf);
  h->key = key;
}

void HeldBlocks::unhold_locked(HeldBlock* h) {
  if (!h->buf) return;
  bytes_.fetch_sub(h->buf->capacity());
  h->buf.reset();
}

uint64_t HeldBlocks::limit() const {
  return std::min<uint64_t>(32 * kBlockSize, ram_capacity_() / 4);
}

}  // namespace kvfs
