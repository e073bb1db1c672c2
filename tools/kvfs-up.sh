#!/usr/bin/env bash
# Sets kvfs up on a fresh Debian machine and mounts it:
#   deps -> build -> install -> mount BACKING (default /var/lib/kvfs/backing)
#   at MOUNTPOINT (default /mnt/kvcache). Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
BACKING=${1:-/var/lib/kvfs/backing}
MNT=${2:-/mnt/kvcache}
OPTS=${KVFS_OPTS:-ram_size=4G,allow_other}
tools/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF
cmake --build build -j"$(nproc)"
cmake --install build
mkdir -p "$BACKING" "$MNT"
chmod 0700 "$BACKING"
if mountpoint -q "$MNT"; then
  echo "kvfs-up: $MNT is already mounted" >&2
  exit 1
fi
kvfs "$BACKING" "$MNT" -o "$OPTS"
echo "kvfs mounted at $MNT (backing dir $BACKING). Unmount with: umount $MNT"
df -h "$MNT"
