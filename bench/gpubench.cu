// SPDX-License-Identifier: Apache-2.0
// kvfs-gpubench: the CUDA client. KV blocks live in GPU memory; a store copies
// a block device-to-host into a pinned buffer (cudaHostAlloc) and writes it
// with vLLM's fs-tier pattern (tmp O_CREAT|O_EXCL|O_DIRECT, ONE write, close,
// rename); a load reads it back (O_DIRECT, ONE read) into pinned memory and
// copies it host-to-device; a kernel then checks every byte on the GPU.
//
//   kvfs-gpubench DIR [DIR ...] [--blocks 32] [--threads 8] [geometry | --chunk-bytes B]
//
// One JSON line per DIR (e.g. a plain directory and a kvfs mount): end-to-end
// store GB/s (D2H + write) and load GB/s (read + H2D), p50/p99 per block.
// The content is bench/pattern.h's, so kvfs-bench can read the files too.
// Without a CUDA device (or driver) it prints "no CUDA device" and exits 0.
#include <cuda_runtime.h>

#include <memory>

#include "bench/bench_util.h"

namespace kvfs::bench {
namespace {

__device__ __forceinline__ uint64_t d_splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Word w of a file of `seed` (pattern.h): the page stamp at each 4 KiB page
// start, the base stream elsewhere.
__device__ __forceinline__ uint64_t d_word(uint64_t seed, uint64_t w) {
  constexpr uint64_t kWordsPerPage = kPage / 8;
  if (w % kWordsPerPage == 0)
    return d_splitmix64(seed ^ d_splitmix64(w / kWordsPerPage + 0x5851f42d4c957f2dull));
  return d_splitmix64(kBaseSeed + w);
}

__global__ void fill_kernel(uint64_t* data, const uint64_t* seeds, uint64_t words_per_block,
                            uint64_t blocks) {
  const uint64_t total = words_per_block * blocks;
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < total;
       i += uint64_t(gridDim.x) * blockDim.x) {
    const uint64_t b = i / words_per_block;
    data[i] = d_word(seeds[b], i - b * words_per_block);
  }
}

__global__ void verify_kernel(const uint64_t* data, const uint64_t* seeds, uint64_t words_per_block,
                              uint64_t blocks, unsigned long long* bad) {
  const uint64_t total = words_per_block * blocks;
  unsigned long long mine = 0;
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < total;
       i += uint64_t(gridDim.x) * blockDim.x) {
    const uint64_t b = i / words_per_block;
    if (data[i] != d_word(seeds[b], i - b * words_per_block)) ++mine;
  }
  if (mine) atomicAdd(bad, mine);
}

void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) die("%s: %s", what, cudaGetErrorString(e));
}

struct Pinned {
  explicit Pinned(size_t n) {
    ck(cudaHostAlloc(reinterpret_cast<void**>(&p), n, cudaHostAllocDefault), "cudaHostAlloc");
    if (reinterpret_cast<uintptr_t>(p) % kPage) die("pinned buffer not 4 KiB aligned");
    std::memset(p, 0, n);
  }
  ~Pinned() { cudaFreeHost(p); }
  char* p = nullptr;
};

