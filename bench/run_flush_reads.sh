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
# KVFS_OPTS, VARIANTS (mount options to compare in paired runs, each round
# runs each in turn, e.g. "flush_pacing=0 flush_pacing=1"; default one
# run a round with none). Writes bench/results/flush-reads[-PRESET].{jsonl,md}.
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

# stat PATH...: values from kvfs-admin stats --json, e.g. stat dirty_bytes flush.gave_way
stat() {
  "$ADMIN" stats "$KMNT" --json | python3 -c "import json,sys
d = json.load(sys.stdin)
for p in sys.argv[1:]:
    v = d
    for k in p.split('.'): v = v[k]
    print(v)" "$@"
}
dirty() { stat dirty_bytes; }

read -ra variants <<<"${VARIANTS:-}"
[[ ${#variants[@]} -gt 0 ]] || variants=("")
for r in $(seq "$ROUNDS"); do
for v in "${variants[@]}"; do
  log "round $r of $ROUNDS${v:+: $v}"
  mount_fresh "$RAM" "capacity=$((RAM * 4))${v:+,$v}"
  "$BENCH" write "$KMNT" --file c --size "$SIZE" --count "$FILES" --direct 1 >/dev/null
  d0=$(dirty)
  during=$("$BENCH" read36 "$KMNT" --file c --size "$SIZE" --count "$FILES" --iters 1 --warmup 0)
  d1=$(dirty)
  gave=$(stat flush.gave_way)
  "$ADMIN" flush "$KMNT" --wait >/dev/null
  after=$("$BENCH" read36 "$KMNT" --file c --size "$SIZE" --count "$FILES" --iters 1 --warmup 0)
  echo "{\"round\": $r, \"variant\": \"$v\", \"dirty_before\": $d0, \"dirty_after_reads\": $d1, \"gave_way\": $gave, \
\"during_gbps\": $(jget "$during" total_gbps), \"after_gbps\": $(jget "$after" total_gbps)}" >>"$RAW"
  umount_kvfs
done
done
elapsed=$(($(date +%s) - start))

python3 - "$RAW" "$elapsed" "$FILES" "$SIZE" "${EMU:-local disk}" >"$OUT/$NAME.md" <<'EOF'
import json, os, statistics as st, sys, datetime
rows = [json.loads(l) for l in open(sys.argv[1])]
elapsed, files, size, backing = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
print(f"## RAM hits during a flush, backing on {backing} ({datetime.datetime.utcnow():%Y-%m-%dT%H:%MZ}, "
      f"{os.cpu_count()} CPUs, {elapsed} s, 1-min load average at the end {os.getloadavg()[0]:.1f})\n")
variants = list(dict.fromkeys(r.get("variant", "") for r in rows))
each = f" of each of {', '.join(variants)}, in turn" if variants != [""] else ""
print(f"{files} files of {size / 2**20:.0f} MiB written with O_DIRECT, then read back at once "
      "(one O_DIRECT read each, kvfs-bench read36) while the flushers write them out, and again "
      f"after `kvfs-admin flush --wait`; {len(rows) // len(variants)} rounds{each}.\n")
print("| round | options | dirty MiB before / after the reads | batches given way | during GB/s | after GB/s | during / after |")
print("|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['round']} | {r.get('variant') or '-'} "
          f"| {r['dirty_before'] / 2**20:.0f} / {r['dirty_after_reads'] / 2**20:.0f} "
          f"| {r.get('gave_way', '-')} | {r['during_gbps']:.2f} | {r['after_gbps']:.2f} | {r['during_gbps'] / r['after_gbps']:.2f} |")
print()
for v in variants:
    ratios = [r["during_gbps"] / r["after_gbps"] for r in rows if r.get("variant", "") == v]
    print(f"Median during / after{' with ' + v if v else ''}: {st.median(ratios):.2f} "
          f"(range {min(ratios):.2f}-{max(ratios):.2f}, {len(ratios)} rounds).")
EOF
cat "$RAW" >>"$OUT/$NAME.jsonl"
cat "$OUT/$NAME.md"
