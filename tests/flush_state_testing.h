// SPDX-License-Identifier: Apache-2.0
// Tests that stand in for the Flusher: a flush of a file, begun and
// committed through FlushState's own transitions, so that a test's file is
// clean exactly as a real commit leaves it.
#pragma once

#include "core/inode/inode.h"

namespace kvfs {

struct FlushStateTestAccess {
  static FlushKey key() { return {}; }
  // A flush that captured the file now and committed (requires in.mu).
  static void commit(Inode& in) {
    const uint64_t v = in.flush.version();
    in.flush.begin(key(), true);
    (void)in.flush.committed(key(), v, in.linked.load());
  }
};

}  // namespace kvfs
