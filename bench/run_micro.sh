#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_micro.sh: kvfs micro-benchmarks against tmpfs, nullfs (the FUSE ceiling)
# and the plain backing directory, in one run; prints a Markdown table.
#
#   sudo bench/run_micro.sh [BUILD_DIR]        (default: build-bench, then build)
#
# Environment: WORK (default /var/tmp/kvfs-bench; must be on local disk, it
# holds the backing dir, the index and the plain-dir baselines), KVFS_BIN (the
# kvfs binary, default BUILD_DIR/fs/kvfs), KVFS_OPTS (extra -o options for
# kvfs), STORE_THREADS (default 4), KEEP=1 (keep WORK's files after the run). Needs root (tmpfs mount), /dev/fuse and fusermount3.
# Everything mounted here is unmounted on exit, even on failure. About 1-2 min.
set -euo pipefail

source "$(dirname "$0")/lib.sh"
use_build "${1:-}" kvfs-bench nullfs kvfs
need_root "tmpfs mount"

WORK=${WORK:-/var/tmp/kvfs-bench}
TMPFS=$WORK/tmpfs
BACKING=$WORK/backing
INDEX=$WORK/index
PLAIN=$WORK/plain # a plain directory on the backing dir's filesystem
KMNT=$WORK/kvfs
NMNT=$WORK/nullfs
N32MNT=$WORK/nullfs-v32 # nullfs run with the libfuse 3.2 loop call kvfs makes
STORE_THREADS=${STORE_THREADS:-4}
SIZE=37748736 # one 256-token chunk of Qwen3-8B in bf16
RAW=$WORK/results.jsonl

MOUNTS=("$NMNT" "$N32MNT" "$TMPFS")
SCRATCH=("$BACKING/ddtest")
[[ ${KEEP:-0} == 1 ]] || SCRATCH+=("$BACKING" "$INDEX" "$PLAIN")
trap_cleanup

# Median of the numbers given as arguments.
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "n/a"}'; }

# --------------------------------------------------------------- setup
mkdir -p "$WORK" "$TMPFS" "$KMNT" "$NMNT" "$N32MNT"
unmount_stale
rm -rf "$BACKING" "$INDEX" "$PLAIN"
mkdir -p "$BACKING" "$INDEX" "$PLAIN"
: >"$RAW"
mount -t tmpfs -o size=2G kvfs-bench-tmpfs "$TMPFS"
mount_kvfs 1G
"$NULLFS" "$NMNT" "$SIZE"
"$NULLFS" "$N32MNT" "$SIZE" --v32-loop
log "tmpfs on $TMPFS, kvfs on $KMNT (backing $BACKING, pid $(kvfs_pid)), nullfs on $NMNT and $N32MNT"
start=$SECONDS

# --------------------------------------------------------------- read36, RAM resident
log "read36: one O_DIRECT read() of 36 MiB, file in memory"
bench write "$TMPFS" --file r/warm36 --size $SIZE >/dev/null
bench write "$KMNT" --file r/warm36 --size $SIZE --sync >/dev/null
r_tmpfs=$(bench read36 "$TMPFS" --file r/warm36 --size $SIZE --iters 15 --warmup 3)
r_kvfs=$(bench read36 "$KMNT" --file r/warm36 --size $SIZE --iters 15 --warmup 3)
r_null=$(bench read36 "$NMNT" --file blob --size $SIZE --iters 15 --warmup 3)
r_n32=$(bench read36 "$N32MNT" --file blob --size $SIZE --iters 15 --warmup 3)

# --------------------------------------------------------------- store
log "store: vLLM store pattern, 16 x 36 MiB, $STORE_THREADS threads"
s_tmpfs=$(bench store "$TMPFS" --count 16 --size $SIZE --threads "$STORE_THREADS" --reps 3)
s_kvfs=$(bench store "$KMNT" --count 16 --size $SIZE --threads "$STORE_THREADS" --reps 3)
s_plain=$(bench store "$PLAIN" --count 16 --size $SIZE --threads "$STORE_THREADS" --reps 3)
s_null=$(bench store "$NMNT" --count 16 --size $SIZE --threads "$STORE_THREADS" --reps 3)
s_n32=$(bench store "$N32MNT" --count 16 --size $SIZE --threads "$STORE_THREADS" --reps 3)

# --------------------------------------------------------------- flush vs dd
log "flush: 24 x 36 MiB buffered, then fsync of a directory; dd 1 GiB O_DIRECT"
f_tmpfs=$(bench flush "$TMPFS" --count 24 --size $SIZE --reps 1)
f_kvfs=$(bench flush "$KMNT" --count 24 --size $SIZE --reps 3)
dd_rates=()
for _ in 1 2 3; do
  line=$(dd if=/dev/zero of="$BACKING/ddtest" bs=1M count=1024 oflag=direct conv=fsync 2>&1 |
    grep copied)
  # "1073741824 bytes (1.1 GB, 1.0 GiB) copied, 0.95 s, 1.1 GB/s"
  secs=$(sed -n 's/.*copied, \([0-9.]*\) s.*/\1/p' <<<"$line")
  dd_rates+=("$(awk -v b="${line%% *}" -v s="$secs" 'BEGIN {printf "%.3f", b / s / 1e9}')")
  rm -f "$BACKING/ddtest"
done
dd_gbps=$(median "${dd_rates[@]}")
echo "{\"cmd\":\"dd\",\"gbps\":$dd_gbps,\"gbps_all\":[$(IFS=,; echo "${dd_rates[*]}")]}" >>"$RAW"

