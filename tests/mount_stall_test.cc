// SPDX-License-Identifier: Apache-2.0
// Mount tests: a backing dir that stops answering, like an NFS server in a
// failover, and one that disappears under the daemon.
//
// The stalling backing dir is a FUSE passthrough (bindfs, with direct_io so
// that every read reaches it) stopped with SIGSTOP and resumed with SIGCONT:
// calls into it then block in the kernel exactly as they do on a hung NFS
// mount. With io_timeout=2, each client call is timed against it: reads that
// need the backing fail with EIO within the deadline; RAM hits, lookups,
// readdir, new writes into RAM and the stats go on; writes beyond the dirty
// budget and fsync fail instead of waiting; unmount exits, naming every file
// it could not flush. After the resume, and after a remount, every file that
// was accepted holds its bytes. The deadline bounds are generous (the test is
// about "not forever", not about speed).
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/mount_fixture.h"
#include "tests/reliability_util.h"

namespace kvfs::test {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMiB = 1 << 20;
constexpr double kIoTimeout = 2.0;
// What a call may take beyond io_timeout: the stall detector's tick and a
// loaded CI machine. A call that hangs takes minutes, not this.
constexpr double kSlack = 4.0;
const std::string kOpts = "io_timeout=2,ram_prefault=0";

std::string slurp_file(const std::string& path) {
  std::string s;
  (void)read_file(path, &s);
  return s;
}

bool backing_stalled(const std::string& mnt) {
  auto j = stats(mnt);
  return j.contains("backing") && j["backing"].value("stalled", false);
}

// A kvfs mount whose backing dir is a bindfs passthrough that can be stopped.
class StallTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have("bindfs")) GTEST_SKIP() << "bindfs is not installed (tools/install-deps.sh)";
    real_ = m_.root() + "/real";
    back_ = m_.root() + "/stalling";
    std::filesystem::create_directories(real_);
    std::filesystem::create_directories(back_);
    const std::string why = view_.start(real_, back_);
    ASSERT_EQ(why, "");
    m_.set_backing(back_);
  }

  void TearDown() override {
    if (!view_.running()) return;
    resume();
    if (m_.mounted()) m_.unmount();
    if (daemon_ > 0) {
      EXPECT_TRUE(KvfsMount::wait_exit(daemon_, 60000));
    }
    view_.close();
  }

  void stall() { ASSERT_TRUE(view_.stop()); }
  void resume() { view_.resume(); }
  bool flush() { return control(m_.mnt(), R"({"cmd":"flush","wait":true})").contains("flushed"); }
  void put(const std::string& rel, size_t n, uint64_t seed) {
    if (auto slash = rel.rfind('/'); slash != std::string::npos)
      std::filesystem::create_directories(m_.path(rel.substr(0, slash)));
    ASSERT_TRUE(write_file(m_.path(rel), make_content(n, seed))) << rel << ": " << errstr(errno);
  }
  // The file holds exactly its content (read through the daemon).
  void expect_content(const std::string& rel, size_t n, uint64_t seed) {
    int err;
    std::string got = read_direct(m_.path(rel), &err);
    EXPECT_EQ(err, 0) << rel << ": " << errstr(err);
    EXPECT_TRUE(got == make_content(n, seed)) << rel << ": wrong bytes (" << got.size() << ")";
  }

  StoppableView view_;  // the backing dir kvfs sees; outlives the mount
  KvfsMount m_;
  std::string real_, back_;
  pid_t daemon_ = -1;  // an unmounted daemon still to wait for
};

