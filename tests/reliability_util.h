// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the reliability mount tests (integrity tools, races,
// injected faults, stalls): self-describing file contents, whole-file reads
// that report short reads, the daemon's stats through the control file,
// polling a condition with a deadline, and a first-error collector for
// worker threads.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "core/control/control_client.h"
#include "tests/mount_fixture.h"

namespace kvfs::test {

// Contents that say who wrote them: bytes [0, 8) hold the seed, bytes
// [8, 16) the length, the rest is a pure function of (seed, offset). A reader
// can tell a complete version from a torn, short or foreign one.
inline void make_content(char* p, size_t n, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  for (size_t i = 0; i < n; i += 8) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    std::memcpy(p + i, &s, n - i < 8 ? n - i : 8);
  }
  if (n >= 8) std::memcpy(p, &seed, 8);
  if (n >= 16) {
    const uint64_t len = n;
    std::memcpy(p + 8, &len, 8);
  }
}

inline std::string make_content(size_t n, uint64_t seed) {
  std::string s(n, '\0');
  make_content(s.data(), n, seed);
  return s;
}

// Checks that (p, n) is exactly one complete version; returns its seed.
// Empty string on success, else what is wrong.
inline std::string check_content(const char* p, size_t n, size_t want_len, uint64_t* seed) {
  if (n != want_len)
    return "length " + std::to_string(n) + ", expected " + std::to_string(want_len);
  if (n < 16) return "too short to identify";
  uint64_t s, len;
  std::memcpy(&s, p, 8);
  std::memcpy(&len, p + 8, 8);
  if (len != n) return "header says length " + std::to_string(len) + ", read " + std::to_string(n);
  std::string want = make_content(n, s);
  if (std::memcmp(want.data(), p, n) != 0) {
    size_t i = 0;
    while (want[i] == p[i]) ++i;
    return "version " + std::to_string(s) + " differs at byte " + std::to_string(i);
  }
  if (seed) *seed = s;
  return "";
}

// Reads a whole file with ONE read() (the offloaders' way) into an aligned
// buffer of cap bytes; then keeps reading to see end of file. Returns the
// bytes read, or -errno.
inline ssize_t read_whole(int fd, char* buf, size_t cap) {
  size_t got = 0;
  for (;;) {
    ssize_t n = ::pread(fd, buf + got, cap - got, static_cast<off_t>(got));
    if (n < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    if (n == 0 || got + size_t(n) == cap) return static_cast<ssize_t>(got + size_t(n));
    got += size_t(n);
  }
}

// Seconds since t.
inline double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Polls cond every 20 ms until it holds or `seconds` pass.
template <typename F>
bool eventually(F cond, double seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  while (!cond()) {
    if (since(t0) > seconds) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// One request to the daemon at mnt; a failure of the exchange itself comes
// back as an error reply, so that a test's expectation on the reply reports it.
inline nlohmann::json control(const std::string& mnt, const std::string& request) {
  auto r = control::request(control::control_path(mnt), request);
  if (!r.ok()) return nlohmann::json{{"error", r.status().ToString()}};
  return std::move(*r);
}

inline nlohmann::json stats(const std::string& mnt) {
  return control(mnt, R"({"cmd":"stats"})");
}

inline uint64_t stat_u64(const nlohmann::json& j, const char* ptr) {
  const nlohmann::json::json_pointer p(ptr);
  return j.contains(p) && j.at(p).is_number_unsigned() ? j.at(p).get<uint64_t>() : 0;
}

// True if the command is on PATH (tools some tests need: bindfs, fiu-run).
inline bool have(const std::string& what) {
  return run_command({"sh", "-c", "command -v " + what}).exit_code == 0;
}

// True while pid runs: exists and is not a zombie (a daemonized kvfs is
// reparented, and its new parent may be slow to reap it).
inline bool process_alive(pid_t pid) {
  if (::kill(pid, 0) != 0) return false;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  const size_t paren = line.rfind(')');
  return paren == std::string::npos || paren + 2 >= line.size() || line[paren + 2] != 'Z';
}

// The daemon is alive and its mount answers.
inline std::string daemon_healthy(const KvfsMount& m) {
  if (!process_alive(m.daemon_pid()))
    return "daemon " + std::to_string(m.daemon_pid()) + " is gone";
  struct stat st;
  if (::stat(m.mnt().c_str(), &st) != 0) return std::string("stat(mnt): ") + std::strerror(errno);
  if (::stat(control::control_path(m.mnt()).c_str(), &st) != 0)
    return std::string("stat(") + control::kControlName + "): " + std::strerror(errno);
  return "";
}

// The first failure seen by any worker thread, and how many there were.
class Failures {
 public:
  void add(const std::string& what) {
    if (count_.fetch_add(1) == 0) {
      std::lock_guard l(mu_);
      first_ = what;
    }
  }
  uint64_t count() const { return count_.load(); }
  std::string first() const {
    std::lock_guard l(mu_);
    return first_;
  }
  bool any() const { return count() > 0; }

 private:
  mutable std::mutex mu_;
  std::string first_;
  std::atomic<uint64_t> count_{0};
};

// A bindfs passthrough of src at view that a test can stop (SIGSTOP: every
// call into it hangs, as on a stalled NFS server) and resume: the backing
// dir, or one node's view of it, that stalls. start() mounts it; close()
// (and the destructor) resumes, unmounts and reaps it. Give it up only
// after the kvfs mounts over it are gone.
class StoppableView {
 public:
  StoppableView() = default;
  StoppableView(const StoppableView&) = delete;
  StoppableView& operator=(const StoppableView&) = delete;
  ~StoppableView() { close(); }
  // "" once mounted, else why not.
  std::string start(const std::string& src, const std::string& view) {
    view_ = view;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::execlp("bindfs", "bindfs", "-f", "--no-allow-other", "-o", "direct_io", src.c_str(),
               view.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    if (pid_ < 0) return std::string("fork: ") + std::strerror(errno);
    if (!eventually([&] { return is_mounted(view_); }, 20)) return "bindfs did not mount " + view;
    return "";
  }
  bool stop() {
    stopped_ = pid_ > 0 && ::kill(pid_, SIGSTOP) == 0;
    return stopped_;
  }
  void resume() {
    if (stopped_) ::kill(pid_, SIGCONT);
    stopped_ = false;
  }
  void close() {
    if (pid_ <= 0) return;
    resume();
    (void)run_command({"fusermount3", "-u", view_});
    ::kill(pid_, SIGTERM);
    int st;
    ::waitpid(pid_, &st, 0);
    pid_ = -1;
  }
  bool running() const { return pid_ > 0; }

 private:
  std::string view_;
  pid_t pid_ = -1;
  bool stopped_ = false;
};

inline std::string errstr(int e) {
  return std::string(strerrorname_np(e) ? strerrorname_np(e) : "?") + " (" + std::strerror(e) + ")";
}

}  // namespace kvfs::test
