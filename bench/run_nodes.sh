#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_nodes.sh: two instances behind a round-robin balancer over one shared
# dir (kvfs-bench mrqa --peer-dir: a user's requests alternate between the
# instances), in one run, for the multi-round QA load at each L:
#   one-node      one kvfs alone (the hit ratio two nodes should match)
#   two-nodes     two kvfs daemons (node_id a and b, each its own index and
#                 capacity) over one backing dir, one mount per instance
#   shared-plain  both instances writing straight into one plain dir
# then one-node and two-nodes again with a user's rounds at least
# NODES_USER_GAP real seconds apart (--user-gap: the answer's decode time,
# which the compressed replay leaves out; it is what gives the other
# instance time to see the stores), for the hit ratio; then the visibility
# latency (kvfs-bench visibility): from close on node a to a read of the
# same bytes on node b, polled as vLLM does.
# Writes bench/results/nodes.{jsonl,md,dat,png} (nodes-PRESET.* with EMU;
# the chart with gnuplot) and prints the table. Every run starts empty;
# everything mounted here is unmounted on exit.
#
#   sudo bench/run_nodes.sh [BUILD_DIR]
#
# Knobs: NODES_LENGTHS ("1000 10000"), NODES_CLIENT (vllm), NODES_TIME
# (virtual seconds, 300), NODES_USER_GAP (1; 0 skips the paced runs), NODES_CHUNK_BYTES (524288), NODES_USERS (15),
# NODES_ROUNDS (20), NODES_CONCURRENCY (4), NODES_RAM (512M per node),
# NODES_CAPACITY (30G per node), NODES_VIS_FILES (40), WORK
# (/var/tmp/kvfs-nodes), OUT, KVFS_OPTS (extra -o options for both nodes),
# EMU=PRESET (the shared dir on an nfsemu mount with that preset).
set -euo pipefail

source "$(dirname "$0")/lib.sh"
use_build "${1:-}" kvfs-bench kvfs ${EMU:+nfsemu}
need_root "FUSE mounts for the benchmark"
command -v python3 >/dev/null || die "python3 is needed for the report"

WORK=${WORK:-/var/tmp/kvfs-nodes}
OUT=${OUT:-$here/bench/results}
LENGTHS=${NODES_LENGTHS:-"1000 10000"}
CLIENT=${NODES_CLIENT:-vllm}
VTIME=${NODES_TIME:-300}
CHUNK=${NODES_CHUNK_BYTES:-524288}
USERS=${NODES_USERS:-15}
ROUNDS=${NODES_ROUNDS:-20}
CONC=${NODES_CONCURRENCY:-4}
RAM=${NODES_RAM:-512M}
CAP=${NODES_CAPACITY:-30G}
VIS_FILES=${NODES_VIS_FILES:-40}
GAP=${NODES_USER_GAP:-1}
TAG=nodes${EMU:+-$EMU}
RAW=$OUT/$TAG.jsonl
ON="local disk"
SHARED=$WORK/shared       # the plain shared dir, or the emulated NFS mount
BACKING=$SHARED/backing   # kvfs's backing dir (lib.sh's name: the one node)
INDEX=$WORK/index-a
KMNT=$WORK/mnt-a
MNT_B=$WORK/mnt-b
INDEX_B=$WORK/index-b
MOUNTS=("$MNT_B")
SCRATCH=("$WORK/index-a" "$WORK/index-b" "$WORK/src")
if [[ -n ${EMU:-} ]]; then
  ON="nfsemu --preset $EMU"
  MOUNTS+=("$SHARED")
fi
trap_cleanup

