#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The peer passes' cost at fleet scale, on paper (bench/README, "A fleet").

    bench/fleet_model.py [--nodes 16,64] [--data-tb 10] [--segment-mib 256]
        [--entries-per-readdir 200] [--requests-per-open 5] [--poll 0.2]
        [--idle-share 0] [--open-segments 4] [--moved 1] [--no-heads] [--unsealed]
        [--open-budget 20] [--max-open-pause 0.5]

What one node's follower asks of the server, from core/peers/peer_log.cc: every
pass (peer_poll seconds, 0.2) one listing of heads/ (disk_layout.h: one
name per node; an OPENDIR, a READDIR per --entries-per-readdir names, a
RELEASEDIR) and, for each peer, an open of each segment whose end its head
says moved (OPEN, GETATTR, READ of the records past the last one read,
FLUSH, RELEASE: --requests-per-open, 4.95 measured by bench/run_fleet.sh
where nearly every request was a pass's): of its
flushers' open segments, --open-segments (flush_threads, 4 on NFS), the
share --moved (1: every flusher of every writing peer syncs a batch every
pass, the worst case). segments/ (READDIRs for every node's segment names)
is listed at most every 10 passes (2 s) while heads move. Each node renames its own
head once per synced batch: --open-segments x --moved per pass. Sealed
segments are never opened again. A quiet peer (nothing new for five
passes) rests, and while all peers rest heads/ is listed every fifth pass.
With heads, a pass that opened many segments stretches the pause after it
so that the passes open at most --open-budget segments a second, the pause
at most --max-open-pause seconds (PeerLog::follow_pause_s; 0: no budget,
as before it). --moved is per peer_poll: a longer pause finds more segments
moved, so the budget saves opens only where they all move every pass.
--no-heads: the follower before heads: segments/ listed every pass and
every open segment of every writing peer opened every pass.
--unsealed: a dir written before seals (or on a backing fs that refuses
chmod): each peer's newest min(8, S) segments every pass and a few older
ones in turn, each at least every 25 passes, at most four a pass.
--idle-share: the fraction of peers that are quiet at a time (with seals:
idle 30 s and more)."""
import argparse
import math

ap = argparse.ArgumentParser()
ap.add_argument("--nodes", default="16,64")
ap.add_argument("--data-tb", type=float, default=10)
ap.add_argument("--segment-mib", type=float, default=256)
ap.add_argument("--entries-per-readdir", type=float, default=200)
ap.add_argument("--requests-per-open", type=float, default=5)
ap.add_argument("--poll", type=float, default=0.2)
ap.add_argument("--idle-share", type=float, default=0)
ap.add_argument("--open-segments", type=float, default=4)
ap.add_argument("--moved", type=float, default=1)
ap.add_argument("--no-heads", action="store_true")
ap.add_argument("--unsealed", action="store_true")
ap.add_argument("--open-budget", type=float, default=20)
ap.add_argument("--max-open-pause", type=float, default=0.5)
a = ap.parse_args()

HOT, OLD_CYCLE, OLD_PER_PASS, REST_EVERY, LIST_EVERY = 8, 25, 4, 5, 10
heads = not (a.no_heads or a.unsealed)
print(f"{a.data_tb:g} TB in {a.segment_mib:g} MiB segments, peer_poll {a.poll} s, "
      f"{a.entries_per_readdir:g} names per READDIR, {a.requests_per_open} requests per open, "
      f"{a.idle_share:.0%} of peers quiet, "
      + ("unsealed segments, no heads" if a.unsealed else f"{a.open_segments:g} open segments per node")
      + (f", heads ({a.moved:.0%} of a writing peer's open segments move per pass; "
         f"at most {a.open_budget:g} opens/s, pause at most {a.max_open_pause:g} s)" if heads
         else ", no heads"))
print()
print("| N | segments per node | listing req/s | segment opens req/s | "
      "older unsealed in turn req/s | per node req/s | whole fleet req/s |")
print("|---|---|---|---|---|---|---|")
for n in (int(x) for x in a.nodes.split(",")):
    total = a.data_tb * 1e12 / (a.segment_mib * 2**20)
    s = total / n
    passes = 1 / a.poll
    moved = a.moved  # the share of a writing peer's open segments that moved since the last pass
    if not (a.no_heads or a.unsealed) and a.open_budget > 0:
        # --moved is per peer_poll: a longer pause finds more of them moved
        # (the same syncs, fewer passes), so it saves opens only where
        # every segment moves every pass. The pause: its fixed point.
        pause = a.poll
        for _ in range(50):
            moved = min(1.0, a.moved * pause / a.poll)
            opens = (n - 1) * (1 - a.idle_share) * min(a.open_segments, s) * moved
            pause = max(a.poll, min(opens / a.open_budget, a.max_open_pause))
        moved = min(1.0, a.moved * pause / a.poll)
        passes = 1 / pause
    listing = (2 + math.ceil(total / a.entries_per_readdir)) * passes
    if a.idle_share >= 1:
        listing /= REST_EVERY
    if heads:
        # heads/ every pass, segments/ at most every LIST_EVERY passes while
        # some head moves, and each node's own renames.
        seg_listing = listing / LIST_EVERY if a.idle_share < 1 else 0
        head_listing = (2 + math.ceil(n / a.entries_per_readdir)) * passes
        if a.idle_share >= 1:
            head_listing /= REST_EVERY
        # (a batch every peer_poll, whatever the follower's pause)
        renames = a.open_segments * a.moved / a.poll if a.idle_share < 1 else 0
        listing = seg_listing + head_listing + renames
        active = (n - 1) * (1 - a.idle_share)
        hot = active * min(a.open_segments, s) * moved * a.requests_per_open * passes
        full = 0
    elif a.unsealed:
        active = (n - 1) * (1 - a.idle_share) + (n - 1) * a.idle_share / REST_EVERY
        hot = active * min(HOT, s) * a.requests_per_open * passes
        old = min(OLD_PER_PASS, math.ceil(max(0, s - HOT) / OLD_CYCLE))
        full = active * old * a.requests_per_open * passes
    else:  # only what is being written is opened; an idle peer has sealed all
        active = (n - 1) * (1 - a.idle_share)
        hot = active * min(a.open_segments, s) * a.requests_per_open * passes
        full = 0
    node = listing + hot + full
    print(f"| {n} | {s:.0f} | {listing:,.0f} | {hot:,.0f} | {full:,.0f} | {node:,.0f} | "
          f"{n * node:,.0f} |")
