// SPDX-License-Identifier: Apache-2.0
// kvfs-bench mrqa: LMCache's multi-round QA benchmark (multi-round-qa.py,
// shared/WORKLOADS.md "The comparison users run") replayed at the level of the
// files a vLLM fs tier makes of it.
//
// The schedule is the benchmark's own, simulated in virtual time (0.1 s steps
// for --time seconds): gap between a user's requests = users / qps, session
// alive time = gap * (rounds - 1), a new user every alive / users seconds, the
// initial users ramped in part-way through their sessions; every request
// resends the whole history. Tokens: the first prompt is the shared system
// prompt (S) + the user's context (L) + a question (Q, chat template
// included); each later round adds the previous answer (A) + a new question.
// A prompt's full 256-token chunks are hashed in prefix order (a chunk's hash
// depends on every token before it, so the chunks wholly inside the system
// prompt are shared by all users).
//
// Each request: an existence check on its chunks in prefix order until the
// first miss; the hits are loaded (and verified) by the read pool; the misses
// are stored by the write pool. The requests run time-compressed, as fast as
// storage allows, in the schedule's order, at most --concurrency at once and
// one at a time per user; --user-gap S keeps a user's next request at least S
// real seconds after its last one ended (the answer's decode time, which the
// compressed replay leaves out: it matters when the next round goes to
// another instance, which sees the stores only after its visibility delay).
// --client picks whose file pattern that is:
//   vllm        vLLM's fs tier: access(F_OK); open O_DIRECT + ONE read; the
//               vLLM store pattern (nested dirs, random tmp, rename).
//   nixl-gds    LMCache MP server, NIXL GDS (bench/client_patterns.h): stat;
//               O_RDWR|O_DIRECT, extents concurrently (a scaled chunk keeps the
//               full-size chunk's three); the store skipped for a key in the
//               adapter's dict.
//   lmcache-fs  LMCache FSConnector: stat; buffered header + payload; a put
//               skipped while the same key's put is in flight (put_tasks).
//
//   kvfs-bench mrqa DIR [--client vllm|nixl-gds|lmcache-fs] [--context-tokens 1000]
//       [--users 15] [--rounds 20] [--qps 2] [--time 1200] [--system-prompt 1000]
//       [--answer 100] [--question 32] [--concurrency 4] [--write-threads 16]
//       [--read-threads 32] [geometry | --chunk-bytes B] [--backing-dir PATH]
//       [--label NAME] [--flush 1] [--peer-dir DIR2[,DIR3...]] [--route rr|user]
//       [--user-gap S] [--dry-run]
//
// --peer-dir: more instances behind a balancer (DIR is the first), the same
// relative paths under each: kvfs nodes over one backing dir, or (DIR2 =
// DIR) clients of one shared plain dir. --route rr (the default): a user's
// round r goes to instance r % N, so with two a user's requests alternate;
// --route user: every round of user u goes to instance u % N, as a
// prefix-aware router keeps a conversation where its prefix is.
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <unordered_set>

#include "bench/bench_util.h"
#include "bench/client_patterns.h"
#include "bench/kvfs_control.h"
#include "bench/mrqa_schedule.h"