# node_pid NODE: the daemon of node NODE (its lock file's first line).
node_pid() { head -n1 "$BACKING/kvfs.$1.lock" 2>/dev/null | tr -dc 0-9 || true; }
# mount_node NODE MNT INDEX
mount_node() {
  mkdir -p "$2" "$3"
  "$KVFS" "$BACKING" "$2" \
    -o "node_id=$1,index_dir=$3,ram_size=$RAM,capacity=$CAP${KVFS_OPTS:+,$KVFS_OPTS}"
}
# umount_node NODE MNT: unmounts and waits for the daemon to exit.
umount_node() { umount_wait "$2" "$(node_pid "$1")" 60; }
# fresh: an empty shared dir (and backing dir), no index.
fresh() {
  umount_node b "$MNT_B"
  umount_node a "$KMNT"
  if [[ -n ${EMU:-} ]]; then
    umount_emu "$SHARED"
    rm -rf "$WORK/src"
    mount_emu "$EMU" "$WORK/src" "$SHARED"
  else
    rm -rf "$SHARED"
    mkdir -p "$SHARED"
  fi
  rm -rf "$INDEX" "$INDEX_B"
  mkdir -p "$BACKING"
}
# tag LABEL L: the bench line (stdin) with the setup, L and the backing.
tag() {
  local l
  read -r l
  echo "${l%\}},\"setup\":\"$1\",\"backing\":\"$ON\",\"segment_files\":$(find "$BACKING" -name '*.seg' 2>/dev/null | wc -l),\"backing_bytes\":$(du -sb "$BACKING" 2>/dev/null | cut -f1 || echo 0)}"
}

mkdir -p "$WORK" "$OUT"
unmount_stale
: >"$RAW"
common=(--client "$CLIENT" --users "$USERS" --rounds "$ROUNDS" --time "$VTIME"
  --chunk-bytes "$CHUNK" --concurrency "$CONC")
# one_node LABEL [MRQA ARGS...] and two_nodes LABEL [MRQA ARGS...]: one
# replay on fresh kvfs nodes (opts: this L's workload).
one_node() {
  local label=$1
  shift
  fresh
  mount_node a "$KMNT" "$INDEX"
  log "L=$L $label"
  "$BENCH" mrqa "$KMNT" "${opts[@]}" "$@" --label "$label" --backing-dir "$BACKING" |
    tag "$label" >>"$RAW"
}
two_nodes() {
  local label=$1
  shift
  fresh
  mount_node a "$KMNT" "$INDEX"
  mount_node b "$MNT_B" "$INDEX_B"
  log "L=$L $label"
  "$BENCH" mrqa "$KMNT" "${opts[@]}" "$@" --peer-dir "$MNT_B" --label "$label" \
    --backing-dir "$BACKING" | tag "$label" >>"$RAW"
}
for L in $LENGTHS; do
  opts=(--context-tokens "$L" "${common[@]}")
  one_node one-node
  two_nodes two-nodes
  fresh
  log "L=$L shared-plain"
  mkdir -p "$SHARED/plain"
  "$BENCH" mrqa "$SHARED/plain" "${opts[@]}" --peer-dir "$SHARED/plain" --label shared-plain \
    --backing-dir "$SHARED/plain" | tag shared-plain >>"$RAW"
  [[ $GAP != 0 ]] || continue
  one_node one-node-paced --user-gap "$GAP"
  two_nodes two-nodes-paced --user-gap "$GAP"
done
fresh
mount_node a "$KMNT" "$INDEX"
mount_node b "$MNT_B" "$INDEX_B"
log "visibility a -> b"
"$BENCH" visibility "$KMNT" --peer-dir "$MNT_B" --files "$VIS_FILES" --size "$CHUNK" \
  --label two-nodes | tag two-nodes >>"$RAW" || true
mkdir -p "$SHARED/plain"
"$BENCH" visibility "$SHARED/plain" --peer-dir "$SHARED/plain" --files "$VIS_FILES" \
  --size "$CHUNK" --label shared-plain | tag shared-plain >>"$RAW" || true
umount_node b "$MNT_B"
umount_node a "$KMNT"

python3 - "$RAW" "$OUT/$TAG.md" "$ON" <<'EOF'
import json, sys
raw, md, on = sys.argv[1:4]
rows = [json.loads(l) for l in open(raw) if l.strip()]
mr = [r for r in rows if r["cmd"] == "mrqa"]
vis = [r for r in rows if r["cmd"] == "visibility"]
o = [f"# Two instances over one shared dir (backing: {on})", "",
     "`bench/run_nodes.sh`: multi-round QA, a user's requests alternating between two",
     "instances. Throughput is chunk bytes moved per second of the replay.", "",
     "| L | setup | hit ratio | GB/s | x shared-plain | files made in the shared dir | segment files |",
     "|---|---|---|---|---|---|---|"]
