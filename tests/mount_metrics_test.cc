// SPDX-License-Identifier: Apache-2.0
// The daemon's /metrics (mount option metrics=) and kvfs-admin --prometheus:
// real Prometheus histograms, hits and misses in one unit, promtool's verdict
// on both outputs, bad values refused at mount, the port closed at unmount,
// and which closes reach the daemon (a flush only from handles that write).
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/mount_fixture.h"

namespace kvfs::test {
namespace {

// A port nobody listens on now (the kernel's pick); another process could
// take it before kvfs does, which would fail the mount loudly, not wrongly.
unsigned free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (fd >= 0) ::close(fd);
    return 0;
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

struct HttpReply {
  bool connected = false;
  std::string status_line, headers, body;
};

// Plain HTTP/1.0 GET on 127.0.0.1: the test should not trust the library
// the daemon uses to also read its answers.
HttpReply http_get(unsigned port, const std::string& path) {
  HttpReply r;
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    if (fd >= 0) ::close(fd);
    return r;
  }
  r.connected = true;
  const std::string req = "GET " + path + " HTTP/1.0\r\nHost: localhost\r\n\r\n";
  if (::write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    ::close(fd);
    return r;
  }
  std::string all;
  char buf[65536];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR))
    if (n > 0) all.append(buf, static_cast<size_t>(n));
  ::close(fd);
  const auto eol = all.find("\r\n");
  const auto hdr_end = all.find("\r\n\r\n");
  if (eol == std::string::npos || hdr_end == std::string::npos) return r;
  r.status_line = all.substr(0, eol);
  r.headers = all.substr(eol + 2, hdr_end - eol - 2);
  r.body = all.substr(hdr_end + 4);
  return r;
}

// One exposition parsed just enough: every sample by its full series text
// (name{labels}), and the histogram buckets per op in the order given.
struct Scrape {
  std::map<std::string, double> samples;
  std::map<std::string, std::vector<std::pair<std::string, uint64_t>>> buckets;  // op -> le, n
  std::set<std::string> types;                                                   // "# TYPE" lines
  double get(const std::string& series) const {
    auto it = samples.find(series);
    return it == samples.end() ? -1 : it->second;
  }
};

std::string label(const std::string& series, const std::string& key) {
  const auto p = series.find(key + "=\"");
  if (p == std::string::npos) return "";
  const auto s = p + key.size() + 2;
  return series.substr(s, series.find('"', s) - s);
}

Scrape parse(const std::string& text) {
  Scrape sc;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# TYPE ", 0) == 0) sc.types.insert(line);
    if (line.empty() || line[0] == '#') continue;
    const auto sp = line.rfind(' ');
    std::string series = line.substr(0, sp);
    const double v = std::strtod(line.c_str() + sp + 1, nullptr);
    // Drop the mountpoint label so tests can name series briefly.
    if (auto m = series.find("mountpoint=\""); m != std::string::npos) {
      auto e = series.find('"', m + 12);
      series.erase(m, e + 1 - m + (series[e + 1] == ',' ? 1 : 0));
      if (series.size() > 2 && series.compare(series.size() - 2, 2, "{}") == 0)
        series.resize(series.size() - 2);
    }
    sc.samples[series] = v;
    if (series.rfind("kvfs_op_latency_seconds_bucket{", 0) == 0)
      sc.buckets[label(series, "op")].push_back({label(series, "le"), uint64_t(v)});
  }
  return sc;
}

// Checks the histogram rules Prometheus relies on; returns the failures.
std::string histogram_errors(const Scrape& sc) {
  std::string err;
  if (!sc.types.count("# TYPE kvfs_op_latency_seconds histogram")) err += "no histogram TYPE; ";
  for (const char* op : {"lookup", "read", "write", "create", "rename", "flush"}) {
    auto it = sc.buckets.find(op);
    if (it == sc.buckets.end() || it->second.size() < 2) {
      err += std::string("no buckets for ") + op + "; ";
      continue;
    }
    const auto& b = it->second;
    double prev_le = -1;
    uint64_t prev_n = 0;
    for (const auto& [le, n] : b) {
      const double lev = le == "+Inf" ? 1e300 : std::strtod(le.c_str(), nullptr);
      if (lev <= prev_le) err += std::string(op) + ": le not increasing at " + le + "; ";
      if (n < prev_n) err += std::string(op) + ": buckets not cumulative at le=" + le + "; ";
      prev_le = lev;
      prev_n = n;
    }
    if (b.back().first != "+Inf") err += std::string(op) + ": last bucket is not +Inf; ";
    const double count = sc.get(std::string("kvfs_op_latency_seconds_count{op=\"") + op + "\"}");
    const double sum = sc.get(std::string("kvfs_op_latency_seconds_sum{op=\"") + op + "\"}");
    if (count != double(b.back().second)) err += std::string(op) + ": +Inf != _count; ";
    if (sum < 0) err += std::string(op) + ": no _sum; ";
  }
  return err;
}

