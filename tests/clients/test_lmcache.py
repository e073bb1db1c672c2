# SPDX-License-Identifier: Apache-2.0
"""LMCache's own code against a plain directory and against a kvfs mount.

Nothing here replays LMCache: every test drives the installed lmcache package
(its CLI, its L2 adapters, its storage backends), and every byte that went
through the filesystem is checked, by LMCache's own verification and again by
reading the files back here.

1. MP mode: ``lmcache server`` with the ``fs_native`` L2 adapter on the
   directory (L1 kept small, LRU, ``--l2-store-policy skip_l1`` so that every
   warm retrieve is served from L2, i.e. read back from the filesystem), driven
   by ``lmcache bench server --mode cpu``, whose cold/warm checksums must all
   match.
2. ``lmcache bench l2`` (run in this process through ``lmcache.cli.main``) for
   ``fs_native`` (buffered and O_DIRECT) and ``nixl_store_dynamic`` (POSIX
   backend, ``use_direct_io``), each with and without an ``eviction`` block,
   with ``--no-skip-verify``; then every stored file is read back and checked.
3. In process: the FSConnector (``remote_url: fs://``) and the
   LocalDiskBackend, through their own classes with CPU tensors: put,
   contains, get, bytes equal (buffered and O_DIRECT).

Each test runs once on a plain directory and once on a kvfs mount (the
``root_dir`` fixture of conftest.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import lmcache  # noqa: F401
import torch

LMCACHE_BIN = shutil.which("lmcache", path=str(Path(sys.executable).parent)) or shutil.which(
    "lmcache")

# Quiet, offline, and no banner for every LMCache process and for this one.
LMC_ENV = {
    "LMCACHE_DISABLE_BANNER": "1",
    "LMCACHE_TRACK_USAGE": "false",
    "DO_NOT_TRACK": "1",
    "PYTHONWARNINGS": "ignore",
}
os.environ.update(LMC_ENV)


def kvfs_of(request):
    """The Kvfs behind root_dir, or None on the plain directory."""
    return getattr(request.node, "kvfs_mount", None)


def poll(pred, timeout: float, step: float = 0.05):
    """pred() until it is truthy or timeout passes; returns its last value."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(step)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def stop(proc: subprocess.Popen, timeout: float = 20) -> None:
    """SIGTERM, then SIGKILL after timeout; always reaps."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=30)


def data_files(d: Path, suffix: str) -> list[Path]:
    return sorted(p for p in d.iterdir() if p.is_file() and p.name.endswith(suffix))


def tmp_files(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if ".tmp" in p.name)


def run_lmcache_cli(argv: list[str]) -> int:
    """lmcache's own CLI entry point, in this process (one torch import for
    all the cases); returns its exit status."""
    from lmcache.cli.main import main

    try:
        main(argv)
    except SystemExit as e:
        return int(e.code or 0)
    return 0


# --------------------------------------------------------------------------
# 1. MP server + fs_native L2, driven by `lmcache bench server --mode cpu`
# --------------------------------------------------------------------------

# 4 layers x 8 heads x 128 x fp16 x K/V = 16 KiB per token: a 256-token chunk
# is a 4 MiB object (one fs_native file).
MP_SHAPE = "(2,64,16,8,128):float16:4"
MP_CHUNK_BYTES = 256 * 16 * 1024
MP_SEQS = 4
MP_TOKENS = 512  # 2 full chunks per request
MP_STORED = MP_SEQS * MP_TOKENS // 256  # chunks stored in all
MP_L2_CHUNKS = 5  # L2 capacity, in chunks


def test_mp_server_fs_native(root_dir, request, tmp_path, capsys):
    assert LMCACHE_BIN, "the lmcache CLI is not installed next to this python"
    l2 = Path(root_dir) / "mp_l2"
    port, http_port = free_port(), free_port()
    # L2 capped at MP_L2_CHUNKS chunks with LRU eviction: the server unlinks
    # the oldest files once the working set outgrows it.
    adapter = {"type": "fs_native", "base_path": str(l2), "num_workers": 2,
               "max_capacity_gb": MP_L2_CHUNKS * MP_CHUNK_BYTES / 2**30,
               "eviction": {"eviction_policy": "LRU"}}
    server_log = tmp_path / "server.log"
    server_cmd = [
        LMCACHE_BIN, "server", "--host", "127.0.0.1", "--port", str(port),
        "--http-host", "127.0.0.1", "--http-port", str(http_port),
        "--l1-size-gb", "0.25", "--eviction-policy", "LRU",
        "--chunk-size", "256", "--max-workers", "1",
        # engine_driven is what `bench server --mode cpu` uses;
        "--supported-transfer-mode", "auto",
        # every key leaves L1 once it is in L2: warm retrieves read the files.
        "--l2-store-policy", "skip_l1",
        "--l2-adapter", json.dumps(adapter),
        "--disable-observability",
    ]
    env = {**os.environ, **LMC_ENV}
    with open(server_log, "wb") as log:
        server = subprocess.Popen(server_cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                  cwd=tmp_path)
    bench_json = tmp_path / "bench.json"
    try:
        up = poll(lambda: port_open(port) or server.poll() is not None, 90, 0.2)
        assert up and server.poll() is None, (
            f"lmcache server did not come up: {server_log.read_text(errors='replace')[-3000:]}")
        # The bench client runs in this process (torch is imported once).
        rc = run_lmcache_cli(
            ["bench", "server", "--mode", "cpu",
             "--rpc-url", f"tcp://127.0.0.1:{port}", "--url", f"http://127.0.0.1:{http_port}",
             "--kvcache-shape-spec", MP_SHAPE, "--num-tokens", str(MP_TOKENS),
             "--start", "0", "--end", str(MP_SEQS), "--interval", "0.3",
             "--format", "json", "--output", str(bench_json)])
        out = capsys.readouterr().out
        assert rc == 0, f"bench server rc {rc}: {out[-4000:]}"
        res = json.loads(bench_json.read_text())["metrics"]["results"]
        # Warm retrieves zero the destination first, then the bench compares
        # the per-chunk checksums of what it stored with what came back.
        assert res["total_requests"] == MP_SEQS, res
        assert res["checksum_fail"] == 0, (res, out[-4000:])
        assert res["checksum_ok"] == MP_SEQS, (res, out[-4000:])
        assert "CHECKSUM MISMATCH" not in out
        # L2 eviction brings the directory back under its capacity.
        files = poll(lambda: (f := data_files(l2, ".data")) and len(f) <= MP_L2_CHUNKS and f, 30)
        assert files, [p.name for p in data_files(l2, ".data")]
    finally:
        stop(server)
    slog = server_log.read_text(errors="replace")
    # The files landed in the directory: one per chunk, full size, no tmp left.
    files = data_files(l2, ".data")
    assert 0 < len(files) <= MP_L2_CHUNKS < MP_STORED, [p.name for p in files]
    assert all(p.stat().st_size == MP_CHUNK_BYTES for p in files)
    assert tmp_files(l2) == []
    # ...and the warm retrieves were served from L2 (the files), not from L1.
    l2_hits = sum(int(m) for m in re.findall(r"retained keys \(\d+ L1, (\d+) L2\)", slog))
    assert l2_hits >= MP_SEQS, f"no L2 prefetch in the server log:\n{slog[-4000:]}"
    k = kvfs_of(request)
    if k is not None:
        st = k.stats()
        assert st["errors"] == {"checksum": 0, "dropped_files": 0, "enospc": 0, "io": 0}
        read = st["cache"]["ram_hit_bytes"] + st["cache"]["ram_miss_bytes"]
        assert read >= l2_hits * MP_CHUNK_BYTES, st["cache"]
        assert st["latency"]["rename"]["count"] >= MP_STORED
        assert st["files"] == len(files)  # the evicted ones were unlinked


# --------------------------------------------------------------------------
# 2. `lmcache bench l2` with verification, then every file checked here
# --------------------------------------------------------------------------

BENCH_KEYS = 8
BENCH_KB = 256
BENCH_ROUNDS = 2
BENCH_WARMUP = 1
BENCH_TOTAL = BENCH_KEYS * (BENCH_ROUNDS + BENCH_WARMUP)
EVICTION = {"eviction_policy": "LRU", "trigger_watermark": 0.8, "eviction_ratio": 0.2}


def _fs_native(d, odirect=False, evict=False):
    a = {"type": "fs_native", "base_path": d, "num_workers": 2}
    if odirect:
        a["use_odirect"] = True
    if evict:
        a["max_capacity_gb"] = 1
        a["eviction"] = EVICTION
    return a


def _nixl(d, evict=False):
    a = {"type": "nixl_store_dynamic", "backend": "POSIX",
         "backend_params": {"file_path": d, "use_direct_io": "true", "max_capacity_gb": "1"}}
    if evict:
        a["eviction"] = EVICTION
    return a


# name -> (adapter json maker, data file suffix)
L2_CASES = {
    "fs_native": (lambda d: _fs_native(d), ".data"),
    "fs_native-evict": (lambda d: _fs_native(d, evict=True), ".data"),
    "fs_native-odirect": (lambda d: _fs_native(d, odirect=True), ".data"),
    "nixl_posix_dio": (lambda d: _nixl(d), ".bin"),
    "nixl_posix_dio-evict": (lambda d: _nixl(d, evict=True), ".bin"),
}


def key_index(name: str) -> int:
    """The bench's key index from a file name: its chunk hash is the index as
    16 big-endian bytes, the last 32 hex digits before the suffix."""
    m = re.search(r"([0-9a-f]{32})\.(data|bin)$", name)
    assert m, name
    return int(m.group(1), 16)


@pytest.mark.parametrize("case", list(L2_CASES))
def test_bench_l2(root_dir, request, tmp_path, case):
    make, suffix = L2_CASES[case]
    d = Path(root_dir) / f"l2-{case}"
    out = tmp_path / "l2.json"
    argv = ["bench", "l2", "--l2-adapter", json.dumps(make(str(d))),
            "--num-keys", str(BENCH_KEYS), "--data-size-kb", str(BENCH_KB),
            "--l1-align-bytes", "4096", "--rounds", str(BENCH_ROUNDS),
            "--warmup-rounds", str(BENCH_WARMUP), "--lookup-max-hit-rate", "1.0",
            "--no-skip-verify", "--format", "json", "--output", str(out), "-q"]
    rc = run_lmcache_cli(argv)
    assert rc == 0, f"lmcache bench l2 ({case}) exited {rc} (1 = a verify mismatch or error)"
    m = json.loads(out.read_text())["metrics"]
    ops = {v["operation"]: v for k, v in m.items() if k.startswith("op_")}
    assert set(ops) == {"Store", "Lookup", "Load"}, ops.keys()
    for op in ops.values():
        assert op["rounds_timed_out"] == 0, op
        assert op["total_success"] == op["total_keys"] == BENCH_KEYS * BENCH_ROUNDS, op

    # Every key the bench stored (warmup included) is one full-size file whose
    # bytes are the bench's fill pattern: key index mod num_keys.
    files = data_files(d, suffix)
    assert sorted(key_index(p.name) for p in files) == list(range(BENCH_TOTAL))
    assert tmp_files(d) == []
    size = BENCH_KB * 1024
    for p in files:
        b = p.read_bytes()
        want = key_index(p.name) % BENCH_KEYS
        assert len(b) == size and b == bytes([want]) * size, f"{p.name}: wrong bytes"
    k = kvfs_of(request)
    if k is not None:
        st = k.stats()
        assert st["files"] >= BENCH_TOTAL
        assert st["logical_bytes"] >= BENCH_TOTAL * size
        assert st["errors"] == {"checksum": 0, "dropped_files": 0, "enospc": 0, "io": 0}


# --------------------------------------------------------------------------
# 3. FSConnector (fs://) and LocalDiskBackend, in process
# --------------------------------------------------------------------------

CHUNK = 256
KV_SHAPE = (4, 2, CHUNK, 8, 128)  # layers, K/V, tokens, heads, head size: 4 MiB bf16
MODEL = "kvfs/test-model"
NKEYS = 4


@pytest.fixture
def lmc_loop():
    """An asyncio loop on its own thread, as LMCache's engine runs one."""
    loop = asyncio.new_event_loop()
    t = threading.Thread(target=loop.run_forever, name="lmc-test-loop", daemon=True)
    t.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    t.join(10)
    assert not t.is_alive(), "event loop thread did not stop"
    loop.close()


