#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_mrqa.sh: LMCache's multi-round QA load (kvfs-bench mrqa) replayed on four
# setups in one run, for each client's file pattern (kvfs-bench mrqa --client:
# vllm = vLLM fs tier, nixl-gds = LMCache MP server with NIXL GDS, lmcache-fs =
# LMCache FSConnector), swept over the user-context length L:
#   direct      the backing dir's filesystem (local disk) used directly
#   tmpfs       a tmpfs (size MRQA_TMPFS_SIZE)
#   kvfs-small  kvfs over a backing dir on that disk, ram_size=MRQA_SMALL_RAM
#   kvfs-large  the same with ram_size=MRQA_LARGE_RAM
# Every (client, setup, L) starts empty (kvfs: fresh backing dir and index_dir,
# mounted anew). Writes bench/results/mrqa.{jsonl,json,md} and the chart
# mrqa.png (gnuplot, pngcairo; one panel per client), prints the table with
# the ratios kvfs/direct and kvfs/tmpfs of the same client. Everything mounted
# here is unmounted on exit.
#
#   sudo bench/run_mrqa.sh [BUILD_DIR]
#
# Scaling (the real load moves TBs; the defaults fit ~3 GiB of disk and ~5 min
# per client on a 2-core VM): MRQA_CLIENTS ("vllm nixl-gds lmcache-fs"), MRQA_TIME (virtual seconds of the schedule, default 300 of
# the benchmark's 1200), MRQA_CHUNK_BYTES (bytes per 256-token chunk file,
# default 524288 = 1/72 of Qwen3-8B's 36 MiB), MRQA_USERS (15), MRQA_ROUNDS
# (20), MRQA_LENGTHS ("1000 5000 10000 20000"), MRQA_CONCURRENCY (4),
# MRQA_SMALL_RAM (512M; "eighth": an eighth of the bytes each run stores,
# its working set), MRQA_LARGE_RAM (4G), MRQA_TMPFS_SIZE (6G),
# MRQA_CAPACITY (60G), WORK (/var/tmp/kvfs-mrqa, local disk), KVFS_BIN,
# KVFS_OPTS (extra -o options), OUT (results dir, default bench/results),
# REPORT_ONLY=1 (no runs: redo the tables and the chart from OUT/mrqa.jsonl).
# EMU=PRESET: "direct" and kvfs's backing dir are each on an nfsemu mount
# (bench/nfsemu.cc, an emulated NFS server) with that preset, over local-disk
# dirs in WORK; the files are OUT/mrqa-PRESET.*, every run says its backing.
# Needs root (tmpfs), /dev/fuse, fusermount3, python3; gnuplot for the chart.
set -euo pipefail

source "$(dirname "$0")/lib.sh"
use_build "${1:-}" kvfs-bench kvfs ${EMU:+nfsemu}
need_root "tmpfs mount"
command -v python3 >/dev/null || die "python3 is needed for the report"

WORK=${WORK:-/var/tmp/kvfs-mrqa}
OUT=${OUT:-$here/bench/results}
LENGTHS=${MRQA_LENGTHS:-"1000 5000 10000 20000"}
CLIENTS=${MRQA_CLIENTS:-"vllm nixl-gds lmcache-fs"}
USERS=${MRQA_USERS:-15}
ROUNDS=${MRQA_ROUNDS:-20}
VTIME=${MRQA_TIME:-300}
CHUNK=${MRQA_CHUNK_BYTES:-524288}
CONC=${MRQA_CONCURRENCY:-4}
SMALL_RAM=${MRQA_SMALL_RAM:-512M}
LARGE_RAM=${MRQA_LARGE_RAM:-4G}
TMPFS_SIZE=${MRQA_TMPFS_SIZE:-6G}
CAPACITY=${MRQA_CAPACITY:-60G}
DIRECT=$WORK/direct
TMPFS=$WORK/tmpfs
BACKING=$WORK/backing
INDEX=$WORK/index
KMNT=$WORK/kvfs
TAG=mrqa${EMU:+-$EMU}
RAW=$OUT/$TAG.jsonl
ON="local disk"

