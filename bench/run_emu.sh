#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_emu.sh: what nfsemu (bench/nfsemu.cc, the emulated NFS backing dir)
# costs by itself and what a preset's modelled costs come to, in one run:
#   1. its own overhead: preset none against the bare directory it passes
#      through (kvfs-bench store, read36, access, meta);
#   2. the preset EMU (default lan-nfs): the same figures on the emulated
#      dir, next to what the preset's figures predict, and the round trips
#      per stored 36 MiB file that nfsemu counted;
#   3. kvfs with its backing dir on that emulated dir: round trips and
#      backing files per stored file once flushed, and cold reads from it
#      (one read per file, and 1 MiB at a time with and without read-ahead).
# Prints Markdown, writes OUT/emu.{jsonl,md} (OUT/emu-PRESET.* for EMU other
# than lan-nfs).
#
#   sudo bench/run_emu.sh [BUILD_DIR]
#
# Environment: EMU (preset, default lan-nfs), EMU_OPTS (extra nfsemu -o
# options), WORK (/var/tmp/kvfs-emu, local disk), KVFS_BIN, KVFS_OPTS, OUT
# (bench/results). Root (the FUSE mounts are cleaned up with umount),
# /dev/fuse, fusermount3. About 2-3 min.
set -euo pipefail

source "$(dirname "$0")/lib.sh"
use_build "${1:-}" kvfs-bench kvfs nfsemu
need_root "umount of the FUSE mounts at exit"

PRESET=${EMU:-lan-nfs}
WORK=${WORK:-/var/tmp/kvfs-emu}
OUT=${OUT:-$here/bench/results}
TAG=emu
[[ $PRESET == lan-nfs ]] || TAG=emu-$PRESET
BARE=$WORK/bare               # a plain local-disk directory
NONE=$WORK/emu-none           # nfsemu --preset none over $WORK/src-none
MODEL=$WORK/emu-model         # nfsemu --preset $PRESET over $WORK/src-model
BACKING=$MODEL/backing
INDEX=$WORK/index
KMNT=$WORK/kvfs
SIZE=37748736 # one 256-token chunk of Qwen3-8B in bf16
RAW=$OUT/$TAG.jsonl

MOUNTS=("$NONE" "$MODEL")
SCRATCH=("$BARE" "$WORK/src-none" "$WORK/src-model" "$INDEX")
trap_cleanup

# bench LABEL ARGS...: kvfs-bench's JSON line, tagged with the setup, kept in
# RAW and echoed.
bench() {
  local label=$1 out
  shift
  out=$("$BENCH" "$@")
  out="${out%\}},\"setup\":\"$label\"}"
  echo "$out" >>"$RAW"
  echo "$out"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "n/a"}'; }
# delta BEFORE AFTER KEY DIVISOR: (after - before) / divisor of a stats field.
delta() {
  awk -v a="$(jget "$1" "$3")" -v b="$(jget "$2" "$3")" -v d="$4" 'BEGIN {printf "%.1f", (b - a) / d}'
}

mkdir -p "$WORK" "$KMNT" "$OUT"
unmount_stale
rm -rf "${SCRATCH[@]}" && mkdir -p "$BARE" "$INDEX"
: >"$RAW"
mount_emu none "$WORK/src-none" "$NONE"
mount_emu "$PRESET" "$WORK/src-model" "$MODEL"
log "nfsemu: none on $NONE, $PRESET on $MODEL; bare dir $BARE"
start=$SECONDS

# --------------------------------------------------------------- 1. overhead
declare -A R
for s in bare none; do
  d=$BARE
  [[ $s == none ]] && d=$NONE
  log "overhead: $s ($d)"
  R[$s.store]=$(bench "$s" store "$d" --count 16 --size $SIZE --threads 4 --reps 3)
  bench "$s" write "$d" --file r/warm36 --size $SIZE --direct 1 >/dev/null
  R[$s.read]=$(bench "$s" read36 "$d" --file r/warm36 --size $SIZE --iters 15 --warmup 3)
  R[$s.access]=$(bench "$s" access "$d" --count 1000 --seconds 0.3)
  R[$s.meta1]=$(bench "$s" meta "$d" --count 2000 --threads 1)
  R[$s.meta16]=$(bench "$s" meta "$d" --count 2000 --threads 16)
