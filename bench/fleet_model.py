#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The peer passes' cost at fleet scale, on paper (bench/README, "A fleet").

    bench/fleet_model.py [--nodes 16,64] [--data-tb 10] [--segment-mib 256]
        [--entries-per-readdir 200] [--requests-per-open 3.9] [--poll 0.2]
        [--idle-share 0] [--open-segments 4] [--unsealed]

What one node's follower asks of the server, from core/peers/peer_log.cc: every
pass (peer_poll seconds, 0.2) one listing of segments/ (an OPENDIR, the
READDIRs for every node's segments, a RELEASEDIR) and, for each peer, an open
of each segment it is writing (OPEN, GETATTR, READ of the record past the
last one read, CLOSE: --requests-per-open, measured by bench/run_fleet.sh):
its flushers' open segments, --open-segments (flush_threads, 4 on NFS).
Sealed segments (disk_layout.h) are never opened again. A quiet peer
(nothing new for five passes) is opened every fifth pass instead, and while
all peers are quiet the listing waits too; a peer idle for 30 s has sealed
every segment and costs only its share of the listing.
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
ap.add_argument("--requests-per-open", type=float, default=3.9)
ap.add_argument("--poll", type=float, default=0.2)
ap.add_argument("--idle-share", type=float, default=0)
ap.add_argument("--open-segments", type=float, default=4)
ap.add_argument("--unsealed", action="store_true")
a = ap.parse_args()

HOT, OLD_CYCLE, OLD_PER_PASS, REST_EVERY = 8, 25, 4, 5
print(f"{a.data_tb:g} TB in {a.segment_mib:g} MiB segments, peer_poll {a.poll} s, "
      f"{a.entries_per_readdir:g} names per READDIR, {a.requests_per_open} requests per open, "
      f"{a.idle_share:.0%} of peers quiet, "
      + ("unsealed segments" if a.unsealed else f"{a.open_segments:g} open segments per node"))
print()
print("| N | segments per node | listing req/s | segment opens req/s | "
      "older unsealed in turn req/s | per node req/s | whole fleet req/s |")
print("|---|---|---|---|---|---|---|")
for n in (int(x) for x in a.nodes.split(",")):
    total = a.data_tb * 1e12 / (a.segment_mib * 2**20)
    s = total / n
    passes = 1 / a.poll
    listing = (2 + math.ceil(total / a.entries_per_readdir)) * passes
    if a.idle_share >= 1:
        listing /= REST_EVERY
    if a.unsealed:
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
