// SPDX-License-Identifier: Apache-2.0
// Mount tests: LMCache's in-process FSConnector (remote_url fs://): flat
// <fmt>@<model>@<world>@<worker>@<hash>@<dtype>.data names, one fixed tmp
// name per key (<stem>.tmp, so two writers of a key share it), a 28-byte
// header written before the payload (unaligned, buffered), or with
// fs_connector_use_odirect one O_DIRECT write without O_TRUNC.
// (The NIXL GDS patterns are in mount_clients_test.cc.)
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <barrier>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/mount_fixture.h"
#include "tests/reliability_util.h"

namespace kvfs::test {
namespace {

constexpr size_t kPage = 4096, kMiB = 1 << 20;
constexpr size_t kHeader = 28;

std::string key_name(const std::string& dir, int key) {
  char h[17];
  std::snprintf(h, sizeof(h), "%016llx", (unsigned long long)(0x9e3779b97f4a7c15ull * (key + 1)));
  return dir + "/vllm@Qwen3-8B@1@0@" + h + "@bfloat16.data";
}
std::string tmp_of(const std::string& name) {
  return name.substr(0, name.size() - 5) + ".tmp";
}

// One stored object: the header, then the payload; both functions of the key.
std::string object(int key, size_t payload) {
  std::string o = make_content(kHeader, 7000 + key) + make_content(payload, 9000 + key);
  return o;
}

std::string write_all(int fd, const char* p, size_t n) {
  for (size_t done = 0; done < n;) {
    ssize_t w = ::write(fd, p + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return "write: " + errstr(w < 0 ? errno : EIO);
    done += size_t(w);
  }
  return "";
}

// The buffered store: stat (skip when present), open(tmp, O_WRONLY|O_CREAT|
// O_TRUNC), header write, payload write at offset 28, close, rename. A rename
// that finds the tmp name gone lost the race to the other writer of the key.
std::string fs_store(const std::string& name, const std::string& obj) {
  struct stat st;
  if (::stat(name.c_str(), &st) == 0) return "";
  const std::string tmp = tmp_of(name);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return "open " + tmp + ": " + errstr(errno);
  std::string e = write_all(fd, obj.data(), kHeader);
  if (e.empty()) e = write_all(fd, obj.data() + kHeader, obj.size() - kHeader);
  if (::close(fd) != 0 && e.empty()) e = "close: " + errstr(errno);
  if (e.empty() && ::rename(tmp.c_str(), name.c_str()) != 0 && errno != ENOENT)
    e = "rename: " + errstr(errno);
  return e;
}

// The load: the header read, then the rest to end of file.
std::string fs_load(const std::string& name, std::string* out) {
  int fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errstr(errno);
  out->assign(kHeader, '\0');
  ssize_t n = ::read(fd, out->data(), kHeader);
  if (n >= 0) out->resize(size_t(n));
  char buf[1 << 16];
  while (n > 0 && (n = ::read(fd, buf, sizeof(buf))) > 0) out->append(buf, size_t(n));
  ::close(fd);
  return n < 0 ? "read: " + errstr(errno) : "";
}

// (c) Two writers of one key (two servers sharing the store) collide on the
// fixed tmp name, in a loop of keys. While they race, a reader of the final
// name may see the second writer refilling the inode the first one renamed
// (the file is one inode under POSIX: zeros where its truncation cut, or a
// short file), never another key's bytes; once both are done, the final name
// holds exactly one complete object, the tmp name is gone, and the same
// bytes come back after a remount (what kvfs flushed is the finished file,
// not the first writer's close).
TEST(ClientsFs, FsConnectorFixedTmpNameTwoWriters) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok("ram_size=512M"));
  const std::string dir = m.mnt() + "/fs";
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  constexpr int kKeys = 40;
  const size_t payload = 2 * kMiB + 100;
  uint64_t transient = 0, complete_reads = 0;
  for (int key = 0; key < kKeys; ++key) {
    const std::string name = key_name(dir, key), obj = object(key, payload);
    std::barrier go(3);
    std::atomic<int> writing{2};
    Failures fails;
    std::vector<std::thread> ts;
    for (int w = 0; w < 2; ++w)
      ts.emplace_back([&] {
        go.arrive_and_wait();
        std::string e = fs_store(name, obj);
        if (!e.empty()) fails.add("writer: " + e);
        writing--;
      });
    ts.emplace_back([&] {
      go.arrive_and_wait();
      std::string got;
      do {
        std::string e = fs_load(name, &got);
        if (e.find("ENOENT") == 0) continue;
        if (!e.empty()) return fails.add("reader: " + e);
        bool foreign = got.size() > obj.size(), zeros = false;
        for (size_t i = 0; !foreign && i < got.size(); ++i)
          if (got[i] != obj[i]) (got[i] == 0 ? zeros : foreign) = true;
        if (foreign) fails.add("reader: " + std::to_string(got.size()) + " bytes not this key's");
        if (zeros || got.size() < obj.size())
          ++transient;
        else
          ++complete_reads;
      } while (writing.load() > 0);
    });
    for (auto& t : ts) t.join();
    ASSERT_FALSE(fails.any()) << "key " << key << ": " << fails.first();
    std::string got;
    ASSERT_EQ(fs_load(name, &got), "");
    ASSERT_EQ(got.size(), obj.size()) << "key " << key;
    ASSERT_TRUE(got == obj) << "key " << key << ": the final name is not one complete object";
    struct stat st;
    EXPECT_NE(::stat(tmp_of(name).c_str(), &st), 0) << "tmp name left for key " << key;
  }
  std::printf("FSConnector collisions: %llu complete reads, %llu inside the writers' race\n",
              (unsigned long long)complete_reads, (unsigned long long)transient);
  m.unmount();
  ASSERT_TRUE(m.mount_ok("ram_size=512M"));
  for (int key = 0; key < kKeys; ++key) {
    std::string got;
    ASSERT_EQ(fs_load(key_name(dir, key), &got), "");
    EXPECT_TRUE(got == object(key, payload)) << "key " << key << " after remount";
  }
}

// (d) The buffered store: a 28-byte header, then payloads of several sizes at
// the unaligned offset 28; sizes, header and payload reads (also at
// unaligned offsets) right away and after a remount.
TEST(ClientsFs, FsConnectorHeaderThenUnalignedPayload) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok("ram_size=512M"));
  const std::vector<size_t> payloads = {36 * kMiB, kMiB + 7, 100, 4 * kMiB - kHeader};
  auto check = [&](const char* when) {
    for (size_t k = 0; k < payloads.size(); ++k) {
      const std::string name = key_name(m.mnt(), int(k)), obj = object(int(k), payloads[k]);
      struct stat st;
      ASSERT_EQ(::stat(name.c_str(), &st), 0);
      EXPECT_EQ(size_t(st.st_size), kHeader + payloads[k]) << when;
      std::string got;
      ASSERT_EQ(fs_load(name, &got), "");
      EXPECT_TRUE(got == obj) << "object " << k << " " << when;
      int fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC);
      ASSERT_GE(fd, 0);
      std::string part(std::min<size_t>(payloads[k], kMiB + 3), '\0');
      const off_t off = off_t(kHeader + payloads[k] - part.size());
      ASSERT_EQ(::pread(fd, part.data(), part.size(), off), ssize_t(part.size()));
      ::close(fd);
      EXPECT_EQ(std::memcmp(part.data(), obj.data() + off, part.size()), 0)
          << "tail of object " << k << " " << when;
    }
  };
  for (size_t k = 0; k < payloads.size(); ++k)
    ASSERT_EQ(fs_store(key_name(m.mnt(), int(k)), object(int(k), payloads[k])), "");
  check("after the stores");
  m.unmount();
  ASSERT_TRUE(m.mount_ok("ram_size=512M"));
  check("after a remount");
}

