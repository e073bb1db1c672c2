// SPDX-License-Identifier: Apache-2.0
// The option table (core/config/option_table.h, fs/option_table.h): its defaults
// are the structs', its ranges are what validate() refuses, its runtime
// column is what `kvfs-admin config` accepts, and the man pages agree.
#include "fs/option_table.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/store/block_store.h"
#include "fs/control.h"
#include "fs/options.h"

namespace kvfs {
namespace {

using json = nlohmann::json;

MountConfig defaults() {
  MountConfig c;
  c.store.backing_dir = "/tmp";
  c.fs.mountpoint = "/tmp";
  return c;
}

bool numeric(OptType t) {
  return t == OptType::kSize || t == OptType::kFraction || t == OptType::kSeconds ||
         t == OptType::kCount;
}

// A value of the option's type just past `bound` (below it, or above it).
std::string past(const OptionSpec& s, double bound, bool above) {
  if (s.type == OptType::kSize || s.type == OptType::kCount)
    return std::to_string(static_cast<uint64_t>(bound) + (above ? 1 : -1));
  std::ostringstream o;
  o << (above ? bound * 2 : bound / 2);
  return o.str();
}

TEST(OptionTable, NamesAreUniqueAndDocumented) {
  std::set<std::string> names;
  for (const MountOption& o : mount_options()) {
    const OptionSpec& s = o.spec();
    EXPECT_TRUE(names.insert(s.name).second) << s.name << " twice";
    EXPECT_NE(std::string(s.doc), "") << s.name;
    EXPECT_EQ(find_mount_option(s.name), &o) << s.name;
    if (s.type == OptType::kFlag) {
      EXPECT_EQ(s.def, nullptr) << s.name;
    }
    if (s.type != OptType::kFlag && !s.def) {
      EXPECT_NE(s.default_doc, nullptr) << s.name;
    }
    if (numeric(s.type)) {
      EXPECT_LE(s.min, s.max) << s.name;
    }
    EXPECT_NE(std::string(usage_text()).find("  " + std::string(s.name)), std::string::npos)
        << s.name << " is not in --help";
  }
  EXPECT_EQ(find_mount_option("no_such_option"), nullptr);
}

TEST(OptionTable, EveryDefaultParsesBackToTheStructDefault) {
  MountConfig d = defaults();
  ASSERT_TRUE(d.validate().ok()) << d.validate().ToString();
  for (const MountOption& o : mount_options()) {
    const OptionSpec& s = o.spec();
    if (!s.def) continue;
    EXPECT_EQ(option_text(s, o.field(d)), s.def) << s.name << ": the struct's default differs";
    MountConfig c = defaults();
    ASSERT_TRUE(parse_option(s, s.def, true, o.field(c)).ok()) << s.name;
    EXPECT_EQ(option_text(s, o.field(c)), s.def) << s.name;
    // And through the mount command line.
    std::vector<std::string> args = {"kvfs", "/tmp", "/tmp", "-o",
                                     std::string(s.name) + "=" + s.def};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    auto r = parse_args(static_cast<int>(argv.size()), argv.data());
    ASSERT_TRUE(r.ok()) << s.name << ": " << r.status().ToString();
    EXPECT_EQ(option_text(s, o.field(*r)), s.def) << s.name;
  }
}

TEST(OptionTable, OutOfRangeIsInvalid) {
  int checked = 0;
  for (const MountOption& o : mount_options()) {
    const OptionSpec& s = o.spec();
    if (!numeric(s.type)) continue;
    std::vector<std::string> bad;
    if (s.min > 0) bad.push_back(past(s, s.min, false));
    if (s.max != kNoMax) bad.push_back(past(s, s.max, true));
    if (s.type == OptType::kFraction || s.type == OptType::kSeconds) bad.push_back("-1");
    bad.push_back("x");
    for (const std::string& v : bad) {
      MountConfig c = defaults();
      Status st = parse_option(s, v, true, o.field(c));
      if (st.ok()) st = c.validate();
      EXPECT_EQ(st.code(), Status::Code::kInvalid) << s.name << "=" << v;
      ++checked;
    }
  }
  EXPECT_GE(checked, 30);
}

TEST(OptionTable, RulesBetweenOptions) {
  auto with = [](std::vector<std::pair<const char*, const char*>> kv) {
    MountConfig c = defaults();
    for (auto& [k, v] : kv) {
      const MountOption* o = find_mount_option(k);
      EXPECT_NE(o, nullptr) << k;
      if (!o) return Status::Invalid("no such option");
      KVFS_RETURN_IF_ERROR(parse_option(o->spec(), v, true, o->field(c)));
    }
    return c.validate();
  };
  EXPECT_TRUE(with({{"low_watermark", "0.5"}, {"high_watermark", "0.6"}}).ok());
  EXPECT_EQ(with({{"low_watermark", "0.96"}}).code(), Status::Code::kInvalid) << "above high";
  EXPECT_EQ(with({{"low_watermark", "0"}}).code(), Status::Code::kInvalid);
  EXPECT_EQ(with({{"capacity", "511M"}}).code(), Status::Code::kInvalid) << "two segments";
  EXPECT_TRUE(with({{"capacity", "512M"}}).ok());
  EXPECT_TRUE(with({{"capacity", "16M"}, {"segment_size", "8M"}}).ok());
  EXPECT_EQ(with({{"capacity", "0"}}).code(), Status::Code::kInvalid) << "0 means not given";
  EXPECT_EQ(with({{"node_id", "a/b"}}).code(), Status::Code::kInvalid);
  EXPECT_EQ(with({{"index_dir", "relative"}}).code(), Status::Code::kInvalid);
  EXPECT_EQ(with({{"ro", "1"}}).code(), Status::Code::kInvalid) << "a flag takes no value";
  if (const uint64_t mem = machine_memory(); mem) {
    const std::string more = std::to_string(mem + (1ull << 30));
    EXPECT_EQ(with({{"ram_size", more.c_str()}}).code(), Status::Code::kInvalid);
  }
}

// A real store behind control_execute, as `kvfs-admin config` reaches it.
class RuntimeConfig : public ::testing::Test {
 protected:
  void SetUp() override {
    char t[] = "/tmp/kvfs-options-XXXXXX";
    root_ = ::mkdtemp(t);
    std::filesystem::create_directories(root_ + "/backing");
    StoreConfig c;
    c.backing_dir = root_ + "/backing";
    c.index_dir = root_ + "/index";
    c.ram_size = 64 << 20;
    c.ram_prefault = 0;
    c.segment_size = 8 << 20;
    c.capacity = 1ull << 30;
    auto s = BlockStore::Open(c);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
    fs_.mountpoint = root_ + "/mnt";
  }
  void TearDown() override {
    if (store_) {
      EXPECT_TRUE(store_->Close().ok());
    }
    store_.reset();
    std::filesystem::remove_all(root_);
  }
  json request(const json& req) {
    return json::parse(control_execute(*store_, fs_, lat_, req.dump(), 0));
  }
  json set(std::vector<std::pair<std::string, std::string>> kv) {
    json pairs = json::array();
    for (auto& [k, v] : kv) pairs.push_back({k, v});
    return request({{"cmd", "config"}, {"set", pairs}});
  }