def engine(root: Path, odirect: bool, disk_gb: float = 0.05):
    from lmcache.v1.config import LMCacheEngineConfig
    from lmcache.v1.metadata import LMCacheMetadata

    meta = LMCacheMetadata(model_name=MODEL, world_size=1, local_world_size=1, worker_id=0,
                           local_worker_id=0, kv_dtype=torch.bfloat16, kv_shape=KV_SHAPE,
                           chunk_size=CHUNK)
    extra = {}
    if odirect:
        # LocalDiskBackend's switch, and the FSConnector's (which needs the
        # 28-byte chunk header off: it would misalign the payload).
        extra = {"use_odirect": True, "fs_connector_use_odirect": True,
                 "save_chunk_meta": False}
    cfg = LMCacheEngineConfig.from_defaults(
        chunk_size=CHUNK, local_cpu=False, max_local_cpu_size=0.1,
        # fs://host:port/path: the URL parser wants a host and port, unused.
        remote_url=f"fs://localhost:1{root / 'remote'}", remote_serde="naive",
        local_disk=str(root / "disk") + "/", max_local_disk_size=disk_gb,
        lmcache_instance_id="kvfs-test", extra_config=extra or None)
    return cfg, meta


def make_chunks(cpu, meta, n, seed):
    from lmcache.utils import CacheEngineKey
    from lmcache.v1.memory_management import MemoryFormat

    g = torch.Generator().manual_seed(seed)
    shape = meta.get_shapes()[0]
    keys, objs = [], []
    for i in range(n):
        keys.append(CacheEngineKey(MODEL, 1, 0, 0x1000 * seed + i, torch.bfloat16))
        o = cpu.allocate(shape, torch.bfloat16, MemoryFormat.KV_2LTD)
        assert o is not None
        o.tensor.copy_(torch.randn(shape, generator=g).to(torch.bfloat16))
        objs.append(o)
    return keys, objs


