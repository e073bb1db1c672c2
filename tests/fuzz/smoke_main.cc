// SPDX-License-Identifier: Apache-2.0
// A stand-in for libFuzzer's main(), so that every compiler can run the fuzz
// targets as ordinary ctest tests ("fuzz smoke"): it replays each file of the
// seed corpora, then N inputs made by mutating those seeds (bit flips, byte
// overwrites, truncation, splicing, random bytes) with a fixed-seed PRNG.
// A crash, sanitizer report or abort in the target fails the test.
//
//   fuzz_X_smoke [--runs=N] [--seed=S] [--max-len=L] CORPUS_DIR_OR_FILE...
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void run_one(const std::string& s) {
  // A private copy, so that reads past the end land in ASan's redzone.
  std::vector<uint8_t> buf(s.begin(), s.end());
  LLVMFuzzerTestOneInput(buf.empty() ? nullptr : buf.data(), buf.size());
}

std::string mutate(std::string s, const std::vector<std::string>& seeds, std::mt19937_64& rng,
                   size_t max_len) {
  const int n = 1 + static_cast<int>(rng() % 4);
  for (int k = 0; k < n; ++k) {
    switch (rng() % 7) {
      case 0:  // flip a bit
        if (!s.empty()) s[rng() % s.size()] ^= static_cast<char>(1u << (rng() % 8));
        break;
      case 1:  // overwrite a byte with an interesting value
        if (!s.empty()) {
          static const uint8_t vals[] = {0, 1, 0x7f, 0x80, 0xff, 0xfe, 16, 32, 64};
          s[rng() % s.size()] = static_cast<char>(vals[rng() % sizeof(vals)]);
        }
        break;
      case 2:  // truncate
        if (!s.empty()) s.resize(rng() % s.size());
        break;
      case 3:  // insert random bytes
        if (s.size() < max_len) {
          std::string ins(1 + rng() % 16, '\0');
          for (char& c : ins) c = static_cast<char>(rng());
          s.insert(s.empty() ? 0 : rng() % s.size(), ins);
        }
        break;
      case 4:  // splice with another seed
        if (!seeds.empty()) {
          const std::string& o = seeds[rng() % seeds.size()];
          if (!o.empty()) {
            size_t from = rng() % o.size();
            s = s.substr(0, s.empty() ? 0 : rng() % s.size()) + o.substr(from);
          }
        }
        break;
      case 5:  // overwrite 4 or 8 bytes with a random little-endian integer
        if (s.size() >= 8) {
          uint64_t v = rng() >> (rng() % 64);
          std::memcpy(&s[rng() % (s.size() - 7)], &v, (rng() & 1) ? 8 : 4);
        }
        break;
      case 6:  // duplicate a slice
        if (!s.empty() && s.size() < max_len) {
          size_t a = rng() % s.size(), len = 1 + rng() % std::min<size_t>(64, s.size() - a);
          s.insert(a, s.substr(a, len));
        }
        break;
    }
  }
  if (s.size() > max_len) s.resize(max_len);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  long runs = 1000;
  uint64_t seed = 1;
  size_t max_len = 4096;
  std::vector<std::filesystem::path> inputs;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--runs=", 0) == 0)
      runs = std::atol(a.c_str() + 7);
    else if (a.rfind("--seed=", 0) == 0)
      seed = std::strtoull(a.c_str() + 7, nullptr, 10);
    else if (a.rfind("--max-len=", 0) == 0)
      max_len = std::strtoull(a.c_str() + 10, nullptr, 10);
    else
      inputs.emplace_back(a);
  }
  std::vector<std::string> seeds;
  for (const auto& p : inputs) {
    if (std::filesystem::is_directory(p)) {
      std::vector<std::filesystem::path> files;
      for (const auto& e : std::filesystem::directory_iterator(p))
        if (e.is_regular_file()) files.push_back(e.path());
      std::sort(files.begin(), files.end());
      for (const auto& f : files) seeds.push_back(slurp(f));
    } else if (std::filesystem::is_regular_file(p)) {
      seeds.push_back(slurp(p));
    } else {
      std::fprintf(stderr, "no such corpus: %s\n", p.c_str());
      return 2;
    }
  }
  for (const std::string& s : seeds) run_one(s);
  std::printf("replayed %zu seed inputs\n", seeds.size());
  std::fflush(stdout);
  std::mt19937_64 rng(seed);
  for (long i = 0; i < runs; ++i) {
    std::string s;
    if (seeds.empty() || rng() % 8 == 0) {
      s.resize(rng() % (max_len + 1));
      for (char& c : s) c = static_cast<char>(rng());
    } else {
      s = mutate(seeds[rng() % seeds.size()], seeds, rng, max_len);
    }
    run_one(s);
  }
  std::printf("ran %ld generated inputs (seed %llu)\n", runs,
              static_cast<unsigned long long>(seed));
  return 0;
}
