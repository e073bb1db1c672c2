# SPDX-License-Identifier: Apache-2.0
"""The multi-round QA schedule driven through the real client code, into one
directory: vLLM's FileSystemTierManager (vllm.v1.kv_offload.tiering.fs, its
fs_io_C extension, its DualQueueThreadPool and async lookup thread) or
LMCache's fs_native L2 adapter (NativeConnectorL2Adapter over the C++
LMCacheFSClient). Not a replay of their syscalls: their own code does the I/O.

    real_clients_mrqa.py --client vllm|lmcache ROOT [--context-tokens 10000]
        [--time 300] [--users 15] [--rounds 20] [--chunk-bytes 524288]
        [--concurrency 4] [--label NAME] [--kvfs-mount MNT --kvfs-admin BIN]
        [--kvfs-backing DIR] [--dry-run]

The schedule is bench/mrqa_schedule.cc ported line for line (schedule()
below; --dry-run prints the same "requests", "sessions" and "chunks_needed"
as `kvfs-bench mrqa --dry-run`), and chunk identity is the replay's: chunk i
of a prompt belongs to its user, except the chunks wholly inside the shared
system prompt, which every user shares.

A single driver thread plays the scheduler: at most --concurrency requests
at once, in schedule order, one at a time per user. Each request
  1. looks up all its chunks in prefix order, as one batch (vLLM:
     tier.lookup() per key, RETRY until the lookup thread has answered after
     on_schedule_end(); LMCache: submit_lookup_and_lock_task), and takes the
     leading hits;
  2. loads the hits as ONE job (vLLM batches a request's promotions into one
     submit_load per step; LMCache one submit_load_task), then checks every
     byte of every loaded chunk against its deterministic content;
  3. stores the misses as one job (submit_store / submit_store_task).
Content of a chunk: a fixed random base with the chunk's 64-bit id stamped
in the first word of every 4 KiB page.

Prints one JSON line: GB/s = (bytes loaded + stored) / wall time of the
schedule; the process's CPU seconds over that time (getrusage: every thread,
the clients' native I/O threads included) split by thread (Python threads
by name via /proc/self/task), the harness's own share (content stamping and
verification on the driver thread), and with --kvfs-backing the daemon's CPU
seconds (/proc/PID/stat, PID from the backing dir's kvfs.lock) and, with
--kvfs-mount, the RAM-hit share of kvfs's reads (`kvfs-admin stats --json`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import mmap
import os
import resource
import select
import subprocess
import sys
import threading
import time

import numpy as np

PAGE = 4096
CLK = os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------ the schedule
def schedule(users=15, rounds=20, sys_tokens=1000, ctx=1000, answer=100, question=32,
             qps=2.0, vtime=1200.0):
    """bench/mrqa_schedule.cc's schedule(): (user, round, prompt tokens) in the
    order the requests start (multi-round-qa.py's UserSessionManager)."""
    gap_req = users / qps
    alive = gap_req * (rounds - 1)
    gap_users = alive / users
    out, sessions = [], []
    next_id = 0
    last_join = -1e18
    steps = int(vtime / 0.1)
    for k in range(steps + 1):
        t = k * 0.1
        if k == 0:  # _ramp_up: users already part-way through their sessions
            for i in range(users):
                next_id += 1
                s = {"id": next_id, "qid": 0, "history": 0, "last": -1.0, "has_last": False}
                offset = users * gap_users - i * gap_users
                if offset >= 0:
                    passed = int(offset / gap_req) + 1
                    s["last"] = t - offset + (passed - 1) * gap_req
                    s["has_last"] = True
                    s["qid"] = passed
                sessions.append(s)
                if offset < 0:
                    break
        if t - last_join > gap_users:
            next_id += 1
            sessions.append({"id": next_id, "qid": 0, "history": 0, "last": -1.0,
                             "has_last": False})
            last_join = t
        for s in sessions:
            if s["qid"] >= rounds:
                continue
            if s["has_last"] and not (t - s["last"] > gap_req):
                continue
            s["qid"] += 1
            s["history"] += sys_tokens + ctx + question if s["history"] == 0 else question
            out.append((s["id"], s["qid"], s["history"]))
            s["history"] += answer
            s["last"], s["has_last"] = t, True
        sessions = [s for s in sessions if s["qid"] < rounds]
    return out


# ------------------------------------------------------------ content
class Content:
    """Deterministic chunk bytes: base + the chunk id in word 0 of each page."""

    def __init__(self, size: int):
        self.size = size
        rng = np.random.default_rng(0x6b766673)
        self.base = rng.integers(0, 2**63, size=size // 8, dtype=np.uint64)
        self.base_pages = self.base.reshape(-1, PAGE // 8)
        self.cpu_s = 0.0  # driver-thread CPU spent here (the harness, not the client)

    def fill(self, row: np.ndarray, cid: int) -> None:
        t0 = time.thread_time()
        w = row.view(np.uint64)
        w[:] = self.base
        w[:: PAGE // 8] = cid
        self.cpu_s += time.thread_time() - t0

    def poison(self, row: np.ndarray) -> None:
        t0 = time.thread_time()
        row.view(np.uint64)[:: PAGE // 8] = 0xA5A5A5A5A5A5A5A5
        row[:PAGE] = 0xA5
        self.cpu_s += time.thread_time() - t0

    def check(self, row: np.ndarray, cid: int, what: str) -> None:
        t0 = time.thread_time()
        p = row.view(np.uint64).reshape(-1, PAGE // 8)
        ok = bool((p[:, 0] == np.uint64(cid)).all()) and np.array_equal(p[:, 1:],
                                                                          self.base_pages[:, 1:])
        self.cpu_s += time.thread_time() - t0
        if not ok:
            raise SystemExit(f"real_clients_mrqa: wrong bytes loaded for {what}")


class Slots:
    """--concurrency regions of max_chunks page-aligned chunk rows (the
    client's CPU buffer: vLLM's primary_kv_view, LMCache's L1 objects)."""

    def __init__(self, regions: int, per: int, size: int):
        self.per = per
        self._map = mmap.mmap(-1, regions * per * size)
        self.rows = np.frombuffer(self._map, dtype=np.uint8).reshape(regions * per, size)
        self.view = memoryview(self.rows)
        self.free = list(range(regions))

    def row_id(self, region: int, i: int) -> int:
        return region * self.per + i


def chunk_ids(salt: int, user: int, n: int, shared: int):
    """64-bit id and 32-byte hash of chunk i of a prompt of `user`: the chunks
    wholly inside the system prompt are every user's (owner 0)."""
    out = []
    for i in range(n):
        owner = 0 if i < shared else user
        d = hashlib.sha256(f"{salt}:{owner}:{i}".encode()).digest()
        out.append((int.from_bytes(d[:8], "little") | 1, d))
    return out


# ------------------------------------------------------------ per-thread CPU
def thread_cpu() -> dict[str, float]:
    """CPU seconds of each thread of this process, grouped: Python threads by
    their name (digits stripped), the other (native) threads as 'native'; and
    as "<group> user", the user-mode part (stat's utime, in ticks): a Python
    thread holds the GIL only in user mode, never inside a syscall."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:  # schedstat: ns on a CPU, exact (stat's utime/stime are ticks)
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                cpu = int(f.read().split()[0]) / 1e9
            with open(f"/proc/self/task/{tid}/stat") as f:
                user = int(f.read().rsplit(")", 1)[1].split()[11]) / CLK
        except (OSError, ValueError, IndexError):
            continue
        name = names.get(int(tid))
        if name is None:
            group = "native"
        elif name == "MainThread":
            group = "driver"
        else:
            group = name.rstrip("0123456789").rstrip("_")
        out[group] = out.get(group, 0.0) + cpu
        out[group + " user"] = out.get(group + " user", 0.0) + user
    return out


def proc_cpu(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            st = f.read().rsplit(")", 1)[1].split()
        return (int(st[11]) + int(st[12])) / CLK
    except (OSError, ValueError):
        return float("nan")


def kvfs_pid(backing: str | None) -> int | None:
    if not backing:
        return None
    try:
        with open(os.path.join(backing, "kvfs.lock")) as f:
            return int("".join(c for c in f.readline() if c.isdigit()))
    except (OSError, ValueError):
        return None


def kvfs_stats(admin: str | None, mnt: str | None) -> dict | None:
    if not (admin and mnt):
        return None
    r = subprocess.run([admin, "stats", "--json", mnt], capture_output=True, text=True,
                       timeout=30)
    return json.loads(r.stdout) if r.returncode == 0 else None


# ------------------------------------------------------------ the clients
class VllmClient:
    """vLLM's FileSystemTierManager, built as tests/clients/test_vllm_fs_tier.py
    builds it (a mock OffloadingSpec, a CPU buffer as its primary view)."""

    name = "vllm"

    def __init__(self, root: str, slots: Slots, chunk: int, read_threads: int,
                 write_threads: int):
        from vllm.v1.kv_offload.base import (OffloadingKVEventsConfig, ScheduleEndContext,
                                             make_offload_key)
        from vllm.v1.kv_offload.tiering.fs.manager import FileSystemTierManager
        from unittest.mock import MagicMock
        from vllm.v1.kv_offload.config import (OffloadingCacheConfig, OffloadingConfig,
                                               OffloadingGroupConfig, OffloadingModelConfig,
                                               OffloadingParallelConfig)
        from vllm.v1.kv_offload.base import LookupResult, ReqContext
        from vllm.v1.kv_offload.tiering.base import TransferJob
        self.LR, self.ReqContext, self.TransferJob = LookupResult, ReqContext, TransferJob
        self.make_key = make_offload_key
        self.end = ScheduleEndContext(new_req_ids=(), preempted_req_ids=())
        spec = MagicMock()
        spec.config = OffloadingConfig(
            groups=(OffloadingGroupConfig(tokens_per_block=16, layer_names=("layers.0",),
                                          group_id=0),),
            worker_kv_bytes_per_block=chunk, enable_kv_cache_events=False, extra_config={},
            engine_id="kvfs-mrqa", model=OffloadingModelConfig(name="Qwen/Qwen3-8B",
                                                               dtype="bfloat16"),
            cache=OffloadingCacheConfig(tokens_per_hash=16, blocks_per_chunk=1),
            parallel=OffloadingParallelConfig(
                rank=0, world_size=1, tp_size=1, pp_size=1, pcp_size=1, dcp_size=1,
                data_parallel_index=0, data_parallel_size=1, data_parallel_rank_local=None,
                is_parallelism_agnostic=False))
        spec.blocks_per_chunk = 1
        spec.kv_events_config = OffloadingKVEventsConfig(enable_kv_cache_events=False,
                                                         self_describing_kv_events=False)
        self.tier = FileSystemTierManager(offloading_spec=spec, primary_kv_view=slots.view,
                                          tier_type="fs", root_dir=root,
                                          n_read_threads=read_threads,
                                          n_write_threads=write_threads)
        self.o_direct = bool(self.tier._use_o_direct)
        self.pool, self.lm = self.tier._pool, self.tier._lookup_manager
        self._job = 0
        self._lookups: dict[int, tuple] = {}  # req tag -> (keys, ctx)
        self.threads = {"vllm_kv_py_fs_l": "pool (load)", "vllm_kv_py_fs_s": "pool (store)",
                        "vllm_offloading_lookup_fs": "lookup thread"}

    def key(self, digest: bytes):
        return self.make_key(digest, 0)

    # Each returns a handle; poll() returns the finished handles with a result.
    def lookup(self, tag, keys):
        ctx = self.ReqContext(req_id=f"r{tag}")
        self.tier.on_new_request(ctx)
        self._lookups[tag] = (keys, ctx)
        for k in keys:
            self.tier.lookup(k, ctx)
        return ("lookup", tag)

    def load(self, tag, keys, rows):
        self._job += 1
        ctx = self._lookups[tag][1]
        self.tier.submit_load(self.TransferJob(self._job, keys, np.asarray(rows, np.int64),
                                               True, ctx))
        return ("job", self._job)

    def store(self, tag, keys, rows):
        self._job += 1
        ctx = self._lookups[tag][1]
        self.tier.submit_store(self.TransferJob(self._job, keys, np.asarray(rows, np.int64),
                                                False, ctx))
        return ("job", self._job)

    def done(self, tag):
        self._lookups.pop(tag)

    def poll(self, handles, wait_s):
        """One scheduler step: flush lookups, collect finished jobs and lookups."""
        self.tier.on_schedule_end(self.end)
        out = {}
        for r in self.tier.get_finished_jobs():
            out[("job", r.job_id)] = (r.success, r.transfer_bytes)
        for h in handles:
            if h[0] == "lookup":
                keys, ctx = self._lookups[h[1]]
                res = [self.tier.lookup(k, ctx) for k in keys]
                if self.LR.RETRY not in res:
                    # Release the request's verdicts now: kept to its end, a
                    # MISS cached for a shared system-prompt chunk stays while
                    # overlapping requests hold it, and fails their whole
                    # prefix (vLLM's primary CPU tier, not driven here, would
                    # answer those chunks first).
                    self.tier.on_request_finished(ctx)
                    n = 0
                    while n < len(res) and res[n] == self.LR.HIT:
                        n += 1
                    out[h] = n
        if not out:  # nothing yet: wait (bounded) for the pool or the lookup thread
            if any(h[0] == "lookup" for h in handles):
                deadline = time.monotonic() + wait_s
                while self.lm._pending_results.qsize() == 0 and time.monotonic() < deadline:
                    with self.pool._condition:
                        if self.pool._condition.wait_for(lambda: bool(self.pool._finished_q),
                                                         timeout=0.0005):
                            break
            else:
                with self.pool._condition:
                    self.pool._condition.wait_for(lambda: bool(self.pool._finished_q),
                                                  timeout=wait_s)
        return out

    def close(self):
        self.tier.shutdown()


class LmcacheClient:
    """LMCache's fs_native L2 adapter (create_l2_adapter, as `lmcache server
    --l2-adapter '{"type":"fs_native",...}'` and `lmcache bench l2` make it)."""

    name = "lmcache"

    def __init__(self, root: str, slots: Slots, chunk: int, workers: int, odirect: bool):
        import torch
        from lmcache.v1.distributed.api import MemoryLayoutDesc, ObjectKey
        from lmcache.v1.distributed.l2_adapters import create_l2_adapter
        from lmcache.v1.distributed.l2_adapters.config import parse_args_to_l2_adapters_config
        from lmcache.v1.memory_management import MemoryFormat, MemoryObjMetadata, TensorMemoryObj
        self.ObjectKey = ObjectKey
        self.layout = {0: MemoryLayoutDesc(shapes=[], dtypes=[])}
        spec = {"type": "fs_native", "base_path": os.path.join(root, "lmcache_fs_native"),
                "num_workers": workers, "use_odirect": odirect}
        os.makedirs(spec["base_path"], exist_ok=True)
        cfg = parse_args_to_l2_adapters_config(argparse.Namespace(l2_adapter=[json.dumps(spec)]))
        self.adapter = create_l2_adapter(cfg.adapters[0])
        self.o_direct = odirect
        flat = torch.from_numpy(slots.rows).view(-1)
        self.objs = []
        for r in range(slots.rows.shape[0]):  # one MemoryObj per chunk row (L1 object)
            t = flat[r * chunk:(r + 1) * chunk]
            md = MemoryObjMetadata(shape=torch.Size([chunk]), dtype=torch.uint8,
                                   address=r * chunk, phy_size=chunk, fmt=MemoryFormat.KV_2LTD,
                                   ref_count=1)
            self.objs.append(TensorMemoryObj(raw_data=t, metadata=md, parent_allocator=None))
        self._stores_done: dict[int, object] = {}
        self._locked: dict[int, list] = {}
        self.poller = select.poll()
        self.efds = [self.adapter.get_store_event_fd(), self.adapter.get_lookup_and_lock_event_fd(),
                     self.adapter.get_load_event_fd()]
        for fd in self.efds:
            self.poller.register(fd, select.POLLIN)
        from lmcache.v1.platform import consume_fd
        self.consume = consume_fd
        self.threads = {"l2-adapter-demux": "demux thread"}

    def key(self, digest: bytes):
        return self.ObjectKey(chunk_hash=digest, model_name="Qwen3-8B", kv_rank=0)

    def lookup(self, tag, keys):
        self._locked[tag] = keys
        return ("lookup", self.adapter.submit_lookup_and_lock_task(keys, self.layout))

    def load(self, tag, keys, rows):
        return ("load", self.adapter.submit_load_task(keys, [self.objs[r] for r in rows]))

    def store(self, tag, keys, rows):
        return ("store", self.adapter.submit_store_task(keys, [self.objs[r] for r in rows]))

    def done(self, tag):
        self.adapter.submit_unlock(self._locked.pop(tag))

    def poll(self, handles, wait_s):
        out = {}
        self._stores_done.update(self.adapter.pop_completed_store_tasks())
        for h in handles:
            kind, tid = h
            if kind == "lookup":
                b = self.adapter.query_lookup_and_lock_result(tid)
                if b is not None:
                    out[h] = b.count_leading_ones()
            elif kind == "load":
                b = self.adapter.query_load_result(tid)
                if b is not None:
                    out[h] = (b.popcount(), None)
            elif tid in self._stores_done:
                r = self._stores_done.pop(tid)
                out[h] = (r.is_successful(), None)
        if not out:
            for fd, _ in self.poller.poll(wait_s * 1000):
                self.consume(fd)
        return out

    def close(self):
        self.adapter.close()


# ------------------------------------------------------------ the driver
def run(a) -> dict:
    reqs = schedule(a.users, a.rounds, a.system_prompt, a.context_tokens, a.answer,
                    a.question, a.qps, a.time)
    bt, size = a.block_tokens, a.chunk_bytes
    shared = a.system_prompt // bt
    need = sum(t // bt for _, _, t in reqs)
    max_n = max(t // bt for _, _, t in reqs)
    j = {"cmd": "real_clients_mrqa", "client": a.client, "label": a.label, "dir": a.root,
         "users": a.users, "rounds": a.rounds, "qps": a.qps, "time_virtual_s": a.time,
         "system_prompt": a.system_prompt, "context_tokens": a.context_tokens,
         "answer": a.answer, "chunk_bytes": size, "block_tokens": bt, "requests": len(reqs),
         "sessions": max(u for u, _, _ in reqs), "chunks_needed": need}
    if a.dry_run:
        j.update(max_bytes=need * size, dry_run=True)
        return j
    slots = Slots(a.concurrency, max_n, size)
    content = Content(size)
    if a.client == "vllm":
        cl = VllmClient(a.root, slots, size, a.read_threads, a.write_threads)
    else:
        cl = LmcacheClient(a.root, slots, size, a.lmcache_workers, a.lmcache_odirect)
    salt = a.salt if a.salt is not None else int.from_bytes(os.urandom(5), "little")

    pid = kvfs_pid(a.kvfs_backing)
    st0 = kvfs_stats(a.kvfs_admin, a.kvfs_mount)
    kcpu0 = proc_cpu(pid) if pid else None
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    th0 = thread_cpu()
    c0 = content.cpu_s
    t0 = time.monotonic()

    nxt = 0
    busy: set[int] = set()
    active: dict[tuple, dict] = {}  # handle -> request state
    storing: set[bytes] = set()  # LMCache: keys with a put in flight (put_tasks)
    lookups = hits = loads = stores = skipped = 0
    bytes_read = bytes_written = 0
    req_ms: list[float] = []
    steps = 0
    while nxt < len(reqs) or active:
        # Admit in schedule order: a free region, and the user not busy.
        while nxt < len(reqs) and slots.free and reqs[nxt][0] not in busy:
            user, rnd, tokens = reqs[nxt]
            nxt += 1
            n = tokens // bt
            ids = chunk_ids(salt, user, n, shared)
            keys = [cl.key(d) for _, d in ids]
            q = {"tag": nxt, "user": user, "n": n, "ids": ids, "keys": keys,
                 "region": slots.free.pop(), "t0": time.monotonic()}
            busy.add(user)
            lookups += n
            active[cl.lookup(q["tag"], keys)] = q
        steps += 1
        for h, res in cl.poll(list(active), a.poll_s).items():
            q = active.pop(h)
            rows = [slots.row_id(q["region"], i) for i in range(q["n"])]
            if h[0] == "lookup":
                k = q["k"] = res
                hits += k
                if k:
                    for i in range(k):
                        content.poison(slots.rows[rows[i]])
                    active[cl.load(q["tag"], q["keys"][:k], rows[:k])] = q
                    q["phase"] = "load"
                    continue
                res = None  # no hits: straight to the stores
            if q.get("phase") == "load":
                ok, _ = res
                if ok is not True and ok != q["k"]:
                    raise SystemExit(f"real_clients_mrqa: load of {q['k']} chunks failed ({ok})")
                for i in range(q["k"]):
                    content.check(slots.rows[rows[i]], q["ids"][i][0],
                                  f"user {q['user']} chunk {i}")
                loads += q["k"]
                bytes_read += q["k"] * size
            if q.get("phase") in (None, "load"):
                todo = []
                for i in range(q["k"], q["n"]):
                    if a.client == "lmcache":  # a put of a key in flight is skipped
                        d = q["ids"][i][1]
                        if d in storing:
                            skipped += 1
                            continue
                        storing.add(d)
                    content.fill(slots.rows[rows[i]], q["ids"][i][0])
                    todo.append(i)
                if todo:
                    q["phase"], q["stored"] = "store", todo
                    active[cl.store(q["tag"], [q["keys"][i] for i in todo],
                                    [rows[i] for i in todo])] = q
                    continue
            elif q["phase"] == "store":
                ok, _ = res
                if not ok:
                    raise SystemExit(f"real_clients_mrqa: store of {len(q['stored'])} chunks failed")
                stores += len(q["stored"])
                bytes_written += len(q["stored"]) * size
                if a.client == "lmcache":
                    for i in q["stored"]:
                        storing.discard(q["ids"][i][1])
            # request done
            cl.done(q["tag"])
            busy.discard(q["user"])
            slots.free.append(q["region"])
            req_ms.append((time.monotonic() - q["t0"]) * 1e3)
    wall = time.monotonic() - t0
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    th1 = thread_cpu()
    kcpu1 = proc_cpu(pid) if pid else None
    st1 = kvfs_stats(a.kvfs_admin, a.kvfs_mount)
    cl.close()

    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    harness = content.cpu_s - c0
    groups: dict[str, float] = {}
    for g in set(th0) | set(th1):
        label = next((v + g[len(k):] for k, v in cl.threads.items() if g.startswith(k)), g)
        groups[label] = groups.get(label, 0.0) + max(0.0, th1.get(g, 0.0) - th0.get(g, 0.0))
    user = {g[:-5]: groups.pop(g) for g in list(groups) if g.endswith(" user")}
    py_cpu = sum(v for g, v in groups.items() if g != "native")
    py_user = sum(v for g, v in user.items() if g != "native")
    # Threads that ended within the run (getrusage counts them, /proc no more).
    groups["ended threads"] = max(0.0, cpu - sum(groups.values()))
    j.update({
        "label": a.label, "o_direct": cl.o_direct, "concurrency": a.concurrency,
        "read_threads": a.read_threads if a.client == "vllm" else None,
        "write_threads": a.write_threads if a.client == "vllm" else None,
        "lmcache_workers": a.lmcache_workers if a.client == "lmcache" else None,
        "wall_s": round(wall, 3), "gbps": round((bytes_read + bytes_written) / wall / 1e9, 4),
        "chunk_ops_s": round((loads + stores) / wall, 1),
        "request_p50_ms": round(float(np.percentile(req_ms, 50)), 2),
        "request_p99_ms": round(float(np.percentile(req_ms, 99)), 2),
        "lookups": lookups, "hits": hits, "hit_ratio": round(hits / need, 4) if need else 0,
        "loads": loads, "stores": stores, "stores_skipped": skipped,
        "bytes_read": bytes_read, "bytes_written": bytes_written, "verified_bytes": bytes_read,
        "steps": steps,
        "client_cpu_s": round(cpu, 3), "client_cpu_per_wall": round(cpu / wall, 3),
        "harness_cpu_s": round(harness, 3),
        "python_threads_cpu_s": round(py_cpu, 3),
        "python_threads_cpu_per_wall": round(py_cpu / wall, 3),
        "python_threads_user_s": round(py_user, 3),
        "python_threads_user_per_wall": round(py_user / wall, 3),
        "thread_cpu_s": {k: round(v, 3) for k, v in sorted(groups.items())},
        "thread_user_s": {k: round(v, 3) for k, v in sorted(user.items())},
    })
    try:
        j["loadavg_1m_end"] = float(open("/proc/loadavg").read().split()[0])
    except OSError:
        pass
    if pid:
        j["kvfs_pid"] = pid
        j["kvfs_cpu_s"] = round(kcpu1 - kcpu0, 3)
        j["kvfs_cpu_per_wall"] = round((kcpu1 - kcpu0) / wall, 3)
    if st0 and st1:
        def d(path):
            x0, x1 = st0, st1
            for p in path.split("."):
                x0, x1 = x0[p], x1[p]
            return x1 - x0
        hb, mb = d("cache.ram_hit_bytes"), d("cache.ram_miss_bytes")
        j.update({"is_kvfs": True, "kvfs_ram_hit_bytes": hb, "kvfs_ram_miss_bytes": mb,
                  "kvfs_ram_hit_share": round(hb / (hb + mb), 4) if hb + mb else None,
                  "kvfs_backing_read_bytes": d("backing.read_bytes"),
                  "kvfs_hits_ram": d("hits.ram"), "kvfs_hits_backing": d("hits.backing")})
    return j


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("root")
    p.add_argument("--client", choices=["vllm", "lmcache"], required=True)
    p.add_argument("--context-tokens", type=int, default=1000)
    p.add_argument("--users", type=int, default=15)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--qps", type=float, default=2.0)
    p.add_argument("--time", type=float, default=1200.0)
    p.add_argument("--system-prompt", type=int, default=1000)
    p.add_argument("--answer", type=int, default=100)
    p.add_argument("--question", type=int, default=32)
    p.add_argument("--chunk-bytes", type=int, default=524288)
    p.add_argument("--block-tokens", type=int, default=256)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--read-threads", type=int, default=32)
    p.add_argument("--write-threads", type=int, default=16)
    p.add_argument("--lmcache-workers", type=int, default=16)
    p.add_argument("--lmcache-odirect", action="store_true")
    p.add_argument("--poll-s", type=float, default=0.05, help="longest wait of one step")
    p.add_argument("--salt", type=int)
    p.add_argument("--label", default="")
    p.add_argument("--kvfs-mount")
    p.add_argument("--kvfs-admin")
    p.add_argument("--kvfs-backing")
    p.add_argument("--dry-run", action="store_true")
    a = p.parse_args(argv)
    if a.chunk_bytes % PAGE:
        p.error("--chunk-bytes: a multiple of 4096")
    print(json.dumps(run(a)), flush=True)


if __name__ == "__main__":
    os.environ.setdefault("LMCACHE_DISABLE_BANNER", "1")
    os.environ.setdefault("LMCACHE_TRACK_USAGE", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("LMCACHE_LOG_LEVEL", "WARNING")
    sys.exit(main())