# --------------------------------------------------------------- cold read
log "cold read: 8 files written, kvfs remounted (RAM empty), each read once"
bench write "$KMNT" --file c/cold36 --size $SIZE --count 8 >/dev/null
bench write "$KMNT" --file c/coldwarm --size $SIZE --sync >/dev/null
umount_kvfs
mount_kvfs 1G
bench write "$PLAIN" --file c/cold36 --size $SIZE --count 8 --sync >/dev/null
bench write "$PLAIN" --file c/coldwarm --size $SIZE --sync >/dev/null
# One cold file first (not counted) so that both start with a warm code path.
bench read36 "$KMNT" --file c/coldwarm --size $SIZE --iters 1 --warmup 0 >/dev/null
c_kvfs=$(bench read36 "$KMNT" --file c/cold36 --size $SIZE --count 8 --iters 1 --warmup 0)
bench read36 "$PLAIN" --file c/coldwarm --size $SIZE --iters 1 --warmup 0 >/dev/null
c_plain=$(bench read36 "$PLAIN" --file c/cold36 --size $SIZE --count 8 --iters 1 --warmup 0)
# The same files again: now they are in kvfs's RAM tier.
c_kvfs2=$(bench read36 "$KMNT" --file c/cold36 --size $SIZE --count 8 --iters 1 --warmup 0)

# --------------------------------------------------------------- access
log "access(F_OK): present and absent names"
a_tmpfs=$(bench access "$TMPFS" --count 1000 --seconds 0.3)
a_kvfs=$(bench access "$KMNT" --count 1000 --seconds 0.3)
a_null=$(bench access "$NMNT" --count 1000 --seconds 0.3)
elapsed=$((SECONDS - start))

# --------------------------------------------------------------- report
rt=$(jget "$r_tmpfs" median_gbps) rk=$(jget "$r_kvfs" median_gbps) rn=$(jget "$r_null" median_gbps)
st=$(jget "$s_tmpfs" gbps) sk=$(jget "$s_kvfs" gbps) sp=$(jget "$s_plain" gbps)
fk=$(jget "$f_kvfs" flush_gbps) fkt=$(jget "$f_kvfs" total_gbps)
ck=$(jget "$c_kvfs" median_gbps) cp=$(jget "$c_plain" median_gbps) ck2=$(jget "$c_kvfs2" median_gbps)

row() { # name kvfs ref ratio target
  local v="-"
  [[ $5 != - ]] && v=$(verdict "$4" ">=" "$5")
  printf '| %s | %s | %s | %s | %s | %s |\n' "$1" "$2" "$3" "$4" "${5/#-/info}" "$v"
}
echo
echo "## kvfs micro-benchmarks ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, ${elapsed}s)"
echo
echo "| measurement (GB/s, median) | kvfs | reference | ratio | target | met |"
echo "|---|---|---|---|---|---|"
row "read36 in RAM vs tmpfs" "$rk" "$rt" "$(ratio "$rk" "$rt")" 0.50
row "read36 in RAM vs nullfs (FUSE ceiling)" "$rk" "$rn" "$(ratio "$rk" "$rn")" 0.95
row "store (${STORE_THREADS} thr) vs tmpfs" "$sk" "$st" "$(ratio "$sk" "$st")" 0.50
row "store vs plain backing dir, O_DIRECT" "$sk" "$sp" "$(ratio "$sk" "$sp")" -
row "cold read36 vs backing O_DIRECT read" "$ck" "$cp" "$(ratio "$ck" "$cp")" 0.80
row "flush (close+fsync of dir) vs dd oflag=direct" "$fk" "$dd_gbps" "$(ratio "$fk" "$dd_gbps")" 0.90
row "flush write+fsync vs dd" "$fkt" "$dd_gbps" "$(ratio "$fkt" "$dd_gbps")" -
echo
echo "| detail | tmpfs | kvfs | nullfs | plain dir |"
echo "|---|---|---|---|---|"
echo "| read36 median / best GB/s | $rt / $(jget "$r_tmpfs" best_gbps) | $rk / $(jget "$r_kvfs" best_gbps) | $rn / $(jget "$r_null" best_gbps) | - |"
echo "| read36 median GB/s, nullfs with kvfs's loop call (v32) | - | - | $(jget "$r_n32" median_gbps) | - |"
echo "| store GB/s | $st | $sk | $(jget "$s_null" gbps) (v32 loop: $(jget "$s_n32" gbps)) | $sp |"
echo "| store p50 / p99 ms per 36 MiB | $(jget "$s_tmpfs" p50_ms) / $(jget "$s_tmpfs" p99_ms) | $(jget "$s_kvfs" p50_ms) / $(jget "$s_kvfs" p99_ms) | $(jget "$s_null" p50_ms) / $(jget "$s_null" p99_ms) | $(jget "$s_plain" p50_ms) / $(jget "$s_plain" p99_ms) |"
echo "| cold read36 (1st read after remount) GB/s | - | $ck | - | $cp |"
echo "| same files, 2nd read (RAM tier) GB/s | - | $ck2 | - | - |"
echo "| flush: buffered write GB/s (fds held open) | $(jget "$f_tmpfs" write_gbps) | $(jget "$f_kvfs" write_gbps) | - | - |"
for k in present_1t_ops present_16t_ops absent_1t_ops absent_16t_ops absent_first_pass_ops; do
  echo "| access $k /s | $(jget "$a_tmpfs" $k) | $(jget "$a_kvfs" $k) | $(jget "$a_null" $k) | - |"
done
echo
echo "Raw JSON lines: $RAW"
