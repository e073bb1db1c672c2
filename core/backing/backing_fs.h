// SPDX-License-Identifier: Apache-2.0
// BackingFs: the calls core/ makes on the files of the backing directory's
// segment log, behind one interface, so that a test can put a disk that
// fails (or lies) under a real SegmentStore and a real BlockStore without a
// mount (tests/fault_fs.h: an EIO on the third pwrite of one segment, an
// ENOSPC at fallocate, a flipped byte in what a pread returns). The daemon
// uses posix(), which is the system calls themselves.
//
// Each call returns what the system call returns, or -errno at once (as
// mergerfs's fs_*.hpp): the caller never reads errno, which a log line or a
// destructor between the call and the check could change. EINTR is retried
// inside; a short pread or pwrite is returned as such (the caller loops).
//
// What goes through it: the segment log's files, a node's own and its
// peers': SegmentStore's creates, opens, reads, unlinks and retirements,
// SegmentWriter's appends, preallocation, fdatasync, trim and seal, the
// record scans (catch-up, reclaim, rebuild, a peer's follow), the listings
// of segments/ and heads/ by a peer, and the head files (head_publisher.h).
// Not: what SegmentStore::Open does once (the lock, superblock and probe
// files, its own listing; a failure there fails the mount, which the mount
// tests cover), and the io_uring path,
// which SegmentWriter takes only over posix() (a ring submits straight to
// the kernel, past any seam): over another BackingFs its writes are pwrites.
//
// Thread-safe: posix() holds no state; an implementation must allow calls
// from every flusher, reader and BackingIo thread at once.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace kvfs {

class BackingFs {
 public:
  virtual ~BackingFs() = default;

  virtual int open(const std::string& path, int flags, mode_t mode) = 0;  // fd or -errno
  virtual int close(int fd) = 0;
  virtual ssize_t pread(int fd, void* buf, size_t n, uint64_t off) = 0;
  virtual ssize_t pwrite(int fd, const void* buf, size_t n, uint64_t off) = 0;
  virtual int fdatasync(int fd) = 0;
  virtual int fsync(int fd) = 0;  // of a directory: the names in it are durable
  virtual int fallocate(int fd, uint64_t off, uint64_t len) = 0;
  virtual int ftruncate(int fd, uint64_t len) = 0;
  virtual int fchmod(int fd, mode_t mode) = 0;
  virtual int fstat(int fd, struct stat* st) = 0;
  virtual int rename(const std::string& from, const std::string& to) = 0;
  virtual int unlink(const std::string& path) = 0;
  virtual int mkdir(const std::string& path, mode_t mode) = 0;
  // The names in dir ("." and ".." left out), appended to *names; 0 or -errno.
  virtual int list(const std::string& dir, std::vector<std::string>* names) = 0;

  // Whether writes may go through an io_uring instead of pwrite(): only
  // the real system calls, which a ring reaches directly.
  virtual bool kernel_direct() const { return false; }

  // The system calls themselves; one instance, never destroyed.
  static BackingFs* posix();
};

}  // namespace kvfs