int run_dir(const std::string& dir, const Geometry& g, uint64_t blocks, unsigned threads) {
  const size_t size = g.chunk_bytes;
  if (size % kPage) die("the chunk size must be a multiple of 4096 (O_DIRECT)");
  const uint64_t words = size / 8;
  const uint64_t salt = rand64() & 0xffffffffffull;
  const std::string base_dir = vllm_base_dir(dir, "Qwen/Qwen3-8B", salt);
  const bool direct = vllm_probe_o_direct(base_dir);
  std::vector<std::string> paths(blocks);
  std::vector<uint64_t> seeds(blocks);
  for (uint64_t b = 0; b < blocks; ++b) {
    paths[b] = vllm_block_path(base_dir + "_r0", hex64(salt + b, 21));
    seeds[b] = name_seed(paths[b]);
  }
  uint64_t *d_src = nullptr, *d_dst = nullptr, *d_seeds = nullptr;
  unsigned long long* d_bad = nullptr;
  ck(cudaMalloc(&d_src, blocks * size), "cudaMalloc (source blocks)");
  ck(cudaMalloc(&d_dst, blocks * size), "cudaMalloc (loaded blocks)");
  ck(cudaMalloc(&d_seeds, blocks * 8), "cudaMalloc");
  ck(cudaMalloc(&d_bad, 8), "cudaMalloc");
  ck(cudaMemcpy(d_seeds, seeds.data(), blocks * 8, cudaMemcpyHostToDevice), "cudaMemcpy seeds");
  fill_kernel<<<1024, 256>>>(d_src, d_seeds, words, blocks);
  ck(cudaGetLastError(), "fill kernel");
  ck(cudaMemset(d_dst, 0, blocks * size), "cudaMemset");
  ck(cudaMemset(d_bad, 0, 8), "cudaMemset");
  ck(cudaDeviceSynchronize(), "fill kernel");

  std::vector<std::unique_ptr<Pinned>> pinned;
  std::vector<cudaStream_t> streams(threads);
  for (unsigned t = 0; t < threads; ++t) {
    pinned.push_back(std::make_unique<Pinned>(size));
    ck(cudaStreamCreateWithFlags(&streams[t], cudaStreamNonBlocking), "cudaStreamCreate");
  }
  auto src = reinterpret_cast<char*>(d_src);
  auto dst = reinterpret_cast<char*>(d_dst);
  const Phase store = run_phase(blocks, threads, [&](unsigned t, uint64_t b, Phase& p) {
    const double t0 = now_s();
    ck(cudaMemcpyAsync(pinned[t]->p, src + b * size, size, cudaMemcpyDeviceToHost, streams[t]),
       "D2H");
    ck(cudaStreamSynchronize(streams[t]), "D2H");
    if (!vllm_store(paths[b], pinned[t]->p, size, direct)) die("%s existed", paths[b].c_str());
    p.lat_ms.push_back((now_s() - t0) * 1e3);
    ++p.ops, p.bytes += size;
  });
  fsync_dir(base_dir + "_r0");  // untimed: on kvfs the loads then do not race the flushers
  const Phase load = run_phase(blocks, threads, [&](unsigned t, uint64_t b, Phase& p) {
    const double t0 = now_s();
    vllm_load(paths[b], pinned[t]->p, size, direct);
    ck(cudaMemcpyAsync(dst + b * size, pinned[t]->p, size, cudaMemcpyHostToDevice, streams[t]),
       "H2D");
    ck(cudaStreamSynchronize(streams[t]), "H2D");
    p.lat_ms.push_back((now_s() - t0) * 1e3);
    ++p.ops, p.bytes += size;
  });
  verify_kernel<<<1024, 256>>>(d_dst, d_seeds, words, blocks, d_bad);
  ck(cudaGetLastError(), "verify kernel");
  unsigned long long bad = 0;
  ck(cudaMemcpy(&bad, d_bad, 8, cudaMemcpyDeviceToHost), "verify kernel");
  for (const auto& p : paths) ::unlink(p.c_str());
  for (auto s : streams) cudaStreamDestroy(s);
  cudaFree(d_src), cudaFree(d_dst), cudaFree(d_seeds), cudaFree(d_bad);
  if (bad) die("%s: %llu wrong 8-byte words after the round trip", dir.c_str(), bad);
  Json j;
  j.add("cmd", "gpubench").add("dir", dir);
  add_geometry(j, g);
  j.add("blocks", blocks).add("threads", threads).add("o_direct", direct);
  j.add("store_gbps", store.gbps()).add("load_gbps", load.gbps());
  j.add("gbps", gbps(store.bytes + load.bytes, store.secs + load.secs));
  j.add("store_p50_ms", percentile(store.lat_ms, 50))
      .add("store_p99_ms", percentile(store.lat_ms, 99));
  j.add("load_p50_ms", percentile(load.lat_ms, 50)).add("load_p99_ms", percentile(load.lat_ms, 99));
  j.add("verified_bytes", load.bytes).add("verified_on", "gpu");
  std::printf("%s\n", j.str().c_str());
  return 0;
}

}  // namespace
}  // namespace kvfs::bench

int main(int argc, char** argv) {
  using namespace kvfs::bench;
  std::vector<std::string> dirs;
  int i = 1;
  for (; i < argc && std::strncmp(argv[i], "--", 2) != 0; ++i) dirs.push_back(argv[i]);
  Args a(argc, argv, i, {});
  const Geometry g = parse_geometry(a);
  const uint64_t blocks = std::max<uint64_t>(1, a.num("blocks", 32));
  const unsigned threads = static_cast<unsigned>(std::max<uint64_t>(1, a.num("threads", 8)));
  a.check_all_used();
  if (dirs.empty()) {
    std::fputs(
        "usage: kvfs-gpubench DIR [DIR ...] [--blocks 32] [--threads 8]\n"
        "       [--layers 36 --kv-heads 8 --head-dim 128 --dtype-bytes 2 --block-tokens 256 "
        "--tp 1 | --chunk-bytes B]\n",
        stderr);
    return 1;
  }
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    std::printf("kvfs-gpubench: no CUDA device (%s), nothing measured\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return 0;
  }
  cudaDeviceProp prop;
  ck(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::fprintf(stderr, "kvfs-gpubench: %s, %.1f GiB\n", prop.name,
               prop.totalGlobalMem / double(1ull << 30));
  for (const auto& d : dirs) run_dir(d, g, blocks, threads);
  return 0;
}
