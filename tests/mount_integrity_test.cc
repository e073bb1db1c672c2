// SPDX-License-Identifier: Apache-2.0
// Mount tests: third-party integrity tools through a real mount.
//
// fio writes with per-block checksums (verify=crc32c, verify_fatal=1) from
// 16 jobs: sequential and random, buffered and O_DIRECT, files from 4 KiB to
// 64 MiB; it verifies what it wrote right away, and again after a remount
// (verify_only: every byte then comes back from the segments). stress-ng
// runs its filesystem stressors in a directory on the mount with --verify.
// Each test is skipped (with the reason) only when its tool is not installed.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/mount_fixture.h"
#include "tests/reliability_util.h"

namespace kvfs::test {
namespace {

using json = nlohmann::json;

bool have_tool(const std::string& name) {
  return run_command({"sh", "-c", "command -v " + name}).exit_code == 0;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// 16 jobs in five groups; about 1 GiB written and verified per pass.
std::string fio_jobfile(const std::string& dir) {
  return "[global]\n"
         "directory=" +
         dir +
         "\n"
         "ioengine=psync\n"
         "verify=crc32c\n"
         "verify_fatal=1\n"
         "do_verify=1\n"
         "verify_state_save=0\n"  // no local-*-verify.state files in the cwd
         "randrepeat=1\n"
         "fallocate=none\n"
         "group_reporting=0\n"
         "\n"
         "; vLLM-sized chunks through the page cache: sequential 1 MiB writes\n"
         "[seq_buffered]\n"
         "rw=write\n"
         "bs=1M\n"
         "filesize=128M\n"
         "numjobs=4\n"
         "\n"
         "; the vLLM store itself: O_DIRECT, 36 MiB files\n"
         "[seq_direct]\n"
         "rw=write\n"
         "direct=1\n"
         "bs=4M\n"
         "nrfiles=2\n"
         "filesize=36M\n"
         "numjobs=4\n"
         "\n"
         "; random writes of mixed sizes, buffered: partial blocks, rewrites of\n"
         "; the same 1 MiB block\n"
         "[rand_buffered]\n"
         "rw=randwrite\n"
         "bsrange=4k-256k\n"
         "filesize=16M\n"
         "numjobs=3\n"
         "\n"
         "[rand_direct]\n"
         "rw=randwrite\n"
         "direct=1\n"
         "bsrange=4k-128k\n"
         "blockalign=4k\n"
         "filesize=8M\n"
         "numjobs=3\n"
         "\n"
         "; many small files, 4 KiB to 1 MiB\n"
         "[small_files]\n"
         "rw=write\n"
         "bs=4k\n"
         "nrfiles=64\n"
         "filesize=4k-1M\n"
         "file_service_type=sequential\n"
         "numjobs=2\n";
}

struct FioResult {
  int exit_code = -1;
  std::string output;
  json report;
  uint64_t errors = 0, jobs = 0, written = 0, read = 0;
};

FioResult run_fio(const std::string& jobfile, const std::string& json_out,
                  const std::vector<std::string>& extra) {
  FioResult r;
  std::vector<std::string> argv = {"fio", "--output-format=json", "--output=" + json_out};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.push_back(jobfile);
  RunResult rr = run_command(argv);
  r.exit_code = rr.exit_code;
  r.output = rr.output;
  std::string js = slurp(json_out);
  // fio may print notes before the JSON object.
  size_t brace = js.find('{');
  r.report = json::parse(brace == std::string::npos ? js : js.substr(brace), nullptr, false);
  if (r.report.is_discarded() || !r.report.contains("jobs")) return r;
  for (const auto& j : r.report["jobs"]) {
    ++r.jobs;
    r.errors += j.value("error", 0);
    if (j.contains("write")) r.written += j["write"].value("io_bytes", uint64_t(0));
    if (j.contains("read")) r.read += j["read"].value("io_bytes", uint64_t(0));
  }
  return r;
}

std::string fio_errors(const FioResult& r) {
  std::string s;
  if (r.report.is_discarded() || !r.report.contains("jobs")) return "no JSON report";
  for (const auto& j : r.report["jobs"])
    if (j.value("error", 0) != 0)
      s += j.value("jobname", std::string("?")) + ": error " + std::to_string(j.value("error", 0)) +
           "; ";
  return s;
}

TEST(Integrity, FioVerifyCrc32c16Jobs) {
  if (!have_tool("fio")) GTEST_SKIP() << "fio is not installed (apt-get install fio)";
  KvfsMount m;
  // A RAM tier much smaller than the data: the verify reads and the second
  // pass come from the segments.
  ASSERT_TRUE(m.mount_ok("ram_size=128M"));
  const std::string dir = m.path("fio");
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  const std::string jobfile = m.root() + "/verify.fio";
  {
    std::ofstream f(jobfile);
    f << fio_jobfile(dir);
  }
  FioResult w = run_fio(jobfile, m.root() + "/fio-write.json", {});
  ASSERT_FALSE(w.report.is_discarded()) << "fio gave no JSON: " << w.output;
  EXPECT_EQ(w.jobs, 16u);
  EXPECT_EQ(w.exit_code, 0) << fio_errors(w) << "\n" << w.output;
  EXPECT_EQ(w.errors, 0u) << fio_errors(w);
  EXPECT_GE(w.written, 900ull << 20);
  EXPECT_GE(w.read, w.written) << "fio verified less than it wrote";
  ASSERT_EQ(daemon_healthy(m), "");

  // Remount: everything comes back from the segments, verified again.
  m.unmount();
  ASSERT_TRUE(m.mount_ok("ram_size=64M"));
  FioResult v = run_fio(jobfile, m.root() + "/fio-verify.json", {"--verify_only"});
  ASSERT_FALSE(v.report.is_discarded()) << "fio gave no JSON: " << v.output;
  EXPECT_EQ(v.exit_code, 0) << fio_errors(v) << "\n" << v.output;
  EXPECT_EQ(v.errors, 0u) << fio_errors(v);
  EXPECT_GE(v.read, w.written) << "the verify-only pass read less than was written";
  json s = stats(m.mnt());
  EXPECT_EQ(stat_u64(s, "/errors/checksum"), 0u) << s.dump();
  EXPECT_EQ(stat_u64(s, "/errors/io"), 0u) << s.dump();
  EXPECT_GT(stat_u64(s, "/hits/backing"), 0u) << "nothing was read from the segments";
  std::printf("fio: wrote %.2f GiB, verified %.2f GiB right away and %.2f GiB after a remount\n",
              w.written / double(1 << 30), w.read / double(1 << 30), v.read / double(1 << 30));
  EXPECT_EQ(daemon_healthy(m), "");
}

// Runs stress-ng with the given stressors (two instances each) for secs
// seconds in dir; returns its result and each stressor's bogo ops.
RunResult run_stress_ng(const std::string& dir, const std::vector<std::string>& stressors, int secs,
                        std::map<std::string, uint64_t>* ops) {
  std::vector<std::string> argv = {"stress-ng",
                                   "--temp-path",
                                   dir,
                                   "--verify",
                                   "--timeout",
                                   std::to_string(secs) + "s",
                                   "--metrics-brief",
                                   "--hdd-bytes",
                                   "64M",
                                   "--iomix-bytes",
                                   "64M",
                                   "--readahead-bytes",
                                   "16M",
                                   "--fallocate-bytes",
                                   "64M"};
  for (const auto& s : stressors) {
    argv.push_back("--" + s);
    argv.push_back("2");
  }
  RunResult r = run_command(argv);
  std::istringstream lines(r.output);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream w(line);
    std::vector<std::string> tok;
    std::string t;
    while (w >> t) tok.push_back(t);
    // "stress-ng: metrc: [pid] NAME BOGO-OPS REAL USR SYS RATE RATE"; the
    // first line of a stressor is the bogo-ops table, later ones are extras.
    if (tok.size() >= 10 && tok[1] == "metrc:" && !ops->count(tok[3]))
      (*ops)[tok[3]] = std::strtoull(tok[4].c_str(), nullptr, 10);
  }
  return r;
}

void expect_clean(const RunResult& r) {
  // 0: all passed; 2: a stressor failed; 3: out of resources; 4: a stressor
  // not implemented (skipped).
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find(" fail: "), std::string::npos) << "a stressor failed:\n" << r.output;
  EXPECT_EQ(r.output.find(" error: "), std::string::npos) << r.output;
}

TEST(Integrity, StressNgFilesystemStressors) {
  if (!have_tool("stress-ng"))
    GTEST_SKIP() << "stress-ng is not installed (apt-get install stress-ng)";
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok("ram_size=256M"));
  const std::string dir = m.path("stress");
  ASSERT_EQ(::mkdir(dir.c_str(), 0777), 0);
  // All stressors at once, so that they race each other as well; --verify
  // where the stressor supports it.
  const std::vector<std::string> stressors = {"hdd",      "rename", "dir",       "dentry",
                                              "filename", "iomix",  "fallocate", "readahead"};
  std::map<std::string, uint64_t> ops;
  RunResult r = run_stress_ng(dir, stressors, 8, &ops);
  expect_clean(r);
  std::string out = r.output;
  // Every stressor must have done some work. One that spent its time in
  // its setup (filename probes every byte as a name; a slow, sanitized
  // daemon) runs again alone.
  for (const auto& s : stressors) {
    EXPECT_TRUE(ops.count(s)) << "no metrics for stressor " << s << ":\n" << r.output;
    if (ops[s] > 0) continue;
    std::map<std::string, uint64_t> alone;
    RunResult again = run_stress_ng(dir, {s}, 10, &alone);
    expect_clean(again);
    EXPECT_GT(alone[s], 0u) << "stressor " << s << " did no work, twice:\n" << again.output;
    out += again.output;
  }
  EXPECT_EQ(daemon_healthy(m), "");
  // The mount still works: a file written now reads back.
  const std::string p = m.path("after.bin");
  const std::string c = make_content(3 << 20, 42);
  ASSERT_TRUE(write_file(p, c));
  std::string got;
  ASSERT_TRUE(read_file(p, &got));
  EXPECT_TRUE(got == c);
  json s = stats(m.mnt());
  EXPECT_EQ(stat_u64(s, "/errors/checksum"), 0u) << s.dump();
  std::printf("stress-ng output:\n%s\n", out.c_str());
}

}  // namespace
}  // namespace kvfs::test
