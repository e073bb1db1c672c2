// SPDX-License-Identifier: Apache-2.0
// Crash loop: a writer records in a manifest every file it fsync'ed, every
// file it saw flushed (fsync of a directory) and every unlink that returned;
// the daemon is killed with SIGKILL at a random moment (during writes,
// flushes, eviction and segment reclamation, index commits), remounted and
// checked: every fsync'ed or flushed file present and bit-exact (unless the
// capacity cap legitimately evicted it), every present file bit-exact (never
// partial), every confirmed unlink still gone, and `kvfs-admin fsck` clean.
// Every fourth iteration also puts back, before the remount, the copy of the
// index dir taken after the previous clean unmount: the mount must catch up
// with everything the segments got since. There a rename or unlink made
// just before the kill may not have reached a segment yet (it is committed
// to the index first, to a segment by the next flush): a file fsync'ed and
// then renamed may come back under its tmp name, complete, and only unlinks
// followed by a successful fsync of the directory are checked.
//
// KVFS_CRASH_ITERS sets the number of iterations (default 20; the long mode
// is any larger number). An iteration that proves nothing fails.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/mount_fixture.h"

namespace kvfs::test {
namespace {

namespace fs = std::filesystem;

// A file's name says how to rebuild its content: "<seed>_<size>.blk".
std::string name_for(uint64_t seed, size_t size) {
  return std::to_string(seed) + "_" + std::to_string(size) + ".blk";
}
bool parse_name(const std::string& n, uint64_t* seed, size_t* size) {
  return std::sscanf(n.c_str(), "%lu_%zu.blk", seed, size) == 2 && n == name_for(*seed, *size);
}

struct Manifest {
  std::mutex mu;
  std::map<std::string, const char*> durable;  // fsync'ed, or closed before a dir fsync; how
  std::set<std::string> unlinked;              // unlink returned 0
  std::set<std::string> unlinked_flushed;      // ... and a directory fsync succeeded after
  // unlinks the kill cut off: the daemon may have committed them before it
  // died (the client saw ENOTCONN, not the answer), so either outcome holds.
  std::set<std::string> unlink_in_doubt;
  // tmp files whose write failed (ENOSPC under the tight cap) before the
  // client could unlink them: the daemon may have committed them as closed,
  // short; what they hold must still be a prefix of the right bytes.
  std::set<std::string> short_tmp;
  std::condition_variable first;  // something is durable: the kill may come
  bool any = false;
  std::map<std::string, int> soft;  // "op: error" -> count (ENOSPC under a tight cap)
  int soft_total() {
    std::lock_guard l(mu);
    int n = 0;
    for (auto& [k, v] : soft) n += v;
    return n;
  }
};

void soft_error(Manifest* m, const char* op, int e) {
  std::lock_guard l(m->mu);
  ++m->soft[std::string(op) + ": " + std::strerror(e)];
}

// True when the daemon is gone (after the kill): the writer stops. Other
// errors (ENOSPC under a tight cap) only mean that file is not durable.
bool dead(int err) {
  return err == ENOTCONN || err == ECONNABORTED || err == ENODEV;
}

void writer(const std::string& dir, uint64_t seed0, Manifest* m, std::atomic<bool>* stop) {
  std::mt19937_64 rng(seed0);
  std::vector<std::string> closed;  // closed since the last directory fsync
  std::vector<std::string> gone;    // unlinked since the last directory fsync
  std::vector<std::string> mine;
  while (!stop->load()) {
    const uint64_t seed = rng();
    const size_t size = 1 + rng() % (3 << 20);
    const std::string name = name_for(seed, size);
    const std::string tmp = dir + "/" + name + ".tmp";
    const std::string data = random_bytes(size, seed);
    int fd = ::open(tmp.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
    if (fd < 0) {
      if (dead(errno)) return;
      soft_error(m, "create", errno);
      continue;
    }
    int err = 0;
    const char* op = "write";
    // A short write (the daemon died between two of its requests) is retried
    // for its errno.
    for (size_t done = 0; done < size && err == 0;) {
      const ssize_t n = ::write(fd, data.data() + done, size - done);
      if (n > 0)
        done += static_cast<size_t>(n);
      else
        err = n < 0 ? errno : EIO;
    }
    const bool sync = err == 0 && rng() % 3 == 0;
    if (sync && ::fsync(fd) != 0) err = errno, op = "fsync";
    if (::close(fd) != 0 && err == 0) err = errno, op = "close";
    if (err == 0 && ::rename(tmp.c_str(), (dir + "/" + name).c_str()) != 0)
      err = errno, op = "rename";
    if (err != 0) {
      if (std::string(op) == "write") {
        std::lock_guard l(m->mu);
        m->short_tmp.insert(name + ".tmp");
      }
      if (dead(err)) return;
      soft_error(m, op, err);
      ::unlink(tmp.c_str());
      continue;
    }
    mine.push_back(name);
    closed.push_back(name);
    if (sync) {
      // fsync made the data durable under the tmp name; the rename of a file
      // already in the index is committed at once, so the final name holds.
      std::lock_guard l(m->mu);
      m->durable.emplace(name, "fsync");
      m->any = true;
      m->first.notify_all();
    }
    if (rng() % 8 == 0 && mine.size() > 2) {
      std::string victim = mine[rng() % mine.size()];
      if (::unlink((dir + "/" + victim).c_str()) == 0) {
        std::lock_guard l(m->mu);
        m->unlinked.insert(victim);
        m->durable.erase(victim);
        gone.push_back(victim);
      } else if (dead(errno)) {
        std::lock_guard l(m->mu);
        m->unlink_in_doubt.insert(victim);
        return;
      }
    }
    if (rng() % 6 == 0) {
      int d = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
      if (d < 0) return;
      const bool flushed = ::fsync(d) == 0;
      const int e = errno;
      ::close(d);
      if (!flushed) {
        if (dead(e)) return;
        soft_error(m, "fsync(dir)", e);
        continue;
      }
      std::lock_guard l(m->mu);
      for (auto& n : closed)
        if (!m->unlinked.count(n)) m->durable.emplace(n, "closed, then fsync of the directory");
      closed.clear();
      m->unlinked_flushed.insert(gone.begin(), gone.end());
      gone.clear();
      m->any = true;
      m->first.notify_all();
    }
  }
}

class CrashLoop : public ::testing::Test {};

TEST_F(CrashLoop, Kill9AtRandomMomentsNeverLosesOrCorrupts) {
  int iters = 20;
  if (const char* e = std::getenv("KVFS_CRASH_ITERS")) iters = std::max(1, std::atoi(e));
  KvfsMount m;
  std::mt19937_64 rng(std::random_device{}());
  uint64_t verified_files = 0, verified_durable = 0, evicted_durable = 0, swaps = 0;
  uint64_t unlinks_in_doubt = 0;
  std::set<std::string> short_tmp;  // Manifest::short_tmp of every iteration so far
  const std::string saved_index = m.root() + "/index.saved";
  bool have_saved = false;
  for (int it = 0; it < iters; ++it) {
    const bool swap = it % 4 == 3 && have_saved;
    // Odd iterations run against a small cap, so that eviction and segment
    // reclamation are busy when the kill comes.
    const bool tight = it % 2 == 1;
    std::string opts = "ram_size=64M,segment_size=8M,evict_grace=0";
    opts += tight ? ",capacity=48M" : ",capacity=4G";
    ASSERT_TRUE(m.mount_ok(opts)) << "iteration " << it;
    const std::string dir = m.path("blocks");
    fs::create_directories(dir);
    Manifest man;
    std::atomic<bool> stop{false};
    std::vector<std::thread> ws;
    for (int w = 0; w < 3; ++w) ws.emplace_back(writer, dir, rng(), &man, &stop);
    bool proved;
    {
      std::unique_lock l(man.mu);
      proved = man.first.wait_for(l, std::chrono::seconds(60), [&] { return man.any; });
    }
    if (!proved) {
      stop = true;  // join before failing: a joinable thread must not outlive the test
      m.kill9();
      for (auto& t : ws) t.join();
      FAIL() << "nothing became durable in iteration " << it << ": it would prove nothing ("
             << man.soft_total() << " write errors)";
    }
    // A random moment after the first durable file (not a synchronisation:
    // the point is to land anywhere in the write/flush/evict cycle).
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 400));
    m.kill9();
    stop = true;
    for (auto& t : ws) t.join();
    if (swap) {
      fs::remove_all(m.index_dir());
      fs::copy(saved_index, m.index_dir(), fs::copy_options::recursive);
    }

    ASSERT_TRUE(m.mount_ok(opts)) << "remount after kill, iteration " << it;
    std::set<std::string> present;
    for (auto& e : fs::directory_iterator(dir)) {
      const std::string n = e.path().filename();
      uint64_t seed;
      size_t size;
      if (!parse_name(n, &seed, &size)) continue;  // a tmp name: checked below anyway
      std::string got;
      if (!read_file(e.path(), &got)) {
        // Right after the remount the evictor may take a file between the
        // listing and the open when the cap is tight: a miss, never wrong.
        ASSERT_TRUE(errno == ENOENT && tight) << n << ": " << std::strerror(errno);
        continue;
      }
      present.insert(n);
      ASSERT_EQ(got.size(), size) << n << " came back partial";
      ASSERT_TRUE(got == random_bytes(size, seed)) << n << " came back with other bytes";
      ++verified_files;
    }
    short_tmp.insert(man.short_tmp.begin(), man.short_tmp.end());
    for (auto& e : fs::directory_iterator(dir)) {  // tmp files: complete or absent
      std::string n = e.path().filename();
      if (n.size() < 4 || n.substr(n.size() - 4) != ".tmp") continue;
      uint64_t seed;
      size_t size;
      ASSERT_TRUE(parse_name(n.substr(0, n.size() - 4), &seed, &size)) << n;
      std::string got;
      if (!read_file(e.path(), &got)) {
        ASSERT_TRUE(errno == ENOENT && tight) << n << ": " << std::strerror(errno);
        continue;  // evicted since the listing, as above
      }
      const std::string want = random_bytes(size, seed);
      if (short_tmp.count(n)) {
        ASSERT_TRUE(got.size() <= size && got == want.substr(0, got.size()))
            << n << " (a failed write) holds other bytes";
        continue;
      }
      ASSERT_TRUE(got.size() == size && got == want) << n << " is partial";
    }
    for (auto& [n, how] : man.durable) {
      if (present.count(n)) {
        ++verified_durable;
      } else if (man.unlink_in_doubt.count(n)) {
        ++unlinks_in_doubt;  // its unlink was under way at the kill: gone is right too
      } else if (swap && std::string(how) == "fsync" && fs::exists(dir + "/" + n + ".tmp")) {
        ++verified_durable;  // its rename had not reached a segment (checked complete above)
      } else {
        ASSERT_TRUE(tight) << n << " was made durable (" << how << ") and is gone (iteration " << it
                           << "; "
                           << (fs::exists(dir + "/" + n + ".tmp") ? "its .tmp is there"
                                                                  : "no .tmp of it either")
                           << ")";
        ++evicted_durable;  // the cap may evict it: then it is a miss, never wrong
      }
    }
    for (auto& n : swap ? man.unlinked_flushed : man.unlinked)
      EXPECT_FALSE(present.count(n)) << n << " came back after unlink (iteration " << it << ")";
    m.unmount();
    RunResult f = run_command({KVFS_ADMIN_BIN, "fsck", m.backing(), "--index-dir", m.index_dir()});
    ASSERT_EQ(f.exit_code, 0) << "fsck after iteration " << it << ":\n" << f.output;
    fs::remove_all(saved_index);
    fs::copy(m.index_dir(), saved_index, fs::copy_options::recursive);
    have_saved = true;
    swaps += swap;
    if (std::getenv("KVFS_CRASH_VERBOSE")) {
      std::string soft;
      for (auto& [k, v] : man.soft) soft += " [" + k + "] x" + std::to_string(v);
      std::fprintf(stderr,
                   "iteration %d (%s): %zu durable, %zu present, %zu unlinks cut off, errors:%s\n",
                   it, tight ? "tight cap" : "no cap", man.durable.size(), present.size(),
                   man.unlink_in_doubt.size(), soft.empty() ? " none" : soft.c_str());
    }
  }
  std::printf(
      "crash loop: %d kills (%lu with an older index dir put back), %lu files verified "
      "bit-exact, %lu durable files checked, %lu durable files evicted by the cap, %lu gone "
      "by an unlink the kill cut off\n",
      iters, (unsigned long)swaps, (unsigned long)verified_files, (unsigned long)verified_durable,
      (unsigned long)evicted_durable, (unsigned long)unlinks_in_doubt);
  EXPECT_GT(verified_durable, 0u);
}

}  // namespace
}  // namespace kvfs::test
