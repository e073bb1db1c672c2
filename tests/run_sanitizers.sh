#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds kvfs with sanitizers in its own build directory and runs the tests
# under them: the unit tests, the fuzz smoke tests and the real-FUSE mount
# tests, whose kvfs daemon is built with the same sanitizers.
#
#   tests/run_sanitizers.sh [asan|tsan] [extra ctest arguments...]
#
#   asan (default): build-asan, -fsanitize=address,undefined (-O1, line
#                   tables only), every test.
#   tsan:           build-tsan, -fsanitize=thread, the concurrency tests
#                   (the unit tests of the parts that run threads or are
#                   shared by them, mount_races_test, mount_stall_test,
#                   mount_prefetch_test and the nodes' mount tests:
#                   mount_nodes_test, mount_peers_test and
#                   mount_peers_faults_test;
#                   the rest of the mount tests run one client at a time
#                   and would add most of an hour under TSan; the
#                   sixteen-node mount_fleet_test runs the same code as the
#                   nodes' tests, in sixteen TSan daemons' worth of memory).
#
# A daemonized kvfs logs to syslog and its stderr goes nowhere, so the
# sanitizers write their reports to files (log_path) under
# /tmp/kvfs-<mode>/; the script fails if any report file appears, whatever
# ctest said, and prints them. Environment: JOBS (build parallelism,
# default 2), CC/CXX (compiler), KVFS_SAN_DIR (report directory),
# KVFS_FAULT_TESTS=ON (also the libfiu fault tests, tests/faults/).
#
# Left out under ASan: the two RSS-bound checks of mount_recovery_test
# (ASan's shadow memory and quarantine inflate the daemon's RSS by design).
set -uo pipefail
cd "$(dirname "$0")/.."

mode=${1:-asan}
[[ $# -gt 0 ]] && shift
jobs=${JOBS:-2}

case "$mode" in
  asan)
    build=build-asan
    sanitize="address,undefined"
    targets=(kvfs kvfs-admin no_uring_exec status_config_test record_test namespace_load_test
             ram_tier_test block_store_test evictor_test index_test recovery_test
             backing_io_test fuzz_record_smoke fuzz_ops_smoke)
    ctest_filter=()
    # -O1 with line tables only: ASan+UBSan at -O2 -g compiles this tree
    # twice as slowly (33 of CI's 80 minutes on a slow machine), and a
    # report still names file and line.
    opt_flags="-O1 -g1 -DNDEBUG"
    ;;
  tsan)
    build=build-tsan
    sanitize="thread"
    targets=(kvfs block_store_test evictor_test evictor_parts_test recovery_test backing_io_test space_budget_test
      flusher_test flush_pacer_test namespace_test file_data_test prefetcher_test segment_windows_test mount_races_test
      mount_stall_test mount_prefetch_test mount_nodes_test segment_store_test peer_files_test peer_imports_test peer_log_test head_publisher_test mount_peers_test
      mount_peers_faults_test)
    opt_flags="-O2 -g -DNDEBUG"
    ctest_filter=(-R "^(StoreTest|EvictorTest|EvictorPartsTest|RecoveryTest|BackingIo|SpaceBudgetTest|FlusherTest|FlushPacer|NamespaceTest|FileDataTest|PrefetcherTest|SegmentWindowsTest|SegmentStoreTest|PeerFilesTest|PeerLogTest|HeadPublisherTest)\.|^mount_(races|stall|prefetch|nodes|peers|peers_faults)_test$")
    ;;
  *)
    echo "usage: $0 [asan|tsan] [ctest args...]" >&2
    exit 2
    ;;
esac

logdir=${KVFS_SAN_DIR:-/tmp/kvfs-$mode}
rm -rf "$logdir"
mkdir -p "$logdir"

mkdir -p "$build"
echo "== configuring $build (-fsanitize=$sanitize)"
faults=${KVFS_FAULT_TESTS:-OFF}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVFS_SANITIZE="$sanitize" -DKVFS_CHECKS=ON \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$opt_flags" -DCMAKE_C_FLAGS_RELWITHDEBINFO="$opt_flags" \
  -DKVFS_FAULT_TESTS="$faults" \
  >"$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 1; }

if [[ $mode == asan ]]; then
  # Every test binary the ctest run will start: the unit tests as
  # tests/CMakeLists.txt lists them (an unbuilt one would fail as NOT_BUILT),
  # the mount tests globbed.
  while read -r t; do
    targets+=("$t")
  done < <(sed -n '/^set(KVFS_UNIT_TESTS/,/^)/s/^  \([a-z_]*\)$/\1/p' tests/CMakeLists.txt)
  for f in tests/mount_*_test.cc tests/daemon_*_test.cc; do
    [[ -e $f ]] && targets+=("$(basename "${f%.cc}")")
  done
  [[ $faults == ON ]] && targets+=(mount_faults_test)
  export GTEST_FILTER="-Recovery.RamBackpressureBoundsRss:Recovery.FileLargerThanRam"
  # The flat-directory client test makes 300,000 names: a sixth of them
  # checks the same paths at ASan's speed.
  export KVFS_FLAT_NAMES=${KVFS_FLAT_NAMES:-50000}
fi
# Only the targets this checkout has (others may be added or removed).
known=$(cmake --build "$build" --target help 2>/dev/null | sed -n 's/^\.\.\. \([^ ]*\).*/\1/p')
present=()
for t in "${targets[@]}"; do
  grep -qx -- "$t" <<<"$known" && present+=("$t")
done
targets=("${present[@]}")
echo "== building ${targets[*]}"
cmake --build "$build" -j"$jobs" --target "${targets[@]}" || exit 1

# Reports go to files: <logdir>/asan.<pid>, ubsan.<pid>, tsan.<pid>.
# (The libfiu fault tests skip themselves under ASan: libfiu's preload
# replaces malloc.)
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:fast_unwind_on_malloc=0:log_path=$logdir/asan:detect_stack_use_after_return=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$logdir/ubsan"
# die_after_fork=0: mount_races_test forks two "instances" that start threads.
export TSAN_OPTIONS="halt_on_error=0:second_deadlock_stack=1:history_size=4:die_after_fork=0:log_path=$logdir/tsan:suppressions=$PWD/tests/tsan_suppressions.txt"
# Sanitized daemons are slower: give the mount tests' watchdog more room.
export KVFS_TEST_TIMEOUT=${KVFS_TEST_TIMEOUT:-1500}

echo "== running tests under $mode (reports: $logdir)"
ctest --test-dir "$build" --output-on-failure --timeout 1800 "${ctest_filter[@]}" "$@"
ctest_rc=$?

reports=$(find "$logdir" -type f -size +0 | sort)
if [[ -n $reports ]]; then
  echo
  echo "== sanitizer reports ($(echo "$reports" | wc -l) files):"
  for r in $reports; do
    echo "---- $r"
    cat "$r"
  done
  echo "FAIL: the sanitizers reported errors (ctest exit $ctest_rc)"
  exit 1
fi
if [[ $ctest_rc -ne 0 ]]; then
  echo "FAIL: tests failed under $mode (no sanitizer report)"
  exit "$ctest_rc"
fi
echo "OK: no sanitizer reports, all tests passed under $mode"
