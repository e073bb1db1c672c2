#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_stall.sh: what a client sees while the backing dir hangs, with the
# default io_timeout (30 s), against the same calls made straight into the
# hung dir. The backing dir is a bindfs passthrough (direct_io) stopped with
# SIGSTOP, the way a hung NFS server behaves; kvfs's backing dir is on it.
# Each call is timed from a separate process; a call into the plain hung dir
# is given STALL_CAP seconds (60) and then reported as "no answer".
# Writes bench/results/stall.{jsonl,md} and prints the table.
#
#   sudo bench/run_stall.sh [BUILD_DIR]
#
# STALL_TIMEOUT (30: kvfs's default io_timeout; give another to see it move),
# STALL_CAP (60), WORK (/var/tmp/kvfs-stall), OUT.
set -euo pipefail

source "$(dirname "$0")/lib.sh"
use_build "${1:-}" kvfs kvfs-admin
need_root "FUSE mounts and SIGSTOP of the passthrough"
command -v bindfs >/dev/null || die "bindfs is not installed (tools/install-deps.sh)"

WORK=${WORK:-/var/tmp/kvfs-stall}
OUT=${OUT:-$here/bench/results}
TIMEOUT=${STALL_TIMEOUT:-30}
CAP=${STALL_CAP:-60}
REAL=$WORK/real
BACKING=$WORK/stalling
KMNT=$WORK/mnt
INDEX=$WORK/index
LOGF=$WORK/kvfs.log
BINDFS_PID=

cleanup() {
  [[ -n $BINDFS_PID ]] && kill -CONT "$BINDFS_PID" 2>/dev/null || true
  fusermount3 -u "$KMNT" 2>/dev/null || true
  fusermount3 -u "$BACKING" 2>/dev/null || true
  [[ -n $BINDFS_PID ]] && kill "$BINDFS_PID" 2>/dev/null || true
}
trap cleanup EXIT
cleanup
rm -rf "$WORK"
mkdir -p "$REAL" "$BACKING" "$KMNT" "$INDEX" "$OUT"

bindfs -f --no-allow-other -o direct_io "$REAL" "$BACKING" &
BINDFS_PID=$!
for _ in $(seq 200); do mountpoint -q "$BACKING" && break; sleep 0.05; done
mountpoint -q "$BACKING" || die "bindfs did not mount"

kopts="index_dir=$INDEX,log_file=$LOGF,ram_size=64M,ram_prefault=0,io_timeout=$TIMEOUT"
"$KVFS" "$BACKING" "$KMNT" -o "$kopts"
mkdir -p "$KMNT/cold" "$REAL/plain"
for i in 0 1; do
  head -c 8M /dev/urandom >"$KMNT/cold/f$i"
  head -c 8M /dev/urandom >"$BACKING/plain/f$i"
done
"$ADMIN" flush --wait "$KMNT" >&2
fusermount3 -u "$KMNT"
for _ in $(seq 600); do pgrep -f "$KVFS $BACKING" >/dev/null || break; sleep 0.1; done
"$KVFS" "$BACKING" "$KMNT" -o "$kopts" # the RAM tier is empty: f0, f1 only in the backing dir
head -c 1M /dev/urandom >"$KMNT/hot"

# timed NAME WHERE CMD...: runs CMD in its own process group, at most CAP s.
results=()
timed() {
  local name=$1 where=$2
  shift 2
  local t0 t1 rc
  t0=$(date +%s.%N)
  set +e
  timeout -s KILL "$CAP" "$@" >/dev/null 2>"$WORK/err"
  rc=$?
  set -e
  t1=$(date +%s.%N)
  local secs err
  secs=$(python3 -c "print(f'{$t1 - $t0:.2f}')")
  err=$(tr '\n' ' ' <"$WORK/err" | sed 's/"/\\"/g' | cut -c1-120)
  [[ $rc -eq 137 ]] && err="no answer after $CAP s (killed)"
  results+=("{\"call\":\"$name\",\"where\":\"$where\",\"seconds\":$secs,\"rc\":$rc,\"error\":\"$err\"}")
  log "$name on $where: ${secs}s rc=$rc $err"
}

kill -STOP "$BINDFS_PID"
log "backing dir stopped"
timed "O_DIRECT read of a cold 8 MiB file" kvfs dd if="$KMNT/cold/f0" of=/dev/null bs=1M iflag=direct
timed "O_DIRECT read of an 8 MiB file" plain dd if="$BACKING/plain/f0" of=/dev/null bs=1M iflag=direct
timed "stat" kvfs stat "$KMNT/cold/f1"
timed "stat" plain stat "$BACKING/plain/f1"
timed "readdir" kvfs ls "$KMNT/cold"
timed "read of a file in RAM" kvfs dd if="$KMNT/hot" of=/dev/null bs=1M iflag=direct
timed "kvfs-admin stats" kvfs sh -c "'$ADMIN' stats --json '$KMNT' | python3 -c \"
import json, sys; j = json.load(sys.stdin); assert j['backing']['stalled'], j['backing']\""
timed "write of a 4 MiB file into RAM" kvfs dd if=/dev/zero of="$KMNT/new" bs=1M count=4
timed "write of a 4 MiB file" plain dd if=/dev/zero of="$BACKING/plain/new" bs=1M count=4
timed "write of 256 MiB (4x the RAM tier)" kvfs dd if=/dev/zero of="$KMNT/big" bs=1M count=256
timed "fsync of a dirty file" kvfs python3 -c "
import os; fd=os.open('$KMNT/new', os.O_WRONLY); os.fsync(fd)"
t0=$(date +%s.%N)
fusermount3 -u "$KMNT"
for _ in $(seq $((CAP * 10))); do grep -q "stopped: the backing dir" "$LOGF" && break; sleep 0.1; done
t1=$(date +%s.%N)
secs=$(python3 -c "print(f'{$t1 - $t0:.2f}')")
lost=$(grep -c "not flushed, lost" "$LOGF" || true)
results+=("{\"call\":\"umount until the daemon gives up\",\"where\":\"kvfs\",\"seconds\":$secs,\"rc\":0,\"error\":\"$lost files named as not flushed\"}")
log "umount: daemon gave up after ${secs}s, $lost files named"
kill -CONT "$BINDFS_PID"

printf '%s\n' "${results[@]}" >"$OUT/stall.jsonl"
{
  echo "# A hung backing dir (bindfs stopped with SIGSTOP), io_timeout=$TIMEOUT s"
  echo
  echo "$(date -u +%F), $(nproc) CPUs; each call timed from its own process; calls into the plain"
  echo "hung dir killed after $CAP s. \`bench/run_stall.sh\`."
  echo
  echo "| call | on | seconds | result |"
  echo "|---|---|---:|---|"
  python3 - "$OUT/stall.jsonl" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    e = r["error"]
    if r["rc"] == 0:
        res = e if "named" in e else "ok"
    elif "Input/output error" in e:
        res = "EIO"
    else:
        res = e or f"exit {r['rc']}"
    print(f"| {r['call']} | {r['where']} | {r['seconds']:.2f} | {res} |")
EOF
} >"$OUT/stall.md"
cat "$OUT/stall.md"
