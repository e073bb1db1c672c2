// SPDX-License-Identifier: Apache-2.0
// kvfs-bench visibility: how long a file closed on one instance takes to be
// readable on another, the way vLLM finds it: the reader polls access(F_OK)
// on the name (vLLM checks every scheduler step) from before the write, then
// reads the whole file and checks it.
//
//   kvfs-bench visibility DIR --peer-dir DIR2 [--files 40] [--size 4M]
//       [--poll-ms 2] [--timeout 30] [--label NAME]
//
// DIR and DIR2: two kvfs nodes' mounts over one backing dir, or one plain
// shared dir (then DIR2 = DIR: the bound of what a dir shared by clients
// gives). Files are written one at a time, each a new name, vLLM's store
// pattern (nested dirs, tmp file, rename).
#include "bench/bench_util.h"

namespace kvfs::bench {

int cmd_visibility(const std::string& dir, Args& a) {
  const std::string peer = a.str("peer-dir", "");
  const uint64_t files = std::max<uint64_t>(1, a.num("files", 40));
  const uint64_t size = a.num("size", 4ull << 20);
  const double poll_s = a.real("poll-ms", 2) / 1e3;
  const double timeout = a.real("timeout", 30);
  const std::string label = a.str("label", "");
  a.check_all_used();
  if (peer.empty()) die("--peer-dir: the other instance's dir");
  const uint64_t salt = rand64();
  const std::string src = join(dir, "visibility_" + hex64(salt, 0).substr(0, 12));
  const std::string dst = join(peer, "visibility_" + hex64(salt, 0).substr(0, 12));
  AlignedBuf base(size), buf(size);
  fill_base(base.p, size);
  std::vector<double> lat_ms;
  uint64_t timeouts = 0;
  for (uint64_t i = 0; i < files; ++i) {
    const std::string h = hex64(splitmix64(salt), i);
    const std::string w = vllm_block_path(src, h), r = vllm_block_path(dst, h);
    if (::access(r.c_str(), F_OK) == 0) die("%s exists before it was written", r.c_str());
    std::memcpy(buf.p, base.p, size);
    apply_stamps(buf.p, size, name_seed(w));
    vllm_store(w, buf.p, size, false);
    const double t0 = now_s();
    bool seen = false;
    while (now_s() - t0 < timeout) {
      if (::access(r.c_str(), F_OK) == 0) {
        vllm_load(r, buf.p, size, false);
        check_content(buf.p, base.p, size, r);  // same file name: the writer's bytes
        seen = true;
        break;
      }
      ::usleep(static_cast<useconds_t>(poll_s * 1e6));
    }
    if (!seen) {
      ++timeouts;
      continue;
    }
    lat_ms.push_back((now_s() - t0) * 1e3);
  }
  Json j;
  j.add("cmd", "visibility").add("dir", dir).add("peer_dir", peer).add("label", label);
  j.add("files", files).add("size", size).add("poll_ms", poll_s * 1e3, 1);
  j.add("visible", static_cast<uint64_t>(lat_ms.size())).add("timeouts", timeouts);
  j.add("p50_ms", percentile(lat_ms, 50)).add("p99_ms", percentile(lat_ms, 99));
  j.add("max_ms", lat_ms.empty() ? 0.0 : *std::max_element(lat_ms.begin(), lat_ms.end()));
  std::printf("%s\n", j.str().c_str());
  return timeouts ? 3 : 0;
}

}  // namespace kvfs::bench
