#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_cpu.sh: what kvfs costs in CPU per GB, so that the cores of a large
# host can be sized: the daemon's own CPU-seconds (user and system, all its
# threads, from /proc/PID/stat) per GB of stores (written and flushed), of
# RAM hits and of cold reads, beside the CPU the client process spends on the
# same bytes through the mount and writing straight to the backing dir.
#
#   sudo bench/run_cpu.sh [BUILD_DIR]        (default: build-bench, then build)
#
# The client is kvfs-bench (write --direct 1: one O_DIRECT write per 36 MiB
# file, vLLM's store; read36: one O_DIRECT read per file, vLLM's load), every
# byte read checked. The backing dir is on local disk: the kernel's work for
# the backing files is in the daemon's system time (on NFS that is the NFS
# client's, also on this host). Environment: WORK (default
# /var/tmp/kvfs-cpu), FILES (default 32), ROUNDS (default 3), KVFS_OPTS.
# Writes bench/results/cpu.{jsonl,md}. About 2 minutes.
set -euo pipefail

source "$(dirname "$0")/lib.sh"
use_build "${1:-}" kvfs-bench kvfs kvfs-admin
need_root "drop_caches"

WORK=${WORK:-/var/tmp/kvfs-cpu}
BACKING=$WORK/backing
INDEX=$WORK/index
PLAIN=$WORK/plain
KMNT=$WORK/kvfs
FILES=${FILES:-32}
ROUNDS=${ROUNDS:-3}
SIZE=37748736 # one 256-token chunk of Qwen3-8B in bf16
RAM=$((FILES * SIZE * 2))
RAW=$WORK/cpu.jsonl
OUT=$here/bench/results

MOUNTS=()
SCRATCH=("$BACKING" "$INDEX" "$PLAIN")
trap_cleanup
mkdir -p "$WORK" "$KMNT" "$OUT"
: >"$RAW"
start=$(date +%s)

# CPU seconds (user system) of a process, all its threads, dead ones included.
proc_cpu() { awk -v t="$(getconf CLK_TCK)" '{printf "%.2f %.2f\n", $14 / t, $15 / t}' "/proc/$1/stat"; }

# client DIR PHASE ARGS...: runs kvfs-bench; prints "user system" CPU seconds.
client() {
  python3 - "$BENCH" "$@" <<'EOF'
import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, text=True)
if r.returncode != 0:
    sys.exit(f"kvfs-bench {' '.join(sys.argv[2:3])} failed ({r.returncode})")
u = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"{u.ru_utime:.2f} {u.ru_stime:.2f}")
EOF
}

stat_of() { "$ADMIN" stats "$KMNT" --json | python3 -c "import json,sys; j=json.load(sys.stdin); print(j$1)"; }

# record SETUP PHASE CLIENT_CPU DAEMON_BEFORE DAEMON_AFTER [MISS_BYTES]
record() {
  local cu cs du0 ds0 du1 ds1
  read -r cu cs <<<"$3"
  read -r du0 ds0 <<<"$4"
  read -r du1 ds1 <<<"${5:-0 0}"
  echo "{\"round\": $r, \"setup\": \"$1\", \"phase\": \"$2\", \"bytes\": $((FILES * SIZE)), \
\"client_user_s\": $cu, \"client_sys_s\": $cs, \"daemon_user_s\": $(awk "BEGIN{print $du1-$du0}"), \
\"daemon_sys_s\": $(awk "BEGIN{print $ds1-$ds0}"), \"miss_bytes\": ${6:-0}}" >>"$RAW"
}

# kvfs_reads PHASE: every file read once through the mount, with the
# daemon's CPU and the bytes that missed the RAM tier.
kvfs_reads() {
  local m0 d0 d1 c
  m0=$(stat_of "['cache']['ram_miss_bytes']")
  d0=$(proc_cpu "$pid")
  c=$(client read36 "$KMNT" --file c --size "$SIZE" --count "$FILES" --iters 1 --warmup 0)
  d1=$(proc_cpu "$pid")
  record kvfs "$1" "$c" "$d0" "$d1" $(($(stat_of "['cache']['ram_miss_bytes']") - m0))
}

