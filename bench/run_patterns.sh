#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_patterns.sh: the offloaders' file patterns and the micro-benchmarks that
# run_micro.sh does not cover, on tmpfs, a plain local-disk directory and kvfs,
# in one run:
#   - client replays: vllm, llmd, lmcache-native, lmcache-local, nixl-gds (pwrite
#     and io_uring), lmcache-fs (buffered and O_DIRECT) (36 MiB files);
#   - 1 MiB buffered writes and reads (page cache warm, and after drop_caches);
#   - create+rename and mkdir -p rates, 1 and 16 threads;
#   - scaling of the vLLM store and load from 1 to 16 threads;
#   - the daemon's VmRSS/VmHWM against ram_size after a write and read load.
# Prints Markdown tables, writes bench/results/patterns.{jsonl,md}.
#
#   sudo bench/run_patterns.sh [BUILD_DIR]
#
# Environment: WORK (/var/tmp/kvfs-patterns, local disk), KVFS_BIN, KVFS_OPTS,
# PAT_RAM (kvfs ram_size for the replays, default 2G: one replay's 32 files
# fit), PAT_CHUNKS (32), PAT_META (names per metadata run, 20000), MEM_RAM
# (ram_size of the memory check, 512M), OUT. EMU=PRESET: the plain dir and
# kvfs's backing dir are each on an nfsemu mount (bench/nfsemu.cc, an emulated
# NFS server) with that preset, over local-disk dirs in WORK; the results go
# to OUT/patterns-PRESET.{jsonl,md} and every line says its backing.
# Root (tmpfs, drop_caches), /dev/fuse, fusermount3, python3. About 4-5 min.
set -euo pipefail

source "$(dirname "$0")/lib.sh"
use_build "${1:-}" kvfs-bench kvfs ${EMU:+nfsemu}
need_root "tmpfs, drop_caches"

WORK=${WORK:-/var/tmp/kvfs-patterns}
OUT=${OUT:-$here/bench/results}
PAT_RAM=${PAT_RAM:-2G}
CHUNKS=${PAT_CHUNKS:-32}
META=${PAT_META:-20000}
# nfsemu holds an fd for every inode the kernel knows (until the kernel
# forgets it) and cannot go past the hard fd limit where that is fixed (a
# container). One meta run makes META files, up to META leaf dirs and 4096
# dirs above them; the kernel forgets them when its dentries are dropped
# before each run (below). The burst is cut to fit, and the log says so.
if [[ -n ${EMU:-} ]] && (($(ulimit -Hn) < 2 * META + 6000)); then
  META=$((($(ulimit -Hn) - 6000) / 2))
  log "metadata burst cut to $META names: the fd limit is $(ulimit -Hn) (nfsemu holds one per inode)"
fi
MEM_RAM=${MEM_RAM:-512M}
TMPFS=$WORK/tmpfs
PLAIN=$WORK/plain
BACKING=$WORK/backing
INDEX=$WORK/index
KMNT=$WORK/kvfs
TAG=patterns${EMU:+-$EMU}
RAW=$OUT/$TAG.jsonl
ON="local disk"

MOUNTS=("$TMPFS")
SCRATCH=("$BACKING" "$INDEX" "$PLAIN")
if [[ -n ${EMU:-} ]]; then
  ON="nfsemu --preset $EMU"
  PLAIN=$WORK/emu-plain/plain
  BACKING=$WORK/emu-backing/backing
  MOUNTS+=("$WORK/emu-plain" "$WORK/emu-backing")
  SCRATCH+=("$WORK/emu-src")
fi
declare -A BACKS=([tmpfs]=tmpfs [plain]=$ON [kvfs]=$ON)
trap_cleanup

# bench LABEL ARGS...: replaces lib.sh's bench: tags kvfs-bench's JSON line
# with the setup and keeps it only in RAW (the tables come from RAW).
bench() {
  local label=$1 out
  shift
  out=$("$BENCH" "$@")
  echo "${out%\}},\"setup\":\"$label\",\"backing\":\"${BACKS[$label]}\"}" >>"$RAW"
}

mkdir -p "$WORK" "$TMPFS" "$KMNT" "$OUT"
unmount_stale
if [[ -n ${EMU:-} ]]; then
  rm -rf "$WORK/emu-src"
  mount_emu "$EMU" "$WORK/emu-src/plain" "$WORK/emu-plain"
  mount_emu "$EMU" "$WORK/emu-src/backing" "$WORK/emu-backing"
fi
rm -rf "$PLAIN" && mkdir -p "$PLAIN"
: >"$RAW"
mount -t tmpfs -o size=4G kvfs-patterns-tmpfs "$TMPFS"
mount_fresh "$PAT_RAM" capacity=100G
declare -A DIRS=([tmpfs]=$TMPFS [plain]=$PLAIN [kvfs]=$KMNT)
SETUPS="tmpfs plain kvfs"
start=$SECONDS

