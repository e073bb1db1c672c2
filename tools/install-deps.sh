#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what kvfs needs from Debian's packages, by purpose:
#
#   tools/install-deps.sh [--runtime] [--build] [--test]   (default: --build --test)
#
#   --runtime  what the installed daemon needs: fuse3 (fusermount3,
#              mount.fuse3) and util-linux; the libraries come as the
#              package's own dependencies (dpkg-shlibdeps).
#   --build    a compiler, cmake and the -dev packages (libfuse3, RocksDB,
#              liburing, xxHash, spdlog, fmt, CLI11, nlohmann-json,
#              cpp-httplib for the daemon's /metrics), and what makes the
#              Debian package (dpkg-dev, fakeroot).
#   --test     the test tools, never needed on a serving host: GoogleTest,
#              fio, stress-ng, attr, fiu-utils/libfiu (fault injection),
#              bindfs (a backing dir that stalls), prometheus (promtool checks
#              the metrics), lintian (the package check), strace.
#
# KVFS_SKIP_APT_UPDATE=1 skips apt-get update.
set -euo pipefail
runtime=0 build=0 test=0
for a in "$@"; do
  case "$a" in
    --runtime) runtime=1 ;;
    --build) build=1 ;;
    --test) test=1 ;;
    *) echo "usage: $0 [--runtime] [--build] [--test]" >&2; exit 2 ;;
  esac
done
[[ $# -eq 0 ]] && build=1 test=1
pkgs=()
((runtime || build || test)) && pkgs+=(fuse3 util-linux procps ca-certificates)
((build || test)) && pkgs+=(build-essential cmake pkg-config git
  libfuse3-dev librocksdb-dev liburing-dev libxxhash-dev libspdlog-dev libfmt-dev
  libcli11-dev nlohmann-json3-dev libcpp-httplib-dev groff-base dpkg-dev fakeroot)
((test)) && pkgs+=(libgtest-dev attr fio stress-ng fiu-utils libfiu-dev bindfs
  prometheus lintian strace python3 python3-venv)
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
if [ -z "${KVFS_SKIP_APT_UPDATE:-}" ]; then $SUDO apt-get update -qq; fi
$SUDO apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
