#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_cold.sh: kvfs against the plain dir when both sit on an emulated NFS
# server (nfsemu, bench/nfsemu.cc) and the RAM tier cannot hold the data:
# the cold path (flushing to the server, reading back from it). Each
# measurement runs RUNS times, each on fresh dirs and a fresh mount; the
# report gives the median and the range of the runs.
#
#   1. vLLM's pattern (kvfs-bench vllm: mkdir -p, O_DIRECT tmp + rename with
#      16 writer threads; access; one O_DIRECT read per chunk with 32 reader
#      threads) of CHUNKS x 36 MiB, with ram_size=RAM below the data: stores
#      and loads, direct on the emulated dir against kvfs with its backing
#      dir there.
#   2. The same stores with a RAM tier that holds them (BIG_RAM): what the
#      store pattern costs when kvfs absorbs it (direct pays a create, a
#      rename and the mkdirs' round trips per chunk).
#   3. A 128-chunk prefix read cold (kvfs remounted: RAM empty, measured once
#      the mount's background prefault is done, as in 1; plain: never
#      cached, O_DIRECT), chunk after chunk by one loader, as GB/s and
#      as a share of the preset's link bandwidth; then the same with prefixes
#      of SMALL_TOTAL bytes in smaller chunks (SMALL_SIZES), where a plain
#      dir's lookup and open per chunk count against the transfer.
# Writes OUT/cold-PRESET.{jsonl,md}.
#
#   sudo bench/run_cold.sh [BUILD_DIR]
#
# Environment: EMU (preset, default lan-nfs), RUNS (3), CHUNKS (64), RAM
# (1G), BIG_RAM (4G), PREFIX (128), SMALL_SIZES ("2359296 524288"),
# SMALL_TOTAL (512 MiB), WORK (/var/tmp/kvfs-cold), KVFS_OPTS, OUT
# (bench/results). Root, /dev/fuse, fusermount3. About 6 min at the
# defaults.
set -euo pipefail

source "$(dirname "$0")/lib.sh"
use_build "${1:-}" kvfs-bench kvfs nfsemu
need_root "umount of the FUSE mounts at exit"

PRESET=${EMU:-lan-nfs}
RUNS=${RUNS:-3}
CHUNKS=${CHUNKS:-64}
RAM=${RAM:-1G}
BIG_RAM=${BIG_RAM:-4G}
PREFIX=${PREFIX:-128}
# Prefixes of smaller chunks, SMALL_TOTAL bytes each: 16-token blocks of
# the same model (2.25 MiB) and 512 KiB (the multi-round QA replay's chunk,
# a 16-token block of a 1B-class model), where a plain dir's lookup and
# open per chunk weigh against the transfer.
SMALL_SIZES=${SMALL_SIZES:-2359296 524288}
SMALL_TOTAL=${SMALL_TOTAL:-536870912}
WORK=${WORK:-/var/tmp/kvfs-cold}
OUT=${OUT:-$here/bench/results}
SIZE=37748736 # one 256-token chunk of Qwen3-8B in bf16
EMU_D=$WORK/emu-direct
EMU_K=$WORK/emu-backing
DIRECT=$EMU_D/direct
BACKING=$EMU_K/backing
INDEX=$WORK/index
KMNT=$WORK/kvfs
RAW=$OUT/cold-$PRESET.jsonl
MOUNTS=("$EMU_D" "$EMU_K")
SCRATCH=("$WORK/src-d" "$WORK/src-k" "$INDEX")
trap_cleanup

# one LABEL RUN ARGS...: kvfs-bench's JSON line tagged with label and run,
# kept in RAW.
one() {
  local label=$1 run=$2 out
  shift 2
  out=$("$BENCH" "$@")
  echo "${out%\}},\"setup\":\"$label\",\"run\":$run,\"preset\":\"$PRESET\"}" >>"$RAW"
}
# fresh_emu: both emulated dirs empty and mounted anew (no server cache).
fresh_emu() {
  umount_kvfs
  umount_emu "$EMU_D"
  umount_emu "$EMU_K"
  rm -rf "$WORK/src-d" "$WORK/src-k" "$INDEX" && mkdir -p "$WORK/src-d" "$WORK/src-k" "$INDEX"
  mount_emu "$PRESET" "$WORK/src-d" "$EMU_D"
  mount_emu "$PRESET" "$WORK/src-k" "$EMU_K"
  mkdir -p "$DIRECT" "$BACKING"
}

