#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_real_clients.sh: the multi-round QA schedule (bench/mrqa_schedule.cc,
# ported in bench/real_clients_mrqa.py) driven through the real client code,
# vLLM's FileSystemTierManager and LMCache's fs_native L2 adapter, on three
# setups, every one starting empty:
#   direct      the client writing straight into a dir on an nfsemu mount
#               (RC_EMU preset, default lan-nfs) of a local-disk dir
#   kvfs-small  kvfs over a backing dir on such an nfsemu mount, ram_size = an
#               eighth of what the client stores in the run (its working set)
#   kvfs-large  the same with ram_size = RC_LARGE_RAM (holds all of it)
# RC_RUNS rounds (default 3); each round runs the setups in turn, the order
# rotating from round to round. Prints the table (medians, ratios
# kvfs/direct, the client's and kvfs's CPU) and writes
# OUT/real_clients.{jsonl,md,json} (real_clients-RC_EMU.* for a preset other
# than lan-nfs). Everything mounted here is unmounted on exit.
#
#   sudo bench/run_real_clients.sh [BUILD_DIR]
#
# Knobs: RC_CLIENTS ("vllm lmcache"), RC_L (context tokens, 10000), RC_TIME
# (virtual seconds of the schedule, 150), RC_CHUNK_BYTES (524288), RC_USERS
# (15), RC_ROUNDS (20), RC_CONCURRENCY (4), RC_RUNS (3), RC_EMU (lan-nfs),
# RC_LARGE_RAM (4G), RC_CAPACITY (60G), RC_PYTHON (the clients' venv python,
# /root/.cache/kvfs/clients/bin/python), WORK (/var/tmp/kvfs-real), OUT
# (bench/results), KVFS_BIN, KVFS_OPTS, REPORT_ONLY=1 (tables from
# the jsonl). Needs root, /dev/fuse, fusermount3, the venv.
set -euo pipefail

source "$(dirname "$0")/lib.sh"
use_build "${1:-}" kvfs nfsemu kvfs-admin
need_root "FUSE mounts of nfsemu and kvfs"

PY=${RC_PYTHON:-/root/.cache/kvfs/clients/bin/python}
[[ -x $PY ]] || die "$PY is missing (the vllm + lmcache venv)"
WORK=${WORK:-/var/tmp/kvfs-real}
OUT=${OUT:-$here/bench/results}
CLIENTS=${RC_CLIENTS:-"vllm lmcache"}
L=${RC_L:-10000}
VTIME=${RC_TIME:-150}
CHUNK=${RC_CHUNK_BYTES:-524288}
USERS=${RC_USERS:-15}
ROUNDS=${RC_ROUNDS:-20}
CONC=${RC_CONCURRENCY:-4}
RUNS=${RC_RUNS:-3}
EMU=${RC_EMU:-lan-nfs}
LARGE_RAM=${RC_LARGE_RAM:-4G}
CAPACITY=${RC_CAPACITY:-60G}
DIRECT=$WORK/emu-direct/direct
BACKING=$WORK/emu-backing/backing
INDEX=$WORK/index
KMNT=$WORK/kvfs
# lan-nfs keeps the first run's names; another preset gets its own files.
TAG=real_clients-$EMU
[[ $EMU == lan-nfs ]] && TAG=real_clients
RAW=$OUT/$TAG.jsonl
MOUNTS+=("$WORK/emu-direct" "$WORK/emu-backing")
SCRATCH+=("$WORK/emu-src" "$INDEX")
trap_cleanup

common=(--context-tokens "$L" --users "$USERS" --rounds "$ROUNDS" --time "$VTIME"
  --chunk-bytes "$CHUNK" --concurrency "$CONC")
# rc CLIENT LABEL DIR [ARGS...]: one run of the real client; its JSON line.
rc() {
  local client=$1 label=$2 dir=$3
  shift 3
  LMCACHE_DISABLE_BANNER=1 LMCACHE_TRACK_USAGE=false DO_NOT_TRACK=1 PYTHONWARNINGS=ignore \
    "$PY" "$here/bench/real_clients_mrqa.py" "$dir" --client "$client" --label "$label" \
    "${common[@]}" "$@" 2>"$WORK/$client-$label.err" | tail -n1 ||
    { tail -n 20 "$WORK/$client-$label.err" >&2; die "$client $label failed"; }
}
# with JSON KEY=VALUE...: the line with string fields added.
with() {
  local l=$1 kv
  shift
  for kv in "$@"; do l="${l%\}}, \"${kv%%=*}\": \"${kv#*=}\"}"; done
  echo "$l"
}

