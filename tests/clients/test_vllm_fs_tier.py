# SPDX-License-Identifier: Apache-2.0
"""vLLM's own filesystem KV-offload tier, run against a plain directory and a
kvfs mount: the installed vllm.v1.kv_offload code (FileSystemTierManager, its
fs_io_C extension and Python I/O path, the TieringOffloadingManager with its
/dev/shm CPU primary tier), not a replay of its syscalls.

Every test checks the bytes it gets back against the bytes it stored, and on
a kvfs mount it also checks kvfs's own counters, so it cannot pass without
the data going through kvfs.

How vLLM picks its I/O path: vllm/v1/kv_offload/tiering/fs/io.py tries
`from vllm.fs_io_C import batch_store_block, batch_load_block` at import and
sets the module flag _HAS_FSIO_C; tiering/fs/manager.py does the same for
batch_lookup (_HAS_BATCH_LOOKUP_C). There is no env var or config key; the
flags are read on every call, so a test forces a path by setting them.
  C path:      access(F_OK) per lookup (batched, GIL released), access +
               create_directories, open(tmp, O_WRONLY|O_CREAT|O_EXCL|O_TRUNC|
               O_DIRECT) without O_CLOEXEC, one write(), close, rename; loads
               open(O_RDONLY|O_DIRECT) and one read().
  Python path: stat() per lookup (os.path.exists), the same open flags plus
               O_CLOEXEC, one write(), rename; loads with one readv().
Both unlink a block whose load comes back short (C: after close(); Python:
while its fd is still open). Neither fsyncs or sets xattrs (vllm 0.33.0). A
store or load job is ONE pool task: its blocks go one after another on one
thread; only separate jobs run in parallel.
"""

import mmap
import os
import time
import uuid
from unittest.mock import MagicMock

import numpy as np
import pytest

import vllm  # noqa: F401

import vllm.v1.kv_offload.tiering.fs.io as fs_io  # noqa: E402
import vllm.v1.kv_offload.tiering.fs.manager as fs_manager  # noqa: E402
from vllm.v1.kv_offload.base import (  # noqa: E402
    LookupResult,
    OffloadingKVEventsConfig,
    ReqContext,
    ScheduleEndContext,
    make_offload_key,
)
from vllm.v1.kv_offload.config import (  # noqa: E402
    OffloadingCacheConfig,
    OffloadingConfig,
    OffloadingGroupConfig,
    OffloadingModelConfig,
    OffloadingParallelConfig,
)
from vllm.v1.kv_offload.tiering.base import TransferJob  # noqa: E402
from vllm.v1.kv_offload.tiering.fs.manager import FileSystemTierManager  # noqa: E402
from vllm.v1.kv_offload.tiering.spec import TieringOffloadingSpec  # noqa: E402

MiB = 1 << 20
CHUNK_SMALL = 9 * MiB // 4  # 2.25 MiB
CHUNK_LARGE = 36 * MiB  # one Qwen3-8B 256-token chunk in bf16
WAIT_S = 30.0  # any single I/O wait; kvfs answering within it is part of the test
PEER_DEADLINE_S = 10.0
END_STEP = ScheduleEndContext(new_req_ids=(), preempted_req_ids=())


# ---------------------------------------------------------------- helpers


