#!/usr/bin/env bash
# Builds kvfs and runs every test (unit tests and real-FUSE mount tests).
# Needs root (or a user allowed to mount FUSE) and /dev/fuse.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
# BUILD_TESTING=ON: build/ may have been configured without tests by
# tools/kvfs-up.sh; --no-tests=error: a run that finds no test fails.
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_TESTING=ON
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure --no-tests=error -j2 "$@"
# The Debian package: lintian clean, installs and purges (promtool checks
# the metrics inside the mount tests). KVFS_PACKAGE_CHECK=0 skips it.
if [[ ${KVFS_PACKAGE_CHECK:-1} == 1 ]]; then JOBS=$(nproc) tools/check-package.sh; fi
# The same unit and mount tests again under AddressSanitizer with
# UndefinedBehaviorSanitizer (a second build, build-asan/; the crash loop runs
# KVFS_SAN_CRASH_ITERS kills there, 6 by default), then ThreadSanitizer over
# the store, evictor and races tests (build-tsan/). KVFS_SANITIZERS picks the
# runs: "asan tsan" by default, "none" skips them.
for san in ${KVFS_SANITIZERS-asan tsan}; do
  [[ $san == none ]] && continue
  JOBS=$(nproc) KVFS_CRASH_ITERS=${KVFS_SAN_CRASH_ITERS:-6} tests/run_sanitizers.sh "$san" -j2
done