for L in sorted({r["context_tokens"] for r in mr}):
    by = {r["setup"]: r for r in mr if r["context_tokens"] == L}
    plain = by.get("shared-plain", {}).get("gbps", 0)
    for s in ["one-node", "two-nodes", "shared-plain"]:  # the paced ones below
        r = by.get(s)
        if not r: continue
        made = r.get("backing_files_created", 0) + r.get("backing_dirs_created", 0)
        x = f"{r['gbps'] / plain:.2f}" if plain else "-"
        o.append(f"| {L} | {s} | {r['hit_ratio']:.4f} | {r['gbps']:.2f} | {x} | {made} | {r['segment_files']} |")
paced = [r for r in mr if r["setup"].endswith("-paced")]
if paced:
    o += ["", f"Hit ratio with a user's rounds at least {paced[0]['user_gap_s']} s apart (the",
          "answer's decode time, which the replay above compresses away), and the",
          "backing dir at the end:", "",
          "| L | one-node | two-nodes | two-nodes - one-node | backing MiB (two-nodes) | GB/s (two-nodes) |",
          "|---|---|---|---|---|---|"]
    for L in sorted({r["context_tokens"] for r in paced}):
        by = {r["setup"]: r for r in paced if r["context_tokens"] == L}
        one, two = by.get("one-node-paced"), by.get("two-nodes-paced")
        if not one or not two: continue
        o.append(f"| {L} | {one['hit_ratio']:.4f} | {two['hit_ratio']:.4f} | "
                 f"{two['hit_ratio'] - one['hit_ratio']:+.4f} | {two.get('backing_bytes', 0) / 2**20:.0f} | "
                 f"{two['gbps']:.2f} |")
o += ["", "Visibility, close on one instance to a bit-exact read on the other:", "",
      "| setup | files | visible | p50 ms | p99 ms | max ms |", "|---|---|---|---|---|---|"]
for r in vis:
    o.append(f"| {r['setup']} | {r['files']} | {r['visible']} | {r['p50_ms']:.0f} | {r['p99_ms']:.0f} | {r['max_ms']:.0f} |")
o += ["", f"![two instances vs one, throughput and hit ratio against L]({md.rsplit('/', 1)[-1][:-3]}.png)"]
open(md, "w").write("\n".join(o) + "\n")
print("\n".join(o))
# The chart's data: per L, GB/s then hit ratio of each setup ("?" if absent).
setups = ["one-node", "two-nodes", "shared-plain", "one-node-paced", "two-nodes-paced"]
with open(md[:-3] + ".dat", "w") as dat:
    dat.write("# L " + " ".join(f"gbps:{s}" for s in setups) + " " +
              " ".join(f"hit:{s}" for s in setups) + "\n")
    for L in sorted({r["context_tokens"] for r in mr}):
        by = {r["setup"]: r for r in mr if r["context_tokens"] == L}
        dat.write(f"{L} " + " ".join(f"{by[s]['gbps']:.3f}" if s in by else "?" for s in setups) +
                  " " + " ".join(f"{by[s]['hit_ratio']:.4f}" if s in by else "?" for s in setups) + "\n")
EOF

if command -v gnuplot >/dev/null; then
  gnuplot <<EOF
set terminal pngcairo size 1100,500 font "DejaVu Sans,11" noenhanced
set output "$OUT/$TAG.png"
set multiplot layout 1,2 title "Two instances behind a round-robin balancer, one shared dir ($ON; $CLIENT, chunk $CHUNK B)"
set xlabel "user context L (tokens)"
set key bottom left font ",9"
set grid
set datafile missing "?"
set title "throughput (replay compressed)"
set ylabel "GB/s"
set yrange [0:*]
plot "$OUT/$TAG.dat" using 1:2 with linespoints lw 2 title "one node", \\
     "" using 1:3 with linespoints lw 2 title "two nodes", \\
     "" using 1:4 with linespoints lw 2 title "two clients, shared plain dir"
set title "hit ratio"
set ylabel "hits / lookups of needed chunks"
set yrange [*:1]
plot "$OUT/$TAG.dat" using 1:7 with linespoints lw 2 title "one node", \\
     "" using 1:8 with linespoints lw 2 title "two nodes", \\
     "" using 1:9 with linespoints lw 2 title "shared plain dir", \\
     "" using 1:10 with linespoints lw 2 dt 2 title "one node, rounds ${GAP} s apart", \\
     "" using 1:11 with linespoints lw 2 dt 2 title "two nodes, rounds ${GAP} s apart"
unset multiplot
EOF
  log "chart: $OUT/$TAG.png"
else
  log "gnuplot not found (apt-get install -y gnuplot-nox): no chart"
fi