mkdir -p "$WORK" "$KMNT" "$OUT"
unmount_stale
: >"$RAW"
start=$SECONDS
for run in $(seq "$RUNS"); do
  log "run $run of $RUNS: vLLM pattern, $CHUNKS x 36 MiB, RAM $RAM"
  fresh_emu
  one direct "$run" vllm "$DIRECT" --chunks "$CHUNKS"
  mount_kvfs "$RAM" capacity=100G
  wait_settled 20
  one "kvfs-$RAM" "$run" vllm "$KMNT" --chunks "$CHUNKS"
  umount_kvfs
  log "run $run: stores into a RAM tier that holds them ($BIG_RAM)"
  rm -rf "$BACKING" "$INDEX" && mkdir -p "$BACKING" "$INDEX"
  mount_kvfs "$BIG_RAM" capacity=100G,ram_prefault=$BIG_RAM
  wait_settled 20
  one "kvfs-$BIG_RAM" "$run" vllm "$KMNT" --chunks "$CHUNKS"
  umount_kvfs
  log "run $run: a $PREFIX-chunk prefix read cold"
  fresh_emu
  one direct-write "$run" write "$DIRECT" --file p/c --size $SIZE --count "$PREFIX" --direct 1
  one direct "$run" read36 "$DIRECT" --file p/c --size $SIZE --count "$PREFIX" --iters 1 --warmup 0
  mount_kvfs "$RAM" capacity=100G
  one kvfs-write "$run" write "$KMNT" --file p/c --size $SIZE --count "$PREFIX" --sync
  umount_kvfs
  mount_kvfs "$RAM" capacity=100G
  wait_settled 20
  one "kvfs-$RAM" "$run" read36 "$KMNT" --file p/c --size $SIZE --count "$PREFIX" --iters 1 --warmup 0
  umount_kvfs
  for small in $SMALL_SIZES; do
    n=$((SMALL_TOTAL / small))
    log "run $run: a $n-chunk prefix of $small-byte chunks read cold"
    fresh_emu
    one direct-write "$run" write "$DIRECT" --file s/c --size "$small" --count "$n" --direct 1
    one direct "$run" read36 "$DIRECT" --file s/c --size "$small" --count "$n" --iters 1 --warmup 0
    mount_kvfs "$RAM" capacity=100G
    one kvfs-write "$run" write "$KMNT" --file s/c --size "$small" --count "$n" --sync
    umount_kvfs
    mount_kvfs "$RAM" capacity=100G
    wait_settled 20
    one "kvfs-$RAM" "$run" read36 "$KMNT" --file s/c --size "$small" --count "$n" --iters 1 --warmup 0
    umount_kvfs
  done
done
elapsed=$((SECONDS - start))
bw=$(jget "$(emu_stats "$EMU_K")" bw_mbps)

# --------------------------------------------------------------- report
python3 - "$RAW" "$PRESET" "$bw" "$RUNS" "$CHUNKS" "$RAM" "$BIG_RAM" "$PREFIX" "$elapsed" \
  "$(cut -d' ' -f1 /proc/loadavg)" <<'EOF' | tee "$OUT/cold-$PRESET.md"
import json, statistics, sys
raw, preset, bw, runs, chunks, ram, big, prefix, elapsed, load = sys.argv[1:]
rows = [json.loads(l) for l in open(raw)]
def vals(setup, cmd, key):
    return [r[key] for r in rows if r["setup"] == setup and r["cmd"] == cmd and key in r]
def med(v):
    return statistics.median(v) if v else float("nan")
def cell(v):
    return f"{med(v):.2f} ({min(v):.2f}-{max(v):.2f})" if v else "-"
def ratio(a, b):
    return f"{med(a) / med(b):.2f}x" if a and b and med(b) > 0 else "-"
link = float(bw) / 1000 if float(bw) > 0 else float("nan")
print(f"## kvfs on an emulated {preset} backing, RAM tier below the data "
      f"({runs} runs, {elapsed} s; 1-min load average at the end {load} on 2 CPUs)")
print()
print(f"Median of {runs} runs (range in brackets). direct = the client writing straight "
      f"into a dir on nfsemu --preset {preset}; kvfs = kvfs with its backing dir on another "
      f"such mount. Link: {link:.2f} GB/s.")
print()
print(f"| vLLM pattern, {chunks} x 36 MiB | direct | kvfs ram_size={ram} | kvfs/direct "
      f"| kvfs ram_size={big} | kvfs/direct |")
print("|---|---|---|---|---|---|")
for what, key in (("store GB/s", "store_gbps"), ("load GB/s", "load_gbps")):
    d, k, b = vals("direct", "vllm", key), vals(f"kvfs-{ram}", "vllm", key), vals(f"kvfs-{big}", "vllm", key)
    print(f"| {what} | {cell(d)} | {cell(k)} | {ratio(k, d)} | {cell(b)} | {ratio(b, d)} |")
print()
def prefix(setup, size):
    return [r["total_gbps"] for r in rows
            if r["setup"] == setup and r["cmd"] == "read36" and r["size"] == size]
print(f"| a prefix read cold, one loader, one chunk after another | direct GB/s | kvfs ram_size={ram} GB/s | kvfs/direct | share of the link ({link:.2f} GB/s): direct / kvfs |")
print("|---|---|---|---|---|")
for size in sorted({r["size"] for r in rows if r["cmd"] == "read36"}, reverse=True):
    d, k = prefix("direct", size), prefix(f"kvfs-{ram}", size)
    n = next(r["files"] for r in rows if r["cmd"] == "read36" and r["size"] == size)
    print(f"| {n} chunks of {size / 1048576:g} MiB | {cell(d)} | {cell(k)} | {ratio(k, d)} "
          f"| {med(d) / link:.2f} / {med(k) / link:.2f} |")
print()
print(f"Raw JSON lines: {raw.split('/bench/')[-1]}")
EOF
