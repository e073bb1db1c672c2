#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The table and chart of bench/run_fleet.sh: fleet_report.py RAW.jsonl OUT.md
BACKING writes OUT.md, OUT.dat and (with gnuplot) OUT.png; run again on a
saved RAW.jsonl it rebuilds all three from the same figures.

Server requests are nfsemu's counters (every FUSE request it got, by kind;
forget is left out: it never reaches an NFS server) between two snapshots,
per second of the emulator's uptime between them. Peer passes are the sum of
the nodes' own counters over the idle window after the replay; their share
of the requests during the replay is estimated from the listings, opens and
renames the nodes counted then, at a fixed cost each (peer_share)."""
import json
import shutil
import subprocess
import sys

raw, md, backing = sys.argv[1:4]
rows = [json.loads(line) for line in open(raw) if line.strip()]
emu = {(r["nodes"], r["phase"]): r["emu"] for r in rows if r["cmd"] == "emu"}
nodes = {}
for r in rows:
    if r["cmd"] == "node":
        nodes.setdefault((r["nodes"], r["phase"]), []).append(r)
mrqa = {r["fleet_nodes"]: r for r in rows if r["cmd"] == "mrqa"}
vis = {r["fleet_nodes"]: r for r in rows if r["cmd"] == "visibility"}
KINDS = ["open", "read", "getattr", "lookup", "readdir", "write", "rename"]


def rate(n, a, b):
    """Requests per second by kind between phases a and b of N=n."""
    x, y = emu.get((n, a)), emu.get((n, b))
    if not x or not y:
        return None
    dt = max(1e-9, y["uptime_s"] - x["uptime_s"])
    d = {k: (y["ops"][k] - x["ops"][k]) / dt for k in y["ops"] if k != "forget"}
    d["total"] = sum(d.values())
    d["seconds"] = dt
    return d


def peer(n, a, b):
    """Summed peer-pass counters of the nodes between phases a and b."""
    x, y = nodes.get((n, a), []), nodes.get((n, b), [])
    if not x or len(x) != len(y):
        return None
    get = lambda r, k: r["stats"].get("peers", {}).get(k, 0)
    passes = sum(get(q, "passes") - get(p, "passes") for p, q in zip(x, y))
    secs = sum(get(q, "pass_seconds") - get(p, "pass_seconds") for p, q in zip(x, y))
    opens = sum(get(q, "segment_opens") - get(p, "segment_opens") for p, q in zip(x, y))
    listings = sum(get(q, "listings") - get(p, "listings") for p, q in zip(x, y))
    heads = sum(get(q, "head_listings") - get(p, "head_listings") for p, q in zip(x, y))
    renames = sum(get(q, "head_renames") - get(p, "head_renames") for p, q in zip(x, y))
    slowest = max(get(q, "slowest_pass_seconds") for q in y)
    segs = sum(q["stats"].get("backing", {}).get("segments", 0) for q in y)
    rss = [q["rss_kb"] / 1024 for q in y]
    hwm = [q["hwm_kb"] / 1024 for q in y]
    return dict(passes=passes, secs=secs, opens=opens, listings=listings, heads=heads,
                renames=renames, slowest=slowest, segs=segs,
                rss_mean=sum(rss) / len(rss), rss_max=max(rss), hwm_max=max(hwm))


# What one of a pass's backing calls costs the server, in the emulator's
# requests: a listing is OPENDIR, READDIR (one for a dir of a few hundred
# names), RELEASEDIR; a segment open is OPEN, READ, GETATTR, FLUSH, RELEASE
# (4.95 an open measured in the idle window of the run before heads,
# results/fleet-lan-nfs-noheads.jsonl at N=16, where nearly every request
# was a pass's); a head rename is one RENAME.
PER_LIST, PER_OPEN = 3.0, 5.0


def peer_share(n):
    """The peer passes' requests per second during the replay: their
    listings (of segments/ and of heads/), segment opens and head renames
    (the nodes' own counters) at PER_LIST, PER_OPEN and one request each.
    (An estimate from the idle window after the replay overstated it once
    heads left that window with few opens: its other requests were charged
    to them.) None without the counters (a kvfs before them)."""
    rp, pr = rate(n, "replay0", "replay1"), peer(n, "replay0", "replay1")
    if not (rp and pr):
        return None
    return ((pr["listings"] + pr["heads"]) * PER_LIST + pr["opens"] * PER_OPEN
            + pr["renames"]) / rp["seconds"]


def kinds(d):
    return ", ".join(f"{k} {d[k]:.0f}" for k in KINDS if d.get(k, 0) >= 0.5) or "-"


ns = sorted(k for k in mrqa if k > 0)
o = [f"# A fleet over one shared dir (backing: {backing})", "",
     "`bench/run_fleet.sh`: N kvfs nodes on one machine over one backing dir on the",
     "emulator, the multi-round QA load spread over them"
     + (f" (route {mrqa[ns[0]].get('fleet_route', 'rr')}," if ns else " (")
     + (f" a user's rounds at least {mrqa[ns[0]].get('user_gap_s', 0)} s apart)." if ns else ")."),
     "Server requests per second as the emulator counts them.", "",
     "| N | idle, empty dir: req/s | idle after the replay: req/s (by kind) | idle, settled: req/s | during the replay: req/s | of which peer passes (est.) | segments in the dir |",
     "|---|---|---|---|---|---|---|"]
for n in ns:
    i0, i1, rp = rate(n, "idle0", "idle1"), rate(n, "after0", "after1"), rate(n, "replay0", "replay1")
    pa = peer(n, "after0", "after1")
    if not (i0 and i1 and rp and pa):
        continue
    ps = peer_share(n)
    pss = f"{ps:.0f} ({ps / rp['total']:.2f})" if ps is not None and rp["total"] else "-"
    st = rate(n, "settled0", "settled1")
    sts = f"{st['total']:.0f}" if st else "-"
    o.append(f"| {n} | {i0['total']:.0f} | {i1['total']:.0f} ({kinds(i1)}) | {sts} | {rp['total']:.0f} | "
             f"{pss} | {pa['segs']} |")
plain = rate(0, "replay0", "replay1")
if plain and 0 in mrqa:
    o.append(f"| shared-plain | - | - | - | {plain['total']:.0f} | - | - |")

o += ["", "Peer passes (the idle window after the replay, all nodes), the replay, "
      "visibility (close on n01 to a bit-exact read on the last node) and memory:", "",
      "| N | passes/s per node | mean pass ms | slowest pass ms | segment opens per pass | in the replay: opens / segment listings / head listings per pass, head renames/s per node | hit ratio | GB/s | visibility p50 / p99 ms | RSS per node MiB (mean / max) | peak RSS max MiB |",
      "|---|---|---|---|---|---|---|---|---|---|---|"]
for n in ns:
    pa, r = peer(n, "after0", "after1"), mrqa[n]
    i1 = rate(n, "after0", "after1")
    if not pa or not i1:
        continue
    per_node = pa["passes"] / n / i1["seconds"] if n else 0
    mean_ms = 1e3 * pa["secs"] / pa["passes"] if pa["passes"] else 0
    opens = pa["opens"] / pa["passes"] if pa["passes"] else 0
    pr, rp = peer(n, "replay0", "replay1"), rate(n, "replay0", "replay1")
    if pr and pr["passes"] and rp:
        k = pr["passes"]
        rs = (f"{pr['opens'] / k:.1f} / {pr['listings'] / k:.2f} / {pr['heads'] / k:.2f}, "
              f"{pr['renames'] / n / rp['seconds']:.1f}")
    else:
        rs = "-"
    v = vis.get(n)
    vs = f"{v['p50_ms']:.0f} / {v['p99_ms']:.0f}" if v else "-"
    o.append(f"| {n} | {per_node:.1f} | {mean_ms:.1f} | {1e3 * pa['slowest']:.0f} | {opens:.1f} | {rs} | "
             f"{r['hit_ratio']:.4f} | {r['gbps']:.2f} | {vs} | {pa['rss_mean']:.0f} / {pa['rss_max']:.0f} | "
             f"{pa['hwm_max']:.0f} |")
if 0 in mrqa:
    r = mrqa[0]
    o.append(f"| shared-plain | - | - | - | - | - | {r['hit_ratio']:.4f} | {r['gbps']:.2f} | - | - | - |")

# The chart: what the server gets per second against N (log-log), and what
# a node pays (visibility, RSS). One row per N; "?" where a figure is missing.
base = md[:-3] if md.endswith(".md") else md
dat_rows = []
for n in ns:
    rp, st = rate(n, "replay0", "replay1"), rate(n, "settled0", "settled1")
    ps, v, pa = peer_share(n), vis.get(n), peer(n, "after0", "after1")
    f = lambda x: f"{x:.1f}" if x is not None else "?"
    dat_rows.append(" ".join([
        str(n), f(rp and rp["total"]), f(ps), f(plain and plain["total"]), f(st and st["total"]),
        f(v and v["p50_ms"]), f(v and v["p99_ms"]), f(pa and pa["rss_mean"])]))
open(base + ".dat", "w").write(
    "# N replay_req_s peer_pass_req_s plain_dir_req_s settled_req_s vis_p50_ms vis_p99_ms rss_mib\n"
    + "\n".join(dat_rows) + "\n")
png = base + ".png"
if shutil.which("gnuplot") and dat_rows:
    name = png.rsplit("/", 1)[-1]
    o += ["", f"![server requests and a node's visibility and memory against N]({name})"]
    subprocess.run(["gnuplot"], check=True, text=True, input=f"""
set terminal pngcairo size 1100,480 font "DejaVu Sans,11" noenhanced
set output "{png}"
set multiplot layout 1,2 title "A fleet over one shared dir ({backing})"
set datafile missing "?"
set grid
set xlabel "kvfs nodes (N)"
set logscale x 2
set xtics (1, 2, 4, 8, 16)
set xrange [0.8:20]
set key top left font ",9"
set title "storage server: requests/s"
set logscale y
set ylabel "requests/s"
plot "{base}.dat" using 1:2 with linespoints lw 2 title "kvfs, during the replay", \\
     "" using 1:3 with linespoints lw 2 title "of which peer passes", \\
     "" using 1:($2/10) with lines lw 1 dt 2 lc rgb "#555555" title "target for the peer passes: a tenth", \\
     "" using 1:5 with linespoints lw 2 title "kvfs, idle and settled", \\
     "" using 1:4 with lines lw 2 dt 2 title "the same replay, plain shared dir"
unset logscale y
set key bottom right font ",9"
set title "a node: visibility and memory"
set ylabel "close on n01 to a read on nN, ms"
set y2label "RSS per node, MiB"
set ytics nomirror
set y2tics
set yrange [0:*]
set y2range [0:*]
plot "{base}.dat" using 1:6 with linespoints lw 2 title "visibility p50", \\
     "" using 1:7 with linespoints lw 2 title "visibility p99", \\
     "" using 1:8 axes x1y2 with linespoints lw 2 dt 3 title "RSS per node (64M RAM tier)"
unset multiplot
""")
open(md, "w").write("\n".join(o) + "\n")
print("\n".join(o))
