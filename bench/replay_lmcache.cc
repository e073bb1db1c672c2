// Replays of the two LMCache clients of the published comparison that do not
// go through LMCache's own fs backends: the MP server's NIXL store with the
// GDS backend, and the in-process FSConnector (remote_url fs://). Same
// contract as replay.cc: --chunks keys stored with the client's pattern,
// looked up, loaded back (every byte verified against bench/pattern.h), one
// JSON line.
//
//   kvfs-bench nixl-gds DIR [geometry] [--chunks 32] [--threads 4] [--io pwrite|io_uring]
//                            [--orphans 4] [--shard-dirs 0|1]
//   kvfs-bench lmcache-fs DIR [geometry] [--chunks 32] [--threads 8] [--odirect 0|1]
#include <dirent.h>
#include <liburing.h>

#include <unordered_set>

#include "bench/replay_util.h"

namespace kvfs::bench {

using namespace replay;

namespace {

// cuFile (and so NIXL's GDS backend) splits a transfer at 16 MiB.
constexpr uint64_t kExtent = 16ull << 20;
constexpr size_t kFsHeader = 28;  // FSConnector's metadata header

struct Extent {
  uint64_t off, len;
};

std::vector<Extent> extents_of(uint64_t size) {
  std::vector<Extent> v;
  for (uint64_t off = 0; off < size; off += kExtent)
    v.push_back({off, std::min(kExtent, size - off)});
  return v;
}

// A uuid4().hex: the tmp suffix of one store.
std::string uuid_hex() {
  char b[33];
  std::snprintf(b, sizeof(b), "%016llx%016llx", (unsigned long long)rand64(),
                (unsigned long long)rand64());
  return b;
}

// All extents of one file in flight at once; they complete in whatever order
// the filesystem finishes them. Returns true when they did not complete in
// offset order. A short transfer is an error (cuFile fails the batch).
class ExtentIo {
 public:
  explicit ExtentIo(bool uring) : uring_(uring) {
    if (uring_ && io_uring_queue_init(16, &ring_, 0) != 0) die("io_uring_queue_init failed");
  }
  ~ExtentIo() {
    if (uring_) io_uring_queue_exit(&ring_);
  }
  ExtentIo(const ExtentIo&) = delete;
  ExtentIo& operator=(const ExtentIo&) = delete;

  bool run(bool write, int fd, char* buf, const std::vector<Extent>& ex, const std::string& path) {
    std::vector<unsigned> done;  // extent indices in completion order
    if (uring_) {
      for (unsigned i = 0; i < ex.size(); ++i) {
        io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
        if (!sqe) die("io_uring: no sqe");
        if (write)
          io_uring_prep_write(sqe, fd, buf + ex[i].off, ex[i].len, ex[i].off);
        else
          io_uring_prep_read(sqe, fd, buf + ex[i].off, ex[i].len, ex[i].off);
        io_uring_sqe_set_data64(sqe, i);
      }
      const int sub = io_uring_submit(&ring_);
      if (sub != static_cast<int>(ex.size())) die("io_uring_submit %s: %d", path.c_str(), sub);
      for (size_t n = 0; n < ex.size(); ++n) {
        io_uring_cqe* cqe;
        const int r = io_uring_wait_cqe(&ring_, &cqe);
        if (r != 0) die("io_uring_wait_cqe %s: %s", path.c_str(), strerror(-r));
        const unsigned i = static_cast<unsigned>(io_uring_cqe_get_data64(cqe));
        const int res = cqe->res;
        io_uring_cqe_seen(&ring_, cqe);
        if (res < 0) die("%s %s: %s", write ? "write" : "read", path.c_str(), strerror(-res));
        if (static_cast<uint64_t>(res) != ex[i].len)
          die("short %s of %s at %llu: %d of %llu", write ? "write" : "read", path.c_str(),
              (unsigned long long)ex[i].off, res, (unsigned long long)ex[i].len);
        done.push_back(i);
      }
    } else {
      // cuFile's compatibility mode: one POSIX pwrite/pread per extent, each
      // on its own thread.
      std::mutex mu;
      std::vector<std::thread> ths;
      for (unsigned i = 0; i < ex.size(); ++i)
        ths.emplace_back([&, i] {
          char* p = buf + ex[i].off;
          const ssize_t r = write ? ::pwrite(fd, p, ex[i].len, static_cast<off_t>(ex[i].off))
                                  : ::pread(fd, p, ex[i].len, static_cast<off_t>(ex[i].off));
          if (r < 0) die("%s %s: %s", write ? "pwrite" : "pread", path.c_str(), strerror(errno));
          if (static_cast<uint64_t>(r) != ex[i].len)
            die("short %s of %s at %llu: %zd of %llu", write ? "pwrite" : "pread", path.c_str(),
                (unsigned long long)ex[i].off, r, (unsigned long long)ex[i].len);
          std::lock_guard l(mu);
          done.push_back(i);
        });
      for (auto& t : ths) t.join();
    }
    return !std::is_sorted(done.begin(), done.end());
  }