mkdir -p "$WORK" "$KMNT" "$OUT"
start=$SECONDS
if [[ ${REPORT_ONLY:-0} != 1 ]]; then
  unmount_stale
  rm -rf "$WORK/emu-src"
  mount_emu "$EMU" "$WORK/emu-src/direct" "$WORK/emu-direct"
  mount_emu "$EMU" "$WORK/emu-src/backing" "$WORK/emu-backing"
  : >"$RAW"
  # The bytes a run stores: from one sizing run of the client on a local-disk
  # dir (the same for every setup: the hit ratio depends on the schedule only).
  setups=(direct kvfs-small kvfs-large)
  for client in $CLIENTS; do
    small=""
    for run in $(seq "$RUNS"); do
      # rotate the order, so that no setup always runs first (a warm machine)
      for k in 0 1 2; do
        s=${setups[$(((k + run - 1) % 3))]}
        if [[ $s == direct ]]; then
          rm -rf "$DIRECT" && mkdir -p "$DIRECT"
          log "$client run $run: direct on nfsemu $EMU"
          line=$(rc "$client" direct "$DIRECT")
          rm -rf "$DIRECT"
          with "$line" run="$run" backing="nfsemu $EMU" >>"$RAW"
          continue
        fi
        if [[ $s == kvfs-small ]]; then
          if [[ -z $small ]]; then # an eighth of what the client stores here
            d=$(mktemp -d "$WORK/size.XXXX")
            b=$(rc "$client" sizing "$d" | python3 -c 'import json,sys; print(json.load(sys.stdin)["bytes_written"])')
            rm -rf "$d"
            small=$(awk -v b="$b" 'BEGIN {m = int(b / 8 / 1048576); print (m < 16 ? 16 : m) "M"}')
            log "$client stores $b bytes: kvfs-small ram_size=$small"
          fi
          ram=$small
        else
          ram=$LARGE_RAM
        fi
        mount_fresh "$ram" "capacity=$CAPACITY"
        pid=$(kvfs_pid)
        log "$client run $run: $s (ram_size=$ram, pid $pid)"
        line=$(rc "$client" "$s" "$KMNT" --kvfs-mount "$KMNT" --kvfs-admin "$ADMIN" \
          --kvfs-backing "$BACKING")
        umount_kvfs
        with "$line" run="$run" ram_size="$ram" backing="nfsemu $EMU" >>"$RAW"
      done
    done
  done
fi
elapsed=$((SECONDS - start))

# ---------------------------------------------------------------- report
python3 - "$RAW" "$OUT" "$elapsed" "$TAG" <<'EOF'
import json, sys, datetime, os, statistics as st
raw, out, elapsed, tag = sys.argv[1:5]
rows = [json.loads(l) for l in open(raw) if l.strip()]
clients = [c for c in ("vllm", "lmcache") if any(r["client"] == c for r in rows)]
setups = ["direct", "kvfs-small", "kvfs-large"]
by = {}
for r in rows:
    by.setdefault((r["client"], r["label"]), []).append(r)
med = lambda rs, k: st.median(r[k] for r in rs) if rs and all(r.get(k) is not None for r in rs) else None
f = lambda v, p=2: "-" if v is None else f"{v:.{p}f}"
r0 = rows[0]
loads = [r["loadavg_1m_end"] for r in rows if "loadavg_1m_end" in r]
date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
names = {"vllm": "vLLM FileSystemTierManager (fs_io_C, 32 read / 16 write threads)",
         "lmcache": f"LMCache fs_native L2 adapter ({r0.get('lmcache_workers') or 16} workers)"}
