#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_small_ram.sh: vLLM's store-and-load pattern through a RAM tier smaller
# than what is written, so that stores wait for the flush to make room,
# against the client writing straight into a dir on the same emulated
# server ("direct"), on several emulator presets, in paired runs.
#
#   sudo bench/run_small_ram.sh [BUILD_DIR]
#
# Per preset and run: fresh nfsemu mounts (one for direct, one for kvfs's
# backing dir), kvfs-bench vllm (16 writer threads, O_DIRECT tmp + rename;
# 32 reader threads, one O_DIRECT read per chunk) of CHUNKS chunks of
# CHUNK_BYTES on direct, then on kvfs with ram_size=RAM once per variant
# (VARIANTS: mount options compared in the same run, e.g. "flush_pacing=0
# flush_pacing=1"; default one kvfs run with none). The report gives each
# setup's median store, load and overall GB/s with the range, and kvfs over
# direct.
#
# Environment: PRESETS ("lan-nfs cloud-nfs"), RUNS (3), CHUNKS (32),
# CHUNK_BYTES (4718592: 4.5 MiB, 32 tokens of Qwen3-8B in bf16), RAM (64M), VARIANTS, KVFS_OPTS, WORK
# (/var/tmp/kvfs-small-ram), OUT (bench/results). Writes
# OUT/small-ram.{jsonl,md}. About 1 min per preset and run.
set -euo pipefail

source "$(dirname "$0")/lib.sh"
use_build "${1:-}" kvfs-bench kvfs nfsemu
need_root "FUSE mounts"

PRESETS=${PRESETS:-lan-nfs cloud-nfs}
RUNS=${RUNS:-3}
CHUNKS=${CHUNKS:-32}
CHUNK_BYTES=${CHUNK_BYTES:-4718592}
RAM=${RAM:-64M}
WORK=${WORK:-/var/tmp/kvfs-small-ram}
OUT=${OUT:-$here/bench/results}
EMU_D=$WORK/emu-direct
EMU_K=$WORK/emu-backing
DIRECT=$EMU_D/direct
BACKING=$EMU_K/backing
INDEX=$WORK/index
KMNT=$WORK/kvfs
RAW=$OUT/small-ram.jsonl
MOUNTS=("$EMU_D" "$EMU_K")
SCRATCH=("$WORK/src-d" "$WORK/src-k" "$INDEX")
trap_cleanup

# one LABEL RUN PRESET DIR: kvfs-bench vllm's JSON line, tagged, kept in RAW.
one() {
  local out
  out=$("$BENCH" vllm "$4" --chunks "$CHUNKS" --chunk-bytes "$CHUNK_BYTES")
  echo "${out%\}},\"setup\":\"$1\",\"run\":$2,\"preset\":\"$3\"}" >>"$RAW"
}

read -ra variants <<<"${VARIANTS:-}"
[[ ${#variants[@]} -gt 0 ]] || variants=("")
mkdir -p "$WORK" "$KMNT" "$OUT"
unmount_stale
: >"$RAW"
start=$SECONDS
for preset in $PRESETS; do
  for run in $(seq "$RUNS"); do
    for v in "${variants[@]}"; do
      log "$preset, run $run of $RUNS${v:+, $v}"
      umount_kvfs
      umount_emu "$EMU_D"
      umount_emu "$EMU_K"
      rm -rf "$WORK/src-d" "$WORK/src-k" "$INDEX"
      mkdir -p "$WORK/src-d" "$WORK/src-k" "$INDEX"
      mount_emu "$preset" "$WORK/src-d" "$EMU_D"
      mount_emu "$preset" "$WORK/src-k" "$EMU_K"
      mkdir -p "$DIRECT" "$BACKING"
      one direct "$run" "$preset" "$DIRECT"
      mount_kvfs "$RAM" "capacity=100G${v:+,$v}"
      wait_settled 20
      one "kvfs${v:+ $v}" "$run" "$preset" "$KMNT"
      umount_kvfs
    done
  done
done
elapsed=$((SECONDS - start))

python3 - "$RAW" "$RUNS" "$CHUNKS" "$CHUNK_BYTES" "$RAM" "$elapsed" \
  "$(cut -d' ' -f1 /proc/loadavg)" <<'EOF' | tee "$OUT/small-ram.md"
import json, statistics, sys
raw, runs, chunks, size, ram, elapsed, load = sys.argv[1:]
rows = [json.loads(l) for l in open(raw)]
def vals(preset, setup, key):
    return [r[key] for r in rows if r["preset"] == preset and r["setup"] == setup]
def cell(v):
    return f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})"
print(f"## vLLM's pattern through a RAM tier smaller than the data ({runs} runs, {elapsed} s; "
      f"1-min load average at the end {load} on 2 CPUs)")
print()
print(f"{chunks} chunks of {int(size) / 2**20:.1f} MiB, 16 writer and 32 reader threads, kvfs "
      f"with ram_size={ram}; direct = the client writing straight into a dir on the same "
      "emulated server. Medians (range). Each kvfs run is paired with the direct run "
      "before it, on fresh emulator mounts.")
print()
print("| preset | setup | store GB/s | load GB/s | overall GB/s | store / direct | overall / direct |")
print("|---|---|---|---|---|---|---|")
for preset in dict.fromkeys(r["preset"] for r in rows):
    d = vals(preset, "direct", "store_gbps"), vals(preset, "direct", "gbps")
    for setup in dict.fromkeys(r["setup"] for r in rows if r["preset"] == preset):
        s, l, o = (vals(preset, setup, k) for k in ("store_gbps", "load_gbps", "gbps"))
        rs = statistics.median(s) / statistics.median(d[0])
        ro = statistics.median(o) / statistics.median(d[1])
        print(f"| {preset} | {setup} | {cell(s)} | {cell(l)} | {cell(o)} | {rs:.2f}x | {ro:.2f}x |")
EOF