def until(pred, timeout: float, what: str, interval: float = 0.002):
    """Polls pred until it is true; fails the test after timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def offloading_config(engine_id: str, chunk_bytes: int = 0, extra: dict | None = None):
    """The normalized config vLLM builds from a VllmConfig for its offloading
    backends; built directly here (no engine)."""
    return OffloadingConfig(
        groups=(OffloadingGroupConfig(tokens_per_block=16, layer_names=("layers.0",), group_id=0),),
        worker_kv_bytes_per_block=chunk_bytes,
        enable_kv_cache_events=False,
        extra_config=extra or {},
        engine_id=engine_id,
        model=OffloadingModelConfig(name="Qwen/Qwen3-8B", dtype="bfloat16"),
        cache=OffloadingCacheConfig(tokens_per_hash=16, blocks_per_chunk=1),
        parallel=OffloadingParallelConfig(
            rank=0, world_size=1, tp_size=1, pp_size=1, pcp_size=1, dcp_size=1,
            data_parallel_index=0, data_parallel_size=1, data_parallel_rank_local=None,
            is_parallelism_agnostic=False,
        ),
    )


def mock_spec(engine_id: str = "fs-tier-test"):
    """What FileSystemTierManager reads from its OffloadingSpec, as vLLM's own
    fs-tier unit test supplies it: .config, .blocks_per_chunk, .kv_events_config."""
    spec = MagicMock()
    spec.config = offloading_config(engine_id)
    spec.blocks_per_chunk = 1
    spec.kv_events_config = OffloadingKVEventsConfig(
        enable_kv_cache_events=False, self_describing_kv_events=False)
    return spec


def new_keys(n: int) -> list:
    return [make_offload_key(os.urandom(32), 0) for _ in range(n)]


def random_rows(n: int, size: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 2**63, size=(n, size // 8), dtype=np.uint64).view(np.uint8)


class CpuBuffer:
    """A page-aligned host buffer of `slots` chunks, as the primary tier's
    memoryview: shape (slots, chunk), strides[0] = chunk."""

    def __init__(self, slots: int, chunk: int):
        self._map = mmap.mmap(-1, slots * chunk)
        self.rows = np.frombuffer(self._map, dtype=np.uint8).reshape(slots, chunk)
        self.view = memoryview(self.rows)


def kvfs_of(request):
    return getattr(request.node, "kvfs_mount", None)


def stat(s: dict, dotted: str) -> int:
    for part in dotted.split("."):
        s = s[part]
    return s


def served_bytes(s: dict) -> int:
    """Bytes kvfs served to readers, from its RAM tier or past it."""
    return stat(s, "cache.ram_hit_bytes") + stat(s, "cache.ram_miss_bytes")


def strays(root: str) -> list[str]:
    """tmp files or O_DIRECT probes left anywhere under root."""
    out = []
    for d, _, files in os.walk(root):
        out += [os.path.join(d, f) for f in files if f.endswith(".tmp") or ".o_direct_probe" in f]
    return out


@pytest.fixture(params=["fs_io_C", "python"])
def io_path(request, monkeypatch):
    """Forces vLLM's I/O path: the fs_io_C extension or its pure-Python one,
    for stores, loads and lookups alike; records which functions really ran."""
    calls = {"c": 0, "py": 0}
    if request.param == "fs_io_C":
        if not (fs_io._HAS_FSIO_C and fs_manager._HAS_BATCH_LOOKUP_C):
            pytest.fail("vllm.fs_io_C did not load: the pinned vllm ships it")
        monkeypatch.setattr(fs_io, "_HAS_FSIO_C", True)
        monkeypatch.setattr(fs_manager, "_HAS_BATCH_LOOKUP_C", True)
        for name in ("batch_store_block_C", "batch_load_block_C"):
            orig = getattr(fs_io, name)
            monkeypatch.setattr(fs_io, name, _counted(orig, calls, "c"))
    else:
        monkeypatch.setattr(fs_io, "_HAS_FSIO_C", False)
        monkeypatch.setattr(fs_manager, "_HAS_BATCH_LOOKUP_C", False)
        for name in ("_store_block", "_load_block"):
            orig = getattr(fs_io, name)
            monkeypatch.setattr(fs_io, name, _counted(orig, calls, "py"))
    yield request.param, calls


def _counted(fn, calls, which):
    def wrapper(*a, **kw):
        calls[which] += 1
        return fn(*a, **kw)
    return wrapper


# ------------------------------------------------- FileSystemTierManager


def wait_jobs(tier: FileSystemTierManager, job_ids) -> dict:
    """Collects the results of job_ids, waiting on the tier pool's condition
    (bounded), never on an unbounded drain."""
    pool = tier._pool
    want, got = set(job_ids), {}
    deadline = time.monotonic() + WAIT_S
    while True:
        got.update({r.job_id: r for r in tier.get_finished_jobs()})
        if want <= got.keys():
            return got
        left = deadline - time.monotonic()
        if left <= 0:
            pytest.fail(f"fs tier jobs {sorted(want - got.keys())} not finished in {WAIT_S} s")
        with pool._condition:
            pool._condition.wait_for(lambda: bool(pool._finished_q), timeout=left)


def tier_lookup(tier: FileSystemTierManager, keys, ctx) -> list:
    """vLLM's async batched lookup, driven step by step as the scheduler does:
    lookup() (RETRY while in flight), on_schedule_end() posts the batch."""
    lm = tier._lookup_manager
    deadline = time.monotonic() + WAIT_S
    while True:
        res = [tier.lookup(k, ctx) for k in keys]
        if LookupResult.RETRY not in res:
            return res
        tier.on_schedule_end(END_STEP)
        until(lambda: lm._pending_results.qsize() > 0, max(0.0, deadline - time.monotonic()),
              "the fs tier's lookup thread")


@pytest.mark.parametrize("chunk,n", [(CHUNK_SMALL, 8), (CHUNK_LARGE, 3)], ids=["2.25MiB", "36MiB"])
def test_fs_tier_store_lookup_load(request, root_dir, io_path, chunk, n):
    path_name, calls = io_path
    k = kvfs_of(request)
    buf = CpuBuffer(2 * n, chunk)
    expected = random_rows(n, chunk, seed=chunk + n)
    buf.rows[:n] = expected

    tier = FileSystemTierManager(
        offloading_spec=mock_spec(), primary_kv_view=buf.view, tier_type="fs",
        root_dir=root_dir, n_read_threads=32, n_write_threads=16)
    try:
        # vLLM probes O_DIRECT once at startup and silently falls back to
        # buffered I/O where it is refused: it must not have fallen back.
        assert tier._use_o_direct is True, f"O_DIRECT probe failed at {root_dir}"
        s0 = k.stats() if k else None

        keys, absent = new_keys(n), new_keys(2)
        ctx = ReqContext(req_id="store-then-load")
        tier.submit_store(TransferJob(1, keys, np.arange(n, dtype=np.int64), False, ctx))
        (res,) = wait_jobs(tier, [1]).values()
        assert res.success and res.transfer_bytes == n * chunk
        for key in keys:
            assert os.stat(tier.file_mapper.get_file_name(key)).st_size == chunk

        assert tier_lookup(tier, keys + absent, ctx) == \
            [LookupResult.HIT] * n + [LookupResult.MISS] * 2

        s1 = k.stats() if k else None
        buf.rows[n:] = 0xEE
        tier.submit_load(TransferJob(2, keys, np.arange(n, 2 * n, dtype=np.int64), True, ctx))
        (res,) = wait_jobs(tier, [2]).values()
        assert res.success, f"load failed ({path_name})"
        for i in range(n):
            assert np.array_equal(buf.rows[n + i], expected[i]), f"block {i}: wrong bytes"
        assert strays(root_dir) == []

        # The forced path is the one that ran.
        if path_name == "fs_io_C":
            assert calls == {"c": 2, "py": 0}
        else:
            assert calls == {"c": 0, "py": 2 * n}

        if k:
            s2 = k.stats()
            assert s1["files"] - s0["files"] == n, "kvfs does not hold one file per block"
            assert s1["logical_bytes"] - s0["logical_bytes"] >= n * chunk
            assert served_bytes(s2) - served_bytes(s1) >= n * chunk, \
                "the loads were not served by kvfs"
    finally:
        tier.shutdown()


@pytest.mark.parametrize("chunk", [CHUNK_SMALL], ids=["2.25MiB"])
def test_fs_tier_short_read_unlinks_block(request, root_dir, io_path, chunk):
    """A block file found shorter than the chunk fails its load, is unlinked by
    vLLM (its delete-on-short-read policy), and the blocks before it are kept."""
    path_name, _ = io_path
    k = kvfs_of(request)
    buf = CpuBuffer(4, chunk)
    expected = random_rows(2, chunk, seed=7)
    buf.rows[:2] = expected
    tier = FileSystemTierManager(
        offloading_spec=mock_spec(), primary_kv_view=buf.view, tier_type="fs",
        root_dir=root_dir, n_read_threads=32, n_write_threads=16)
    try:
        keys = new_keys(2)
        ctx = ReqContext(req_id="short")
        tier.submit_store(TransferJob(1, keys, np.arange(2, dtype=np.int64), False, ctx))
        assert wait_jobs(tier, [1])[1].success
        good, bad = (tier.file_mapper.get_file_name(x) for x in keys)
        os.truncate(bad, chunk // 2)
        files_before = k.stats()["files"] if k else None

        buf.rows[2:] = 0
        tier.submit_load(TransferJob(2, keys, np.array([2, 3]), True, ctx))
        res = wait_jobs(tier, [2])[2]
        assert not res.success
        assert list(res.successful_keys or ()) == [keys[0]], path_name
        assert np.array_equal(buf.rows[2], expected[0])
        assert not os.path.exists(bad), "vLLM's unlink of the short block did not take"
        assert os.path.getsize(good) == chunk
        if k:
            assert k.stats()["files"] == files_before - 1
    finally:
        tier.shutdown()


# ------------------------------------------------- TieringOffloadingManager


class Instance:
    """One vLLM instance's scheduler-side offloading: TieringOffloadingSpec's
    manager, a CPU primary tier in /dev/shm/vllm_offload_<engine_id>.mmap
    cascading to the fs tier at root_dir."""

    def __init__(self, root_dir: str, chunk: int, num_chunks: int, name: str):
        self.engine_id = f"kvfs-test-{name}-{uuid.uuid4().hex[:12]}"
        extra = {
            "cpu_bytes_to_use": num_chunks * chunk,
            "secondary_tiers": [{"type": "fs", "root_dir": root_dir}],
        }
        self.spec = TieringOffloadingSpec(offloading_config(self.engine_id, chunk, extra))
        self.mgr = self.spec.get_manager()
        self.fs = self.mgr.secondary_tiers[0]
        assert isinstance(self.fs, FileSystemTierManager)
        self.region = np.asarray(self.mgr.primary_tier.get_kv_memoryview()).view(np.uint8)
        assert self.region.shape == (num_chunks, chunk)
        self.fs_results = []
        orig = self.fs.get_finished_jobs

        def recorded():
            r = list(orig())
            self.fs_results += r
            return r
        self.fs.get_finished_jobs = recorded
        self._req = 0

    def ctx(self) -> ReqContext:
        self._req += 1
        ctx = ReqContext(req_id=f"{self.engine_id}-req{self._req}")
        self.mgr.on_new_request(ctx)
        return ctx

    def step(self) -> None:
        self.mgr.on_schedule_end(END_STEP)

    def store(self, keys, rows) -> None:
        """GPU->CPU store as the connector does it, then the cascade to fs."""
        ctx = self.ctx()
        out = self.mgr.prepare_store(keys, ctx)
        assert out is not None and list(out.keys_to_store) == list(keys)
        for cid, row in zip(out.store_spec.chunk_ids, rows):
            self.region[cid] = row
        self.mgr.complete_store(keys, ctx)
        pool = self.fs._pool
        with pool._condition:
            assert pool._condition.wait_for(lambda: pool._inflight_jobs == 0, timeout=WAIT_S), \
                "fs tier stores did not finish"
        # prepare_store() polled the tiers this step already, so the cascade's
        # completion is taken up at the next step's poll.
        self.step()
        self.step()
        assert self.fs_results and all(r.success for r in self.fs_results), self.fs_results
        self.mgr.on_request_finished(ctx)

    def promote(self, keys, deadline: float, retry_miss: bool = False) -> ReqContext:
        """lookup() until every key is a HIT in the primary tier: RETRY while
        the fs lookup is in flight, HIT_PENDING while the fs tier loads it.
        With retry_miss, a MISS is asked again in a new request (a peer's file
        may not be visible yet) until the deadline."""
        ctx = self.ctx()
        lm, pool = self.fs._lookup_manager, self.fs._pool
        while True:
            res = [self.mgr.lookup(key, ctx) for key in keys]
            if all(r is LookupResult.HIT for r in res):
                return ctx
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"lookups still {res} at the deadline")
            if LookupResult.MISS in res:
                assert retry_miss, f"a stored block missed: {res}"
                self.mgr.on_request_finished(ctx)
                self.step()
                time.sleep(0.05)  # poll interval of the bounded retry
                ctx = self.ctx()
                continue
            self.step()
            until(lambda: lm._pending_results.qsize() > 0 or bool(pool._finished_q), left,
                  "the fs tier (lookup or promotion)")

    def load(self, keys, ctx) -> list:
        """CPU->GPU load: the chunks' bytes as the worker would copy them."""
        spec = self.mgr.prepare_load(keys, ctx)
        rows = [self.region[cid].copy() for cid in spec.chunk_ids]
        self.mgr.complete_load(keys, ctx)
        self.mgr.on_request_finished(ctx)
        return rows

    def close(self) -> None:
        self.region = None
        self.mgr.shutdown()
        assert not os.path.exists(f"/dev/shm/vllm_offload_{self.engine_id}.mmap")