// (d) fs_connector_use_odirect: open(tmp, O_CREAT|O_WRONLY|O_DIRECT) without
// O_TRUNC, one write, close, rename, over no tmp, a shorter leftover tmp and
// a longer one (a crashed store's). kvfs must keep POSIX's result, the same
// as a plain directory gives: the new bytes over the old, the old tail kept.
TEST(ClientsFs, FsConnectorODirectWithoutTruncOverExistingTmp) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok("ram_size=512M"));
  const size_t size = 8 * kMiB;
  const std::string ref = m.root() + "/ref";
  ASSERT_EQ(::mkdir(ref.c_str(), 0755), 0);
  AlignedBuf buf(size);
  const std::vector<size_t> leftovers = {0, kMiB + 5, size + kMiB + 5};
  std::vector<std::string> want(leftovers.size());
  auto store = [&](const std::string& dir, size_t k) -> std::string {
    const std::string name = key_name(dir, 100 + int(k)), tmp = tmp_of(name);
    if (leftovers[k] && !write_file(tmp, make_content(leftovers[k], 500 + k)))
      return "leftover tmp: " + errstr(errno);
    make_content(buf.data, size, 600 + k);
    int fd = ::open(tmp.c_str(), O_CREAT | O_WRONLY | O_DIRECT | O_CLOEXEC, 0644);
    if (fd < 0) return "open: " + errstr(errno);
    ssize_t w = ::write(fd, buf.data, size);
    if (w != ssize_t(size)) return "write: " + std::to_string(w) + " " + errstr(errno);
    if (::close(fd) != 0) return "close: " + errstr(errno);
    if (::rename(tmp.c_str(), name.c_str()) != 0) return "rename: " + errstr(errno);
    return "";
  };
  for (size_t k = 0; k < leftovers.size(); ++k) {
    want[k] = make_content(size, 600 + k);
    if (leftovers[k] > size) want[k] += make_content(leftovers[k], 500 + k).substr(size);
    ASSERT_EQ(store(ref, k), "") << "plain dir, case " << k;
    ASSERT_EQ(store(m.mnt(), k), "") << "kvfs, case " << k;
    std::string got;
    ASSERT_TRUE(read_file(key_name(ref, 100 + int(k)), &got));
    ASSERT_TRUE(got == want[k]) << "the plain directory disagrees with POSIX, case " << k;
  }
  auto check = [&](const char* when) {
    for (size_t k = 0; k < leftovers.size(); ++k) {
      std::string got;
      ASSERT_TRUE(read_file(key_name(m.mnt(), 100 + int(k)), &got));
      EXPECT_EQ(got.size(), want[k].size()) << "case " << k << " " << when;
      EXPECT_TRUE(got == want[k]) << "case " << k << " " << when;
    }
    // The O_DIRECT load: one read of the whole object.
    int fd = ::open(key_name(m.mnt(), 100).c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
    ASSERT_GE(fd, 0) << errstr(errno);
    AlignedBuf rb(size);
    EXPECT_EQ(::read(fd, rb.data, size), ssize_t(size)) << errstr(errno);
    ::close(fd);
    EXPECT_EQ(std::memcmp(rb.data, want[0].data(), size), 0) << "one O_DIRECT read " << when;
  };
  check("after the stores");
  m.unmount();
  ASSERT_TRUE(m.mount_ok("ram_size=512M"));
  check("after a remount");
}

}  // namespace
}  // namespace kvfs::test
