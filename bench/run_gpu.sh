#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_gpu.sh: kvfs-gpubench (GPU -> pinned host -> files -> GPU, verified on
# the GPU) against tmpfs, the plain backing directory and kvfs, in one run;
# writes OUT/gpu.md and OUT/gpu.jsonl. The one script to run where a GPU is
# at hand; without one it says so and exits 0 before mounting anything.
#
#   sudo bench/run_gpu.sh [BUILD_DIR]          (default: build-bench, then build)
#
# Environment: WORK (default /var/tmp/kvfs-gpu, on local disk), OUT (default
# bench/results), GPU_BLOCKS (default 64 blocks of 36 MiB), GPU_THREADS
# ("1 8 16"), GPU_RAM (kvfs ram_size, default 8G: every block fits in RAM),
# GPU_TMPFS_SIZE (default 8G), KVFS_BIN, KVFS_OPTS, KEEP=1. About 1-2 min.
set -euo pipefail

source "$(dirname "$0")/lib.sh"
use_build "${1:-}" kvfs-gpubench kvfs
GPU=$(dirname "$BENCH")/kvfs-gpubench
need_root "tmpfs mount"

WORK=${WORK:-/var/tmp/kvfs-gpu}
OUT=${OUT:-$here/bench/results}
BACKING=$WORK/backing
INDEX=$WORK/index
PLAIN=$WORK/plain
TMPFS=$WORK/tmpfs
KMNT=$WORK/kvfs
BLOCKS=${GPU_BLOCKS:-64}
THREADS=${GPU_THREADS:-1 8 16}
RAM=${GPU_RAM:-8G}
RAW=$OUT/gpu.jsonl

# Without a device there is nothing to compare: no mount, no result files.
mkdir -p "$WORK" "$PLAIN"
probe=$("$GPU" "$PLAIN" --blocks 1 --threads 1 --chunk-bytes 1048576)
if grep -q "no CUDA device" <<<"$probe"; then
  echo "$probe"
  exit 0
fi

MOUNTS=("$TMPFS")
[[ ${KEEP:-0} == 1 ]] || SCRATCH=("$BACKING" "$INDEX" "$PLAIN")
trap_cleanup
mkdir -p "$OUT" "$TMPFS" "$KMNT"
unmount_stale
: >"$RAW"
mount -t tmpfs -o "size=${GPU_TMPFS_SIZE:-8G}" kvfs-gpu-tmpfs "$TMPFS"
mount_fresh "$RAM"
log "tmpfs on $TMPFS, kvfs on $KMNT (backing $BACKING, ram_size $RAM), plain dir $PLAIN"
device=$("$GPU" "$PLAIN" --blocks 1 --threads 1 --chunk-bytes 1048576 2>&1 >/dev/null | head -1)
start=$SECONDS

for t in $THREADS; do
  for setup in tmpfs plain kvfs; do
    case $setup in
      tmpfs) dir=$TMPFS ;;
      plain) dir=$PLAIN ;;
      kvfs) dir=$KMNT ;;
    esac
    log "$setup, $t threads, $BLOCKS blocks"
    out=$("$GPU" "$dir" --blocks "$BLOCKS" --threads "$t")
    echo "${out%\}},\"setup\":\"$setup\"}" >>"$RAW"
  done
done

row() { # row THREADS SETUP FIELD
  local line
  line=$(grep "\"threads\":$1," "$RAW" | grep "\"setup\":\"$2\"")
  jget "$line" "$3"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "n/a"}'; }
{
  echo "## kvfs-gpubench ($(date -u +%Y-%m-%dT%H:%MZ), ${device#kvfs-gpubench: }, $((SECONDS - start)) s)"
  echo
  echo "$BLOCKS KV blocks of 36 MiB (Qwen3-8B, 256 tokens) per run: D2H into pinned buffers, vLLM store"
  echo "pattern (O_DIRECT tmp + rename), directory fsync (untimed), O_DIRECT load, H2D, verified by a"
  echo "GPU kernel. kvfs: ram_size=$RAM over $BACKING. End-to-end GB/s (p99 ms per block)."
  echo
  echo "| threads | store tmpfs / plain / kvfs | load tmpfs / plain / kvfs | kvfs/plain store, load | kvfs/tmpfs store, load |"
  echo "|---|---|---|---|---|"
  for t in $THREADS; do
    s=() l=() sp=() lp=()
    for setup in tmpfs plain kvfs; do
      s+=("$(row "$t" $setup store_gbps)")
      l+=("$(row "$t" $setup load_gbps)")
      sp+=("$(row "$t" $setup store_p99_ms)")
      lp+=("$(row "$t" $setup load_p99_ms)")
    done
    printf '| %s | %.2f (%.0f) / %.2f (%.0f) / %.2f (%.0f) | %.2f (%.0f) / %.2f (%.0f) / %.2f (%.0f) | %s, %s | %s, %s |\n' \
      "$t" "${s[0]}" "${sp[0]}" "${s[1]}" "${sp[1]}" "${s[2]}" "${sp[2]}" \
      "${l[0]}" "${lp[0]}" "${l[1]}" "${lp[1]}" "${l[2]}" "${lp[2]}" \
      "$(ratio "${s[2]}" "${s[1]}")" "$(ratio "${l[2]}" "${l[1]}")" \
      "$(ratio "${s[2]}" "${s[0]}")" "$(ratio "${l[2]}" "${l[0]}")"
  done
} | tee "$OUT/gpu.md"
log "raw JSON lines: $RAW"
