# SPDX-License-Identifier: Apache-2.0
# lib.sh: shell shared by the bench/run_*.sh drivers; sourced, not run:
#   source "$(dirname "$0")/lib.sh"
# The functions use the caller's BACKING, INDEX and KMNT (kvfs's backing dir,
# index_dir and mount point), set once the script has chosen its WORK dir.
# shellcheck shell=bash disable=SC2154

here=$(cd "$(dirname "$0")/.." && pwd)
SCRIPT=$(basename "$0" .sh)
UMOUNT_TIMEOUT=120 # seconds; a script whose daemon has more to flush raises it
MOUNTS=()          # mount points besides KMNT: cleared at start, unmounted at exit
SCRATCH=()         # paths removed at exit

log() { echo "$SCRIPT: $*" >&2; }
die() {
  log "$@"
  exit 1
}

# use_build DIR TARGET...: sets BENCH, NULLFS, NFSEMU, KVFS (KVFS_BIN overrides it)
# and ADMIN (kvfs-admin, the one client of the control file for scripts) from
# DIR, else from build-bench or build, whichever has kvfs-bench; exits unless
# every TARGET (cmake target: kvfs-bench, nullfs, nfsemu, kvfs, kvfs-admin) is built.
use_build() {
  local build=$1 b t
  shift
  if [[ -z $build ]]; then
    for b in build-bench build; do
      [[ -x $here/$b/bench/kvfs-bench ]] && { build=$here/$b; break; }
    done
  fi
  [[ -n $build ]] || die "no build dir with bench/kvfs-bench found"
  build=$(cd "$build" && pwd)
  BENCH=$build/bench/kvfs-bench
  # shellcheck disable=SC2034 # for run_micro.sh
  NULLFS=$build/bench/nullfs
  # shellcheck disable=SC2034 # for mount_emu
  NFSEMU=$build/bench/nfsemu
  KVFS=${KVFS_BIN:-$build/fs/kvfs}
  ADMIN=$build/tools/kvfs-admin
  for t in "$@"; do
    case $t in
      kvfs) b=$KVFS ;;
      kvfs-admin) b=$ADMIN ;;
      *) b=$build/bench/$t ;;
    esac
    [[ -x $b ]] || die "$b is missing (build $*)"
  done
}

need_root() { [[ $(id -u) == 0 ]] || die "must run as root${1:+ ($1)}"; }

# shellcheck disable=SC2015 # no pid (not mounted) is not an error
# The daemon's pid: the first line of the dir's lock (the benches mount without node_id).
kvfs_pid() { [[ -s $BACKING/kvfs.lock ]] && head -n1 "$BACKING/kvfs.lock" | tr -dc 0-9 || true; }

# mount_kvfs RAM_SIZE [OPTIONS]: KVFS_OPTS go last, after the script's own.
mount_kvfs() {
  "$KVFS" "$BACKING" "$KMNT" -o "ram_size=$1,index_dir=$INDEX${2:+,$2}${KVFS_OPTS:+,$KVFS_OPTS}"
}

# Unmounts kvfs and waits for the daemon to flush and exit, so that the next
# mount or the next measurement does not race it (at most UMOUNT_TIMEOUT s).
umount_kvfs() { umount_wait "$KMNT" "$(kvfs_pid)" "$UMOUNT_TIMEOUT"; }

# umount_wait MNT PID SECONDS: unmounts the FUSE mount MNT and waits at most
# SECONDS for its daemon PID (read before the unmount; empty: no wait) to exit.
umount_wait() {
  mountpoint -q "$1" || return 0
  fusermount3 -u "$1" || fusermount3 -u -z "$1" || true
  [[ -n $2 ]] || return 0
  for _ in $(seq $(($3 * 10))); do
    kill -0 "$2" 2>/dev/null || return 0
    sleep 0.1
  done
  log "the daemon of $1 (pid $2) did not exit within $3 s"
}

