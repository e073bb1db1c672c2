#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_flush_reads.sh: RAM hits while the flushers write the same files out,
# against the same hits once they are done. kvfs exists to serve loads from
# RAM; on a host with few cores a flush competes with them for the CPU.
#
#   sudo bench/run_flush_reads.sh [BUILD_DIR]   (default: build-bench, then build)
#
# Per round, on a fresh kvfs whose RAM tier holds everything: FILES files of
# 36 MiB written with O_DIRECT (kvfs-bench write: they are dirty in RAM and
# the flushers start on each at its close), then at once every file read
# back with O_DIRECT (read36, every byte checked): "during"; then
# `kvfs-admin flush --wait` and the same reads again: "after". The dirty
# bytes when the first reads end show that the flush was still running.
# With EMU=PRESET the backing dir is on an nfsemu mount of that preset (a
# network link: the flush then runs long after the writes end; on local disk
# it is mostly done before the reads start). Environment: WORK (default
# /var/tmp/kvfs-flush-reads), FILES (default 48), ROUNDS (default 5), EMU,
# KVFS_OPTS. Writes bench/results/flush-reads[-PRESET].{jsonl,md}.
set -euo pipefail

source "$(dirname "$0")/lib.sh"
use_build "${1:-}" kvfs-bench kvfs kvfs-admin ${EMU:+nfsemu}
need_root "FUSE mounts"

WORK=${WORK:-/var/tmp/kvfs-flush-reads}
EMU_K=$WORK/emu-backing
BACKING=$WORK/backing
[[ -z ${EMU:-} ]] || BACKING=$EMU_K/backing
INDEX=$WORK/index
KMNT=$WORK/kvfs
FILES=${FILES:-48}
ROUNDS=${ROUNDS:-5}
SIZE=37748736 # one 256-token chunk of Qwen3-8B in bf16
RAM=$((FILES * SIZE * 2))
NAME=flush-reads${EMU:+-$EMU}
RAW=$WORK/$NAME.jsonl
OUT=${OUT:-$here/bench/results}

MOUNTS=()
SCRATCH=("$BACKING" "$INDEX" "$WORK/src-k")
trap_cleanup
mkdir -p "$WORK" "$KMNT" "$OUT"
: >"$RAW"
start=$(date +%s)
[[ -z ${EMU:-} ]] || mount_emu "$EMU" "$WORK/src-k" "$EMU_K"

dirty() { "$ADMIN" stats "$KMNT" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['dirty_bytes'])"; }

for r in $(seq "$ROUNDS"); do
  log "round $r of $ROUNDS"
  mount_fresh "$RAM" "capacity=$((RAM * 4))"
  "$BENCH" write "$KMNT" --file c --size "$SIZE" --count "$FILES" --direct 1 >/dev/null
  d0=$(dirty)
  during=$("$BENCH" read36 "$KMNT" --file c --size "$SIZE" --count "$FILES" --iters 1 --warmup 0)
  d1=$(dirty)
  "$ADMIN" flush "$KMNT" --wait >/dev/null
  after=$("$BENCH" read36 "$KMNT" --file c --size "$SIZE" --count "$FILES" --iters 1 --warmup 0)
  echo "{\"round\": $r, \"dirty_before\": $d0, \"dirty_after_reads\": $d1, \
\"during_gbps\": $(jget "$during" total_gbps), \"after_gbps\": $(jget "$after" total_gbps)}" >>"$RAW"
  umount_kvfs
done
elapsed=$(($(date +%s) - start))

python3 - "$RAW" "$elapsed" "$FILES" "$SIZE" "${EMU:-local disk}" >"$OUT/$NAME.md" <<'EOF'
import json, os, statistics as st, sys, datetime
rows = [json.loads(l) for l in open(sys.argv[1])]
elapsed, files, size, backing = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
print(f"## RAM hits during a flush, backing on {backing} ({datetime.datetime.utcnow():%Y-%m-%dT%H:%MZ}, "
      f"{os.cpu_count()} CPUs, {elapsed} s, 1-min load average at the end {os.getloadavg()[0]:.1f})\n")
print(f"{files} files of {size / 2**20:.0f} MiB written with O_DIRECT, then read back at once "
      "(one O_DIRECT read each, kvfs-bench read36) while the flushers write them out, and again "
      f"after `kvfs-admin flush --wait`; {len(rows)} rounds.\n")
print("| round | dirty MiB before / after the reads | during GB/s | after GB/s | during / after |")
print("|---|---|---|---|---|")
for r in rows:
    print(f"| {r['round']} | {r['dirty_before'] / 2**20:.0f} / {r['dirty_after_reads'] / 2**20:.0f} "
          f"| {r['during_gbps']:.2f} | {r['after_gbps']:.2f} | {r['during_gbps'] / r['after_gbps']:.2f} |")
ratios = [r["during_gbps"] / r["after_gbps"] for r in rows]
print(f"\nMedian during / after: {st.median(ratios):.2f} (range {min(ratios):.2f}-{max(ratios):.2f}).")
EOF
cat "$RAW" >>"$OUT/$NAME.jsonl"
cat "$OUT/$NAME.md"
