// SPDX-License-Identifier: Apache-2.0
// Mount tests: the syscall patterns of the KV-cache offloaders of
// shared/WORKLOADS.md, each replayed as the client issues it, on a real mount.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <barrier>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/mount_fixture.h"

namespace kvfs::test {
namespace {

constexpr size_t kChunk = 37748736;  // 256 tokens of Qwen3-8B in bf16: 36 MiB
constexpr size_t kMiB = 1 << 20;

uint64_t splitmix(uint64_t* s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Deterministic contents: the same seed always gives the same bytes.
void fill(char* p, size_t n, uint64_t seed) {
  uint64_t s = seed * 0x2545F4914F6CDD1Dull + 1;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = splitmix(&s);
    std::memcpy(p + i, &v, 8);
  }
  for (; i < n; ++i) p[i] = static_cast<char>(splitmix(&s));
}

std::string content(size_t n, uint64_t seed) {
  std::string s(n, '\0');
  fill(s.data(), n, seed);
  return s;
}

std::string hex(uint64_t seed, size_t len) {
  static const char* d = "0123456789abcdef";
  uint64_t s = seed;
  std::string o;
  while (o.size() < len) {
    uint64_t v = splitmix(&s);
    for (int i = 0; i < 16 && o.size() < len; ++i, v >>= 4) o += d[v & 15];
  }
  return o;
}

// os.makedirs(exist_ok=True): racing creators see EEXIST and go on.
bool mkdir_p(const std::string& path) {
  for (size_t pos = 1; pos != std::string::npos;) {
    pos = path.find('/', pos + 1);
    std::string p = path.substr(0, pos);
    if (::mkdir(p.c_str(), 0755) != 0 && errno != EEXIST) return false;
  }
  return true;
}

std::string err() {
  return std::strerror(errno);
}

// access(F_OK) with its errno (0 when present).
int access_errno(const std::string& p) {
  return ::access(p.c_str(), F_OK) == 0 ? 0 : errno;
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  ::closedir(d);
  return out;
}

// CRC32C (Castagnoli), what vLLM keeps in user.vllm.kv_crc32c.
uint32_t crc32c(const std::string& s) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = ~0u;
  for (unsigned char b : s) c = table[(c ^ b) & 0xFF] ^ (c >> 8);
  return ~c;
}

// ---------------------------------------------------------------------------
// vLLM OffloadingConnector, fs tier.

struct VllmLayout {
  std::string root, model = "Qwen_Qwen3-8B_", base, rank0;
  explicit VllmLayout(const std::string& r) : root(r) {
    model += hex(42, 12);
    base = root + "/" + model;
    rank0 = root + "/" + model + "_r0";
  }
  // Blocks share their first levels so that threads race on mkdir -p.
  std::string hash(int block) const {
    std::string h = hex(1000 + block, 64);
    h[0] = 'a';
    h[1] = "01"[block % 2];
    h[3] = "0123"[block % 4];
    return h;
  }
  std::string dir(const std::string& h) const {
    return rank0 + "/" + h.substr(0, 3) + "/" + h.substr(3, 2) + "_g0";
  }
  std::string dest(int block) const {
    std::string h = hash(block);
    return dir(h) + "/" + h + ".bin";
  }
};

// One store of vLLM's fs tier: access miss, mkdir -p, O_DIRECT tmp with ONE
// write, close, rename over dest. Returns "" or what went wrong.
std::string vllm_store(const VllmLayout& l, int block, AlignedBuf& buf, uint64_t rnd) {
  const std::string dest = l.dest(block);
  if (int e = access_errno(dest); e != ENOENT)
    return "access(F_OK) before the store: " + std::string(std::strerror(e));
  if (!mkdir_p(l.dir(l.hash(block)))) return "mkdir -p: " + err();
  const std::string tmp = dest + "_" + hex(rnd, 8) + ".tmp";
  int fd = ::open(tmp.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_TRUNC | O_DIRECT | O_CLOEXEC, 0644);
  if (fd < 0) return "open tmp: " + err();
  fill(buf.data, kChunk, block);
  ssize_t n = ::write(fd, buf.data, kChunk);
  if (n != static_cast<ssize_t>(kChunk)) {
    std::string e = "write returned " + std::to_string(n) + " (" + err() + ")";
    ::close(fd);
    return e;
  }
  if (::close(fd) != 0) return "close: " + err();
  if (::rename(tmp.c_str(), dest.c_str()) != 0) return "rename: " + err();
  return "";
}

// One load: open(O_RDONLY|O_DIRECT), ONE read of the whole block.
std::string vllm_load(const VllmLayout& l, int block, AlignedBuf& rbuf, AlignedBuf& expect) {
  const std::string dest = l.dest(block);
  if (access_errno(dest) != 0) return "access(F_OK) after the store: " + err();
  int fd = ::open(dest.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (fd < 0) return "open O_DIRECT: " + err();
  std::memset(rbuf.data, 0xEE, kChunk);
  ssize_t n = ::read(fd, rbuf.data, kChunk);
  int e = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(kChunk))
    return "read returned " + std::to_string(n) + " (" + std::strerror(e) + ")";
  fill(expect.data, kChunk, block);
  if (std::memcmp(rbuf.data, expect.data, kChunk) != 0) return "wrong bytes";
  return "";
}

// Runs fn(thread, block) for blocks split over `threads` threads; gathers errors.
template <typename Fn>
std::vector<std::string> run_pool(int threads, int blocks, Fn fn) {
  std::mutex mu;
  std::vector<std::string> errors;
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      for (int b = t; b < blocks; b += threads) {
        std::string e = fn(t, b);
        if (!e.empty()) {
          std::lock_guard g(mu);
          errors.push_back("block " + std::to_string(b) + ": " + e);
        }
      }
    });
  for (auto& t : ts) t.join();
  return errors;
}