# wait_settled MAX_SECONDS: waits until the daemon's RSS stops growing (the
# RAM tier is prefaulted in the background after mount), so that measurements
# do not race the prefault.
wait_settled() {
  local pid last=-1 rss same=0
  pid=$(kvfs_pid)
  for _ in $(seq $(($1 * 5))); do
    rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
    if [[ $rss == "$last" ]]; then
      same=$((same + 1))
      ((same >= 3)) && return 0
    else
      same=0
    fi
    last=$rss
    sleep 0.2
  done
}

# mount_fresh RAM_SIZE [OPTIONS]: kvfs on an empty backing dir and index, so
# that no run sees an earlier one's files, and only once the prefault is done.
mount_fresh() {
  umount_kvfs
  rm -rf "$BACKING" "$INDEX" && mkdir -p "$BACKING" "$INDEX"
  mount_kvfs "$@"
  wait_settled 20
}

# mount_emu PRESET SRC MNT [OPTIONS]: nfsemu (an emulated NFS mount, see
# bench/nfsemu.cc) of the local directory SRC on MNT; EMU_OPTS go last. Its
# counters go to MNT.stats.json (emu_stats), its pid to MNT.pid. MNT joins
# MOUNTS, so that cleanup unmounts it after kvfs (whose backing it may hold).
mount_emu() {
  local m
  mkdir -p "$2" "$3"
  "$NFSEMU" "$2" "$3" --preset "$1" \
    -o "stats=$3.stats.json,pidfile=$3.pid${4:+,$4}${EMU_OPTS:+,$EMU_OPTS}"
  for m in "${MOUNTS[@]}"; do [[ $m == "$3" ]] && return 0; done
  MOUNTS+=("$3")
}

# emu_stats MNT: nfsemu's counters now, one JSON line (SIGUSR1 makes it write
# them; the file appears whole, by rename).
emu_stats() {
  rm -f "$1.stats.json"
  kill -USR1 "$(cat "$1.pid")"
  for _ in $(seq 100); do
    [[ -s $1.stats.json ]] && { cat "$1.stats.json"; return 0; }
    sleep 0.05
  done
  die "nfsemu on $1 wrote no stats"
}

# umount_emu MNT: unmounts nfsemu and waits for it to exit (it writes its
# final counters to MNT.stats.json as it goes).
umount_emu() { umount_wait "$1" "$(cat "$1.pid" 2>/dev/null || true)" 30; }

# A run killed half-way leaves its mounts behind; the next one clears them.
unmount_stale() {
  local m
  for m in "$KMNT" "${MOUNTS[@]}"; do
    if mountpoint -q "$m"; then
      log "$m is still mounted (an earlier run?): unmounting"
      umount -l "$m"
    fi
  done
}

cleanup() {
  local rc=$? m
  set +e
  umount_kvfs
  for m in "${MOUNTS[@]}"; do
    mountpoint -q "$m" && umount "$m"
  done
  rm -rf "${SCRATCH[@]}"
  exit $rc
}
# INT and TERM exit so that the EXIT trap unmounts on Ctrl-C and kill too.
trap_cleanup() {
  trap cleanup EXIT
  trap 'exit 130' INT TERM
}

# bench ARGS...: runs kvfs-bench, appends its JSON line to RAW and echoes it.
bench() {
  local out
  out=$("$BENCH" "$@")
  echo "$out" >>"$RAW"
  echo "$out"
}
# jget JSON KEY: a numeric field.
jget() { sed -n "s/.*\"$2\":\([-0-9.e+]*\).*/\1/p" <<<"$1"; }
# verdict VALUE OP TARGET, OP '>=' or '<': the "met" column of a table.
verdict() {
  awk -v v="$1" -v op="$2" -v t="$3" \
    'BEGIN {ok = (op == "<") ? (v + 0 < t + 0) : (v + 0 >= t + 0); print (ok ? "yes" : "**NO**")}'
}
