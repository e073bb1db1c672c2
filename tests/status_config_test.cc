// SPDX-License-Identifier: Apache-2.0
// Sizes, config validation and mount-option parsing.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "core/config/config.h"
#include "fs/options.h"

namespace kvfs {
namespace {

TEST(ParseSize, Suffixes) {
  EXPECT_EQ(parse_size("4096"), 4096u);
  EXPECT_EQ(parse_size("64K"), 64u << 10);
  EXPECT_EQ(parse_size("256M"), 256u << 20);
  EXPECT_EQ(parse_size("256m"), 256u << 20);
  EXPECT_EQ(parse_size("10G"), 10ull << 30);
  EXPECT_EQ(parse_size("2T"), 2ull << 40);
  EXPECT_EQ(parse_size("1.5G"), 3ull << 29);
  EXPECT_EQ(parse_size("64MiB"), 64u << 20);
  EXPECT_EQ(parse_size("64MB"), 64u << 20);
}

TEST(ParseSize, RejectsGarbage) {
  for (const char* s : {"", "abc", "12X", "-5M", "1.5", "M", "5MM", "99999999999T"})
    EXPECT_FALSE(parse_size(s).has_value()) << s;
}

TEST(StoreConfig, Validate) {
  StoreConfig c;
  c.backing_dir = "/tmp";
  EXPECT_TRUE(c.validate().ok());
  c.ram_size = 1 << 20;
  EXPECT_FALSE(c.validate().ok());
  c.ram_size = 1 << 30;
  c.segment_size = 1 << 20;
  EXPECT_FALSE(c.validate().ok());
  c.segment_size = 256 << 20;
  c.flush_threads = 0;  // not given: chosen at mount (default_flush_threads)
  EXPECT_TRUE(c.validate().ok());
  c.flush_threads = 65;
  EXPECT_FALSE(c.validate().ok());
  c.flush_threads = 2;
  c.node_id = "a/b";
  EXPECT_FALSE(c.validate().ok());
}

Result<ParsedArgs> parse(std::vector<std::string> v) {
  std::vector<char*> argv;
  for (auto& s : v) argv.push_back(s.data());
  return parse_args(static_cast<int>(argv.size()), argv.data());
}

TEST(Options, KvfsAndFuseOptions) {
  auto r = parse({"kvfs", "/tmp", "/tmp", "-o",
                  "ram_size=2G,segment_size=64M,index_dir=/var/tmp/i,threads=8,flush_threads=3,"
                  "allow_other,fsname=kv,ro"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->store.ram_size, 2ull << 30);
  EXPECT_EQ(r->store.segment_size, 64u << 20);
  EXPECT_EQ(r->store.index_dir, "/var/tmp/i");
  EXPECT_EQ(r->fs.threads, 8u);
  EXPECT_EQ(r->store.flush_threads, 3u);
  EXPECT_TRUE(r->store.read_only);
  EXPECT_TRUE(r->fs.allow_other);
  EXPECT_TRUE(r->fs.default_permissions) << "allow_other turns permission checks on";
  std::vector<std::string> want = {"allow_other", "fsname=kv", "ro"};
  EXPECT_EQ(r->fs.fuse_opts, want);
}

TEST(Options, FstabWordsAreIgnored) {
  auto r = parse({"kvfs", "/tmp", "/tmp", "-o",
                  "defaults,noauto,nofail,_netdev,x-systemd.requires=a.mount,rw,nodev,nosuid"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->fs.fuse_opts.empty());
}

TEST(Options, MetricsListenAddress) {
  auto off = parse({"kvfs", "/tmp", "/tmp"});
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->fs.metrics_port, 0u) << "metrics are opt-in";
  const std::vector<std::tuple<std::string, std::string, unsigned>> ok = {
      {"9464", "127.0.0.1", 9464},  // a port alone: loopback only
      {"0.0.0.0:9100", "0.0.0.0", 9100},
      {"10.1.2.3:1", "10.1.2.3", 1},
      {"[::1]:65535", "::1", 65535}};
  for (const auto& [v, host, port] : ok) {
    auto r = parse({"kvfs", "/tmp", "/tmp", "-o", "metrics=" + v});
    ASSERT_TRUE(r.ok()) << v << ": " << r.status().ToString();
    EXPECT_EQ(r->fs.metrics_host, host) << v;
    EXPECT_EQ(r->fs.metrics_port, port) << v;
  }
  for (const char* v : {"0", "65536", "", "x", ":80", "host:80", "::1:80", "[::1]", "1.2.3.4:"})
    EXPECT_FALSE(parse({"kvfs", "/tmp", "/tmp", "-o", std::string("metrics=") + v}).ok()) << v;
}

TEST(Options, Errors) {
  EXPECT_FALSE(parse({"kvfs", "/tmp", "/tmp", "-o", "bogus=1"}).ok());
  EXPECT_FALSE(parse({"kvfs", "/tmp", "/tmp", "-o", "ram_size=lots"}).ok());
  EXPECT_FALSE(parse({"kvfs", "/tmp", "/tmp", "-o", "threads=0"}).ok());
  // 0 is the struct's "not given", not a value anyone may write.
  EXPECT_FALSE(parse({"kvfs", "/tmp", "/tmp", "-o", "flush_threads=0"}).ok());
  EXPECT_FALSE(parse({"kvfs", "/tmp", "/tmp", "-o", "index_dir=relative"}).ok());
  EXPECT_FALSE(parse({"kvfs", "/tmp"}).ok());
  EXPECT_FALSE(parse({"kvfs", "/tmp", "/tmp", "--frobnicate"}).ok());
  auto r = parse({"kvfs", "/tmp", "/tmp", "-o", "bogus"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("bogus"), std::string::npos);
}

TEST(Options, PermissionChecksOnUnlessTurnedOff) {
  auto on = parse({"kvfs", "/tmp", "/tmp"});
  ASSERT_TRUE(on.ok());
  EXPECT_TRUE(on->fs.default_permissions);
  auto off = parse({"kvfs", "/tmp", "/tmp", "-o", "no_default_permissions"});
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->fs.default_permissions);
}

TEST(Options, SplitHonoursEscapes) {
  std::vector<std::string> want = {"fsname=a,b", "ro"};
  EXPECT_EQ(split_options("fsname=a\\,b,ro"), want);
}

}  // namespace
}  // namespace kvfs