TEST(Workloads, VllmFsTier) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  VllmLayout l(m.mnt());

  // Startup: config.json if missing.
  const std::string cfg = l.base + "/config.json";
  ASSERT_EQ(access_errno(cfg), ENOENT);
  ASSERT_TRUE(mkdir_p(l.base)) << err();
  const std::string cfg_json = R"({"model": "Qwen/Qwen3-8B", "block_size": 256})";
  ASSERT_TRUE(write_file(cfg, cfg_json));

  // O_DIRECT probe: 4096 B to .o_direct_probe_<random>.tmp, then unlink.
  {
    const std::string probe = l.base + "/.o_direct_probe_" + hex(7, 16) + ".tmp";
    AlignedBuf p(4096);
    std::memset(p.data, 0x5A, 4096);
    int fd = ::open(probe.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_DIRECT | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0) << "O_DIRECT open refused: " << err();
    EXPECT_EQ(::write(fd, p.data, 4096), 4096) << err();
    EXPECT_EQ(::close(fd), 0);
    EXPECT_EQ(::unlink(probe.c_str()), 0) << err();
    EXPECT_EQ(access_errno(probe), ENOENT);
  }

  // Store: 16 write threads, 2 blocks each (1.1 GiB through a 256 MiB RAM tier).
  constexpr int kThreads = 16, kBlocks = 32;
  std::vector<std::unique_ptr<AlignedBuf>> bufs, bufs2;
  for (int t = 0; t < kThreads; ++t) {
    bufs.push_back(std::make_unique<AlignedBuf>(kChunk));
    bufs2.push_back(std::make_unique<AlignedBuf>(kChunk));
    ASSERT_NE(bufs.back()->data, nullptr);
    ASSERT_NE(bufs2.back()->data, nullptr);
  }
  auto errs = run_pool(kThreads, kBlocks,
                       [&](int t, int b) { return vllm_store(l, b, *bufs[t], 5000 + b); });
  EXPECT_TRUE(errs.empty()) << errs.size() << " stores failed, first: " << errs.front();

  // Lookup: every stored chunk is present with its full size; absent ones miss.
  for (int b = 0; b < kBlocks; ++b) {
    struct stat st;
    ASSERT_EQ(::stat(l.dest(b).c_str(), &st), 0) << l.dest(b) << ": " << err();
    EXPECT_EQ(static_cast<size_t>(st.st_size), kChunk);
    EXPECT_EQ(access_errno(l.dest(b)), 0);
  }
  for (int b = kBlocks; b < kBlocks + 100; ++b) EXPECT_EQ(access_errno(l.dest(b)), ENOENT);

  // Load: 16 read threads.
  errs = run_pool(kThreads, kBlocks,
                  [&](int t, int b) { return vllm_load(l, b, *bufs[t], *bufs2[t]); });
  EXPECT_TRUE(errs.empty()) << errs.size() << " loads failed, first: " << errs.front();

  // No tmp file is left next to the blocks.
  std::set<std::string> leaves;
  for (int b = 0; b < kBlocks; ++b) leaves.insert(l.dir(l.hash(b)));
  auto no_strays = [&](const char* when) {
    size_t files = 0;
    for (const auto& d : leaves)
      for (const auto& n : list_dir(d)) {
        ++files;
        EXPECT_TRUE(n.size() == 68 && n.substr(64) == ".bin")
            << when << ": stray file " << d << "/" << n;
      }
    EXPECT_EQ(files, static_cast<size_t>(kBlocks)) << when;
  };
  no_strays("before remount");

  // After a restart the blocks come from the segments: same loads.
  m.unmount();
  ASSERT_TRUE(m.mount_ok());
  std::string back;
  ASSERT_TRUE(read_file(cfg, &back));
  EXPECT_EQ(back, cfg_json);
  no_strays("after remount");
  errs = run_pool(kThreads, kBlocks,
                  [&](int t, int b) { return vllm_load(l, b, *bufs[t], *bufs2[t]); });
  EXPECT_TRUE(errs.empty()) << errs.size()
                            << " loads after remount failed, first: " << errs.front();
  EXPECT_EQ(access_errno(l.dest(kBlocks)), ENOENT);
}

