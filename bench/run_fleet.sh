#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_fleet.sh: a fleet of kvfs nodes over one shared dir, and what it costs
# the storage server and each node. For each N in FLEET_NODES, N kvfs daemons
# on this machine (node_id n01.., each its own index, RAM tier and capacity)
# mount one backing dir on an emulated NFS mount (nfsemu --preset EMU, whose
# daemon plays the server and counts every request it gets by kind), and:
#   idle        the server's requests per second while the nodes are mounted
#               and idle, the dir empty (FLEET_IDLE seconds)
#   replay      the multi-round QA load spread over the N nodes as a balancer
#               would (kvfs-bench mrqa --peer-dir n02,..; FLEET_ROUTE rr: a
#               user's rounds go round-robin over the nodes; user: all of a
#               user's rounds to one node, as a prefix-aware router), a
#               user's rounds at least FLEET_USER_GAP s apart
#   idle-after  the idle cost again, with the dir as the replay left it
#   settled     the same FLEET_SETTLE s later (35: the flushers seal an
#               idle node's segments after 30 s, and peers leave sealed
#               ones alone)
#   visibility  close on n01 to a bit-exact read on nN (kvfs-bench visibility)
# and once the same replay by clients writing straight into the emulated dir
# (shared-plain). Per node: its RSS and peak RSS, its peer passes (count,
# time, segment files opened). All nodes share this machine's CPUs and the
# emulator's one FUSE mount (its kernel attribute cache too), so the
# figures are what N nodes ask of one server, not what N hosts could do.
# Writes bench/results/fleet-EMU.{jsonl,md,dat,png} (the chart with gnuplot;
# fleet_report.py rebuilds them from a saved jsonl) and prints the table; every N
# starts empty; everything mounted here is unmounted on exit.
#
#   sudo bench/run_fleet.sh [BUILD_DIR]
#
# Knobs: EMU (lan-nfs), FLEET_NODES ("1 2 4 8 16"), FLEET_ROUTE (rr),
# FLEET_IDLE (10 s), FLEET_SETTLE (35 s; 0: none), FLEET_L (1000 context
# tokens), FLEET_TIME (120 virtual s), FLEET_USERS (15), FLEET_ROUNDS (20),
# FLEET_CONCURRENCY (4), FLEET_CHUNK_BYTES (524288), FLEET_USER_GAP (1),
# FLEET_RAM (64M per node), FLEET_CAPACITY (2G per node), FLEET_VIS_FILES (40), WORK
# (/var/tmp/kvfs-fleet), OUT, KVFS_OPTS (extra -o options for every node).
set -euo pipefail

source "$(dirname "$0")/lib.sh"
use_build "${1:-}" kvfs-bench kvfs kvfs-admin nfsemu
need_root "FUSE mounts for the benchmark"
command -v python3 >/dev/null || die "python3 is needed for the report"

EMU=${EMU:-lan-nfs}
WORK=${WORK:-/var/tmp/kvfs-fleet}
OUT=${OUT:-$here/bench/results}
NODES=${FLEET_NODES:-"1 2 4 8 16"}
ROUTE=${FLEET_ROUTE:-rr}
IDLE=${FLEET_IDLE:-10}
SETTLE=${FLEET_SETTLE:-35}
L=${FLEET_L:-1000}
VTIME=${FLEET_TIME:-120}
USERS=${FLEET_USERS:-15}
ROUNDS=${FLEET_ROUNDS:-20}
CONC=${FLEET_CONCURRENCY:-4}
CHUNK=${FLEET_CHUNK_BYTES:-524288}
GAP=${FLEET_USER_GAP:-1}
RAM=${FLEET_RAM:-64M}
CAP=${FLEET_CAPACITY:-2G}
VIS_FILES=${FLEET_VIS_FILES:-40}
TAG=fleet-$EMU${FLEET_TAG:+-$FLEET_TAG}
RAW=$OUT/$TAG.jsonl
SHARED=$WORK/shared      # the emulated NFS mount
BACKING=$SHARED/backing  # the nodes' backing dir
KMNT=$WORK/mnt-n01       # lib.sh's name: node 1 (cleanup unmounts it first)
max_n=0
for n in $NODES; do ((n > max_n)) && max_n=$n; done
((max_n >= 1)) || die "FLEET_NODES: at least one node"
node_name() { printf 'n%02d' "$1"; }
node_mnt() { echo "$WORK/mnt-$(node_name "$1")"; }
# Every node's mount before the emulator's (cleanup unmounts in order).
for ((i = 2; i <= max_n; i++)); do MOUNTS+=("$(node_mnt "$i")"); done
MOUNTS+=("$SHARED")
SCRATCH=("$WORK/src" "$WORK/index")
trap_cleanup