@pytest.mark.parametrize("odirect", [False, True], ids=["buffered", "odirect"])
def test_fs_connector(root_dir, request, lmc_loop, odirect):
    from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend
    from lmcache.v1.storage_backend.remote_backend import RemoteBackend

    root = Path(root_dir)
    # With O_DIRECT the connector statvfs()es its base path before it makes
    # it (LMCache 0.5.6): the directory has to exist already.
    (root / "remote").mkdir()
    cfg, meta = engine(root, odirect)
    cpu = LocalCPUBackend(cfg, meta)
    rb = RemoteBackend(cfg, meta, lmc_loop, cpu)
    try:
        assert rb.connection is not None, "FSConnector was not created"
        keys, objs = make_chunks(cpu, meta, NKEYS, seed=3 if odirect else 2)
        want = [o.tensor.clone() for o in objs]
        nbytes = objs[0].get_physical_size()
        assert not any(rb.contains(k) for k in keys)
        for k, o in zip(keys, objs):
            fut = rb.submit_put_task(k, o)
            assert fut is not None
            fut.result(timeout=60)
        assert all(rb.contains(k) for k in keys)
        files = data_files(root / "remote", ".data")
        assert len(files) == NKEYS and tmp_files(root / "remote") == []
        # With the header (buffered) every file is 28 bytes longer.
        hdr = 0 if odirect else 28
        assert all(p.stat().st_size == nbytes + hdr for p in files)
        for k, w in zip(keys, want):
            got = rb.get_blocking(k)
            assert got is not None, f"get {k} returned nothing"
            assert torch.equal(got.tensor, w), "FSConnector returned different bytes"
            got.ref_count_down()
        # The bytes on the filesystem are the tensor's bytes.
        raw = {p.name: p.read_bytes()[hdr:] for p in files}
        assert sorted(raw.values()) == sorted(w.view(torch.uint8).numpy().tobytes() for w in want)
    finally:
        rb.close()
    k = kvfs_of(request)
    if k is not None:
        st = k.stats()
        assert st["files"] >= NKEYS
        assert st["errors"] == {"checksum": 0, "dropped_files": 0, "enospc": 0, "io": 0}