// Several blocks, each stored as vLLM will: CRC32C set on the tmp file, then
// the rename; the checksum (and the name) must be on the final name, also
// after a restart.
TEST(Workloads, VllmXattrCrcFollowsRename) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  VllmLayout l(m.mnt());
  constexpr int kBlocks = 24;
  const size_t size = 3 * kMiB + 4096;
  auto value = [&](int b) {
    const uint32_t crc = crc32c(content(size, 77 + b));
    return std::string(reinterpret_cast<const char*>(&crc), sizeof(crc));
  };
  auto tmp = [&](int b) { return l.dest(b) + "_" + hex(b, 8) + ".tmp"; };
  for (int b = 0; b < kBlocks; ++b) {
    const std::string data = content(size, 77 + b), val = value(b);
    ASSERT_TRUE(mkdir_p(l.dir(l.hash(b))));
    int fd = ::open(tmp(b).c_str(), O_CREAT | O_EXCL | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0) << err();
    ASSERT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
    // Odd blocks: a careful writer that makes the tmp file durable first, so
    // that the xattr and the rename reach a file already in the index.
    if (b % 2) {
      ASSERT_EQ(::fsync(fd), 0) << err();
    }
    ASSERT_EQ(::close(fd), 0);
    ASSERT_EQ(::setxattr(tmp(b).c_str(), "user.vllm.kv_crc32c", val.data(), val.size(), 0), 0)
        << "the tier refuses to start without user xattrs: " << err();
    ASSERT_EQ(::rename(tmp(b).c_str(), l.dest(b).c_str()), 0) << err();
  }

  auto check = [&](const char* when) {
    for (int b = 0; b < kBlocks; ++b) {
      const std::string dest = l.dest(b);
      char buf[64];
      ssize_t n = ::getxattr(dest.c_str(), "user.vllm.kv_crc32c", buf, sizeof(buf));
      if (n != 4) {
        std::string names;
        for (const auto& e : list_dir(l.dir(l.hash(b)))) names += " " + e;
        ADD_FAILURE() << when << ": getxattr on the final name of block " << b << ": " << err()
                      << "; its directory has:" << names;
        continue;
      }
      EXPECT_EQ(std::string(buf, 4), value(b)) << when;
      n = ::listxattr(dest.c_str(), buf, sizeof(buf));
      ASSERT_GT(n, 0) << when;
      EXPECT_NE(std::string(buf, static_cast<size_t>(n)).find("user.vllm.kv_crc32c"),
                std::string::npos)
          << when;
      EXPECT_EQ(access_errno(tmp(b)), ENOENT) << when << ": tmp name of block " << b;
      std::string back;
      ASSERT_TRUE(read_file(dest, &back)) << when;
      EXPECT_TRUE(back == content(size, 77 + b)) << when << ": block " << b;
    }
  };
  check("before remount");
  m.unmount();
  ASSERT_TRUE(m.mount_ok());
  check("after remount");
}