 private:
  bool uring_;
  io_uring ring_{};
};

// Files under dir (recursively with shard dirs) whose name contains ".tmp.";
// returns how many entries it saw.
uint64_t sweep_tmps(const std::string& dir, uint64_t* unlinked) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) die("opendir %s: %s", dir.c_str(), strerror(errno));
  uint64_t seen = 0;
  std::vector<std::string> subdirs;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    ++seen;
    if (e->d_type == DT_DIR) {
      subdirs.push_back(dir + "/" + n);
    } else if (n.find(".tmp.") != std::string::npos) {
      if (::unlink((dir + "/" + n).c_str()) != 0) die("unlink %s: %s", n.c_str(), strerror(errno));
      ++*unlinked;
    }
  }
  ::closedir(d);
  for (const auto& s : subdirs) seen += sweep_tmps(s, unlinked);
  return seen;
}

}  // namespace

// ---------------------------------------------------------------- LMCache MP, NIXL GDS

int cmd_nixl_gds(const std::string& dir, Args& a) {
  Common c = parse_common(a);
  const unsigned th = static_cast<unsigned>(std::max<uint64_t>(1, a.num("threads", 4)));
  const std::string io = a.str("io", "pwrite");
  // Tmp files a crashed earlier run left behind, for the shutdown sweep.
  const uint64_t orphans = a.num("orphans", 4);
  const bool shard = a.num("shard-dirs", 0) != 0;
  std::string model = a.str("model", "Qwen/Qwen3-8B");
  a.check_all_used();
  if (io != "pwrite" && io != "io_uring") die("--io: pwrite or io_uring, not '%s'", io.c_str());
  const size_t size = c.size;
  if (size % kPage) die("nixl-gds: objects are a multiple of 4096 bytes (O_DIRECT)");
  for (size_t p; (p = model.find('/')) != std::string::npos;) model.replace(p, 1, "--");
  const std::string base_dir = join(dir, "nixl_gds");
  mkdir_p(base_dir);
  auto name_of = [&](uint64_t key, unsigned rank, uint64_t tag) {
    const std::string h = hex64(c.salt + key, tag);
    char r[16];
    std::snprintf(r, sizeof(r), "_%08x_0_", rank);
    const std::string d = shard ? base_dir + "/" + h.substr(0, 2) + "/" + h.substr(2, 2) : base_dir;
    return d + "/" + model + r + h + ".bin";
  };
  std::vector<std::string> names(c.chunks * c.g.tp), absent(std::max<uint64_t>(c.chunks, 4096));
  for (uint64_t j = 0; j < names.size(); ++j)
    names[j] = name_of(j / c.g.tp, static_cast<unsigned>(j % c.g.tp), 10);
  for (uint64_t i = 0; i < absent.size(); ++i) absent[i] = name_of(i, 0, 11);
  if (shard)
    for (const auto& n : names) mkdir_p(parent_of(n));
  const std::vector<Extent> ex = extents_of(size);
  make_base(c, size);

  {
    // A crashed store: the tmp exists and only its second extent landed.
    AlignedBuf junk(kPage);
    for (uint64_t i = 0; i < orphans; ++i) {
      const std::string n = name_of(i, 0, 12);
      mkdir_p(parent_of(n));
      const std::string tmp = n + ".tmp." + uuid_hex();
      const int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0644);
      if (fd < 0) die("create %s: %s", tmp.c_str(), strerror(errno));
      const off_t off = size > kExtent ? static_cast<off_t>(kExtent) : 0;
      if (::pwrite(fd, junk.p, kPage, off) != static_cast<ssize_t>(kPage))
        die("pwrite %s: %s", tmp.c_str(), strerror(errno));
      ::close(fd);
    }
  }

  std::vector<std::unique_ptr<ExtentIo>> ios;
  for (unsigned t = 0; t < th; ++t) ios.push_back(std::make_unique<ExtentIo>(io == "io_uring"));
  std::atomic<uint64_t> ooo_store{0}, ooo_load{0};
  // The adapter's in-memory dict of what it stored.
  std::mutex mu;
  std::unordered_set<std::string> dict;
  Phase store;
  {
    Bufs wb = make_bufs(th, size, c.base->p);
    store = run_phase(names.size(), th, [&](unsigned t, uint64_t j, Phase& p) {
      const std::string& n = names[j];
      char* b = wb[t]->p;
      apply_stamps(b, size, name_seed(n));
      const double t0 = now_s();
      const std::string tmp = n + ".tmp." + uuid_hex();
      const int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0644);
      if (fd < 0) die("create %s: %s", tmp.c_str(), strerror(errno));
      if (ios[t]->run(true, fd, b, ex, tmp)) ++ooo_store;
      if (::close(fd) != 0) {
        const int e = errno;
        ::unlink(tmp.c_str());
        die("close %s: %s", tmp.c_str(), strerror(e));
      }
      if (::rename(tmp.c_str(), n.c_str()) != 0) {
        const int e = errno;
        ::unlink(tmp.c_str());
        die("rename %s: %s", tmp.c_str(), strerror(e));
      }
      p.lat_ms.push_back((now_s() - t0) * 1e3);
      ++p.ops, p.bytes += size;
      std::lock_guard l(mu);
      dict.insert(n);
    });
  }
  if (c.settle) fsync_dir(base_dir);
  // A dict miss (e.g. after a restart) falls back to stat; st_size is the size.
  auto st = [&](const std::string& n) {
    struct stat s;
    const int r = ::stat(n.c_str(), &s);
    if (r == 0 && static_cast<uint64_t>(s.st_size) != size)
      die("stat %s: size %lld, stored %zu", n.c_str(), (long long)s.st_size, size);
    return r;
  };
  const Phase present = lookups(names, true, "stat", st);
  const Phase warm = lookups(names, true, "stat", st, 4096);
  const Phase missing = lookups(absent, false, "stat", st);

  Bufs rb = make_bufs(th, size, nullptr);
  const Phase load = run_phase(names.size(), th, [&](unsigned t, uint64_t j, Phase& p) {
    const std::string& n = names[j];
    {
      std::lock_guard l(mu);
      if (!dict.count(n)) return void(++p.misses);
    }
    char* b = rb[t]->p;
    std::memset(b, 0xa5, kPage);
    const double t0 = now_s();
    // Read-write even for a read: the adapter opens every object that way.
    const int fd = ::open(n.c_str(), O_RDWR | O_DIRECT);
    if (fd < 0) die("open %s: %s", n.c_str(), strerror(errno));
    if (ios[t]->run(false, fd, b, ex, n)) ++ooo_load;
    ::close(fd);
    const double t1 = now_s();
    p.lat_ms.push_back((t1 - t0) * 1e3);
    ++p.ops, p.bytes += size;
    check_content(b, c.base->p, size, n);
    p.verify_s += now_s() - t1;
  });
  if (load.misses) die("nixl-gds: %llu stored keys missing", (unsigned long long)load.misses);

  // Shutdown: walk the directory, unlink every *.tmp.*.
  uint64_t swept = 0;
  const double s0 = now_s();
  const uint64_t seen = sweep_tmps(base_dir, &swept);
  const double sweep_s = now_s() - s0;
  if (swept != orphans)
    die("nixl-gds: the sweep removed %llu tmp files, %llu were left", (unsigned long long)swept,
        (unsigned long long)orphans);
  for (const auto& n : names)
    if (!exists(n)) die("nixl-gds: %s gone after the sweep", n.c_str());
  if (!c.keep) unlink_all(names);
  Json j = header("nixl-gds", dir, c);
  j.add("threads", th).add("io", io).add("shard_dirs", shard);
  j.add("extents", static_cast<uint64_t>(ex.size())).add("extent_bytes", kExtent);
  j.add("out_of_order_stores", ooo_store.load()).add("out_of_order_loads", ooo_load.load());
  j.add("sweep_entries", seen).add("sweep_unlinked", swept).add("sweep_ms", sweep_s * 1e3);
  add_lookups(j, "stat", present, warm, missing);
  finish(j, store, load);
  return 0;
}

