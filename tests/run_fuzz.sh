#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the libFuzzer targets with clang (ASan + UBSan, the core library
# instrumented for coverage) in build-fuzz and runs each for a while.
#
#   tests/run_fuzz.sh [short|long|SECONDS] [fuzz_record|fuzz_ops ...]
#
#   short: 30 s per fuzzer (CI), long: 1 h per fuzzer, or a number of seconds.
#
# Each fuzzer starts from its committed seed corpus (tests/fuzz/corpus_*/)
# and grows a working corpus in build-fuzz/corpus/<fuzzer>/ (kept between
# runs). A crash leaves its input in build-fuzz/artifacts/; replay it with
#   build-fuzz/tests/<fuzzer> build-fuzz/artifacts/<file>
# or, without clang, with the smoke binary of any build:
#   build/tests/<fuzzer>_smoke --runs=0 build-fuzz/artifacts/<file>
# Needs: clang, libclang-rt-14-dev (Debian: the libFuzzer runtime).
# Environment: JOBS (build parallelism, default 2), KVFS_FUZZ_SKIP (see
# tests/fuzz/fuzz_ops.cc: leave out checks of known, unfixed failures).
set -uo pipefail
cd "$(dirname "$0")/.."

mode=${1:-short}
[[ $# -gt 0 ]] && shift
case "$mode" in
  short) secs=30 ;;
  long) secs=3600 ;;
  *[!0-9]* | "")
    echo "usage: $0 [short|long|SECONDS] [fuzzer...]" >&2
    exit 2
    ;;
  *) secs=$mode ;;
esac
fuzzers=("$@")
[[ ${#fuzzers[@]} -eq 0 ]] && fuzzers=(fuzz_record fuzz_ops)

cc=${CC:-clang}
cxx=${CXX:-clang++}
if ! command -v "$cxx" >/dev/null; then
  echo "$cxx not found: apt-get install clang libclang-rt-14-dev" >&2
  exit 2
fi

build=build-fuzz
mkdir -p "$build"
echo "== configuring $build with $cxx"
CC=$cc CXX=$cxx cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVFS_FUZZ=ON \
  -DKVFS_SANITIZE=address,undefined \
  -DCMAKE_C_FLAGS=-fsanitize=fuzzer-no-link -DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link \
  >"$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 1; }
cmake --build "$build" -j"${JOBS:-2}" --target "${fuzzers[@]}" || exit 1

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
mkdir -p "$build/artifacts"
failed=()
for f in "${fuzzers[@]}"; do
  case "$f" in
    fuzz_record) seeds=tests/fuzz/corpus_record; flags=(-max_len=4096) ;;
    # Each input opens a store: slow per run, so short inputs, long timeout.
    fuzz_ops) seeds=tests/fuzz/corpus_ops; flags=(-max_len=600 -len_control=20 -timeout=120) ;;
    *) echo "unknown fuzzer $f" >&2; exit 2 ;;
  esac
  corpus=$build/corpus/$f
  mkdir -p "$corpus"
  echo "== $f for ${secs}s (corpus $corpus, seeds $seeds)"
  "$build/tests/$f" -max_total_time="$secs" -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/$f-" "${flags[@]}" "$corpus" "$seeds" \
    2>&1 | tee "$build/$f.log" | grep -E "^#[0-9]+[[:space:]]+(DONE|INITED)|ERROR|SUMMARY|fuzz_|stat::number_of_executed_units|Test unit written"
  rc=${PIPESTATUS[0]}
  if [[ $rc -ne 0 ]]; then
    failed+=("$f")
    echo "!! $f failed (exit $rc); full log: $build/$f.log"
  fi
done
if [[ ${#failed[@]} -ne 0 ]]; then
  echo "FAIL: ${failed[*]} (inputs in $build/artifacts/)"
  exit 1
fi
echo "OK: ${fuzzers[*]} ran ${secs}s each without a finding"