@pytest.fixture
def instances():
    made = []

    def make(*a, **kw):
        made.append(Instance(*a, **kw))
        return made[-1]
    yield make
    for inst in made:
        inst.close()


def check_rows(got, want) -> None:
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert np.array_equal(g, w), f"chunk {i}: wrong bytes after promotion"


def test_tiering_cascade_and_promote(request, root_dir, instances):
    """CPU primary -> fs cascade, primary reset, then promotion back from fs."""
    chunk, n = CHUNK_SMALL, 4
    k = kvfs_of(request)
    inst = instances(root_dir, chunk, num_chunks=n + 2, name="solo")
    assert inst.fs._use_o_direct is True
    s0 = k.stats() if k else None
    keys, rows = new_keys(n), random_rows(n, chunk, seed=11)
    inst.store(keys, rows)
    for key in keys:
        assert os.path.getsize(inst.fs.file_mapper.get_file_name(key)) == chunk
    if k:
        assert k.stats()["files"] - s0["files"] == n

    # Drop every chunk from the primary tier (vLLM's reset_cache, on sleep or
    # weight update; the fs tier keeps its data) and poison the region.
    inst.mgr.reset_cache()
    inst.mgr.on_reset_flushed()
    inst.region[:] = 0xA5
    s1 = k.stats() if k else None
    ctx = inst.promote(keys, time.monotonic() + WAIT_S)
    check_rows(inst.load(keys, ctx), rows)
    assert sum(r.transfer_bytes for r in inst.fs_results) == 2 * n * chunk
    if k:
        assert served_bytes(k.stats()) - served_bytes(s1) >= n * chunk