done

# --------------------------------------------------------------- 2. the preset
log "preset $PRESET: store, 36 MiB O_DIRECT write/read, create+rename"
s0=$(emu_stats "$MODEL")
R[m.store]=$(bench "$PRESET" store "$MODEL" --count 16 --size $SIZE --threads 4 --reps 1)
s1=$(emu_stats "$MODEL")
R[m.write]=$(bench "$PRESET" write "$MODEL" --file r/m36 --size $SIZE --count 4 --direct 1)
R[m.read]=$(bench "$PRESET" read36 "$MODEL" --file r/m36 --size $SIZE --count 4 --iters 2 --warmup 1)
# A loader that reads 1 MiB at a time (one request in flight).
R[m.serial]=$(bench "$PRESET" read36 "$MODEL" --file r/m36 --size $SIZE --count 4 --iters 1 --warmup 0 \
  --request 1048576)
R[m.meta1]=$(bench "$PRESET" meta "$MODEL" --count 300 --threads 1)
R[m.meta16]=$(bench "$PRESET" meta "$MODEL" --count 2000 --threads 16)
plain_rtt=$(delta "$s0" "$s1" round_trips 16)
plain_create=$(delta "$s0" "$s1" create 16)

# --------------------------------------------------------------- 3. kvfs on it
log "kvfs with its backing dir on the $PRESET dir"
mount_fresh 2G capacity=20G
k0=$(emu_stats "$MODEL")
R[k.store]=$(bench kvfs store "$KMNT" --count 16 --size $SIZE --threads 4 --reps 1)
bench kvfs write "$KMNT" --file sync/s --size 4096 --sync >/dev/null # flushes everything
k1=$(emu_stats "$MODEL")
kvfs_rtt=$(delta "$k0" "$k1" round_trips 16)
kvfs_create=$(delta "$k0" "$k1" create 16)
bench kvfs write "$KMNT" --file c/cold36 --size $SIZE --count 8 --sync >/dev/null
umount_kvfs
mount_kvfs 2G capacity=20G
R[k.cold]=$(bench kvfs read36 "$KMNT" --file c/cold36 --size $SIZE --count 8 --iters 1 --warmup 0)
umount_kvfs
# The same files read 1 MiB at a time, cold again (remounted), with kvfs's
# read-ahead and without it.
for pf in on off; do
  mount_kvfs 2G capacity=20G$([[ $pf == off ]] && echo ,prefetch=0)
  R[k.serial_$pf]=$(bench "kvfs-prefetch-$pf" read36 "$KMNT" --file c/cold36 --size $SIZE --count 8 \
    --iters 1 --warmup 0 --request 1048576)
  umount_kvfs
done
elapsed=$((SECONDS - start))

# --------------------------------------------------------------- report
p=$(jget "$s1" rtt_us) dus=$(jget "$s1" data_us) bw=$(jget "$s1" bw_mbps)
# The preset's prediction for one 36 MiB O_DIRECT transfer at a time (open
# round trip, then 36 requests in flight: bandwidth plus one data latency).
model_gbps=$(awk -v r="$p" -v d="$dus" -v b="$bw" -v s=$SIZE \
  'BEGIN {if (b > 0) printf "%.2f", s / (r * 1e-6 + d * 1e-6 + s / (b * 1e6)) / 1e9; else print "-"}')
