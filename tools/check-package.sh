#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the kvfs Debian package and checks it end to end on THIS machine:
# a release build (RelWithDebInfo, stripped by cpack) in build-pkg/, or the
# configured build dir BUILD_DIR names (JOBS=N for make -jN, default 1), cpack -G DEB,
# lintian (any error fails), dpkg -i, the binaries and man pages in place,
# dpkg --purge, nothing left behind. Needs root and a test machine: it
# installs into / (and refuses if a kvfs package is installed already).
#
#   sudo JOBS=4 tools/check-package.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD
BUILD=${BUILD_DIR:-$SRC/build-pkg}
JOBS=${JOBS:-1}
t0=$(date +%s)
say() { echo "check-package: $*"; }
fail() { echo "check-package: FAIL: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || fail "run as root (it installs the package with dpkg -i)"
for t in cmake cpack lintian dpkg-shlibdeps fakeroot; do
  command -v "$t" >/dev/null || fail "$t missing (tools/install-deps.sh)"
done
if [[ $(dpkg-query -W -f='${Status}' kvfs 2>/dev/null || true) == *" installed" ]]; then
  fail "a kvfs package is installed already; not replacing it"
fi

# A build dir that is configured already (tools/run-tests.sh passes its own,
# so the package holds the binaries the tests ran) is only brought up to date:
# reconfiguring it with other flags would rebuild it whole.
if [[ -f $BUILD/CMakeCache.txt ]]; then
  say "build (existing $BUILD, -j$JOBS)"
else
  say "build ($BUILD, -j$JOBS)"
  cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_TESTING=OFF -DKVFS_BENCH=OFF \
    >"$BUILD.cmake.log" 2>&1 || { cat "$BUILD.cmake.log"; fail "cmake"; }
fi
san=$(sed -n 's/^KVFS_SANITIZE:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
[[ -z $san || $san == OFF ]] || fail "$BUILD is a sanitizer build ($san); a package is built without sanitizers"
cmake --build "$BUILD" -j"$JOBS" --target kvfs kvfs-admin kvfs_changelog >"$BUILD.build.log" 2>&1 ||
  { tail -50 "$BUILD.build.log"; fail "build"; }
rm -f "$BUILD"/kvfs_*.deb
(cd "$BUILD" && cpack -G DEB >"$BUILD.cpack.log" 2>&1) || { cat "$BUILD.cpack.log"; fail "cpack"; }
debs=("$BUILD"/kvfs_*.deb)
[ ${#debs[@]} -eq 1 ] && [ -f "${debs[0]}" ] || fail "expected one kvfs_*.deb in $BUILD"
DEB=${debs[0]}
say "package $DEB"
dpkg-deb --field "$DEB"

# What the package holds, before anything is installed (a container's dpkg
# may be set to skip /usr/share/man on install; the package must have them).
contents=$(dpkg-deb --contents "$DEB" | awk '{print $6}')
for f in ./usr/sbin/kvfs ./usr/sbin/kvfs-admin \
  ./usr/share/man/man8/kvfs.8.gz ./usr/share/man/man8/kvfs-admin.8.gz \
  ./usr/share/doc/kvfs/copyright ./usr/share/doc/kvfs/changelog.Debian.gz \
  ./usr/share/doc/kvfs/examples/fstab.example ./usr/share/doc/kvfs/examples/mnt-kvcache.mount \
  ./usr/share/doc/kvfs/examples/kvfs.default ./usr/share/doc/kvfs/README.md \
  ./lib/systemd/system/kvfs.service ./sbin/umount.fuse.kvfs ./sbin/umount.fuse; do
  grep -qx "$f" <<<"$contents" || fail "$f is not in the package"
done
if grep -q '^\./usr/local' <<<"$contents"; then fail "files under /usr/local"; fi
[[ $(dpkg-deb --field "$DEB" Depends) == *libc6* ]] || fail "Depends lacks libc6 (dpkg-shlibdeps?)"

say "lintian"
set +e
lint=$(lintian --fail-on error --display-info "$DEB" 2>&1)
lrc=$?
set -e
echo "${lint:-(no tags)}"
echo "$lint" | awk -F: 'NF>1 {print $1}' | sort | uniq -c | sed 's/^/check-package: lintian tags /'
[ $lrc -eq 0 ] || fail "lintian reports errors"

say "dpkg -i"
dpkg -i "$DEB"
trap 'dpkg --purge kvfs >/dev/null 2>&1 || true' EXIT
# Captured first: with pipefail, `cmd | grep -q` fails whenever grep exits on
# its match before cmd's last write (SIGPIPE), as the multi-write --help can.
out=$(/usr/sbin/kvfs --version) || fail "kvfs --version exits $?"
grep -q "^kvfs " <<<"$out" || fail "kvfs --version"
out=$(/usr/sbin/kvfs-admin version) || fail "kvfs-admin version exits $?"
grep -q "kvfs" <<<"$out" || fail "kvfs-admin version"
out=$(/usr/sbin/kvfs --help) || fail "kvfs --help exits $?"
grep -q "metrics=" <<<"$out" || fail "kvfs --help"
# The files dpkg recorded; man pages only if this dpkg installs them.
listed=$(dpkg -L kvfs)
for f in /usr/sbin/kvfs /usr/sbin/kvfs-admin /usr/share/doc/kvfs/copyright; do
  [ -e "$f" ] || fail "$f not installed"
done
if grep -qx /usr/share/man/man8/kvfs.8.gz <<<"$listed"; then
  [ -s /usr/share/man/man8/kvfs.8.gz ] && [ -s /usr/share/man/man8/kvfs-admin.8.gz ] ||
    fail "man pages not installed"
  out=$(zcat /usr/share/man/man8/kvfs.8.gz) || fail "kvfs.8.gz does not unzip"
  grep -q '^\.TH KVFS 8' <<<"$out" || fail "kvfs.8.gz is not the man page"
  if command -v man >/dev/null; then man -w kvfs >/dev/null || fail "man -w kvfs"; fi
else
  say "note: this dpkg excludes /usr/share/man (path-exclude): man pages checked in the .deb only"
fi

if command -v systemd-analyze >/dev/null; then
  systemd-analyze verify --man=no /lib/systemd/system/kvfs.service || fail "kvfs.service does not verify"
fi

# umount(8) through the installed helper: it returns only once the daemon
# has written every dirty file and exited; the bytes are then in the backing
# dir (read back after a remount).
say "umount waits for the flush (/sbin/umount.fuse.kvfs)"
t=$(mktemp -d /tmp/kvfs-pkgcheck.XXXXXX)
mkdir -p "$t/b" "$t/m"
kopts="index_dir=$t/i,ram_size=1G,ram_prefault=0,log_file=$t/log"
/usr/sbin/kvfs "$t/b" "$t/m" -o "$kopts" || fail "kvfs did not mount"
head -c 384M /dev/urandom >"$t/m/blob" || { umount -l "$t/m"; fail "write to the mount"; }
want=$(sha256sum <"$t/m/blob")
pid=$(head -1 "$t/b/kvfs.lock")
u0=$(date +%s.%N)
umount "$t/m" || fail "umount exits $?"
u1=$(date +%s.%N)
if kill -0 "$pid" 2>/dev/null; then fail "umount returned while the daemon (pid $pid) still ran"; fi
say "umount took $(awk -v a="$u0" -v b="$u1" 'BEGIN {printf "%.2f", b - a}') s and the daemon had exited"
/usr/sbin/kvfs "$t/b" "$t/m" -o "$kopts" || fail "kvfs did not mount again"
got=$(sha256sum <"$t/m/blob")
umount "$t/m"
[[ $got == "$want" ]] || fail "the file read back after umount and mount differs"
rm -rf "$t"

say "dpkg --purge"
dpkg --purge kvfs
trap - EXIT
left=""
while read -r f; do
  [ -f "$f" ] && left+=" $f"
done <<<"$listed"
[ -z "$left" ] || fail "left after purge:$left"
[ ! -e /usr/share/doc/kvfs ] || fail "/usr/share/doc/kvfs left after purge"
dpkg-query -W kvfs >/dev/null 2>&1 && fail "dpkg still knows kvfs"
say "OK in $(($(date +%s) - t0)) s"