// ---------------------------------------------------------------------------
// llm-d fs backend.

TEST(Workloads, LlmdStoreRenameWhileOpenTailReadTouch) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  const std::string root = m.mnt() + "/meta-llama_Llama-3.1-8B_" + hex(9, 12) + "_r0";
  constexpr int kThreads = 8, kFiles = 24;
  const size_t size = 5 * kMiB + 4321;
  const size_t need = 147456 * 3 + 11;  // the tail a load asks for
  auto dest = [&](int i) {
    std::string h = hex(300 + i, 64);
    h[0] = "ab"[i % 2];
    return root + "/" + h.substr(0, 3) + "/" + h.substr(3, 2) + "_g0/" + h + ".bin";
  };
  auto parent = [](const std::string& p) { return p.substr(0, p.rfind('/')); };

  // Store: open+close existence test misses, mkdir -p, 1 MiB buffered writes
  // to dst_<u32>.tmp, rename while the fd is still open, close.
  auto errs = run_pool(kThreads, kFiles, [&](int, int i) -> std::string {
    const std::string d = dest(i);
    int probe = ::open(d.c_str(), O_RDONLY | O_CLOEXEC);
    if (probe >= 0 || errno != ENOENT) return "existence test of a new chunk: " + err();
    if (!mkdir_p(parent(d))) return "mkdir -p: " + err();
    const std::string tmp = d + "_" + std::to_string(3000000000u + i) + ".tmp";
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return "open tmp: " + err();
    const std::string data = content(size, i);
    for (size_t off = 0; off < size; off += kMiB) {
      size_t n = std::min(kMiB, size - off);
      if (::write(fd, data.data() + off, n) != static_cast<ssize_t>(n)) {
        ::close(fd);
        return "write: " + err();
      }
    }
    if (::rename(tmp.c_str(), d.c_str()) != 0) {
      ::close(fd);
      return "rename while open: " + err();
    }
    // The name is replaced; reading through the new name already works.
    struct stat st;
    if (::stat(d.c_str(), &st) != 0 || static_cast<size_t>(st.st_size) != size) {
      ::close(fd);
      return "stat after rename: " + err();
    }
    if (::close(fd) != 0) return "close: " + err();
    if (access_errno(tmp) != ENOENT) return "tmp name still present";
    return "";
  });
  EXPECT_TRUE(errs.empty()) << errs.size() << " stores failed, first: " << errs.front();

  // Lookup (stat) and load (seek to size - need, read the tail).
  auto load_all = [&](const char* when) {
    auto errs = run_pool(kThreads, kFiles, [&](int, int i) -> std::string {
      struct stat st;
      if (::stat(dest(i).c_str(), &st) != 0) return "stat: " + err();
      if (static_cast<size_t>(st.st_size) != size) return "size " + std::to_string(st.st_size);
      int fd = ::open(dest(i).c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) return "open: " + err();
      std::string tail(need, '\0');
      ssize_t n = ::pread(fd, tail.data(), need, st.st_size - static_cast<off_t>(need));
      ::close(fd);
      if (n != static_cast<ssize_t>(need)) return "tail read returned " + std::to_string(n);
      if (tail != content(size, i).substr(size - need)) return "wrong tail bytes";
      std::string all;
      if (!read_file(dest(i), &all)) return "read: " + err();
      if (all != content(size, i)) return "wrong bytes";
      return "";
    });
    EXPECT_TRUE(errs.empty()) << when << ": " << errs.size()
                              << " loads failed, first: " << errs.front();
  };
  load_all("before remount");

  // A hit: open+close succeeds, then utimensat with only atime set.
  std::vector<struct stat> before(kFiles);
  for (int i = 0; i < kFiles; i += 3) {
    int fd = ::open(dest(i).c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0) << err();
    ::close(fd);
    ASSERT_EQ(::stat(dest(i).c_str(), &before[i]), 0);
    const timespec ts[2] = {{1700000000 + i, 123456789}, {0, UTIME_OMIT}};
    ASSERT_EQ(::utimensat(AT_FDCWD, dest(i).c_str(), ts, 0), 0) << err();
    struct stat st;
    ASSERT_EQ(::stat(dest(i).c_str(), &st), 0);
    EXPECT_EQ(st.st_atim.tv_sec, 1700000000 + i);
    EXPECT_EQ(st.st_atim.tv_nsec, 123456789);
    EXPECT_EQ(st.st_mtim.tv_sec, before[i].st_mtim.tv_sec) << "atime touch changed mtime";
    EXPECT_EQ(st.st_mtim.tv_nsec, before[i].st_mtim.tv_nsec) << "atime touch changed mtime";
    EXPECT_EQ(st.st_size, before[i].st_size);
  }

  m.unmount();
  ASSERT_TRUE(m.mount_ok());
  load_all("after remount");
  for (int i = 0; i < kFiles; i += 3) {
    struct stat st;
    ASSERT_EQ(::stat(dest(i).c_str(), &st), 0);
    EXPECT_EQ(st.st_mtim.tv_sec, before[i].st_mtim.tv_sec) << "mtime changed over a remount";
    EXPECT_EQ(st.st_mtim.tv_nsec, before[i].st_mtim.tv_nsec) << "mtime changed over a remount";
  }
  // No tmp file survives.
  for (int i = 0; i < kFiles; ++i)
    for (const auto& n : list_dir(parent(dest(i))))
      EXPECT_EQ(n.find(".tmp"), std::string::npos) << "stray " << n;
}