namespace kvfs::bench {
namespace {

// A pool of threads, each with its own chunk buffer, running batches of tasks.
class Pool {
 public:
  using Task = std::function<void(char* buf, Phase& stats)>;
  Pool(unsigned n, size_t buf_size, const char* init) : stats_(n) {
    for (unsigned i = 0; i < n; ++i) {
      bufs_.push_back(std::make_unique<AlignedBuf>(buf_size));
      if (init) std::memcpy(bufs_.back()->p, init, buf_size);
    }
    for (unsigned i = 0; i < n; ++i) threads_.emplace_back([this, i] { loop(i); });
  }
  ~Pool() {
    {
      std::lock_guard l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  // Runs the tasks on the pool and returns when all are done.
  void run(std::vector<Task> tasks) {
    if (tasks.empty()) return;
    Batch b;
    b.left = tasks.size();
    {
      std::lock_guard l(mu_);
      for (auto& t : tasks) q_.push_back({std::move(t), &b});
    }
    cv_.notify_all();
    std::unique_lock l(b.mu);
    b.cv.wait(l, [&] { return b.left == 0; });
  }
  Phase stats() const {
    Phase all;
    for (const auto& s : stats_) all.merge(s);
    return all;
  }

 private:
  struct Batch {
    std::mutex mu;
    std::condition_variable cv;
    size_t left = 0;
  };
  void loop(unsigned i) {
    for (;;) {
      std::pair<Task, Batch*> item;
      {
        std::unique_lock l(mu_);
        cv_.wait(l, [&] { return stop_ || !q_.empty(); });
        if (q_.empty()) return;
        item = std::move(q_.front());
        q_.pop_front();
      }
      item.first(bufs_[i]->p, stats_[i]);
      std::lock_guard l(item.second->mu);
      if (--item.second->left == 0) item.second->cv.notify_all();
    }
  }
  std::vector<Phase> stats_;
  std::vector<std::unique_ptr<AlignedBuf>> bufs_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<Task, Batch*>> q_;
  bool stop_ = false;
};

Json& add_kvfs_delta(Json& j, const nlohmann::json& b, const nlohmann::json& a, const char* key,
                     const char* path) {
  return j.add(key, static_cast<uint64_t>(std::max(0.0, jnum(a, path) - jnum(b, path))));
}

}  // namespace

int cmd_mrqa(const std::string& dir, Args& a) {
  const std::string client = a.str("client", "vllm");
  if (client != "vllm" && client != "nixl-gds" && client != "lmcache-fs")
    die("--client: vllm, nixl-gds or lmcache-fs, not '%s'", client.c_str());
  Workload w;
  w.ctx = a.num("context-tokens", 1000);
  w.users = std::max<uint64_t>(1, a.num("users", 15));
  w.rounds = std::max<uint64_t>(1, a.num("rounds", 20));
  w.qps = a.real("qps", 2);
  w.time = a.real("time", 1200);
  w.sys = a.num("system-prompt", 1000);
  w.answer = a.num("answer", 100);
  w.question = a.num("question", 32);
  const Geometry g = parse_geometry(a);
  const unsigned conc = static_cast<unsigned>(std::max<uint64_t>(1, a.num("concurrency", 4)));
  const unsigned wt = static_cast<unsigned>(std::max<uint64_t>(1, a.num("write-threads", 16)));
  const unsigned rt = static_cast<unsigned>(std::max<uint64_t>(1, a.num("read-threads", 32)));
  const std::string backing = a.str("backing-dir");
  const std::string label = a.str("label", "");
  const bool flush = a.num("flush", 1) != 0;
  const bool dry = a.flag("dry-run");
  const uint64_t salt = a.num("salt", rand64() & 0xffffffffffull);
  std::string ctl = a.str("control", "auto");
  const std::string peer_dir = a.str("peer-dir", "");
  const std::string route = a.str("route", "rr");
  if (route != "rr" && route != "user") die("--route: rr or user");
  const double user_gap = a.real("user-gap", 0);
  a.check_all_used();
  const size_t size = g.chunk_bytes;
  const uint64_t bt = g.block_tokens;
  const uint64_t shared_chunks = w.sys / bt;

  const std::vector<Request> reqs = schedule(w);
  uint64_t need_chunks = 0, max_user = 0;
  for (const auto& r : reqs)
    need_chunks += r.tokens / bt, max_user = std::max<uint64_t>(max_user, r.user);
  Json j;
  j.add("cmd", "mrqa").add("client", client).add("dir", dir).add("label", label);
  // The instances' roots: DIR, then each of --peer-dir's not named before.
  std::vector<std::string> roots{dir};
  for (size_t at = 0; !peer_dir.empty() && at <= peer_dir.size();) {
    const size_t comma = std::min(peer_dir.find(',', at), peer_dir.size());
    const std::string d = peer_dir.substr(at, comma - at);
    if (!d.empty() && std::find(roots.begin(), roots.end(), d) == roots.end()) roots.push_back(d);
    at = comma + 1;
  }
  if (!peer_dir.empty())
    j.add("peer_dir", peer_dir).add("nodes", uint64_t(roots.size())).add("route", route);
  j.add("users", w.users)
      .add("rounds", w.rounds)
      .add("qps", w.qps, 2)
      .add("time_virtual_s", w.time, 0);
  j.add("system_prompt", w.sys).add("context_tokens", w.ctx).add("answer", w.answer);
  add_geometry(j, g);
  j.add("requests", static_cast<uint64_t>(reqs.size())).add("sessions", max_user);
  j.add("chunks_needed", need_chunks);
  if (dry) {
    // Upper bound of the I/O: every chunk of every prompt moved once.
    j.add("max_bytes", need_chunks * size).add("dry_run", true);
    std::printf("%s\n", j.str().c_str());
    return 0;
  }

  // The chunk of (user, index) in prefix order, named as the client names it.
  const bool is_vllm = client == "vllm", is_nixl = client == "nixl-gds";
  bool direct = false;
  // The same relative paths under each instance's root.
  std::vector<std::string> store_dirs;
  for (const std::string& root : roots) {
    if (is_vllm) {  // <root>/<model>_<12 hex>_r0/...
      const std::string base_dir = vllm_base_dir(root, "Qwen/Qwen3-8B", salt);
      store_dirs.push_back(base_dir + "_r0");
      if (root == dir) direct = vllm_probe_o_direct(base_dir);
    } else {
      store_dirs.push_back(join(root, is_nixl ? "nixl_gds" : "lmcache_fs"));
      mkdir_p(store_dirs.back());
      direct = is_nixl;
    }
  }
  if (direct && size % kPage) die("O_DIRECT needs a chunk size that is a multiple of 4096");
  // The instance of a user's round (--route).
  const bool by_user = route == "user";
  auto chunk_path = [&](uint32_t user, uint64_t i, uint32_t round = 0) {
    const std::string h = hex64(splitmix64(salt ^ (i < shared_chunks ? 0 : user)), i);
    const std::string& sd = store_dirs[(by_user ? user : round) % store_dirs.size()];
    if (is_vllm) return vllm_block_path(sd, h);
    if (is_nixl) return clients::nixl_name(sd, "Qwen/Qwen3-8B", 0, h);
    return clients::lmcache_fs_name(sd, "Qwen3-8B", g.tp, 0, h);
  };
  const uint64_t file_size = is_nixl || is_vllm ? size : clients::lmcache_fs_file_size(size, false);
  const std::vector<clients::Extent> ex = clients::extents_of(size, clients::scaled_extent(g));
  std::atomic<uint64_t> ooo{0};  // nixl-gds transfers whose extents completed out of order
  auto present = [&](const std::string& p) {
    return is_vllm ? ::access(p.c_str(), F_OK) == 0 : clients::stat_sized(p, file_size) == 0;
  };
  auto load = [&](const std::string& p, char* b) {
    if (is_vllm) return vllm_load(p, b, size, direct);
    if (!is_nixl) return clients::lmcache_fs_load(p, b, size, false);
    clients::ExtentIo io(false);
    if (clients::nixl_load(p, b, ex, io)) ++ooo;
  };
  // The LMCache clients skip a put of a key they already hold or are putting
  // (the MP adapter's dict keeps it, the FSConnector's put_tasks until done);
  // without that, two FSConnector puts of one key would share its tmp file.
  std::mutex keys_mu;
  std::unordered_set<std::string> keys;
  auto store = [&](const std::string& p, char* b) {
    if (is_vllm) return vllm_store(p, b, size, direct);
    {
      std::lock_guard l(keys_mu);
      if (!keys.insert(p).second) return false;
    }
    bool stored = true;
    if (is_nixl) {
      clients::ExtentIo io(false);
      if (clients::nixl_store(p, b, ex, io)) ++ooo;
    } else {
      stored = clients::lmcache_fs_store(p, b, size, false);
      std::lock_guard l(keys_mu);
      keys.erase(p);
    }
    return stored;
  };
  if (ctl == "auto") ctl = find_kvfs_control(dir);
  const bool is_kvfs = !ctl.empty();
  std::vector<std::string> more_ctls;  // the other instances' kvfs
  for (size_t i = 1; is_kvfs && i < roots.size(); ++i)
    if (std::string c = find_kvfs_control(roots[i]); !c.empty()) more_ctls.push_back(c);
  // One node's stats, or with several the sum of their numbers (nested
  // objects added field by field; the per-peer lists are left out).
  auto stats = [&]() -> std::optional<nlohmann::json> {
    if (!is_kvfs) return std::nullopt;
    auto s1 = kvfs_control(ctl, "{\"cmd\":\"stats\"}");
    if (!s1) return s1;
    std::function<void(nlohmann::json&, const nlohmann::json&)> add = [&](nlohmann::json& x,
                                                                          const nlohmann::json& y) {
      for (auto it = y.begin(); it != y.end(); ++it) {
        if (!x.contains(it.key())) continue;
        nlohmann::json& v = x[it.key()];
        if (v.is_object() && it->is_object())
          add(v, *it);
        else if (v.is_number() && it->is_number())
          v = v.get<double>() + it->get<double>();
      }
    };
    for (const std::string& c : more_ctls)
      if (auto s2 = kvfs_control(c, "{\"cmd\":\"stats\"}")) add(*s1, *s2);
    return s1;
  };
  TreeCount dir0, back0;
  count_tree(dir, &dir0);
  if (!backing.empty()) count_tree(backing, &back0);

  AlignedBuf base(size);
  fill_base(base.p, size);
  Pool readers(rt, size, nullptr), writers(wt, size, base.p);
  std::mutex mu;
  std::condition_variable cv;
  size_t next = 0;
  std::vector<bool> busy(max_user + 1, false);
  std::vector<double> ready(max_user + 1, 0);  // now_s() when the user may go again
  std::atomic<uint64_t> lookups{0}, hits{0};
  std::vector<double> req_ms;
  const auto st0 = stats();

  auto worker = [&] {
    for (;;) {
      size_t r;
      {
        std::unique_lock l(mu);
        // A user's gap holds the queue, as the schedule's order is kept.
        auto go = [&] {
          return next >= reqs.size() ||
                 (!busy[reqs[next].user] && now_s() >= ready[reqs[next].user]);
        };
        while (!go()) {
          if (next < reqs.size() && !busy[reqs[next].user])
            cv.wait_for(l, std::chrono::duration<double>(ready[reqs[next].user] - now_s()));
          else
            cv.wait(l);
        }
        if (next >= reqs.size()) return;
        r = next++;
        busy[reqs[r].user] = true;
      }
      cv.notify_all();
      const Request& q = reqs[r];
      const double t0 = now_s();
      const uint64_t n = q.tokens / bt;
      uint64_t k = 0;  // prefix hits
      for (; k < n; ++k) {
        ++lookups;
        if (!present(chunk_path(q.user, k, q.round))) break;
      }
      hits += k;
      std::vector<Pool::Task> loads, stores;
      for (uint64_t i = 0; i < k; ++i)
        loads.push_back([&, path = chunk_path(q.user, i, q.round)](char* b, Phase& p) {
          std::memset(b, 0xa5, kPage);
          const double s0 = now_s();
          load(path, b);
          const double s1 = now_s();
          p.lat_ms.push_back((s1 - s0) * 1e3);
          ++p.ops, p.bytes += size;
          check_content(b, base.p, size, path);
          p.verify_s += now_s() - s1;
        });
      readers.run(std::move(loads));
      for (uint64_t i = k; i < n; ++i)
        stores.push_back([&, path = chunk_path(q.user, i, q.round)](char* b, Phase& p) {
          apply_stamps(b, size, name_seed(path));
          const double s0 = now_s();
          if (!store(path, b)) return void(++p.skipped);
          p.lat_ms.push_back((now_s() - s0) * 1e3);
          ++p.ops, p.bytes += size;
        });
      writers.run(std::move(stores));
      {
        std::lock_guard l(mu);
        busy[q.user] = false;
        ready[q.user] = now_s() + user_gap;
        req_ms.push_back((now_s() - t0) * 1e3);
      }
      cv.notify_all();
    }
  };
  const double t0 = now_s();
  {
    std::vector<std::thread> ths;
    for (unsigned i = 0; i < conc; ++i) ths.emplace_back(worker);
    for (auto& t : ths) t.join();
  }
  const double io_s = now_s() - t0;
  const auto st1 = stats();
  double flush_s = 0;
  if (flush) {  // untimed: on kvfs, the backing dir then holds everything
    const double f0 = now_s();
    for (const std::string& sd : store_dirs) fsync_dir(sd);
    flush_s = now_s() - f0;
  }
  const auto st2 = stats();
  const Phase ld = readers.stats(), sto = writers.stats();
  TreeCount dir1, back1;
  count_tree(dir, &dir1);
  if (!backing.empty()) count_tree(backing, &back1);

  j.add("concurrency", conc)
      .add("user_gap_s", user_gap, 3)
      .add("write_threads", wt)
      .add("read_threads", rt)
      .add("o_direct", direct);
  if (is_nixl)
    j.add("extents", static_cast<uint64_t>(ex.size()))
        .add("extent_bytes", ex.front().len)
        .add("out_of_order_extents", ooo.load());
  j.add("io_s", io_s).add("gbps", gbps(ld.bytes + sto.bytes, io_s));
  j.add("chunk_ops_s", io_s > 0 ? (ld.ops + sto.ops) / io_s : 0, 1);
  j.add("store_p50_ms", percentile(sto.lat_ms, 50)).add("store_p99_ms", percentile(sto.lat_ms, 99));
  j.add("load_p50_ms", percentile(ld.lat_ms, 50)).add("load_p99_ms", percentile(ld.lat_ms, 99));
  j.add("request_p50_ms", percentile(req_ms, 50)).add("request_p99_ms", percentile(req_ms, 99));
  j.add("lookups", lookups.load()).add("hits", hits.load());
  j.add("hit_ratio", need_chunks ? double(hits.load()) / need_chunks : 0, 4);
  j.add("lookup_hit_ratio", lookups.load() ? double(hits.load()) / lookups.load() : 0, 4);
  j.add("loads", ld.ops).add("stores", sto.ops).add("stores_skipped", sto.skipped);
  j.add("bytes_read", ld.bytes).add("bytes_written", sto.bytes).add("verified_bytes", ld.bytes);
  j.add("verify_cpu_s", ld.verify_s).add("flush_s", flush_s);
  j.add("files_created", dir1.files - std::min(dir1.files, dir0.files));
  j.add("dirs_created", dir1.dirs - std::min(dir1.dirs, dir0.dirs));
  j.add("is_kvfs", is_kvfs);
  // On a shared machine the other load explains much of the spread between runs.
  if (FILE* la = std::fopen("/proc/loadavg", "r")) {
    double l1 = 0;
    if (std::fscanf(la, "%lf", &l1) == 1) j.add("loadavg_1m_end", l1, 2);
    std::fclose(la);
  }
  if (!backing.empty())
    j.add("backing_files_created", back1.files - std::min(back1.files, back0.files))
        .add("backing_dirs_created", back1.dirs - std::min(back1.dirs, back0.dirs))
        .add("backing_files_total", back1.files)
        .add("backing_dirs_total", back1.dirs);
  if (is_kvfs && st0 && st1 && st2) {
    add_kvfs_delta(j, *st0, *st1, "kvfs_hits_ram", "hits.ram");
    add_kvfs_delta(j, *st0, *st1, "kvfs_hits_backing", "hits.backing");
    add_kvfs_delta(j, *st0, *st1, "kvfs_backing_read_bytes", "backing.read_bytes");
    add_kvfs_delta(j, *st0, *st1, "kvfs_backing_written_bytes", "backing.written_bytes");
    add_kvfs_delta(j, *st0, *st2, "kvfs_backing_written_bytes_after_flush",
                   "backing.written_bytes");
    add_kvfs_delta(j, *st0, *st1, "kvfs_misses", "misses");
    add_kvfs_delta(j, *st0, *st1, "kvfs_peer_file_hits", "cache.peer_file_hits");
    add_kvfs_delta(j, *st0, *st1, "kvfs_peer_read_bytes", "peers.read_bytes");
    add_kvfs_delta(j, *st0, *st1, "kvfs_ram_evicted_blocks", "ram.evicted_blocks");
    add_kvfs_delta(j, *st0, *st1, "kvfs_backpressure_waits", "ram.backpressure_waits");
    add_kvfs_delta(j, *st0, *st1, "kvfs_prefetch_read_bytes", "prefetch.read_bytes");
    add_kvfs_delta(j, *st0, *st1, "kvfs_window_read_bytes", "prefetch.window_read_bytes");
    add_kvfs_delta(j, *st0, *st1, "kvfs_window_hit_bytes", "prefetch.window_hit_bytes");
    j.add("kvfs_backing_segments", static_cast<uint64_t>(jnum(*st2, "backing.segments")));
    j.add("kvfs_ram_used_bytes", static_cast<uint64_t>(jnum(*st1, "ram.used_bytes")));
    j.add("kvfs_files", static_cast<uint64_t>(jnum(*st2, "files")));
  }
  std::printf("%s\n", j.str().c_str());
  return 0;
}

}  // namespace kvfs::bench