  std::string root_;
  std::unique_ptr<BlockStore> store_;
  FsConfig fs_;
  OpLatencies lat_;
};

TEST_F(RuntimeConfig, AcceptsExactlyTheRuntimeOptions) {
  const json now = request({{"cmd", "config"}});
  ASSERT_FALSE(now.contains("error")) << now.dump();
  MountConfig live{store_->admin().live_config(), fs_};
  live.fs.log_level = now.value("log_level", "info");
  for (const MountOption& o : mount_options()) {
    const OptionSpec& s = o.spec();
    if (s.type != OptType::kFlag) {
      EXPECT_TRUE(now.contains(s.name)) << s.name << " is not in the config dump";
    }
    // Its current value, so that a runtime one changes nothing.
    const json r = set({{s.name, option_text(s, o.field(live))}});
    if (s.runtime) {
      EXPECT_FALSE(r.contains("error")) << s.name << ": " << r.dump();
      EXPECT_EQ(r.value("changed", json::array()).size(), 1u) << s.name;
    } else {
      EXPECT_EQ(r.value("errno", 0), EINVAL) << s.name << ": " << r.dump();
    }
  }
  EXPECT_EQ(set({{"no_such_key", "1"}}).value("errno", 0), EINVAL);
}

TEST_F(RuntimeConfig, ChangesApplyTogetherOrNotAtAll) {
  json r = set({{"evict_grace", "7"}, {"capacity", "2G"}, {"ram_size", "32M"}});
  ASSERT_FALSE(r.contains("error")) << r.dump();
  EXPECT_EQ(r["evict_grace"].get<double>(), 7.0);
  EXPECT_EQ(store_->admin().capacity(), 2ull << 30);
  EXPECT_EQ(store_->ram().capacity(), 32u << 20);

  // One bad value, one below a cross-option rule (two segments of 8M), one
  // out of range: each refuses the whole request.
  for (auto bad : std::vector<std::vector<std::pair<std::string, std::string>>>{
           {{"evict_grace", "9"}, {"capacity", "lots"}},
           {{"evict_grace", "9"}, {"capacity", "15M"}},
           {{"evict_grace", "9"}, {"io_timeout", "0.01"}},
           {{"evict_grace", "9"}, {"ram_size", "1M"}},
           {{"evict_grace", "9"}, {"segment_size", "16M"}}}) {
    r = set(bad);
    EXPECT_EQ(r.value("errno", 0), EINVAL) << r.dump();
    EXPECT_EQ(store_->admin().live_config().evict_grace_s, 7.0)
        << bad[1].first << " let evict_grace through";
  }
  EXPECT_EQ(store_->admin().capacity(), 2ull << 30);
  // The same rules guard the store's one setter, and it refuses a change
  // to a mount-only option.
  auto with = [&](auto field, auto value) {
    StoreConfig c = store_->admin().live_config();
    c.*field = value;
    return store_->admin().reconfigure(c).code();
  };
  EXPECT_EQ(with(&StoreConfig::capacity, uint64_t(15 << 20)), Status::Code::kInvalid);
  EXPECT_EQ(with(&StoreConfig::capacity, uint64_t(0)), Status::Code::kInvalid);
  EXPECT_EQ(with(&StoreConfig::io_timeout_s, 0.0), Status::Code::kInvalid);
  EXPECT_EQ(with(&StoreConfig::evict_grace_s, -1.0), Status::Code::kInvalid);
  EXPECT_EQ(with(&StoreConfig::ram_size, uint64_t(1 << 20)), Status::Code::kInvalid);
  EXPECT_EQ(with(&StoreConfig::segment_size, uint64_t(16 << 20)), Status::Code::kInvalid);
  EXPECT_EQ(store_->admin().capacity(), 2ull << 30);
  EXPECT_EQ(store_->ram().capacity(), 32u << 20);
}

// Every runtime option of the store's table takes effect through
// StoreAdmin::reconfigure: the live config reads back the new value.
TEST_F(RuntimeConfig, EveryRuntimeOptionTakesEffect) {
  const std::map<std::string, std::string> next = {
      {"ram_size", "48M"}, {"capacity", "3G"},  {"evict_grace", "11"},
      {"io_timeout", "7"}, {"prefetch", "96M"}, {"segment_readahead", "4M"}};
  for (const StoreOption& o : store_options()) {
    if (!o.spec.runtime) continue;
    ASSERT_TRUE(next.count(o.spec.name)) << o.spec.name << ": give it a value here";
    StoreConfig c = store_->admin().live_config();
    ASSERT_TRUE(parse_option(o.spec, next.at(o.spec.name), true, o.field(c)).ok());
    const Status s = store_->admin().reconfigure(c);
    ASSERT_TRUE(s.ok()) << o.spec.name << ": " << s.ToString();
    StoreConfig live = store_->admin().live_config();
    EXPECT_EQ(option_text(o.spec, o.field(live)), option_text(o.spec, o.field(c))) << o.spec.name;
  }
  EXPECT_EQ(store_->ram().capacity(), 48u << 20);
  EXPECT_EQ(store_->admin().capacity(), 3ull << 30);
  EXPECT_EQ(store_->admin().live_config().io_timeout_s, 7.0);
}

std::vector<std::string> man_lines(const char* page) {
  std::ifstream in(std::string(KVFS_SOURCE_DIR) + "/man/" + page);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

// "name" of a ".TP" item's tag line: ".BI ram_size= SIZE", ".B ro".
std::string tag_name(const std::string& line) {
  std::istringstream in(line);
  std::string macro, first;
  in >> macro >> first;
  if (macro != ".B" && macro != ".BI" && macro != ".BR") return "";
  return first.substr(0, first.find('='));
}

TEST(OptionTable, ManPageDocumentsEveryOptionAndItsDefault) {
  const std::vector<std::string> man = man_lines("kvfs.8");
  ASSERT_GT(man.size(), 100u);
  // Each item's text, by the option it documents.
  std::map<std::string, std::vector<std::string>> items;
  for (size_t i = 0; i + 1 < man.size(); ++i) {
    if (man[i] != ".TP") continue;
    const std::string name = tag_name(man[i + 1]);
    if (name.empty()) continue;
    std::vector<std::string>& body = items[name];
    for (size_t j = i + 2; j < man.size() && man[j] != ".TP" && man[j].rfind(".S", 0) != 0; ++j)
      body.push_back(man[j]);
  }
  for (const MountOption& o : mount_options()) {
    const OptionSpec& s = o.spec();
    auto it = items.find(s.name);
    ASSERT_NE(it, items.end()) << s.name << " has no item in kvfs.8";
    if (s.runtime) {
      bool says = false;
      for (const std::string& l : it->second)
        says |= l.find("kvfs\\-admin config") != std::string::npos;
      EXPECT_TRUE(says) << s.name << ": kvfs.8 does not say it is a runtime setting";
    }
    if (!s.def) continue;
    // "Default" then ".BR 1G ." (or ".B 1G").
    std::string documented;
    for (size_t j = 0; j + 1 < it->second.size(); ++j)
      if (it->second[j] == "Default") {
        std::istringstream in(it->second[j + 1]);
        std::string macro;
        in >> macro >> documented;
      }
    EXPECT_EQ(documented, s.def) << s.name << ": kvfs.8 documents another default";
  }
}

TEST(OptionTable, AdminManPageListsTheRuntimeSettings) {
  const std::vector<std::string> man = man_lines("kvfs-admin.8");
  std::set<std::string> listed, runtime;
  bool in_config = false;
  for (size_t i = 0; i + 1 < man.size(); ++i) {
    if (man[i].rfind(".SS", 0) == 0) in_config = man[i] == ".SS config";
    if (in_config && man[i] == ".TP") listed.insert(tag_name(man[i + 1]));
  }
  for (const MountOption& o : mount_options())
    if (o.spec().runtime) runtime.insert(o.spec().name);
  EXPECT_EQ(listed, runtime);
}

}  // namespace
}  // namespace kvfs