for r in $(seq "$ROUNDS"); do
  log "round $r of $ROUNDS"
  mount_fresh "$RAM" "capacity=$((RAM * 4))"
  pid=$(kvfs_pid)
  # Store: written through the mount, then flushed to the backing dir.
  d0=$(proc_cpu "$pid")
  c=$(client write "$KMNT" --file c --size "$SIZE" --count "$FILES" --direct 1)
  "$ADMIN" flush "$KMNT" --wait >/dev/null
  record kvfs store "$c" "$d0" "$(proc_cpu "$pid")"
  # RAM hits: every file is still in the RAM tier.
  kvfs_reads ram_hit
  # Cold reads: a new daemon (empty RAM tier), the page cache dropped.
  umount_kvfs
  sync
  echo 3 >/proc/sys/vm/drop_caches
  mount_kvfs "$RAM" "capacity=$((RAM * 4))"
  wait_settled 20
  pid=$(kvfs_pid)
  kvfs_reads cold_read
  umount_kvfs
  # The same client straight on a directory of the backing dir's filesystem.
  rm -rf "$PLAIN" && mkdir -p "$PLAIN"
  c=$(client write "$PLAIN" --file c --size "$SIZE" --count "$FILES" --direct 1)
  sync
  record direct store "$c" "0 0"
  echo 3 >/proc/sys/vm/drop_caches
  c=$(client read36 "$PLAIN" --file c --size "$SIZE" --count "$FILES" --iters 1 --warmup 0)
  record direct cold_read "$c" "0 0"
done
elapsed=$(($(date +%s) - start))

python3 - "$RAW" "$elapsed" "$FILES" "$SIZE" >"$OUT/cpu.md" <<'EOF'
import json, os, statistics as st, sys, datetime
rows = [json.loads(l) for l in open(sys.argv[1])]
elapsed, files, size = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
load = os.getloadavg()[0]
def med(rs, f): return st.median(f(r) for r in rs)
print(f"## CPU per GB ({datetime.datetime.utcnow():%Y-%m-%dT%H:%MZ}, {os.cpu_count()} CPUs, "
      f"{elapsed} s, 1-min load average at the end {load:.1f})\n")
print(f"kvfs-bench, {files} files of {size / 2**20:.0f} MiB per phase (O_DIRECT, one request per "
      f"file), medians of {len({r['round'] for r in rows})} rounds; CPU-seconds per GB (10^9 bytes) "
      "moved. kvfs: its daemon (user / system, all threads); client: the kvfs-bench process. "
      "Store = written and flushed to the backing dir; cold = a new daemon, page cache dropped.\n")
print("| setup | phase | kvfs CPU s/GB (user / sys) | client CPU s/GB | total CPU s/GB | RAM misses |")
print("|---|---|---|---|---|---|")
for setup, phase in [("kvfs", "store"), ("kvfs", "ram_hit"), ("kvfs", "cold_read"),
                     ("direct", "store"), ("direct", "cold_read")]:
    rs = [r for r in rows if r["setup"] == setup and r["phase"] == phase]
    if not rs: continue
    gb = rs[0]["bytes"] / 1e9
    du = med(rs, lambda r: r["daemon_user_s"] / gb)
    ds = med(rs, lambda r: r["daemon_sys_s"] / gb)
    cl = med(rs, lambda r: (r["client_user_s"] + r["client_sys_s"]) / gb)
    tot = med(rs, lambda r: (r["daemon_user_s"] + r["daemon_sys_s"] + r["client_user_s"]
                             + r["client_sys_s"]) / gb)
    miss = med(rs, lambda r: r["miss_bytes"] / r["bytes"])
    kv = f"{du + ds:.3f} ({du:.3f} / {ds:.3f})" if setup == "kvfs" else "-"
    print(f"| {setup} | {phase} | {kv} | {cl:.3f} | {tot:.3f} | "
          f"{f'{miss:.0%}' if setup == 'kvfs' and phase != 'store' else '-'} |")
EOF
cat "$RAW" >>"$OUT/cpu.jsonl"
cat "$OUT/cpu.md"