// ---------------------------------------------------------------- LMCache FSConnector

int cmd_lmcache_fs(const std::string& dir, Args& a) {
  Common c = parse_common(a);
  const unsigned th = static_cast<unsigned>(std::max<uint64_t>(1, a.num("threads", 8)));
  const bool direct = a.num("odirect", 0) != 0;
  const std::string model = a.str("model", "Qwen3-8B");
  a.check_all_used();
  const size_t size = c.size;
  if (direct && size % kPage) die("lmcache-fs --odirect 1 needs a multiple of 4096 bytes");
  const std::string base_dir = join(dir, "lmcache_fs");
  mkdir_p(base_dir);
  auto name_of = [&](uint64_t key, unsigned worker, uint64_t tag) {
    return base_dir + "/vllm@" + model + "@" + std::to_string(c.g.tp) + "@" +
           std::to_string(worker) + "@" + hex64(c.salt + key, tag).substr(0, 16) + "@bfloat16.data";
  };
  std::vector<std::string> names(c.chunks * c.g.tp), absent(std::max<uint64_t>(c.chunks, 4096));
  for (uint64_t j = 0; j < names.size(); ++j)
    names[j] = name_of(j / c.g.tp, static_cast<unsigned>(j % c.g.tp), 13);
  for (uint64_t i = 0; i < absent.size(); ++i) absent[i] = name_of(i, 0, 14);
  // The header (shape, dtype, format) is the same bytes for one key's object.
  auto header_of = [](const std::string& n) {
    std::string h(kFsHeader, '\0');
    for (size_t i = 0; i < kFsHeader; i += 8) {
      const uint64_t w = splitmix64(name_seed(n) + i);
      std::memcpy(h.data() + i, &w, std::min<size_t>(8, kFsHeader - i));
    }
    return h;
  };
  make_base(c, size);

  Phase store;
  {
    Bufs wb = make_bufs(th, size, c.base->p);
    store = run_phase(names.size(), th, [&](unsigned t, uint64_t j, Phase& p) {
      const std::string& n = names[j];
      char* b = wb[t]->p;
      apply_stamps(b, size, name_seed(n));
      const std::string hdr = header_of(n);
      const double t0 = now_s();
      struct stat st;
      if (::stat(n.c_str(), &st) == 0) return void(++p.skipped);
      // One fixed tmp name per key: two writers of a key share it.
      const std::string tmp = n.substr(0, n.size() - 5) + ".tmp";
      const int fd = direct ? ::open(tmp.c_str(), O_CREAT | O_WRONLY | O_DIRECT, 0644)
                            : ::open(tmp.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
      if (fd < 0) die("create %s: %s", tmp.c_str(), strerror(errno));
      if (direct) {
        write_all_once(fd, b, size, tmp);
      } else {
        write_loop(fd, hdr.data(), hdr.size(), tmp);
        write_loop(fd, b, size, tmp);  // at offset 28: unaligned, buffered
      }
      if (::close(fd) != 0) die("close %s: %s", tmp.c_str(), strerror(errno));
      if (::rename(tmp.c_str(), n.c_str()) != 0) die("rename %s: %s", tmp.c_str(), strerror(errno));
      p.lat_ms.push_back((now_s() - t0) * 1e3);
      ++p.ops, p.bytes += size;
    });
  }
  if (store.skipped) die("lmcache-fs: %llu names existed", (unsigned long long)store.skipped);
  if (c.settle) fsync_dir(base_dir);
  const uint64_t file_size = size + (direct ? 0 : kFsHeader);
  auto st = [&](const std::string& n) {
    struct stat s;
    const int r = ::stat(n.c_str(), &s);
    if (r == 0 && static_cast<uint64_t>(s.st_size) != file_size)
      die("stat %s: size %lld, stored %llu", n.c_str(), (long long)s.st_size,
          (unsigned long long)file_size);
    return r;
  };
  const Phase present = lookups(names, true, "stat", st);
  const Phase warm = lookups(names, true, "stat", st, 4096);
  const Phase missing = lookups(absent, false, "stat", st);

  Bufs rb = make_bufs(th, size, nullptr);
  const Phase load = run_phase(names.size(), th, [&](unsigned t, uint64_t j, Phase& p) {
    const std::string& n = names[j];
    char* b = rb[t]->p;
    std::memset(b, 0xa5, kPage);
    char hdr[kFsHeader];
    const double t0 = now_s();
    if (direct) {
      vllm_load(n, b, size, true);  // one O_DIRECT read of the whole object
    } else {
      const int fd = ::open(n.c_str(), O_RDONLY);
      if (fd < 0) die("open %s: %s", n.c_str(), strerror(errno));
      read_loop(fd, hdr, kFsHeader, n);
      read_loop(fd, b, size, n);
      char extra;
      const ssize_t r = ::read(fd, &extra, 1);  // f.read() reads to end of file
      ::close(fd);
      if (r != 0) die("%s: longer than header + %zu bytes", n.c_str(), size);
    }
    const double t1 = now_s();
    p.lat_ms.push_back((t1 - t0) * 1e3);
    ++p.ops, p.bytes += size;
    if (!direct && std::memcmp(hdr, header_of(n).data(), kFsHeader) != 0)
      die("%s: wrong header", n.c_str());
    check_content(b, c.base->p, size, n);
    p.verify_s += now_s() - t1;
  });
  if (!c.keep) unlink_all(names);
  Json j = header("lmcache-fs", dir, c);
  j.add("threads", th)
      .add("o_direct", direct)
      .add("header_bytes", direct ? 0u : unsigned(kFsHeader));
  add_lookups(j, "stat", present, warm, missing);
  finish(j, store, load);
  return 0;
}

}  // namespace kvfs::bench