TEST_F(StallTest, ColdReadsFailWithinIoTimeoutWhileTheRestGoesOn) {
  ASSERT_TRUE(m_.mount_ok(kOpts));
  for (int i = 0; i < 3; ++i) put("cold/f" + std::to_string(i), 4 * kMiB, 100 + i);
  ASSERT_TRUE(flush());
  m_.unmount();  // an empty RAM tier: the files are only in the backing dir
  ASSERT_TRUE(m_.mount_ok(kOpts));
  put("hot", kMiB, 7);  // in RAM, dirty

  stall();
  auto t0 = Clock::now();
  int err;
  (void)read_direct(m_.path("cold/f0"), &err);
  const double took = since(t0);
  EXPECT_EQ(err, EIO) << errstr(err);
  EXPECT_LE(took, kIoTimeout + kSlack) << "a cold read waited past io_timeout";
  EXPECT_GE(took, kIoTimeout * 0.9) << "gave up before io_timeout";

  // What needs no backing call keeps answering, at once.
  t0 = Clock::now();
  struct stat st;
  EXPECT_EQ(::stat(m_.path("cold/f1").c_str(), &st), 0) << errstr(errno);
  EXPECT_EQ(st.st_size, off_t(4 * kMiB));
  std::set<std::string> names;
  if (DIR* d = ::opendir(m_.path("cold").c_str())) {
    while (dirent* e = ::readdir(d)) names.insert(e->d_name);
    ::closedir(d);
  }
  EXPECT_EQ(names, (std::set<std::string>{".", "..", "f0", "f1", "f2"}));
  expect_content("hot", kMiB, 7);
  put("during", 2 * kMiB, 8);
  EXPECT_EQ(::chmod(m_.path("during").c_str(), 0600), 0) << errstr(errno);
  EXPECT_TRUE(backing_stalled(m_.mnt())) << stats(m_.mnt()).dump();
  auto j = stats(m_.mnt());
  EXPECT_GE(stat_u64(j, "/backing/timeouts"), 1u) << j.dump();
  EXPECT_LE(since(t0), kSlack) << "calls that need no backing I/O were held up";
  // The stall is logged once it is seen (the read is still stuck inside).
  EXPECT_TRUE(eventually(
      [&] { return slurp_file(m_.log_file()).find("backing dir stalled") != std::string::npos; },
      kSlack))
      << m_.log_tail(2000);

  resume();
  EXPECT_TRUE(eventually([&] { return !backing_stalled(m_.mnt()); }, 30)) << "still stalled";
  for (int i = 0; i < 3; ++i) expect_content("cold/f" + std::to_string(i), 4 * kMiB, 100 + i);
  ASSERT_TRUE(flush());
  // The deadline is a runtime setting too.
  auto c = control(m_.mnt(), R"({"cmd":"config","set":[["io_timeout","3"]]})");
  EXPECT_FALSE(c.contains("error")) << c.dump();
  EXPECT_EQ(control(m_.mnt(), R"({"cmd":"config"})").value("io_timeout", 0.0), 3.0);
  m_.unmount();
  ASSERT_TRUE(m_.mount_ok(kOpts));
  for (int i = 0; i < 3; ++i) expect_content("cold/f" + std::to_string(i), 4 * kMiB, 100 + i);
  expect_content("hot", kMiB, 7);
  expect_content("during", 2 * kMiB, 8);
  const std::string log = slurp_file(m_.log_file());
  EXPECT_NE(log.find("backing dir stalled"), std::string::npos) << log;
  EXPECT_NE(log.find("backing dir answers again after a stall"), std::string::npos) << log;
}

