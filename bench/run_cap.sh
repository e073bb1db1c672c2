#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_cap.sh: the LMCache MP server's NIXL store never deletes what it stores
# (only its shutdown sweep of *.tmp.* files), so on a plain directory the KV
# files grow without bound; through kvfs, capacity= is the cap. Replays
# `kvfs-bench nixl-gds --keep` for CAP_ROUNDS rounds of CAP_CHUNKS new keys
# each, on the plain dir and on kvfs (capacity=CAP_CAPACITY), and after every
# round records the bytes in the directory that holds the data (du) and how
# many of the first round's files are still there. Every round verifies the
# bytes it loads; an evicted file is a miss (ENOENT), never other bytes.
# Writes bench/results/cap.{jsonl,md} and prints the table.
#
#   sudo bench/run_cap.sh [BUILD_DIR]
#
# Between rounds the script waits CAP_PAUSE seconds (2), longer than the
# protection window it mounts kvfs with (see below).
# CAP_ROUNDS (10), CAP_CHUNKS (8 per round, of the default geometry's 36 MiB),
# CAP_CAPACITY (1G), CAP_RAM (512M), WORK (/var/tmp/kvfs-cap), OUT.
set -euo pipefail

source "$(dirname "$0")/lib.sh"
use_build "${1:-}" kvfs-bench kvfs
need_root "a FUSE mount with allow_other"

WORK=${WORK:-/var/tmp/kvfs-cap}
OUT=${OUT:-$here/bench/results}
ROUNDS=${CAP_ROUNDS:-10}
CHUNKS=${CAP_CHUNKS:-8}
CAPACITY=${CAP_CAPACITY:-1G}
RAM=${CAP_RAM:-512M}
PAUSE=${CAP_PAUSE:-2}
PLAIN=$WORK/plain
BACKING=$WORK/backing
INDEX=$WORK/index
KMNT=$WORK/kvfs
RAW=$OUT/cap.jsonl
SCRATCH=("$PLAIN" "$BACKING" "$INDEX")
trap_cleanup

mkdir -p "$WORK" "$KMNT" "$OUT"
unmount_stale
: >"$RAW"
start=$SECONDS

for setup in plain kvfs; do
  rm -rf "$PLAIN"
  if [[ $setup == kvfs ]]; then
    # A file used within evict_grace plus the kernel's entry/attr timeouts
    # is never evicted (the kernel may be serving it from its caches). The
    # rounds here write the whole cap within seconds, so that window is made
    # short; with the defaults (60 s + 10 s) writes past the cap would be
    # refused with ENOSPC until files age out of it.
    mount_fresh "$RAM" "capacity=$CAPACITY,evict_grace=0,entry_timeout=1,attr_timeout=1"
    dir=$KMNT data=$BACKING
  else
    mkdir -p "$PLAIN"
    dir=$PLAIN data=$PLAIN
  fi
  for r in $(seq 1 "$ROUNDS"); do
    ((r > 1)) && sleep "$PAUSE"
    out=$("$BENCH" nixl-gds "$dir" --chunks "$CHUNKS" --salt $((r * 1000003)) --keep)
    used=$(du -sb "$data" | cut -f1)
    # What a client listing the directory sees (the store never deletes).
    left=$(find "$dir/nixl_gds" -name '*.bin' | wc -l)
    printf '{"setup":"%s","round":%d,"written_bytes":%s,"dir_bytes":%s,"files_listed":%d,"store_gbps":%s,"load_gbps":%s}\n' \
      "$setup" "$r" "$((r * CHUNKS * 37748736))" "$used" "$left" \
      "$(jget "$out" store_gbps)" "$(jget "$out" load_gbps)" | tee -a "$RAW"
  done
  [[ $setup == kvfs ]] && umount_kvfs
done

python3 - "$RAW" "$OUT/cap.md" "$CAPACITY" "$CHUNKS" "$ROUNDS" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
cap, chunks, rounds = sys.argv[3], sys.argv[4], sys.argv[5]
by = {}
for r in rows:
    by.setdefault(r["round"], {})[r["setup"]] = r
g = lambda b: f"{b / 2**30:.2f}"
out = [f"NIXL store, {chunks} new 36 MiB keys per round, {rounds} rounds; kvfs capacity={cap}",
       "", "| round | written GiB | plain dir GiB | kvfs backing GiB | files listed plain / kvfs | load GB/s plain / kvfs |",
       "|---|---|---|---|---|---|"]
for k in sorted(by):
    p, v = by[k].get("plain", {}), by[k].get("kvfs", {})
    out.append(f"| {k} | {g(p.get('written_bytes', 0))} | {g(p.get('dir_bytes', 0))} | "
               f"{g(v.get('dir_bytes', 0))} | {p.get('files_listed')} / {v.get('files_listed')} | "
               f"{p.get('load_gbps')} / {v.get('load_gbps')} |")
open(sys.argv[2], "w").write("\n".join(out) + "\n")
print("\n".join(out))
EOF
log "done in $((SECONDS - start)) s: $RAW, $OUT/cap.md"
