#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds kvfs in build-test/ and runs its tests. Needs root (FUSE mounts,
# the package check installs into /) and /dev/fuse.
#
#   tools/run-tests.sh [--package] [--clients] [--sanitizers] [--all] [CTEST ARGS...]
#
#   (plain)       the unit tests and the real-FUSE mount tests (ctest)
#   --package     the Debian package made from build-test/'s binaries:
#                 lintian clean, installs, runs, purges (tools/check-package.sh)
#   --clients     the clients' own code against a mount: installs vLLM,
#                 LMCache and NIXL pinned (tools/install-clients.sh, a venv
#                 under ~/.cache/kvfs), then pytest tests/clients/
#   --sanitizers  the unit and mount tests again under ASan+UBSan
#                 (build-asan/), then the concurrency tests under TSan
#                 (build-tsan/); KVFS_SANITIZERS picks ("asan", "tsan")
#   --all         all of the above (what CI runs)
#
# build-test/ is never installed: the package (tools/kvfs-up.sh) is what a
# host runs, and a test build never shadows it. Each stage prints its time.
set -euo pipefail
cd "$(dirname "$0")/.."
package=0 clients=0 sanitizers=0
ctest_args=()
for a in "$@"; do
  case "$a" in
    --package) package=1 ;;
    --clients) clients=1 ;;
    --sanitizers) sanitizers=1 ;;
    --all) package=1 clients=1 sanitizers=1 ;;
    -h | --help) sed -n '3,22p' "$0"; exit 0 ;;
    *) ctest_args+=("$a") ;;
  esac
done
BUILD=${KVFS_TEST_BUILD:-build-test}
t_start=$(date +%s)
stage_t0=$t_start
stages=()
stage_done() {
  local now
  now=$(date +%s)
  stages+=("$(printf '%-22s %5d s' "$1" $((now - stage_t0)))")
  echo "run-tests: stage '$1' took $((now - stage_t0)) s"
  stage_t0=$now
}
summary() {
  echo "run-tests: stage times"
  printf '  %s\n' "${stages[@]}"
  echo "run-tests: total $(($(date +%s) - t_start)) s"
}
trap summary EXIT

tools/install-deps.sh --build --test
stage_done "install-deps"
# --no-tests=error: a run that finds no test fails.
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_TESTING=ON -DKVFS_CHECKS=ON >/dev/null
cmake --build "$BUILD" -j"$(nproc)"
stage_done "build"
ctest --test-dir "$BUILD" --output-on-failure --no-tests=error -j2 "${ctest_args[@]}"
stage_done "unit+mount tests"

if ((package)); then
  BUILD_DIR=$PWD/$BUILD JOBS=$(nproc) tools/check-package.sh
  stage_done "package check"
fi

if ((clients)); then
  tools/install-clients.sh
  stage_done "install clients"
  venv=${KVFS_CLIENTS_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/kvfs/clients}
  KVFS_BIN=$PWD/$BUILD/fs/kvfs KVFS_ADMIN_BIN=$PWD/$BUILD/tools/kvfs-admin \
    "$venv/bin/python" -m pytest -p no:cacheprovider -q -rs tests/clients
  stage_done "client interop tests"
fi

# The same unit and mount tests under AddressSanitizer with
# UndefinedBehaviorSanitizer (the crash loop runs KVFS_SAN_CRASH_ITERS kills
# there, 6 by default), then ThreadSanitizer over the concurrency tests.
if ((sanitizers)); then
  for san in ${KVFS_SANITIZERS-asan tsan}; do
    JOBS=$(nproc) KVFS_CRASH_ITERS=${KVFS_SAN_CRASH_ITERS:-6} tests/run_sanitizers.sh "$san" -j2
    stage_done "sanitizer $san"
  done
fi