MOUNTS=("$TMPFS")
SCRATCH=("$BACKING" "$INDEX" "$DIRECT")
if [[ -n ${EMU:-} ]]; then
  ON="nfsemu --preset $EMU"
  DIRECT=$WORK/emu-direct/direct
  BACKING=$WORK/emu-backing/backing
  MOUNTS+=("$WORK/emu-direct" "$WORK/emu-backing")
  SCRATCH+=("$WORK/emu-src")
fi
trap_cleanup
# with_backing BACKING: kvfs-bench's JSON line (stdin) with the backing it ran on.
with_backing() {
  local l
  read -r l
  echo "${l%\}},\"backing\":\"$1\"}"
}

mkdir -p "$WORK" "$TMPFS" "$KMNT" "$OUT"
start=$SECONDS
if [[ ${REPORT_ONLY:-0} != 1 ]]; then
unmount_stale
if [[ -n ${EMU:-} ]]; then
  rm -rf "$WORK/emu-src"
  mount_emu "$EMU" "$WORK/emu-src/direct" "$WORK/emu-direct"
  mount_emu "$EMU" "$WORK/emu-src/backing" "$WORK/emu-backing"
fi
: >"$RAW"
mount -t tmpfs -o "size=$TMPFS_SIZE" kvfs-mrqa-tmpfs "$TMPFS"

common=(--users "$USERS" --rounds "$ROUNDS" --time "$VTIME" --chunk-bytes "$CHUNK"
  --concurrency "$CONC")