node_pid() { head -n1 "$BACKING/kvfs.$(node_name "$1").lock" 2>/dev/null | tr -dc 0-9 || true; }
mount_node() {
  local m
  m=$(node_mnt "$1")
  mkdir -p "$m" "$WORK/index/$1"
  "$KVFS" "$BACKING" "$m" -o "node_id=$(node_name "$1"),index_dir=$WORK/index/$1,ram_size=$RAM,capacity=$CAP,ram_prefault=0${KVFS_OPTS:+,$KVFS_OPTS}"
}
umount_node() { umount_wait "$(node_mnt "$1")" "$(node_pid "$1")" 60; }
umount_all() { for ((i = max_n; i >= 1; i--)); do umount_node "$i"; done; }
# fresh: no node mounted, an empty emulated dir, no index.
fresh() {
  umount_all
  umount_emu "$SHARED"
  rm -rf "$WORK/src" "$WORK/index"
  mount_emu "$EMU" "$WORK/src" "$SHARED"
  mkdir -p "$BACKING"
}
# emu_line N PHASE: the server's counters now, as a line of RAW.
emu_line() { echo "{\"cmd\":\"emu\",\"nodes\":$1,\"phase\":\"$2\",\"emu\":$(emu_stats "$SHARED")}" >>"$RAW"; }
# node_lines N PHASE: each node's RSS and stats now, a line each.
node_lines() {
  local i pid rss hwm st
  for ((i = 1; i <= $1; i++)); do
    pid=$(node_pid "$i")
    rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
    hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
    st=$("$ADMIN" stats --json "$(node_mnt "$i")" 2>/dev/null || echo '{}')
    st=$(tr -d "\n" <<<"$st")
    echo "{\"cmd\":\"node\",\"nodes\":$1,\"phase\":\"$2\",\"node\":$i,\"rss_kb\":${rss:-0},\"hwm_kb\":${hwm:-0},\"stats\":$st}" >>"$RAW"
  done
}
# tag N: the bench line (stdin) with N and the route.
tag() {
  local l
  read -r l
  echo "${l%\}},\"fleet_nodes\":$1,\"fleet_route\":\"$ROUTE\"}"
}

mkdir -p "$WORK" "$OUT"
unmount_stale
umount -l "$SHARED" 2>/dev/null || true
: >"$RAW"
mrqa_opts=(--client vllm --context-tokens "$L" --users "$USERS" --rounds "$ROUNDS"
  --time "$VTIME" --chunk-bytes "$CHUNK" --concurrency "$CONC" --user-gap "$GAP")

fresh
log "shared-plain: the replay straight into the emulated dir"
mkdir -p "$SHARED/plain"
emu_line 0 replay0
"$BENCH" mrqa "$SHARED/plain" "${mrqa_opts[@]}" --label shared-plain \
  --backing-dir "$SHARED/plain" | tag 0 >>"$RAW"
emu_line 0 replay1

for n in $NODES; do
  fresh
  for ((i = 1; i <= n; i++)); do mount_node "$i"; done
  log "N=$n: idle ${IDLE} s"
  sleep 2 # every node's first passes and housekeeping
  emu_line "$n" idle0
  node_lines "$n" idle0
  sleep "$IDLE"
  emu_line "$n" idle1
  node_lines "$n" idle1
  peers=""
  for ((i = 2; i <= n; i++)); do peers+="${peers:+,}$(node_mnt "$i")"; done
  log "N=$n: replay (route $ROUTE)"
  emu_line "$n" replay0
  node_lines "$n" replay0
  "$BENCH" mrqa "$KMNT" "${mrqa_opts[@]}" ${peers:+--peer-dir "$peers" --route "$ROUTE"} \
    --label "fleet-$n" --backing-dir "$BACKING" | tag "$n" >>"$RAW"
  emu_line "$n" replay1
  node_lines "$n" replay1
  log "N=$n: idle ${IDLE} s with the dir as the replay left it"
  emu_line "$n" after0
  node_lines "$n" after0
  sleep "$IDLE"
  emu_line "$n" after1
  node_lines "$n" after1
  if ((SETTLE > 0)); then
    log "N=$n: idle ${IDLE} s once settled (${SETTLE} s later)"
    sleep "$SETTLE"
    emu_line "$n" settled0
    node_lines "$n" settled0
    sleep "$IDLE"
    emu_line "$n" settled1
    node_lines "$n" settled1
  fi
  if ((n > 1)); then
    log "N=$n: visibility n01 -> $(node_name "$n")"
    "$BENCH" visibility "$KMNT" --peer-dir "$(node_mnt "$n")" --files "$VIS_FILES" \
      --size "$CHUNK" --label "fleet-$n" | tag "$n" >>"$RAW" || true
  fi
done
umount_all

python3 "$here/bench/fleet_report.py" "$RAW" "$OUT/$TAG.md" "nfsemu --preset $EMU"