log "client replays, $CHUNKS x 36 MiB each"
for s in $SETUPS; do
  for c in vllm llmd lmcache-native lmcache-local nixl-gds lmcache-fs; do
    log "  $c on $s"
    bench "$s" "$c" "${DIRS[$s]}" --chunks "$CHUNKS"
  done
  log "  nixl-gds --io io_uring, lmcache-fs --odirect 1 on $s"
  bench "$s" nixl-gds "${DIRS[$s]}" --chunks "$CHUNKS" --io io_uring
  bench "$s" lmcache-fs "${DIRS[$s]}" --chunks "$CHUNKS" --odirect 1
done

log "1 MiB buffered writes and reads, 4 x 256 MiB"
for s in $SETUPS; do
  bench "$s" rw1m "${DIRS[$s]}" --size 256M --count 4
  bench "$s" rw1m "${DIRS[$s]}" --size 256M --count 4 --drop-caches 1
done

log "create+rename and mkdir -p rates"
for s in $SETUPS; do
  for t in 1 16; do
    # the last run's inodes forgotten: nfsemu closes their fds (see META)
    [[ -n ${EMU:-} ]] && sync && echo 2 >/proc/sys/vm/drop_caches
    bench "$s" meta "${DIRS[$s]}" --count "$META" --threads $t
  done
done

log "vLLM store/load scaling, 16 x 36 MiB, 1..16 threads"
for s in $SETUPS; do
  for t in 1 2 4 8 16; do
    bench "$s" vllm "${DIRS[$s]}" --chunks 16 --write-threads $t --read-threads $t
  done
done

# Memory: the daemon after everything above (ram_size=$PAT_RAM), then a fresh
# daemon with ram_size=$MEM_RAM after writing 4x its RAM tier and reading it back.
mem() { # label ram load
  local pid
  pid=$(kvfs_pid)
  echo "{\"cmd\":\"memory\",\"backing\":\"$ON\",\"ram_size\":\"$2\",\"load\":\"$3\",$(awk '/^VmRSS/ {r=$2} /^VmHWM/ {h=$2} END {printf "\"vmrss_kib\":%d,\"vmhwm_kib\":%d", r, h}' "/proc/$pid/status"),\"setup\":\"$1\"}" >>"$RAW"
}
mem kvfs "$PAT_RAM" "all of the above"
log "memory check: ram_size=$MEM_RAM"
mount_fresh "$MEM_RAM" capacity=100G
mem kvfs "$MEM_RAM" "mounted, idle"
n=$(($(numfmt --from=iec "$MEM_RAM") * 4 / 37748736 + 1))
bench kvfs write "$KMNT" --file mem/m36 --size 37748736 --count "$n" >/dev/null
mem kvfs "$MEM_RAM" "after writing $n x 36 MiB"
bench kvfs read36 "$KMNT" --file mem/m36 --size 37748736 --count "$n" --iters 1 --warmup 0
mem kvfs "$MEM_RAM" "after reading them back"
# Files smaller than a 1 MiB block (e.g. 512 KiB chunks) live in smaller buffers.
n=$(($(numfmt --from=iec "$MEM_RAM") * 4 / 524288))
mount_fresh "$MEM_RAM" capacity=100G
bench kvfs write "$KMNT" --file mem/s512 --size 524288 --count "$n" >/dev/null
mem kvfs "$MEM_RAM" "after writing $n x 512 KiB"
bench kvfs read36 "$KMNT" --file mem/s512 --size 524288 --count "$n" --iters 1 --warmup 0
mem kvfs "$MEM_RAM" "after reading them back (512 KiB files)"
elapsed=$((SECONDS - start))

python3 - "$RAW" "$OUT" "$elapsed" <<'EOF' | tee "$OUT/$TAG.md"
import json, sys, datetime, os
raw, out, elapsed = sys.argv[1:4]
rows = [json.loads(l) for l in open(raw) if l.strip()]
sel = lambda cmd, **kw: [r for r in rows if r["cmd"] == cmd and all(r.get(k) == v for k, v in kw.items())]
print(f"## kvfs client patterns and extra micro-benchmarks "
      f"({datetime.datetime.utcnow():%Y-%m-%dT%H:%MZ}, {os.cpu_count()} CPUs, {elapsed} s)\n")
on = next((r["backing"] for r in rows if r.get("setup") == "kvfs" and "backing" in r), "local disk")
print(f"Backing: the plain dir and kvfs's backing dir are on {on}; tmpfs is tmpfs.\n")
n = next((r["chunks"] for r in rows if r["cmd"] == "llmd"), 32)
print(f"Client replays: {n} files of 36 MiB (Qwen3-8B, 256-token chunks) stored with the client's "
      "pattern and thread count, flushed (untimed), looked up, loaded back and verified.\n")
