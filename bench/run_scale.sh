#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_scale.sh: kvfs with many small files in the vLLM layout.
#   1. create KVFS_SCALE_FILES files of 4 KiB (vLLM store pattern, 16 threads,
#      <root>/<model>_r0/<h[0:3]>/<h[3:5]>_g0/<h>.bin: ~1 leaf dir per file)
#      and flush (fsync of a directory);
#   2. lookup latency, in-process: stat of random present and absent names,
#      with the kernel's caches warm, then after dropping dentries/inodes
#      (every stat a daemon lookup);
#   3. clean remount: umount, wait for the daemon to exit, mount again; time
#      until the mount returns and a stat works; lookups again;
#   4. index rebuild: umount, delete index_dir, mount; same timing; lookups
#      and a content check of random files;
#   5. catch-up: umount, keep a copy of index_dir, mount, create
#      KVFS_SCALE_NEW more files (another model dir) and flush, kill -9, put
#      the old copy back, mount: time until a new file stats, what the mount
#      caught up (records, bytes, seconds), new files present and checked.
# Prints a Markdown table, writes bench/results/scale.{jsonl,md}.
#
#   sudo bench/run_scale.sh [BUILD_DIR]
#
# Environment: KVFS_SCALE_FILES (default 1000000), SCALE_THREADS (16),
# SCALE_RAM (ram_size, default 1G), WORK (/var/tmp/kvfs-scale, local disk),
# KVFS_BIN, KVFS_OPTS, OUT (bench/results). Root (drop_caches), fusermount3.
set -euo pipefail

source "$(dirname "$0")/lib.sh"
use_build "${1:-}" kvfs-bench kvfs kvfs-admin
need_root "drop_caches"

N=${KVFS_SCALE_FILES:-1000000}
THREADS=${SCALE_THREADS:-16}
RAM=${SCALE_RAM:-1G}
WORK=${WORK:-/var/tmp/kvfs-scale}
OUT=${OUT:-$here/bench/results}
BACKING=$WORK/backing
INDEX=$WORK/index
KMNT=$WORK/kvfs
RAW=$OUT/scale.jsonl
PROBE=$KMNT/Qwen_Qwen3-8B_000000000001/config.json # exists once created (salt 1)

UMOUNT_TIMEOUT=600 # a million files' worth of index to flush
[[ ${KEEP:-0} == 1 ]] || SCRATCH=("$BACKING" "$INDEX")
trap_cleanup

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.3f", b - a}'; }
rss_mib() { awk '/^VmRSS/ {printf "%.0f", $2 / 1024}' "/proc/$(kvfs_pid)/status"; }
lookup() { bench scale "$KMNT" --phase lookup --files "$N" --samples 20000 "$@"; }
# kstat FIELD...: the daemon's stats, one line of the given fields (a.b paths).
kstat() {
  "$ADMIN" stats --json "$KMNT" | python3 -c '
import json, sys
j = json.load(sys.stdin)
vals = []
for f in sys.argv[1:]:
    v = j
    for k in f.split("."):
        v = v.get(k, 0) if isinstance(v, dict) else 0
    vals.append(str(v))
print(" ".join(vals))' "$@"
}
NEW=${KVFS_SCALE_NEW:-20000}
PROBE2=$KMNT/Qwen_Qwen3-8B_000000000002/config.json # salt 2: the catch-up phase

mkdir -p "$WORK" "$KMNT" "$OUT"
unmount_stale
rm -rf "$BACKING" "$INDEX"
mkdir -p "$BACKING" "$INDEX"
: >"$RAW"
mount_kvfs "$RAM" capacity=1T
wait_settled 30
start=$SECONDS

log "creating $N files of 4 KiB, $THREADS threads"
c=$(bench scale "$KMNT" --phase create --files "$N" --threads "$THREADS")
t0=$(now)
python3 -c "import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd)" "$KMNT"
flush_s=$(since "$t0")
rss_created=$(rss_mib)
stats=$(kstat files directories backing.used_bytes backing.segments)
read -r kfiles kdirs kbytes ksegs <<<"$stats"
log "created: $kfiles files, $kdirs dirs, ${kbytes} B in $ksegs segments; daemon RSS ${rss_created} MiB"

log "lookups, kernel caches warm"
l_warm=$(lookup)
echo 2 >/proc/sys/vm/drop_caches # dentries and inodes: every stat reaches the daemon
log "lookups after dropping dentries"
l_cold=$(lookup --verify 0)

log "clean remount"
t0=$(now)
umount_kvfs
umount_s=$(since "$t0")
t0=$(now)
mount_kvfs "$RAM" capacity=1T
stat "$PROBE" >/dev/null
remount_s=$(since "$t0")
wait_settled 30
rss_remount=$(rss_mib)
l_remount=$(lookup --verify 0)