// ---------------------------------------------------------------------------
// LMCache fs_native: every concurrent writer of a key uses the SAME tmp name.
//
// POSIX makes the shared tmp name racy for the client itself: a writer's
// O_TRUNC open can truncate the inode another writer is about to rename, so a
// reader may see the name with fewer bytes (or a zeroed range) until the
// last writer of that inode finishes — on ext4 as on kvfs. What a filesystem
// can promise, and what is checked: no reader ever gets a byte that is not
// the key's content (or zero from such a truncation), never more than the
// content's length, and once the writers are done the file is complete and
// correct and no tmp file is left. Partial observations are counted and
// printed.

TEST(Workloads, LmcacheFsNativeSharedTmpName) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  const std::string base = m.mnt() + "/lmc";
  ASSERT_EQ(::mkdir(base.c_str(), 0755), 0);
  constexpr int kWriters = 8, kReaders = 2, kKeys = 4;
  const size_t size = 6 * kMiB + 8192;
  int partial_seen = 0, complete_seen = 0;

  for (int key = 0; key < kKeys; ++key) {
    const std::string name = base + "/Qwen_Qwen3-8B@0x0@" + hex(900 + key, 16) + ".data";
    const std::string tmp = name + ".tmp";
    const std::string data = content(size, 900 + key);
    std::atomic<int> writers_left{kWriters};
    std::atomic<int> bad{0}, partial{0}, complete{0};
    std::mutex mu;
    std::string first_bad;
    std::barrier start(kWriters + kReaders);

    std::vector<std::thread> ts;
    for (int w = 0; w < kWriters; ++w)
      ts.emplace_back([&] {
        start.arrive_and_wait();
        struct stat st;
        if (::stat(name.c_str(), &st) == 0) {  // stored meanwhile: skip
          writers_left--;
          return;
        }
        int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) {
          bad++;
          std::lock_guard g(mu);
          first_bad = "open tmp: " + err();
        } else {
          ssize_t n = ::write(fd, data.data(), size);
          int c = ::close(fd);
          // rename may find the tmp name already moved by another writer.
          int r = ::rename(tmp.c_str(), name.c_str());
          if (n != static_cast<ssize_t>(size) || c != 0 || (r != 0 && errno != ENOENT)) {
            bad++;
            std::lock_guard g(mu);
            first_bad = "write/close/rename: n=" + std::to_string(n) + " " + err();
          }
        }
        writers_left--;
      });
    for (int r = 0; r < kReaders; ++r)
      ts.emplace_back([&] {
        start.arrive_and_wait();
        std::string got;
        // Load = read loop; readers go on until every writer is done.
        while (writers_left.load() > 0) {
          int fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC);
          if (fd < 0) {
            if (errno != ENOENT) {
              bad++;
              std::lock_guard g(mu);
              first_bad = "reader open: " + err();
            }
            continue;
          }
          got.clear();
          char buf[1 << 16];
          ssize_t n;
          while ((n = ::read(fd, buf, sizeof(buf))) > 0) got.append(buf, static_cast<size_t>(n));
          ::close(fd);
          bool ok = n == 0 && got.size() <= size;
          bool zeros = false;
          for (size_t i = 0; ok && i < got.size(); ++i) {
            if (got[i] == data[i]) continue;
            if (got[i] == 0) {
              zeros = true;
              continue;
            }
            ok = false;
          }
          if (!ok) {
            bad++;
            std::lock_guard g(mu);
            first_bad = "reader got " + std::to_string(got.size()) + " bytes, not the key's";
          } else if (zeros || got.size() < size) {
            partial++;
          } else {
            complete++;
          }
        }
      });
    for (auto& t : ts) t.join();
    EXPECT_EQ(bad.load(), 0) << "key " << key << ": " << first_bad;
    partial_seen += partial.load();
    complete_seen += complete.load();

    std::string back;
    ASSERT_TRUE(read_file(name, &back)) << err();
    EXPECT_EQ(back.size(), size);
    EXPECT_TRUE(back == data) << "final file of key " << key << " is not the content";
    EXPECT_EQ(access_errno(tmp), ENOENT) << "tmp name left behind";
  }
  std::printf("fs_native readers: %d complete reads, %d reads inside the client's tmp race\n",
              complete_seen, partial_seen);

  // Load after a restart, and delete = unlink.
  m.unmount();
  ASSERT_TRUE(m.mount_ok());
  for (int key = 0; key < kKeys; ++key) {
    const std::string name = base + "/Qwen_Qwen3-8B@0x0@" + hex(900 + key, 16) + ".data";
    std::string back;
    ASSERT_TRUE(read_file(name, &back));
    EXPECT_TRUE(back == content(size, 900 + key)) << "key " << key << " after remount";
    EXPECT_EQ(::unlink(name.c_str()), 0);
    EXPECT_EQ(access_errno(name), ENOENT);
  }
  EXPECT_TRUE(list_dir(base).empty());
}