print("| client | setup | store GB/s | load GB/s | store p50 / p99 ms | load p50 / p99 ms | lookups/s present, 1st after store (again) / absent | notes |")
print("|---|---|---|---|---|---|---|---|")
for c in ["vllm", "llmd", "lmcache-native", "lmcache-local", "nixl-gds", "lmcache-fs"]:
    for r in sel(c):
        if c == "vllm" and (r.get("write_threads"), r.get("read_threads")) != (16, 32): continue
        look = "-"
        for k in ("access", "stat"):
            if f"{k}_present_ops_s" in r:
                look = (f"{k}: {r[k+'_present_ops_s']:.0f} (again: {r[k+'_present_warm_ops_s']:.0f})"
                        f" / {r[k+'_absent_ops_s']:.0f}")
        note = {"vllm": f"O_DIRECT {r.get('o_direct')}, 16 write / 32 read threads",
                "llmd": f"64 threads, tail read of {r.get('need', 0)} B; hit-store (open+close+utimensat) {r.get('hit_store_ops_s', 0):.0f}/s",
                "lmcache-native": f"16 threads; unlink {r.get('unlink_ops_s', 0):.0f}/s",
                "lmcache-local": f"4 threads, O_DIRECT {r.get('o_direct')}, LRU budget 16 files: {r.get('lru_evictions')} evicted",
                "nixl-gds": f"{r.get('threads')} threads, {r.get('io')}, {r.get('extents')} extents in flight per file; out of order: {r.get('out_of_order_stores')}/{r.get('stores')} stores, {r.get('out_of_order_loads')}/{r.get('loads')} loads; shutdown sweep {r.get('sweep_entries')} entries, {r.get('sweep_unlinked')} tmp, {r.get('sweep_ms', 0):.1f} ms",
                "lmcache-fs": f"{r.get('threads')} threads, O_DIRECT {r.get('o_direct')}, header {r.get('header_bytes')} B"}[c]
        print(f"| {c} | {r['setup']} | {r['store_gbps']:.2f} | {r['load_gbps']:.2f} | "
              f"{r['store_p50_ms']:.1f} / {r['store_p99_ms']:.1f} | {r['load_p50_ms']:.1f} / {r['load_p99_ms']:.1f} | {look} | {note} |")
print("\n| 1 MiB buffered I/O (4 x 256 MiB) | write GB/s | read GB/s, page cache warm | read GB/s after drop_caches |")
print("|---|---|---|---|")
for s in ["tmpfs", "plain", "kvfs"]:
    w = sel("rw1m", setup=s, drop_caches=False); d = sel("rw1m", setup=s, drop_caches=True)
    if w and d:
        print(f"| {s} | {w[0]['write_gbps']:.2f} | {w[0]['read_gbps']:.2f} | {d[0]['read_gbps']:.2f} |")
nm = next((r["count"] for r in rows if r["cmd"] == "meta"), 20000)
print(f"\n| metadata ({nm} names) | threads | create+rename ops/s | create+rename p99 µs | mkdir -p (new leaf) ops/s | mkdir -p (existing) ops/s |")
print("|---|---|---|---|---|---|")
for s in ["tmpfs", "plain", "kvfs"]:
    for r in sel("meta", setup=s):
        print(f"| {s} | {r['threads']} | {r['create_rename_ops_s']:.0f} | {r['create_rename_p99_us']:.0f} | "
              f"{r['mkdirp_new_ops_s']:.0f} | {r['mkdirp_existing_ops_s']:.0f} |")
print("\n| vLLM pattern, 16 x 36 MiB, threads | store GB/s tmpfs / plain / kvfs | load GB/s tmpfs / plain / kvfs | kvfs store p99 ms | kvfs load p99 ms |")
print("|---|---|---|---|---|")
for t in [1, 2, 4, 8, 16]:
    g = {s: (sel("vllm", setup=s, chunks=16, write_threads=t) or [None])[0] for s in ["tmpfs", "plain", "kvfs"]}
    if not all(g.values()): continue
    st = " / ".join(f"{g[s]['store_gbps']:.2f}" for s in g)
    ld = " / ".join(f"{g[s]['load_gbps']:.2f}" for s in g)
    print(f"| {t} | {st} | {ld} | {g['kvfs']['store_p99_ms']:.1f} | {g['kvfs']['load_p99_ms']:.1f} |")
print("\n| daemon memory | ram_size | VmRSS MiB | VmHWM MiB | limit ram_size + 5% + 64 MiB | met |")
print("|---|---|---|---|---|---|")
units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
for r in sel("memory"):
    rs = r["ram_size"]; ram = int(rs[:-1]) * units[rs[-1].upper()] if rs[-1].isalpha() else int(rs)
    lim = (ram * 1.05 + (64 << 20)) / (1 << 20)
    hwm = r["vmhwm_kib"] / 1024
    print(f"| {r['load']} | {rs} | {r['vmrss_kib']/1024:.0f} | {hwm:.0f} | {lim:.0f} | {'yes' if hwm <= lim else '**NO**'} |")
EOF
log "raw JSON lines: $RAW"