// O_DIRECT, so every read reaches the daemon (no kernel page cache).
bool read_direct(const std::string& path, size_t size, std::string* out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (fd < 0) return false;
  const size_t cap = (size + 4095) / 4096 * 4096 + 4096;
  AlignedBuf buf(cap);
  size_t got = 0;
  ssize_t n;
  while ((n = ::pread(fd, buf.data + got, cap - got, static_cast<off_t>(got))) > 0)
    got += static_cast<size_t>(n);
  ::close(fd);
  if (n < 0) return false;
  out->assign(buf.data, got);
  return true;
}

bool have_promtool() {
  return run_command({"sh", "-c", "command -v promtool"}).exit_code == 0;
}

// promtool check metrics reads the exposition on stdin; exit 0 = no
// problems, lint included.
RunResult promtool_check(const KvfsMount& m, const std::string& text, const std::string& name) {
  const std::string f = m.root() + "/" + name;
  std::ofstream(f) << text;
  return run_command({"sh", "-c", "promtool check metrics < '" + f + "'"});
}

std::string scrape_text(unsigned port) {
  HttpReply r = http_get(port, "/metrics");
  EXPECT_TRUE(r.connected) << "nothing listens on port " << port;
  EXPECT_EQ(r.status_line.rfind("HTTP/1.", 0), 0u) << r.status_line;
  EXPECT_NE(r.status_line.find(" 200 "), std::string::npos) << r.status_line;
  EXPECT_NE(r.headers.find("text/plain; version=0.0.4"), std::string::npos) << r.headers;
  return r.body;
}

TEST(Metrics, HttpHistogramsGrowAndPassPromtool) {
  const unsigned port = free_port();
  ASSERT_NE(port, 0u);
  KvfsMount m;
  // No kernel caching: every stat and open reaches the daemon.
  ASSERT_TRUE(m.mount_ok("metrics=" + std::to_string(port) +
                         ",entry_timeout=0,attr_timeout=0,negative_timeout=0"));
  const Scrape s0 = parse(scrape_text(port));
  EXPECT_EQ(histogram_errors(s0), "");
  EXPECT_EQ(s0.get("kvfs_up"), 1);

  constexpr int kFiles = 4, kReads = 5;
  constexpr size_t kSize = (1u << 20) + 4096;
  for (int i = 0; i < kFiles; ++i)
    ASSERT_TRUE(write_file(m.path("f" + std::to_string(i)), random_bytes(kSize, i)));
  for (int r = 0; r < kReads; ++r)
    for (int i = 0; i < kFiles; ++i) {
      std::string back;
      ASSERT_TRUE(read_direct(m.path("f" + std::to_string(i)), kSize, &back));
      ASSERT_EQ(back.size(), kSize);
    }
  struct stat st;
  for (int i = 0; i < 3; ++i)
    EXPECT_NE(::stat(m.path("absent" + std::to_string(i)).c_str(), &st), 0);

  const std::string text = scrape_text(port);
  const Scrape s1 = parse(text);
  EXPECT_EQ(histogram_errors(s1), "") << text;
  for (const char* op : {"read", "lookup", "write", "create", "flush"}) {
    const std::string c = std::string("kvfs_op_latency_seconds_count{op=\"") + op + "\"}";
    EXPECT_GT(s1.get(c), s0.get(c)) << op;
    const std::string sum = std::string("kvfs_op_latency_seconds_sum{op=\"") + op + "\"}";
    EXPECT_GT(s1.get(sum), s0.get(sum)) << op;
  }
  // At least one FUSE read per file read (more for the 1 MiB + 4 KiB size).
  EXPECT_GE(s1.get("kvfs_op_latency_seconds_count{op=\"read\"}") -
                s0.get("kvfs_op_latency_seconds_count{op=\"read\"}"),
            kFiles * kReads);
  // Hits and misses, one unit each: file lookups, and bytes served.
  // Each create first looks its name up (a miss), then the 3 stats.
  EXPECT_EQ(s1.get("kvfs_file_lookups_total{result=\"miss\"}") -
                s0.get("kvfs_file_lookups_total{result=\"miss\"}"),
            kFiles + 3);
  EXPECT_GE(s1.get("kvfs_file_lookups_total{result=\"hit\"}") -
                s0.get("kvfs_file_lookups_total{result=\"hit\"}"),
            kFiles * kReads);
  // Everything was written through RAM and is still there.
  EXPECT_EQ(s1.get("kvfs_read_served_bytes_total{tier=\"ram\"}") -
                s0.get("kvfs_read_served_bytes_total{tier=\"ram\"}"),
            double(kFiles * kReads * kSize));
  EXPECT_EQ(s1.get("kvfs_read_served_bytes_total{tier=\"backing\"}"),
            s0.get("kvfs_read_served_bytes_total{tier=\"backing\"}"));
  // No quantile gauges any more.
  EXPECT_EQ(text.find("quantile="), std::string::npos);

  // kvfs-admin renders with the same code: the same metric families.
  RunResult adm = run_command({KVFS_ADMIN_BIN, "stats", m.mnt(), "--prometheus"});
  ASSERT_EQ(adm.exit_code, 0) << adm.output;
  const Scrape sa = parse(adm.output);
  EXPECT_EQ(sa.types, s1.types);
  EXPECT_EQ(histogram_errors(sa), "") << adm.output;

  // After a remount RAM is empty: the same bytes now count as misses.
  // (Read-ahead off: a block it brought in before the client asked would
  // count as a RAM hit; mount_prefetch_test covers that.)
  m.unmount();
  ASSERT_TRUE(m.mount_ok("metrics=" + std::to_string(port) +
                         ",entry_timeout=0,attr_timeout=0,negative_timeout=0,prefetch=0"));
  for (int i = 0; i < kFiles; ++i) {
    std::string back;
    ASSERT_TRUE(read_direct(m.path("f" + std::to_string(i)), kSize, &back));
  }
  const Scrape s2 = parse(scrape_text(port));
  EXPECT_EQ(s2.get("kvfs_read_served_bytes_total{tier=\"backing\"}"), double(kFiles * kSize));

  if (!have_promtool()) GTEST_SKIP() << "promtool not installed (Debian: prometheus): not checked";
  RunResult p1 = promtool_check(m, text, "http.prom");
  EXPECT_EQ(p1.exit_code, 0) << "promtool on /metrics:\n" << p1.output << "\n" << text;
  RunResult p2 = promtool_check(m, adm.output, "admin.prom");
  EXPECT_EQ(p2.exit_code, 0) << "promtool on kvfs-admin:\n" << p2.output << "\n" << adm.output;
}