TEST_F(StallTest, WritesPastTheDirtyBudgetAndFsyncFailInsteadOfWaiting) {
  ASSERT_TRUE(m_.mount_ok(kOpts + ",ram_size=32M"));
  put("before", 4 * kMiB, 1);
  ASSERT_TRUE(flush());

  // A small file written before the stall, not yet flushed.
  int sfd = ::open(m_.path("small").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(sfd, 0) << errstr(errno);
  const std::string small = make_content(64 << 10, 3);
  ASSERT_EQ(::write(sfd, small.data(), small.size()), ssize_t(small.size())) << errstr(errno);

  stall();
  // More than the RAM tier holds: once it is full of dirty data, a writer
  // waits for the flushers, which wait on the backing dir.
  const std::string big = make_content(64 * kMiB, 2);
  int fd = ::open(m_.path("big").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << errstr(errno);
  int err = 0;
  size_t written = 0;
  Clock::time_point blocked = Clock::now();
  double longest = 0;
  while (written < big.size()) {
    const auto t = Clock::now();
    ssize_t n = ::write(fd, big.data() + written, kMiB);
    longest = std::max(longest, since(t));
    if (n < 0) {
      err = errno;
      break;
    }
    written += size_t(n);
    blocked = Clock::now();
  }
  EXPECT_TRUE(err == EIO || err == ENOSPC) << "write: " << errstr(err) << " after " << written;
  EXPECT_LE(since(blocked), 2 * kIoTimeout + kSlack) << "a write waited past io_timeout";
  EXPECT_LE(longest, 2 * kIoTimeout + kSlack);
  ::close(fd);

  // fsync waits for a flush, which cannot happen: EIO within the deadline.
  auto t0 = Clock::now();
  EXPECT_EQ(::fsync(sfd), -1);
  EXPECT_EQ(errno, EIO) << errstr(errno);
  EXPECT_LE(since(t0), kIoTimeout + kSlack) << "fsync waited past io_timeout";

  resume();
  // Flushing resumes by itself: the same fsync now succeeds.
  EXPECT_EQ(::fsync(sfd), 0) << errstr(errno);
  ::close(sfd);
  ASSERT_EQ(::unlink(m_.path("big").c_str()), 0);  // the client's partial file
  ASSERT_TRUE(flush());
  m_.unmount();
  ASSERT_TRUE(m_.mount_ok(kOpts + ",ram_size=32M"));
  expect_content("before", 4 * kMiB, 1);
  expect_content("small", 64 << 10, 3);
}

TEST_F(StallTest, UnmountWhileStalledExitsAndNamesWhatWasNotFlushed) {
  ASSERT_TRUE(m_.mount_ok(kOpts));
  put("kept", 2 * kMiB, 1);
  ASSERT_TRUE(flush());
  stall();
  put("lost1", kMiB, 2);
  put("dir/lost2", kMiB, 3);

  const auto t0 = Clock::now();
  RunResult u = run_command({"fusermount3", "-u", m_.mnt()});
  EXPECT_EQ(u.exit_code, 0) << u.output;
  EXPECT_LE(since(t0), kSlack) << "umount waited for the backing dir";
  daemon_ = m_.forget_unmounted();
  EXPECT_FALSE(is_mounted(m_.mnt()));
  // The daemon gives up on the backing dir after io_timeout and says what it
  // could not write. (Its process may linger until the passthrough answers
  // the requests it had already taken: the kernel waits for those.)
  const std::string done = "stopped: the backing dir did not answer within io_timeout";
  EXPECT_TRUE(eventually([&] { return slurp_file(m_.log_file()).find(done) != std::string::npos; },
                         kIoTimeout + 2 * kSlack))
      << m_.log_tail(4000);
  const std::string log = slurp_file(m_.log_file());
  EXPECT_NE(log.find("not flushed, lost: /lost1"), std::string::npos) << log;
  EXPECT_NE(log.find("not flushed, lost: /dir/lost2"), std::string::npos) << log;
  EXPECT_EQ(log.find("not flushed, lost: /kept"), std::string::npos) << log;

  resume();
  ASSERT_TRUE(KvfsMount::wait_exit(daemon_, 60000));
  daemon_ = -1;
  ASSERT_TRUE(m_.mount_ok(kOpts));
  expect_content("kept", 2 * kMiB, 1);
  // A lost file's record may have reached a segment after the resume: then
  // the catch-up brings it back whole. Never partly.
  for (auto [rel, seed] : {std::pair{"lost1", 2}, std::pair{"dir/lost2", 3}}) {
    struct stat st;
    if (::stat(m_.path(rel).c_str(), &st) == 0) expect_content(rel, kMiB, seed);
  }
}

// The backing dir's contents removed under a running daemon (an admin's
// mistake, a storage volume unmounted): errors, never a crash or wrong bytes.
TEST(BackingGone, BackingDirRemovedUnderTheDaemon) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok("io_timeout=2"));
  ASSERT_TRUE(write_file(m.path("a"), make_content(2 * kMiB, 1)));
  ASSERT_TRUE(control(m.mnt(), R"({"cmd":"flush","wait":true})").contains("flushed"));
  for (const auto& e : std::filesystem::directory_iterator(m.backing()))
    std::filesystem::remove_all(e.path());

  ASSERT_TRUE(write_file(m.path("b"), make_content(kMiB, 2))) << errstr(errno);
  int err;
  std::string a = read_direct(m.path("a"), &err);
  if (err == 0) {
    EXPECT_TRUE(a == make_content(2 * kMiB, 1)) << "wrong bytes for a";
  } else {
    EXPECT_EQ(err, EIO) << errstr(err);
  }
  int fd = ::open(m.path("b").c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(::fsync(fd), -1) << "fsync cannot succeed without a backing dir";
  EXPECT_TRUE(errno == EIO || errno == ENOSPC) << errstr(errno);
  ::close(fd);
  EXPECT_EQ(daemon_healthy(m), "");
  const pid_t pid = m.daemon_pid();
  RunResult u = run_command({"fusermount3", "-u", m.mnt()});
  EXPECT_EQ(u.exit_code, 0) << u.output;
  m.forget_unmounted();
  EXPECT_TRUE(KvfsMount::wait_exit(pid, 60000)) << "the daemon did not exit";
  const std::string log = slurp_file(m.log_file());
  EXPECT_NE(log.find("not flushed, lost: /b"), std::string::npos) << log;
  EXPECT_EQ(log.find("Segmentation"), std::string::npos) << log;
}

// A file larger than the cap could never be flushed: refused as it grows.
TEST(Capacity, FileLargerThanTheCapacityGetsEfbig) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok("capacity=32M,segment_size=4M"));
  int fd = ::open(m.path("huge").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  const std::string mb = make_content(kMiB, 1);
  int err = 0;
  size_t written = 0;
  for (int i = 0; i < 40 && err == 0; ++i) {
    ssize_t n = ::write(fd, mb.data(), mb.size());
    if (n < 0)
      err = errno;
    else
      written += size_t(n);
  }
  EXPECT_EQ(err, EFBIG) << errstr(err);
  EXPECT_EQ(written, 32 * kMiB);
  ::close(fd);
  ASSERT_EQ(::unlink(m.path("huge").c_str()), 0);  // it fills the cap; make room
  ASSERT_TRUE(write_file(m.path("fits"), make_content(3 * kMiB, 2)));
  ASSERT_TRUE(control(m.mnt(), R"({"cmd":"flush","wait":true})").contains("flushed"));
  m.unmount();
  ASSERT_TRUE(m.mount_ok("capacity=32M,segment_size=4M"));
  std::string got;
  ASSERT_TRUE(read_file(m.path("fits"), &got));
  EXPECT_TRUE(got == make_content(3 * kMiB, 2));
}