def test_tiering_two_instances_share_root(request, root_dir, instances):
    """Two vLLM instances (engine ids, /dev/shm regions) over one root_dir:
    one stores, the other finds the blocks and loads them."""
    chunk, n = CHUNK_SMALL, 4
    k = kvfs_of(request)
    a = instances(root_dir, chunk, num_chunks=n, name="a")
    b = instances(root_dir, chunk, num_chunks=n, name="b")
    assert a.fs.file_mapper.base_path == b.fs.file_mapper.base_path
    keys, rows = new_keys(n), random_rows(n, chunk, seed=12)
    a.store(keys, rows)
    s1 = k.stats() if k else None
    ctx = b.promote(keys, time.monotonic() + WAIT_S)
    check_rows(b.load(keys, ctx), rows)
    assert b.fs_results and all(r.success for r in b.fs_results)
    if k:
        s2 = k.stats()
        assert s2["files"] == s1["files"], "the reader wrote block files"
        assert served_bytes(s2) - served_bytes(s1) >= n * chunk


def test_tiering_across_nodes(kvfs, instances):
    """Two kvfs nodes over one backing dir: an instance on node A stores, one on
    node B finds A's blocks (peer visibility is asynchronous) and loads them."""
    chunk, n = CHUNK_SMALL, 4
    node_a = kvfs.mounted(node_id="A")
    node_b = kvfs.mounted(node_id="B", backing=node_a.backing)
    a = instances(str(node_a.mnt), chunk, num_chunks=n, name="nodeA")
    b = instances(str(node_b.mnt), chunk, num_chunks=n, name="nodeB")
    assert a.fs._use_o_direct and b.fs._use_o_direct
    keys, rows = new_keys(n), random_rows(n, chunk, seed=13)
    a.store(keys, rows)
    node_a.admin("flush", "--wait", str(node_a.mnt))
    assert node_a.stats()["dirty_bytes"] == 0

    sb = node_b.stats()
    ctx = b.promote(keys, time.monotonic() + PEER_DEADLINE_S, retry_miss=True)
    check_rows(b.load(keys, ctx), rows)
    sb2 = node_b.stats()
    assert stat(sb2, "peers.read_bytes") + stat(sb2, "cache.ram_hit_bytes") \
        - stat(sb, "peers.read_bytes") - stat(sb, "cache.ram_hit_bytes") >= n * chunk
    assert stat(sb2, "cache.peer_file_hits") > stat(sb, "cache.peer_file_hits"), \
        "node B did not read A's files as a peer's"
    # B's reads left A's files in place, on both nodes.
    for key in keys:
        rel = os.path.relpath(b.fs.file_mapper.get_file_name(key), node_b.mnt)
        assert os.path.getsize(os.path.join(node_a.mnt, rel)) == chunk
