#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the offloaders whose own code the interop tests (tests/clients/)
# run against a kvfs mount: vLLM, LMCache, NIXL and pytest, pinned to the
# exact versions of tests/clients/requirements.lock, into a virtual
# environment of their own (never the system Python):
#
#   tools/install-clients.sh [VENV]
#
# VENV defaults to $KVFS_CLIENTS_VENV, else ~/.cache/kvfs/clients. About
# 4.2 GB is downloaded from PyPI (torch 2.14 with its CUDA 13 libraries, which
# run on the CPU too, vllm, lmcache, nixl) and 11 GB installed; 3.6 minutes on
# a fresh 2-CPU machine. A venv already holding this lock file is kept as it
# is (a stamp file records the lock's hash), so a second run takes a second.
set -euo pipefail
cd "$(dirname "$0")/.."
LOCK=$PWD/tests/clients/requirements.lock
VENV=${1:-${KVFS_CLIENTS_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/kvfs/clients}}
say() { echo "install-clients: $*"; }
t0=$(date +%s)

want=$(sha256sum "$LOCK" | cut -d' ' -f1)
if [[ -x $VENV/bin/python && -f $VENV/.kvfs-lock && $(cat "$VENV/.kvfs-lock") == "$want" ]]; then
  say "$VENV is up to date"
  exit 0
fi

# The wheels are built for CPython 3.11 (Debian 12's python3).
PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
  if [[ -x /usr/bin/python3 ]] && /usr/bin/python3 -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
    PY=/usr/bin/python3
  fi
  if ! "$PY" -c 'import venv, ensurepip' 2>/dev/null; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO=sudo
    say "apt-get install python3-venv"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
      python3 python3-venv >/dev/null
    PY=/usr/bin/python3
  fi
fi

say "venv $VENV ($("$PY" --version))"
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
"$PY" -m venv "$VENV"
# --no-deps: the lock names every package; pip check below proves it whole.
"$VENV/bin/pip" install -q --disable-pip-version-check --no-input --no-deps -r "$LOCK"
"$VENV/bin/pip" check --disable-pip-version-check
"$VENV/bin/python" - <<'EOF'
import importlib.metadata as md
import torch, vllm, lmcache.lmcache_fs, vllm.fs_io_C  # noqa: F401  the compiled parts load
from nixl._api import nixl_agent  # noqa: F401
print("install-clients:", ", ".join(f"{p} {md.version(p)}" for p in
      ("vllm", "torch", "lmcache", "nixl", "nixl-cu13", "pytest")))
EOF
echo "$want" >"$VENV/.kvfs-lock"
say "done in $(($(date +%s) - t0)) s ($(du -sh "$VENV" | cut -f1))"
