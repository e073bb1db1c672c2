#!/usr/bin/env bash
# Installs everything kvfs needs to build, test and run, from Debian's packages.
# libcpp-httplib-dev: the daemon's /metrics (mount option metrics=).
# prometheus: promtool, which tests/mount_metrics_test.cc runs on the metrics.
# lintian, dpkg-dev, fakeroot: tools/check-package.sh (cpack DEB, dpkg-shlibdeps).
set -euo pipefail
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
if [ -z "${KVFS_SKIP_APT_UPDATE:-}" ]; then $SUDO apt-get update -qq; fi
$SUDO apt-get install -y -qq --no-install-recommends \
  build-essential cmake pkg-config git ca-certificates \
  fuse3 libfuse3-dev librocksdb-dev liburing-dev libxxhash-dev libspdlog-dev libfmt-dev \
  libgtest-dev libcli11-dev nlohmann-json3-dev libcpp-httplib-dev \
  util-linux attr fio stress-ng procps groff-base fiu-utils libfiu-dev bindfs \
  prometheus lintian dpkg-dev fakeroot >/dev/null
