// SPDX-License-Identifier: Apache-2.0
// An open file as core/ keeps it, and what a read hands back: shared by the
// read path (block_reader.h) and the store's file operations.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <vector>

#include "core/inode/inode.h"
#include "core/ram/held_blocks.h"
#include "core/util/buffer.h"

namespace kvfs {

// An open file. fs/ keeps the pointer in fuse_file_info::fh.
struct OpenFile {
  InodeRef in;
  bool writable = false;
  bool noatime = false;  // O_NOATIME: reads leave atime alone
  // Writable, and nothing written through it since the client's last close()
  // of a descriptor on it (FUSE flush). Guarded by in->mu.
  bool sealed = false;
  // The kernel may keep its cached pages of the file for this open.
  bool keep_cache = false;
  // The last block this open read only part of (held_blocks.h). Guarded by
  // in->mu; written only through HeldBlocks.
  HeldBlock held{};
};

// What a read returns: iovecs into buffers kept alive by refs. The caller
// replies with the iovecs, then drops the ReadResult.
struct ReadResult {
  std::vector<iovec> iov;
  std::vector<ConstBufRef> refs;
  size_t bytes = 0;
};

}  // namespace kvfs