// A file accepted into RAM while nothing can be evicted to make room for it
// (everything else is within evict_grace) may never be flushed: its close()
// says so with ENOSPC, and new writes are refused, instead of a success that
// is lost at unmount.
TEST(Capacity, CloseSaysEnospcWhileNothingCanBeEvicted) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok("capacity=32M,segment_size=4M"));
  auto flush = [&] { return control(m.mnt(), R"({"cmd":"flush","wait":true})"); };
  ASSERT_TRUE(write_file(m.path("a"), make_content(20 * kMiB, 1)));
  ASSERT_TRUE(flush().contains("flushed"));
  int fd = ::open(m.path("d").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  const std::string d = make_content(kMiB, 4);
  ASSERT_EQ(::write(fd, d.data(), d.size()), ssize_t(d.size())) << errstr(errno);
  ASSERT_TRUE(write_file(m.path("b"), make_content(20 * kMiB, 2)));
  auto r = flush();  // b does not fit beside a, which is in its grace period
  EXPECT_EQ(r.value("errno", 0), ENOSPC) << r.dump();
  EXPECT_EQ(::close(fd), -1) << "close() of a file that cannot be flushed succeeded";
  EXPECT_EQ(errno, ENOSPC) << errstr(errno);
  EXPECT_FALSE(write_file(m.path("c"), make_content(kMiB, 3)));
  EXPECT_EQ(errno, ENOSPC) << errstr(errno);
  // Room again: everything still in RAM is flushed after all (the evictor
  // deletes a's dead segments in the background; a flush retries).
  ASSERT_EQ(::unlink(m.path("a").c_str()), 0);
  EXPECT_TRUE(eventually([&] { return (r = flush()).contains("flushed"); }, 60)) << r.dump();
  m.unmount();
  ASSERT_TRUE(m.mount_ok("capacity=32M,segment_size=4M"));
  std::string got;
  ASSERT_TRUE(read_file(m.path("b"), &got));
  EXPECT_TRUE(got == make_content(20 * kMiB, 2));
  ASSERT_TRUE(read_file(m.path("d"), &got));
  EXPECT_TRUE(got == d);
}

}  // namespace
}  // namespace kvfs::test
