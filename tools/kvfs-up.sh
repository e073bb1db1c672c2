#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Sets kvfs up as a production host has it, from this checkout (as root):
#
#   tools/kvfs-up.sh [BACKING_DIR [MOUNTPOINT]]
#
#   1. Debian's packages to build with (no test tools, no Prometheus server);
#   2. a release build of kvfs and kvfs-admin in build-release/ and the
#      Debian package made from it, installed with dpkg (dpkg -r / --purge
#      kvfs remove it);
#   3. the settings in /etc/default/kvfs (BACKING_DIR, default
#      /var/lib/kvfs/backing; MOUNTPOINT, default /mnt/kvcache; the mount
#      options from KVFS_OPTS, default ram_size=4G,allow_other); without
#      arguments or KVFS_OPTS an existing file is kept;
#   4. mounted and persistent: on a systemd host kvfs.service, enabled and
#      (re)started (Restart=on-failure heals a crash); elsewhere an
#      /etc/fstab line (fuse.kvfs) and mount(8).
#
# Running it again upgrades in place: the new package is installed, then the
# mount is stopped (umount waits until every dirty file is in the backing
# dir) and started again with the new binary.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "kvfs-up: $*"; }
die() { echo "kvfs-up: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "run as root (it installs a package and mounts)"
t0=$(date +%s)
DEFAULTS=/etc/default/kvfs

if [[ $# -eq 0 && -z ${KVFS_OPTS:-} && -f $DEFAULTS ]]; then
  # shellcheck disable=SC1090
  source "$DEFAULTS"
  BACKING=$KVFS_BACKING MNT=$KVFS_MOUNTPOINT OPTS=$KVFS_OPTS
  say "keeping $DEFAULTS"
else
  BACKING=${1:-/var/lib/kvfs/backing}
  MNT=${2:-/mnt/kvcache}
  OPTS=${KVFS_OPTS:-ram_size=4G,allow_other}
fi
[[ $BACKING == /* && $MNT == /* ]] || die "BACKING_DIR and MOUNTPOINT must be absolute paths"

tools/install-deps.sh --build
say "packages installed ($(($(date +%s) - t0)) s)"
cmake -S . -B build-release -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_TESTING=OFF -DKVFS_BENCH=OFF \
  >/dev/null
cmake --build build-release -j"$(nproc)" --target kvfs kvfs-admin kvfs_changelog
rm -f build-release/kvfs_*.deb
(cd build-release && cpack -G DEB >/dev/null)
debs=(build-release/kvfs_*.deb)
[[ -f ${debs[0]} ]] || die "cpack made no package"
say "built ${debs[0]} ($(($(date +%s) - t0)) s)"

# An install by the kvfs-up.sh of old (cmake --install into /usr/local)
# would shadow the package's /usr/sbin/kvfs on root's PATH.
for f in /usr/local/sbin/kvfs /usr/local/sbin/kvfs-admin /usr/local/share/man/man8/kvfs.8 \
  /usr/local/share/man/man8/kvfs-admin.8; do
  [[ -e $f ]] && { say "removing $f (an earlier source install)"; rm -f "$f"; }
done

dpkg -i "${debs[0]}" >/dev/null
say "installed $(dpkg-query -W -f='${Package} ${Version}' kvfs)"

mkdir -p "$BACKING" "$MNT" "$(dirname "$DEFAULTS")"
chmod 0700 "$BACKING"
cat >"$DEFAULTS.new" <<EOF
# Settings of kvfs.service, written by tools/kvfs-up.sh (see kvfs(8) for
# every mount option and /usr/share/doc/kvfs/docs/operations.md).
KVFS_BACKING=$BACKING
KVFS_MOUNTPOINT=$MNT
KVFS_OPTS=$OPTS
EOF
mv "$DEFAULTS.new" "$DEFAULTS"

wait_mounted() {
  for _ in $(seq 1 120); do
    mountpoint -q "$MNT" && stat -f "$MNT" >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  return 1
}

if [[ -d /run/systemd/system ]]; then
  # fstab lines of an earlier setup would mount the same dir twice.
  if grep -qE "^[^#]*[[:space:]]${MNT}[[:space:]]+fuse\.kvfs" /etc/fstab 2>/dev/null; then
    say "an /etc/fstab line mounts $MNT too: kvfs.service now does; comment it out"
  fi
  systemctl daemon-reload
  systemctl enable kvfs.service >/dev/null 2>&1
  systemctl restart kvfs.service
  wait_mounted || { systemctl status --no-pager kvfs.service || true; die "kvfs.service did not mount $MNT"; }
  say "kvfs.service enabled and running"
else
  # No systemd: the mount is an /etc/fstab line; mount -a (or a reboot's
  # init) mounts it, and a mount over a crashed kvfs clears the dead mount.
  line="$BACKING $MNT fuse.kvfs $OPTS,nofail 0 0"
  touch /etc/fstab
  grep -vE "^[^#]*[[:space:]]${MNT}[[:space:]]+fuse\.kvfs[[:space:]]" /etc/fstab >/etc/fstab.kvfs-new || true
  echo "$line" >>/etc/fstab.kvfs-new
  mv /etc/fstab.kvfs-new /etc/fstab
  say "/etc/fstab: $line"
  if mountpoint -q "$MNT"; then
    say "unmounting the running kvfs (waits for its flush)"
    umount "$MNT"
  fi
  mount "$MNT"
  wait_mounted || die "mount $MNT did not come up"
fi
say "kvfs mounted at $MNT over $BACKING in $(($(date +%s) - t0)) s"
df -h "$MNT"
