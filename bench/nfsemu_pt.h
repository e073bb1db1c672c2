// SPDX-License-Identifier: Apache-2.0
// nfsemu's passthrough internals, shared by nfsemu_ops.cc (inodes and names)
// and nfsemu_io.cc (open files and directories).
#pragma once

#include <dirent.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "bench/nfsemu.h"

namespace nfsemu {

struct Inode {
  int fd = -1;  // O_PATH: names nothing, so renames of the file do not matter
  dev_t dev = 0;
  ino_t ino = 0;
  uint64_t nlookup = 0;  // guarded by the inode table's mutex
};

struct File {
  int fd = -1;
  bool direct = false;         // the source fd is O_DIRECT: writes need an aligned buffer
  bool client_direct = false;  // the client asked for O_DIRECT (whatever the source took)
  // Direct writes not yet committed: the COMMIT an NFS client's direct write
  // waits for is paid at the handle's close (em_flush) unless an fsync paid it.
  std::atomic<bool> uncommitted{false};
};

struct Dir {
  DIR* dp = nullptr;
  off_t offset = 0;
  dirent* entry = nullptr;  // read but not yet replied (it did not fit)
  uint64_t bytes = 0;       // replied so far, for the READDIR round trips
};

constexpr size_t kAlign = 4096;
constexpr size_t kMaxIo = 1u << 20;

extern Inode g_root;
inline Inode* inode(fuse_ino_t ino) {
  return ino == FUSE_ROOT_ID ? &g_root : reinterpret_cast<Inode*>(ino);
}
inline File* file(fuse_file_info* fi) {
  return reinterpret_cast<File*>(fi->fh);
}
inline Dir* dir(fuse_file_info* fi) {
  return reinterpret_cast<Dir*>(fi->fh);
}
inline std::string proc_path(int fd) {
  return "/proc/self/fd/" + std::to_string(fd);
}

// An aligned per-thread buffer of at least size bytes (nullptr: no memory),
// for O_DIRECT writes and as the read and readdir buffer.
char* io_buffer(size_t size);
// Replies err (0 = success), counting the errors.
void reply_err(fuse_req_t req, int err);
// Looks name up under parent and takes a reference on its inode; 0 or errno.
int do_lookup(Inode* parent, const char* name, fuse_entry_param* e);

// nfsemu_io.cc
void em_create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
               fuse_file_info* fi);
void em_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
void em_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi);
void em_write(fuse_req_t req, fuse_ino_t ino, const char* data, size_t size, off_t off,
              fuse_file_info* fi);
void em_flush(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
void em_release(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
void em_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, fuse_file_info* fi);
void em_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
                  fuse_file_info* fi);
void em_opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
void em_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi);
void em_releasedir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
void em_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, fuse_file_info* fi);

}  // namespace nfsemu