// ---------------------------------------------------------------------------
// LMCache local_disk: final names written directly, O_DIRECT when the size is
// a multiple of statvfs.f_bsize; LMCache unlinks the files itself.

TEST(Workloads, LmcacheLocalDiskDirectFinalNameUnlink) {
  KvfsMount m;
  ASSERT_TRUE(m.mount_ok());
  const std::string dir = m.mnt() + "/local_disk";
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  struct statvfs vfs;
  ASSERT_EQ(::statvfs(dir.c_str(), &vfs), 0);
  ASSERT_EQ(vfs.f_bsize, 4096u);
  EXPECT_GT(vfs.f_blocks, 0u);

  constexpr int kThreads = 8, kKeys = 32;
  auto size_of = [&](int k) -> size_t {
    return k % 4 == 3 ? kMiB + 100 + k : (2 + k % 3) * kMiB + 4096 * (k % 5);
  };
  auto path = [&](int k) { return dir + "/" + hex(700 + k, 24) + ".pt"; };
  auto errs = run_pool(kThreads, kKeys, [&](int, int k) -> std::string {
    const size_t n = size_of(k);
    const bool direct = n % vfs.f_bsize == 0;
    AlignedBuf b(n);
    fill(b.data, n, 700 + k);
    int fd = ::open(path(k).c_str(),
                    O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | (direct ? O_DIRECT : 0), 0644);
    if (fd < 0) return "open: " + err();
    ssize_t w = ::write(fd, b.data, n);
    int c = ::close(fd);
    if (w != static_cast<ssize_t>(n) || c != 0) return "write returned " + std::to_string(w);
    // Read back the way it was written.
    fd = ::open(path(k).c_str(), O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
    if (fd < 0) return "open for read: " + err();
    AlignedBuf r(n + 4096);
    ssize_t got = ::read(fd, r.data, n + 4096);
    ::close(fd);
    if (got != static_cast<ssize_t>(n)) return "read returned " + std::to_string(got);
    if (std::memcmp(r.data, b.data, n) != 0) return "wrong bytes";
    return "";
  });
  EXPECT_TRUE(errs.empty()) << errs.size() << " keys failed, first: " << errs.front();

  // An fd opened before the unlink keeps reading the data.
  int keep = ::open(path(0).c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(keep, 0);
  for (int k = 0; k < kKeys; ++k) {
    EXPECT_EQ(::unlink(path(k).c_str()), 0) << path(k) << ": " << err();
    EXPECT_EQ(access_errno(path(k)), ENOENT);
  }
  EXPECT_TRUE(list_dir(dir).empty());
  std::string got(size_of(0), '\0');
  EXPECT_EQ(::pread(keep, got.data(), got.size(), 0), static_cast<ssize_t>(got.size()));
  EXPECT_TRUE(got == content(size_of(0), 700)) << "unlinked file lost its data while open";
  ::close(keep);

  m.unmount();
  ASSERT_TRUE(m.mount_ok());
  EXPECT_TRUE(list_dir(dir).empty()) << "unlinked keys came back after a restart";
}

// ---------------------------------------------------------------------------
// LMCache gds backend, POSIX fallback: ftruncate + MAP_SHARED writes, rename,
// MAP_PRIVATE|MAP_POPULATE reads; .metadata sidecars read with O_NOATIME.

TEST(Workloads, LmcacheGdsMmapAndNoatimeSidecar) {
  KvfsMount m;
  // attr_timeout=0: every stat reaches the daemon, so atime is seen as kept.
  ASSERT_TRUE(m.mount_ok("attr_timeout=0"));
  constexpr int kKeys = 6;
  const size_t data_len = 4 * kMiB + 12288;
  auto key = [&](int k) { return hex(40 + k, 40); };
  auto dir = [&](int k) {
    std::string h = key(k);
    return m.mnt() + "/gds/" + h.substr(0, 2) + "/" + h.substr(2, 2);
  };
  auto file = [&](int k) { return dir(k) + "/" + key(k) + ".kvcache.safetensors"; };
  auto header = [&](int k) {
    std::string h(4096, ' ');
    std::string j = R"({"key":")" + key(k) + R"(","len":)" + std::to_string(data_len) + "}";
    h.replace(0, j.size(), j);
    return h;
  };

  for (int k = 0; k < kKeys; ++k) {
    ASSERT_TRUE(mkdir_p(dir(k)));
    const std::string tmp = file(k) + ".tmp";
    int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0) << err();
    ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(4096 + data_len)), 0) << err();
    void* p = ::mmap(nullptr, 4096 + data_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ASSERT_NE(p, MAP_FAILED) << "MAP_SHARED mmap: " << err();
    char* c = static_cast<char*>(p);
    const std::string h = header(k);
    std::memcpy(c, h.data(), 4096);
    fill(c + 4096, data_len, 40 + k);
    ASSERT_EQ(::munmap(p, 4096 + data_len), 0);
    ASSERT_EQ(::close(fd), 0);
    ASSERT_EQ(::rename(tmp.c_str(), file(k).c_str()), 0) << err();
    // The 4 KiB sidecar.
    std::string meta(4096, '\0');
    std::memcpy(meta.data(), h.data(), 256);
    ASSERT_TRUE(write_file(file(k) + ".metadata", meta));
  }

  auto check = [&](const char* when) {
    for (int k = 0; k < kKeys; ++k) {
      int fd = ::open(file(k).c_str(), O_RDONLY | O_CLOEXEC);
      ASSERT_GE(fd, 0) << when << ": " << err();
      struct stat st;
      ASSERT_EQ(::fstat(fd, &st), 0);
      ASSERT_EQ(static_cast<size_t>(st.st_size), 4096 + data_len) << when;
      void* p = ::mmap(nullptr, st.st_size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
      ASSERT_NE(p, MAP_FAILED) << when << ": " << err();
      const char* c = static_cast<const char*>(p);
      EXPECT_EQ(std::string(c, 4096), header(k)) << when << ": header of key " << k;
      EXPECT_TRUE(std::memcmp(c + 4096, content(data_len, 40 + k).data(), data_len) == 0)
          << when << ": data of key " << k;
      ::munmap(p, st.st_size);
      ::close(fd);
    }
  };
  check("before remount");
  m.unmount();
  ASSERT_TRUE(m.mount_ok("attr_timeout=0"));
  check("after remount");

  // Startup scan: every .metadata read with O_NOATIME leaves atime alone.
  for (int k = 0; k < kKeys - 1; ++k) {
    const std::string meta = file(k) + ".metadata";
    struct stat st0, st1;
    ASSERT_EQ(::stat(meta.c_str(), &st0), 0);
    int fd = ::open(meta.c_str(), O_RDONLY | O_NOATIME | O_CLOEXEC);
    ASSERT_GE(fd, 0) << "O_NOATIME open: " << err();
    char buf[4096];
    EXPECT_EQ(::read(fd, buf, sizeof(buf)), 4096);
    EXPECT_EQ(std::memcmp(buf, header(k).data(), 256), 0);
    ::close(fd);
    ASSERT_EQ(::stat(meta.c_str(), &st1), 0);
    EXPECT_TRUE(st1.st_atim.tv_sec == st0.st_atim.tv_sec &&
                st1.st_atim.tv_nsec == st0.st_atim.tv_nsec)
        << "O_NOATIME read of " << meta << " moved atime from " << st0.st_atim.tv_sec << "."
        << st0.st_atim.tv_nsec << " to " << st1.st_atim.tv_sec << "." << st1.st_atim.tv_nsec;
  }
  // Control: a plain read of a file never read since its write moves atime
  // (relatime), so the check above could have seen a change.
  {
    const std::string meta = file(kKeys - 1) + ".metadata";
    struct stat st0, st1;
    ASSERT_EQ(::stat(meta.c_str(), &st0), 0);
    std::string back;
    ASSERT_TRUE(read_file(meta, &back));
    ASSERT_EQ(::stat(meta.c_str(), &st1), 0);
    EXPECT_FALSE(st1.st_atim.tv_sec == st0.st_atim.tv_sec &&
                 st1.st_atim.tv_nsec == st0.st_atim.tv_nsec)
        << "a plain first read did not update atime (relatime)";
  }
}

}  // namespace
}  // namespace kvfs::test