@pytest.mark.parametrize("odirect", [False, True], ids=["buffered", "odirect"])
def test_local_disk_backend(root_dir, request, lmc_loop, odirect):
    from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend
    from lmcache.v1.storage_backend.local_disk_backend import LocalDiskBackend

    root = Path(root_dir)
    # Room for 3 of the 4 MiB chunks: the 4th put evicts the first (unlink).
    cfg, meta = engine(root, odirect, disk_gb=12.5 / 1024)
    cpu = LocalCPUBackend(cfg, meta)
    db = LocalDiskBackend(cfg, lmc_loop, cpu, dst_device="cpu", metadata=meta)
    try:
        keys, objs = make_chunks(cpu, meta, NKEYS, seed=5 if odirect else 4)
        want = [o.tensor.clone() for o in objs]
        nbytes = objs[0].get_physical_size()
        for k, o in zip(keys, objs):
            db.submit_put_task(k, o)
            assert poll(lambda: db.contains(k), 60), f"put of {k} never completed"
        assert not db.contains(keys[0]), "the first chunk was not evicted"
        assert all(db.contains(k) for k in keys[1:])
        disk = root / "disk"
        files = data_files(disk, ".pt")
        assert len(files) == NKEYS - 1, [p.name for p in files]
        assert all(p.stat().st_size == nbytes for p in files)
        for k, w in zip(keys[1:], want[1:]):
            got = db.get_blocking(k)
            assert got is not None
            assert torch.equal(got.tensor, w), "LocalDiskBackend returned different bytes"
            got.ref_count_down()
        raw = sorted(p.read_bytes() for p in files)
        assert raw == sorted(w.view(torch.uint8).numpy().tobytes() for w in want[1:])
    finally:
        db.close()
    k = kvfs_of(request)
    if k is not None:
        st = k.stats()
        assert st["files"] == NKEYS - 1  # the evicted chunk was unlinked
        assert st["errors"] == {"checksum": 0, "dropped_files": 0, "enospc": 0, "io": 0}