for client in $CLIENTS; do
  for L in $LENGTHS; do
    opts=(--client "$client" --context-tokens "$L" "${common[@]}")
    # direct: the local-disk directory itself
    rm -rf "$DIRECT" && mkdir -p "$DIRECT"
    log "$client L=$L direct"
    dline=$("$BENCH" mrqa "$DIRECT" "${opts[@]}" --label direct | with_backing "$ON")
    echo "$dline" >>"$RAW"
    rm -rf "$DIRECT"
    small=$SMALL_RAM
    # eighth: an eighth of what this run stores (its working set), 16M at least.
    [[ $small == eighth ]] &&
      small=$(awk -v b="$(jget "$dline" bytes_written)" 'BEGIN {m = int(b / 8 / 1048576); print (m < 16 ? 16 : m) "M"}')
    # tmpfs
    rm -rf "${TMPFS:?}"/*
    log "$client L=$L tmpfs"
    "$BENCH" mrqa "$TMPFS" "${opts[@]}" --label tmpfs | with_backing tmpfs >>"$RAW"
    rm -rf "${TMPFS:?}"/*
    # kvfs, small and large RAM tier, each on a fresh backing dir and index
    for setup in "kvfs-small:$small" "kvfs-large:$LARGE_RAM"; do
      name=${setup%%:*} ram=${setup#*:}
      mount_fresh "$ram" "capacity=$CAPACITY"
      pid=$(kvfs_pid)
      log "$client L=$L $name (ram_size=$ram, pid $pid)"
      line=$("$BENCH" mrqa "$KMNT" "${opts[@]}" --label "$name" --backing-dir "$BACKING")
      hwm=$(awk '/^VmHWM/ {print $2 * 1024}' "/proc/$pid/status")
      umount_kvfs
      # files on the backing dir once the daemon has exited (all of them are kvfs's)
      bfiles=$(find "$BACKING" -type f | wc -l)
      echo "${line%\}},\"ram_size\":\"$ram\",\"daemon_vmhwm_bytes\":$hwm,\"backing_files_final\":$bfiles,\"backing\":\"$ON\"}" >>"$RAW"
    done
  done
done
umount "$TMPFS"
fi # REPORT_ONLY
elapsed=$((SECONDS - start))
[[ ${REPORT_ONLY:-0} == 1 ]] && elapsed=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['meta']['elapsed_s'])" "$OUT/$TAG.json" 2>/dev/null || echo 0)

# ---------------------------------------------------------------- report
python3 - "$RAW" "$OUT" "$elapsed" "$CHUNK" "$VTIME" "$USERS" "$ROUNDS" "$CONC" "$TAG" <<'EOF'
import json, sys, datetime, os
raw, out, elapsed, chunk, vtime, users, rounds, conc, tag = sys.argv[1:10]
rows = [json.loads(l) for l in open(raw) if l.strip()]
for r in rows:  # lines from before --client are vLLM's pattern
    r.setdefault("client", "vllm")
setups = ["direct", "tmpfs", "kvfs-small", "kvfs-large"]
order = ["vllm", "nixl-gds", "lmcache-fs"]
clients = sorted({r["client"] for r in rows}, key=lambda c: (order + [c]).index(c))
by = {(r["client"], r["label"], r["context_tokens"]): r for r in rows}
lengths = sorted({r["context_tokens"] for r in rows})
scale = 37748736 / int(chunk)
def created(r):  # files + directories the setup created on the backing filesystem
    if r["label"].startswith("kvfs"):
        return r.get("backing_files_final", r.get("backing_files_total", 0))
    return r["files_created"] + r["dirs_created"]
summary = []
for c in clients:
    for L in lengths:
        d, t = by.get((c, "direct", L)), by.get((c, "tmpfs", L))
        for k in ("kvfs-small", "kvfs-large"):
            r = by.get((c, k, L))
            if not r: continue
            summary.append({
                "client": c, "context_tokens": L, "setup": k, "ram_size": r.get("ram_size"),
                "gbps": r["gbps"],
                "vs_direct": r["gbps"] / d["gbps"] if d and d["gbps"] else None,
                "vs_tmpfs": r["gbps"] / t["gbps"] if t and t["gbps"] else None,
                "backing_files": created(r),
                "direct_files_and_dirs": created(d) if d else None,
                "fewer_files_x": created(d) / created(r) if d and created(r) else None,
            })
loads = [r["loadavg_1m_end"] for r in rows if "loadavg_1m_end" in r]
meta = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"),
        "cpus": os.cpu_count(), "elapsed_s": int(elapsed), "chunk_bytes": int(chunk),
        "chunk_scale": f"1/{scale:g}", "virtual_time_s": float(vtime), "users": int(users),
        "rounds": int(rounds), "concurrency": int(conc), "clients": clients,
        "loadavg_1m": [min(loads), max(loads)] if loads else None,
        "note": "time-compressed replay: schedule of multi-round-qa.py (--qps 2 "
                "--shared-system-prompt 1000 --answer-len 100) over the first "
                f"{vtime} s, 256-token chunks of {chunk} bytes (Qwen3-8B: 37748736)"}
json.dump({"meta": meta, "runs": rows, "ratios": summary}, open(f"{out}/{tag}.json", "w"), indent=1)

f = lambda v, p=2: "-" if v is None else f"{v:.{p}f}"
md = [f"## Multi-round QA replay ({meta['date']}, {meta['cpus']} CPUs, {elapsed} s)", "",
      f"Scaling: users {users}, rounds {rounds}, first {vtime} s of the 1200 s schedule, "
      f"chunk files of {int(chunk)} B (1/{scale:g} of Qwen3-8B's 36 MiB; read the RAM tiers "
      f"as {scale:g}x larger at full size). Time-compressed: requests in schedule order, "
      f"at most {conc} at once, 32 read / 16 write threads. GB/s = (bytes loaded + stored) / "
      "I/O time. Clients (kvfs-bench mrqa --client): vllm = vLLM fs tier (access, O_DIRECT "
      "one-read loads, nested dirs); nixl-gds = LMCache MP server + NIXL GDS (stat, "
      "O_DIRECT tmp + rename, 3 extents in parallel); lmcache-fs = LMCache FSConnector "
      "(stat, buffered 28 B header + payload, fixed tmp + rename)." +
      (f" 1-min load average at the end of each run: {min(loads):.1f}-{max(loads):.1f} "
       f"(on {meta['cpus']} CPUs; above that, other work shared the machine)." if loads else ""),
      "",
      "Backing: direct and kvfs's backing dir on "
      + next((r["backing"] for r in rows if r["label"] == "direct" and "backing" in r), "local disk")
      + "; tmpfs is tmpfs.",
      "",
      "| client | L (tokens) | setup | GB/s | chunk ops/s | store p50/p99 ms | load p50/p99 ms "
      "| hit ratio | GB read / written | RAM / backing hits | files+dirs created on the backing fs |",
      "|---|---|---|---|---|---|---|---|---|---|---|"]
for c in clients:
    for L in lengths:
        for s in setups:
            r = by.get((c, s, L))
            if not r: continue
            tiers = (f"{r['kvfs_hits_ram']} / {r['kvfs_hits_backing']}" if r.get("is_kvfs")
                     else "-")
            made = (f"{created(r)} files ({r.get('kvfs_backing_segments', '?')} segments)"
                    if s.startswith("kvfs")
                    else f"{r['files_created']} files + {r['dirs_created']} dirs")
            md.append(f"| {c} | {L} | {s} | {r['gbps']:.3f} | {r['chunk_ops_s']:.0f} | "
                      f"{r['store_p50_ms']:.1f} / {r['store_p99_ms']:.1f} | "
                      f"{r['load_p50_ms']:.1f} / {r['load_p99_ms']:.1f} | {r['hit_ratio']:.3f} | "
                      f"{r['bytes_read']/1e9:.1f} / {r['bytes_written']/1e9:.2f} | {tiers} | "
                      f"{made} |")
md += ["", "| client | L | kvfs setup | kvfs/direct | kvfs/tmpfs | fewer backing files than "
       "direct | target (>= 1.0x direct, >= 20x fewer files) | daemon VmHWM MiB |",
       "|---|---|---|---|---|---|---|---|"]
for s in summary:
    ok = (s["vs_direct"] or 0) >= 1.0 and (s["fewer_files_x"] or 0) >= 20
    hwm = by[(s["client"], s["setup"], s["context_tokens"])].get("daemon_vmhwm_bytes", 0) / 2**20
    md.append(f"| {s['client']} | {s['context_tokens']} | {s['setup']} ({s['ram_size']}) | "
              f"{f(s['vs_direct'])} | {f(s['vs_tmpfs'])} | {f(s['fewer_files_x'], 0)}x | "
              f"{'yes' if ok else '**NO**'} | {hwm:.0f} |")
md += ["", f"![MRQA throughput vs context length, one panel per client]({tag}.png)", ""]
open(f"{out}/{tag}.md", "w").write("\n".join(md))
# One gnuplot data block per client (plotted with `index`); the header names
# them and the common y maximum, so that the panels compare at a glance.
ymax = max([r["gbps"] for r in rows] + [0.001])
with open(f"{out}/{tag}.dat", "w") as dat:
    dat.write(f"# clients: {' '.join(clients)} ymax: {ymax * 1.1:.3f}\n")
    for c in clients:
        dat.write(f"# {c}: L " + " ".join(setups) + "\n")
        for L in lengths:
            dat.write(f"{L} " + " ".join(f(by[(c, s, L)]["gbps"], 3) if (c, s, L) in by else "?"
                                         for s in setups) + "\n")
        dat.write("\n\n")
print("\n".join(md))
EOF

if command -v gnuplot >/dev/null; then
  read -r _ _ plot_clients <<<"$(head -1 "$OUT/$TAG.dat" | sed 's/ ymax:.*//')"
  ymax=$(head -1 "$OUT/$TAG.dat" | sed 's/.* ymax: //')
  n=$(wc -w <<<"$plot_clients")
  gnuplot <<EOF