// Linux 5.16 and later honour FOPEN_NOFLUSH.
bool kernel_skips_flush() {
  utsname u{};
  int major = 0, minor = 0;
  return ::uname(&u) == 0 && std::sscanf(u.release, "%d.%d", &major, &minor) == 2 &&
         (major > 5 || (major == 5 && minor >= 16));
}

// A close of a handle that cannot write costs no round trip to the daemon
// (a load is open, read, close); one that can write still reaches it,
// which queues the file for flushing there.
TEST(Metrics, OnlyHandlesThatCanWriteSendAFlushOnClose) {
  if (!kernel_skips_flush()) GTEST_SKIP() << "FOPEN_NOFLUSH needs Linux 5.16 or later";
  const unsigned port = free_port();
  ASSERT_NE(port, 0u);
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok("metrics=" + std::to_string(port)));
  const std::string f = m.path("f");
  ASSERT_TRUE(write_file(f, random_bytes(8192, 7)));
  const std::string count = "kvfs_op_latency_seconds_count{op=\"flush\"}";
  const double before = parse(scrape_text(port)).get(count);
  EXPECT_GE(before, 1) << "the writer's close";
  for (int i = 0; i < 5; ++i) {
    int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    char c;
    EXPECT_EQ(::read(fd, &c, 1), 1);
    EXPECT_EQ(::close(fd), 0);
  }
  EXPECT_EQ(parse(scrape_text(port)).get(count), before) << "read-only closes sent a flush";
  int fd = ::open(f.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  EXPECT_EQ(::close(fd), 0);
  EXPECT_EQ(parse(scrape_text(port)).get(count), before + 1);
}

TEST(Metrics, StoppedAtUnmount) {
  const unsigned port = free_port();
  ASSERT_NE(port, 0u);
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok("metrics=127.0.0.1:" + std::to_string(port)));
  EXPECT_TRUE(http_get(port, "/metrics").connected);
  HttpReply other = http_get(port, "/nothing");
  EXPECT_NE(other.status_line.find(" 404 "), std::string::npos) << other.status_line;
  m.unmount();
  EXPECT_FALSE(http_get(port, "/metrics").connected) << "still listening after unmount";
}

TEST(Metrics, BadValuesFailTheMount) {
  const unsigned port = free_port();
  for (const std::string v :
       {"0", "65536", "", "abc", "localhost:9464", "1.2.3:80", "[::1", "[zz]:80", "9464x"}) {
    KvfsMount m;
    RunResult r = m.mount("metrics=" + v);
    EXPECT_EQ(r.exit_code, 1) << "metrics=" << v << ": " << r.output;
    EXPECT_NE(r.output.find("metrics"), std::string::npos) << r.output;
    EXPECT_FALSE(m.mounted());
  }
  // A port already taken is refused before anything is mounted.
  KvfsMount a, b;
  ASSERT_TRUE(a.mount_ok("metrics=" + std::to_string(port)));
  RunResult r = b.mount("metrics=" + std::to_string(port));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("cannot listen"), std::string::npos) << r.output;
  EXPECT_FALSE(b.mounted());
}

}  // namespace
}  // namespace kvfs::test
