#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_ab.sh: a change that must not make kvfs slower, checked the way the
# restructurings of core/ are: the same benchmarks on two builds in one
# session, alternating (base, new, base, new) so that the machine's drift
# falls on both. run_micro twice each, run_cold once each (RUNS runs inside),
# the multi-round QA at an eighth on EMU twice each (vllm at L=5000, the
# shortest run that writes past the RAM tier). Each run's table goes to
# OUT/<bench>-<base|new>-<i>; the summary prints the figures side by side.
#
#   sudo bench/run_ab.sh BASE_BUILD NEW_BUILD
#
# Build both with -DBUILD_TESTING=OFF -DKVFS_BENCH=ON (a git worktree of the
# base commit for BASE_BUILD). Environment: OUT (/var/tmp/kvfs-ab), EMU
# (lan-nfs), RUNS (3). About 14 min on 2 CPUs.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
[[ $# -eq 2 ]] || { echo "usage: $0 BASE_BUILD NEW_BUILD" >&2; exit 2; }
base=$(cd "$1" && pwd) new=$(cd "$2" && pwd)
OUT=${OUT:-/var/tmp/kvfs-ab}
EMU=${EMU:-lan-nfs}
RUNS=${RUNS:-3}
mkdir -p "$OUT"
build() { [[ $1 == base ]] && echo "$base" || echo "$new"; }
t0=$(date +%s)
for i in 1 2; do
  for v in base new; do
    echo "run_ab: micro $v $i"
    "$here/bench/run_micro.sh" "$(build $v)" >"$OUT/micro-$v-$i.txt" 2>&1
  done
done
for v in base new; do
  echo "run_ab: cold $v"
  mkdir -p "$OUT/cold-$v"
  OUT=$OUT/cold-$v RUNS=$RUNS EMU=$EMU "$here/bench/run_cold.sh" "$(build $v)" >"$OUT/cold-$v.txt" 2>&1
done
for i in 1 2; do
  for v in base new; do
    echo "run_ab: mrqa $v $i"
    mkdir -p "$OUT/mrqa-$v-$i"
    OUT=$OUT/mrqa-$v-$i EMU=$EMU MRQA_SMALL_RAM=eighth MRQA_CLIENTS=vllm MRQA_LENGTHS=5000 \
      "$here/bench/run_mrqa.sh" "$(build $v)" >"$OUT/mrqa-$v-$i.txt" 2>&1
  done
done
echo "run_ab: done in $(($(date +%s) - t0)) s; base $base, new $new"
echo
echo "run_micro (GB/s): read36 in RAM | store 4 thr | cold read36 | flush"
for f in micro-base-1 micro-new-1 micro-base-2 micro-new-2; do
  printf '  %-13s' "$f"
  for row in 'read36 in RAM vs tmpfs' 'store (4 thr) vs tmpfs' 'cold read36 vs' 'flush (close'; do
    grep -F "| $row" "$OUT/$f.txt" | head -1 | awk -F'|' '{printf " %8s", $3}'
  done
  echo
done
echo "run_cold ($EMU, median of $RUNS): kvfs store / load GB/s at ram_size 1G"
for v in base new; do
  printf '  %-13s' "$v"
  grep -E '^\| (store|load) GB/s' "$OUT/cold-$v/cold-$EMU.md" | awk -F'|' '{printf " %s", $4}'
  echo
done
echo "mrqa eighth ($EMU, vllm L=5000): kvfs/direct small, large"
for f in mrqa-base-1 mrqa-new-1 mrqa-base-2 mrqa-new-2; do
  printf '  %-13s' "$f"
  grep -E '^\| vllm \| 5000 \| kvfs-(small|large) \(' "$OUT/$f/mrqa-$EMU.md" | awk -F'|' '{printf " %s", $5}'
  echo
done