set terminal pngcairo size $((420 * n + 180)),540 font "DejaVu Sans,11" noenhanced
set output "$OUT/$TAG.png"
set multiplot layout 1,$n title "Multi-round QA replay: throughput vs context length (chunk $CHUNK B, ${VTIME}s of schedule)"
set xlabel "user context L (tokens)"
set xtics 5000
set ylabel "GB/s (loaded + stored / I/O time)"
set key top left font ",9"
set grid
set yrange [0:$ymax]
set datafile missing "?"
clients = "$plot_clients"
do for [i=1:words(clients)] {
  set title "client: ".word(clients, i)
  plot "$OUT/$TAG.dat" index (i-1) using 1:2 with linespoints lw 2 title "direct ($ON)", \
       "" index (i-1) using 1:3 with linespoints lw 2 title "tmpfs", \
       "" index (i-1) using 1:4 with linespoints lw 2 title "kvfs ram_size=$SMALL_RAM", \
       "" index (i-1) using 1:5 with linespoints lw 2 title "kvfs ram_size=$LARGE_RAM"
}
unset multiplot
EOF
  log "chart: $OUT/$TAG.png"
else
  log "gnuplot not found (apt-get install -y gnuplot-nox): no chart"
fi
log "results: $OUT/$TAG.json, $OUT/$TAG.md, raw lines $RAW"
