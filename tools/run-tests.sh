#!/usr/bin/env bash
# Builds kvfs and runs every test (unit tests and real-FUSE mount tests).
# Needs root (or a user allowed to mount FUSE) and /dev/fuse.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j2 "$@"