log "index rebuild (index_dir deleted)"
umount_kvfs
rm -rf "$INDEX" && mkdir -p "$INDEX"
t0=$(now)
mount_kvfs "$RAM" capacity=1T
stat "$PROBE" >/dev/null
rebuild_s=$(since "$t0")
wait_settled 30
l_rebuild=$(lookup --verify 1000)

log "catch-up: an index copy from before $NEW more files, put back after kill -9"
umount_kvfs
rm -rf "$INDEX.old" && cp -a "$INDEX" "$INDEX.old"
mount_kvfs "$RAM" capacity=1T
wait_settled 30
bench scale "$KMNT" --phase create --files "$NEW" --threads "$THREADS" --salt 2 >/dev/null
python3 -c "import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd)" "$KMNT"
pid=$(kvfs_pid)
kill -9 "$pid"
while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
fusermount3 -u -z "$KMNT" || true
rm -rf "$INDEX" && mv "$INDEX.old" "$INDEX"
t0=$(now)
mount_kvfs "$RAM" capacity=1T
stat "$PROBE2" >/dev/null
stale_s=$(since "$t0")
read -r cu_records cu_bytes cu_s cu_entries <<<"$(kstat index.caught_up_records index.caught_up_bytes index.caught_up_seconds index.caught_up_entries)"
wait_settled 30
l_stale=$(bench scale "$KMNT" --phase lookup --files "$NEW" --samples 2000 --salt 2 --verify 1000)
elapsed=$((SECONDS - start))
echo "{\"cmd\":\"scale-summary\",\"files\":$N,\"flush_s\":$flush_s,\"umount_s\":$umount_s,\"remount_s\":$remount_s,\"rebuild_s\":$rebuild_s,\"stale_remount_s\":$stale_s,\"caught_up_records\":$cu_records,\"caught_up_bytes\":$cu_bytes,\"caught_up_s\":$cu_s,\"rss_created_mib\":$rss_created,\"rss_remount_mib\":$rss_remount,\"kvfs_files\":$kfiles,\"kvfs_dirs\":$kdirs,\"backing_bytes\":$kbytes,\"segments\":$ksegs}" >>"$RAW"

{
  echo "## kvfs scale test ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, ${elapsed}s)"
  echo
  echo "$N files of 4 KiB in the vLLM layout ($kfiles files, $kdirs directories in kvfs;" \
    "$((kbytes / 1048576)) MiB in $ksegs segments), ram_size=$RAM."
  echo
  echo "| measurement | value | target | met |"
  echo "|---|---|---|---|"
  echo "| create rate ($THREADS threads, vLLM store pattern) | $(jget "$c" create_ops_s) files/s ($(jget "$c" create_s) s) | - | - |"
  echo "| flush of everything after the creates | ${flush_s} s | - | - |"
  for v in "warm kernel caches:$l_warm" "dentries dropped:$l_cold" "after clean remount:$l_remount" "after index rebuild:$l_rebuild"; do
    name=${v%%:*} j=${v#*:}
    p=$(jget "$j" stat_present_p99_us) a=$(jget "$j" stat_absent_p99_us)
    echo "| stat p99 present / absent, $name | $p / $a µs (p50 $(jget "$j" stat_present_p50_us) / $(jget "$j" stat_absent_p50_us)) | < 200 µs | $(verdict "$(awk -v p="$p" -v a="$a" 'BEGIN {print (p > a ? p : a)}')" "<" 200) |"
  done
  echo "| daemon's own lookup p50 / p99 (latency.lookup), after remount / after rebuild | $(jget "$l_remount" kvfs_lookup_p50_us) / $(jget "$l_remount" kvfs_lookup_p99_us) µs, $(jget "$l_rebuild" kvfs_lookup_p50_us) / $(jget "$l_rebuild" kvfs_lookup_p99_us) µs | - | - |"
  echo "| umount (flush + exit) | ${umount_s} s | - | - |"
  echo "| clean remount: mount returns + stat works | ${remount_s} s | < 5 s | $(verdict "$remount_s" "<" 5) |"
  echo "| index rebuild from segments: mount + stat | ${rebuild_s} s | - | - |"
  echo "| older index copy put back after $NEW more files and kill -9: mount + stat of a new file | ${stale_s} s ($cu_entries entries from $cu_records records, $((cu_bytes / 1048576)) MiB, caught up in ${cu_s} s) | - | - |"
  echo "| stat p99 present, the caught-up files (1000 read and checked) | $(jget "$l_stale" stat_present_p99_us) µs | - | - |"
  echo "| daemon RSS after the creates / after remount | ${rss_created} / ${rss_remount} MiB | - | - |"
} | tee "$OUT/scale.md"
log "raw JSON lines: $RAW"
