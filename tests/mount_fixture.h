// SPDX-License-Identifier: Apache-2.0
// KvfsMount: a real kvfs daemon on a real FUSE mount, for the mount tests.
//
// Each instance owns a fresh temporary tree (backing dir, mount point, index
// dir), runs the built `kvfs` binary like a user would, and always unmounts
// and waits for the daemon in its destructor, also when a test fails. A
// watchdog (mount_main.cc) kills every daemon and detaches every mount if a
// test runs past its time, so a hung daemon fails the test instead of
// hanging CI.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kvfs::test {

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout + stderr
};

// Runs a command (argv[0] looked up in PATH) and captures its output.
RunResult run_command(const std::vector<std::string>& argv);
// Runs the built kvfs-admin with these arguments.
RunResult run_admin(std::vector<std::string> args);

class KvfsMount {
 public:
  // Makes the directories; does not mount.
  KvfsMount();
  ~KvfsMount();
  KvfsMount(const KvfsMount&) = delete;
  KvfsMount& operator=(const KvfsMount&) = delete;

  // Starts `kvfs backing mnt -o index_dir=...,ram_size=...,log_file=...,<opts>`
  // and returns its result (0 = mounted). The default ram_size is 256M unless
  // opts has one; every mount of this instance appends to log_file().
  RunResult mount(const std::string& opts = "");
  // Mounts and fails the test (ASSERT-style: returns false) if it did not work.
  bool mount_ok(const std::string& opts = "");
  // fusermount3 -u, then waits for the daemon to flush and exit.
  // Returns the daemon's exit status if known, -1 otherwise.
  void unmount();
  // kill -9 the daemon and detach its dead mount.
  void kill9();
  // kill -9 the daemon and wait for it to be gone, leaving its dead mount
  // (ENOTCONN) on mnt() as a crash does; the watchdog and the destructor
  // still detach it if the test does not.
  void kill9_keep_mount();
  // After a kvfs that the test started by hand over this instance's dirs
  // mounted: adopt its daemon (read from the lock) as this instance's.
  void adopt();
  // After the test unmounted by itself (fusermount3 -u, without waiting):
  // forgets the daemon, which may still be flushing, and returns its pid.
  pid_t forget_unmounted();

  bool mounted() const { return pid_ > 0; }
  pid_t daemon_pid() const { return pid_; }
  std::string path(const std::string& rel) const { return mnt_ + "/" + rel; }
  const std::string& root() const { return root_; }
  const std::string& mnt() const { return mnt_; }
  const std::string& backing() const { return backing_; }
  const std::string& index_dir() const { return index_; }
  void set_backing(const std::string& dir) { backing_ = dir; }
  std::string log_file() const { return root_ + "/kvfs.log"; }
  // The last max_bytes of the daemon's log, from a line start. A failed test
  // prints it when the instance goes away.
  std::string log_tail(size_t max_bytes) const;

  // Waits (pidfd + poll, no sleeping) for pid to exit; false on timeout.
  static bool wait_exit(pid_t pid, int timeout_ms);

 private:
  std::string root_, backing_, mnt_, index_;
  pid_t pid_ = -1;
};

// True when something is mounted on exactly this path.
bool is_mounted(const std::string& path);

// Path of the kvfs binary under test.
const char* kvfs_binary();

// Every file of `want` (name relative to the mount -> bytes) present under
// m and bit-exact: "" or what is wrong with the first that is not.
std::string check_all(const KvfsMount& m, const std::map<std::string, std::string>& want);

// Helpers for file contents.
std::string random_bytes(size_t n, uint64_t seed);
bool write_file(const std::string& path, const std::string& data, int extra_flags = 0);
bool read_file(const std::string& path, std::string* out, int extra_flags = 0);
// fsync of a directory: kvfs flushes every dirty file (like syncfs).
bool fsync_dir(const std::string& dir);
// Aligned buffer for O_DIRECT.
struct AlignedBuf {
  explicit AlignedBuf(size_t n);
  ~AlignedBuf();
  char* data;
  size_t size;
};
// Reads a whole file with O_DIRECT (the daemon's bytes, not the page
// cache), 1 MiB at a time. Returns the bytes; *err is 0 or the errno of the
// first failed call.
std::string read_direct(const std::string& path, int* err);

}  // namespace kvfs::test