# create+rename, one thread: lookup (negative), create, lookup of the new
# name (negative), rename: 4 round trips (NFSv4: 3, its OPEN creates), plus
# the layout round trips of the create.
lrtt=$(jget "$s1" layout_rtt)
model_meta=$(awk -v r="$p" -v l="$lrtt" 'BEGIN {if (r > 0) printf "%.0f", 1e6 / ((4 + l) * r); else print "-"}')
row() { printf '| %s | %s | %s | %s |\n' "$1" "$2" "$3" "$(ratio "$3" "$2")"; }
{
  echo "## nfsemu: own overhead and the $PRESET preset ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, ${elapsed}s)"
  echo
  echo "Machine: $(nproc) cores shared with other work (1-min load average at the end:" \
    "$(cut -d' ' -f1 /proc/loadavg)); every figure is noisy. Bare dir and nfsemu's source" \
    "dirs are on the same local disk ($(df --output=fstype "$WORK" | tail -1))."
  echo
  echo "### 1. Overhead: nfsemu --preset none against the bare directory"
  echo
  echo "| measurement | bare dir | nfsemu none | ratio |"
  echo "|---|---|---|---|"
  row "store 16 x 36 MiB, 4 threads, GB/s" "$(jget "${R[bare.store]}" gbps)" "$(jget "${R[none.store]}" gbps)"
  row "read36 (O_DIRECT, one read), median GB/s" "$(jget "${R[bare.read]}" median_gbps)" "$(jget "${R[none.read]}" median_gbps)"
  for k in present_1t_ops absent_1t_ops present_16t_ops; do
    row "access(F_OK) $k /s" "$(jget "${R[bare.access]}" $k)" "$(jget "${R[none.access]}" $k)"
  done
  row "create+rename, 1 thread, ops/s" "$(jget "${R[bare.meta1]}" create_rename_ops_s)" "$(jget "${R[none.meta1]}" create_rename_ops_s)"
  row "create+rename, 16 threads, ops/s" "$(jget "${R[bare.meta16]}" create_rename_ops_s)" "$(jget "${R[none.meta16]}" create_rename_ops_s)"
  row "mkdir -p (new leaf), 1 thread, ops/s" "$(jget "${R[bare.meta1]}" mkdirp_new_ops_s)" "$(jget "${R[none.meta1]}" mkdirp_new_ops_s)"
  echo
  echo "### 2. Preset $PRESET: rtt_us=$p data_us=$dus bw_mbps=$bw (jitter $(jget "$s1" jitter), layout_rtt $lrtt)"
  echo
  echo "| measurement on the emulated dir | measured | preset predicts |"
  echo "|---|---|---|"
  echo "| 36 MiB O_DIRECT write (one at a time), GB/s | $(jget "${R[m.write]}" write_gbps) | $model_gbps |"
  echo "| read36 (O_DIRECT, one read), median GB/s | $(jget "${R[m.read]}" median_gbps) | $model_gbps |"
  echo "| store 16 x 36 MiB, 4 threads, GB/s | $(jget "${R[m.store]}" gbps) | <= $(awk -v b="$bw" 'BEGIN {print (b > 0 ? b / 1000 : "-")}') (the link) |"
  echo "| store p50 ms per 36 MiB | $(jget "${R[m.store]}" p50_ms) | - |"
  echo "| create+rename, 1 thread, ops/s | $(jget "${R[m.meta1]}" create_rename_ops_s) | $model_meta ($((4 + lrtt)) round trips) |"
  echo "| create+rename, 16 threads, ops/s | $(jget "${R[m.meta16]}" create_rename_ops_s) | - |"
  echo "| mkdir -p (new leaf), 1 thread, ops/s | $(jget "${R[m.meta1]}" mkdirp_new_ops_s) | - |"
  echo
  echo "Data requests overlap their local I/O with the modelled transfer: where the bare dir" \
    "is slower than the preset's link, the figures show the disk, not the preset."
  echo
  echo "### 3. kvfs with its backing dir on the $PRESET dir"
  echo
  echo "| per stored 36 MiB file (vLLM store pattern) | plain dir on $PRESET | kvfs on $PRESET backing |"
  echo "|---|---|---|"
  echo "| round trips to the server, counted by nfsemu (kvfs: once flushed) | $plain_rtt | $kvfs_rtt |"
  echo "| files created on the server | $plain_create | $kvfs_create |"
  echo "| store GB/s (kvfs: into its RAM tier) | $(jget "${R[m.store]}" gbps) | $(jget "${R[k.store]}" gbps) |"
  echo "| cold read36 after a remount, median GB/s (8 files) | $(jget "${R[m.read]}" median_gbps) (plain, read36 above) | $(jget "${R[k.cold]}" median_gbps) |"
  echo "| the same, read 1 MiB at a time (one request in flight), median GB/s | $(jget "${R[m.serial]}" median_gbps) (plain, 4 files) | $(jget "${R[k.serial_on]}" median_gbps) (prefetch=0: $(jget "${R[k.serial_off]}" median_gbps)) |"
  echo
  echo "Raw JSON lines: ${RAW#"$here"/}"
} | tee "$OUT/$TAG.md"
