// SPDX-License-Identifier: Apache-2.0
// kvfs-core-bench mrqa-tier: the RAM tier's share of the multi-round QA
// loads, without FUSE or a backing dir. The chunks of kvfs-bench mrqa's
// schedule (same users, rounds and prompt lengths; one 512 KiB block per
// 256-token chunk) are read and written through a RamTier of 16 shards, as
// BlockStore does (a lookup; on a miss the block read from the backing dir
// is offered to the tier; a store is a written block), and through two
// references on the same trace: least-recently-used, and Belady's oracle,
// which evicts the block used again furthest in the future (what no policy
// can beat). One JSON line per RAM size: an eighth and a quarter of the
// chunks stored, and 512M.
//
//   kvfs-core-bench mrqa-tier [L] [--shuffle]
//
// --shuffle: the loads of each two consecutive requests in a random order
// (the replay's 32 read threads and 4 requests in flight), not in prefix
// order; the stores of a request after its loads, as in the replay.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "bench/mrqa_schedule.h"
#include "bench/plain_lru.h"
#include "core/ram/ram_tier.h"

namespace kvfs::bench {
namespace {

struct Access {
  uint64_t key;  // (user or 0 for the shared system prompt) << 32 | chunk index
  bool load;
};

std::vector<Access> mrqa_trace(uint64_t ctx, bool shuffle) {
  Workload w;
  w.ctx = ctx;
  w.time = 300;  // run_mrqa.sh's default
  constexpr uint64_t kTokens = 256;
  const uint64_t shared = w.sys / kTokens;
  std::set<uint64_t> stored;
  std::vector<std::vector<Access>> loads, stores;
  for (const Request& r : schedule(w)) {
    auto key = [&](uint64_t i) { return (i < shared ? 0 : uint64_t(r.user)) << 32 | i; };
    const uint64_t n = r.tokens / kTokens;
    uint64_t k = 0;  // the prefix hits: chunks stored earlier
    while (k < n && stored.count(key(k))) ++k;
    loads.emplace_back();
    stores.emplace_back();
    for (uint64_t i = 0; i < k; ++i) loads.back().push_back({key(i), true});
    for (uint64_t i = k; i < n; ++i)
      stored.insert(key(i)), stores.back().push_back({key(i), false});
  }
  std::vector<Access> out;
  std::mt19937_64 rng(5);
  const size_t group = shuffle ? 2 : 1;
  for (size_t j = 0; j < loads.size(); j += group) {
    std::vector<Access> l;
    for (size_t g = j; g < std::min(j + group, loads.size()); ++g)
      l.insert(l.end(), loads[g].begin(), loads[g].end());
    if (shuffle) std::shuffle(l.begin(), l.end(), rng);
    out.insert(out.end(), l.begin(), l.end());
    for (size_t g = j; g < std::min(j + group, loads.size()); ++g)
      out.insert(out.end(), stores[g].begin(), stores[g].end());
  }
  return out;
}

uint64_t replay_tier(const std::vector<Access>& t, uint64_t blocks) {
  constexpr uint64_t kBlock = 512 << 10;
  RamTier tier(blocks * kBlock, 4);
  uint64_t hits = 0;
  for (const Access& a : t) {
    const ExtentKey k{1 + (a.key >> 32), (a.key & 0xffffffff) * kBlock};
    if (!a.load) {
      tier.insert(k, BufferPool::allocate(kBlock));
    } else if (tier.lookup(k)) {
      ++hits;
    } else {
      tier.insert(k, BufferPool::allocate(kBlock), RamTier::Admit::kRead);
    }
  }
  return hits;
}

uint64_t replay_lru(const std::vector<Access>& t, uint64_t blocks) {
  PlainLru lru(blocks);
  uint64_t hits = 0;
  for (const Access& a : t) hits += lru.access(a.key) && a.load;
  return hits;
}

// Belady: keeps the blocks used again soonest (a block never used again
// leaves first); a store may also bypass RAM when every block held is
// wanted sooner.
uint64_t replay_oracle(const std::vector<Access>& t, uint64_t blocks) {
  constexpr uint64_t kNever = UINT64_MAX;
  std::vector<uint64_t> next(t.size());
  std::unordered_map<uint64_t, uint64_t> seen;
  for (size_t i = t.size(); i-- > 0;) {
    auto f = seen.find(t[i].key);
    next[i] = f == seen.end() ? kNever : f->second;
    seen[t[i].key] = i;
  }
  std::map<uint64_t, uint64_t, std::greater<>> by_next;  // next use -> key (unique: positions)
  std::unordered_map<uint64_t, uint64_t> held;           // key -> its next use
  uint64_t hits = 0, never = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    auto f = held.find(t[i].key);
    if (f != held.end()) {
      hits += t[i].load;
      by_next.erase(f->second);
      held.erase(f);
    }
    // Blocks never used again are keyed past the end, one each.
    const uint64_t nx = next[i] == kNever ? t.size() + never++ : next[i];
    held[t[i].key] = nx;
    by_next[nx] = t[i].key;
    if (held.size() > blocks) {
      auto far = by_next.begin();
      held.erase(far->second);
      by_next.erase(far);
    }
  }
  return hits;
}

}  // namespace

int mrqa_tier(int argc, char** argv) {
  uint64_t ctx = 10000;
  bool shuffle = false;
  for (int i = 0; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--shuffle"))
      shuffle = true;
    else
      ctx = std::strtoull(argv[i], nullptr, 10);
  }
  const std::vector<Access> t = mrqa_trace(ctx, shuffle);
  uint64_t loads = 0, stores = 0;
  for (const Access& a : t) (a.load ? loads : stores) += 1;
  for (const auto& [name, blocks] : std::vector<std::pair<std::string, uint64_t>>{
           {"eighth", std::max<uint64_t>(32, stores / 8)},
           {"quarter", std::max<uint64_t>(32, stores / 4)},
           {"512M", 1024}}) {
    std::printf(
        "{\"bench\":\"mrqa-tier\",\"context_tokens\":%lu,\"shuffle\":%s,\"ram\":\"%s\","
        "\"ram_blocks\":%lu,\"chunks_stored\":%lu,\"loads\":%lu,\"kvfs_hit_ratio\":%.3f,"
        "\"lru_hit_ratio\":%.3f,\"oracle_hit_ratio\":%.3f}\n",
        (unsigned long)ctx, shuffle ? "true" : "false", name.c_str(), (unsigned long)blocks,
        (unsigned long)stores, (unsigned long)loads, double(replay_tier(t, blocks)) / loads,
        double(replay_lru(t, blocks)) / loads, double(replay_oracle(t, blocks)) / loads);
  }
  return 0;
}

}  // namespace kvfs::bench