for r in rows:
    if r["client"] == "lmcache":
        names["lmcache"] = (f"LMCache fs_native L2 adapter ({r['lmcache_workers']} workers, "
                            f"{'O_DIRECT' if r['o_direct'] else 'buffered'})")
        break
md = [f"## Real client code, multi-round QA ({date}, {os.cpu_count()} CPUs, {elapsed} s)", "",
      f"Schedule: users {r0['users']}, rounds {r0['rounds']}, L = {r0['context_tokens']} tokens, "
      f"the first {r0['time_virtual_s']:g} s of the 1200 s schedule ({r0['requests']} requests, "
      f"{r0['chunks_needed']} chunks of {r0['chunk_bytes']} B), time-compressed, "
      f"{r0['concurrency']} requests at once. Direct and kvfs's backing dir on "
      f"{r0.get('backing', '?')}. {len(set(r['run'] for r in rows))} runs per setup, "
      "medians (range). GB/s = (bytes loaded + stored) / wall time; every loaded byte verified. "
      "CPU s: the client process over the run (all its threads; the harness's own content "
      "stamping and checking, 'harness', included), 'py user' = user-mode CPU of its Python "
      "threads (the most they can have held the GIL), kvfs = the daemon."
      + (f" 1-min load average at the end of the runs: {min(loads):.1f}-{max(loads):.1f}." if loads else ""),
      "",
      "| client | setup | GB/s | kvfs/direct | wall s | hit ratio | client CPU s (harness) "
      "| py user s / wall | kvfs CPU s | RAM-hit share |",
      "|---|---|---|---|---|---|---|---|---|---|"]
summary = []
for c in clients:
    d = by.get((c, "direct"), [])
    dg = med(d, "gbps")
    for s in setups:
        rs = by.get((c, s), [])
        if not rs: continue
        g = med(rs, "gbps")
        rng = f"{min(r['gbps'] for r in rs):.2f}-{max(r['gbps'] for r in rs):.2f}"
        ratio = g / dg if dg and s != "direct" else None
        per_run = None
        if s != "direct" and d:
            dr = {r["run"]: r["gbps"] for r in d}
            per_run = [round(r["gbps"] / dr[r["run"]], 2) for r in rs if r["run"] in dr]
        ram = f" ({rs[0]['ram_size']})" if rs[0].get("ram_size") else ""
        md.append(
            f"| {c} | {s}{ram} | {g:.3f} ({rng}) | "
            f"{f(ratio) + 'x' if ratio else '-'}{' (' + ', '.join(map(str, per_run)) + ')' if per_run else ''} | "
            f"{f(med(rs, 'wall_s'), 1)} | {f(med(rs, 'hit_ratio'), 3)} | "
            f"{f(med(rs, 'client_cpu_s'), 1)} ({f(med(rs, 'harness_cpu_s'), 1)}) | "
            f"{f(med(rs, 'python_threads_user_s'), 1)} / {f(med(rs, 'python_threads_user_per_wall'))} | "
            f"{f(med(rs, 'kvfs_cpu_s'), 1)} | {f(med(rs, 'kvfs_ram_hit_share'), 3)} |")
        summary.append({"client": c, "setup": s, "ram_size": rs[0].get("ram_size"),
                        "gbps_median": g, "vs_direct": ratio, "vs_direct_per_run": per_run,
                        "runs": len(rs)})
md += ["", "Per-thread CPU seconds, medians (client: driver = the scheduler-like loop with "
       "the harness; pool = vLLM's DualQueueThreadPool; native = non-Python threads, e.g. "
       "LMCache's C++ workers):", ""]
for c in clients:
    for s in setups:
        rs = by.get((c, s), [])
        if not rs: continue
        keys = sorted({k for r in rs for k in r["thread_cpu_s"]})
        parts = [f"{k} {st.median(r['thread_cpu_s'].get(k, 0) for r in rs):.2f}" for k in keys]
        md.append(f"- {c} {s}: " + ", ".join(parts))
md.append("")
json.dump({"runs": rows, "summary": summary}, open(f"{out}/{tag}.json", "w"), indent=1)
open(f"{out}/{tag}.md", "w").write("\n".join(md))
print("\n".join(md))
EOF
log "results: $OUT/$TAG.md, raw lines $RAW"
