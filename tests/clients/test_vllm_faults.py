# SPDX-License-Identifier: Apache-2.0
"""Faults as vLLM's filesystem KV-offload tier sees them, on a real kvfs mount.

vLLM's ``FileSystemTierManager`` (vllm/v1/kv_offload/tiering/fs/) is driven
directly, as its scheduler does: ``submit_store``/``submit_load`` of
``TransferJob``s against a page-aligned CPU buffer (the "primary tier"), and
``get_finished_jobs`` for the ``JobResult``s. Lookups use the manager's own
``FsAsyncLookupManager.batch_lookup`` (the call its background lookup thread
makes), synchronously. Each test runs over both of vLLM's block I/O paths: the
``fs_io_C`` extension (``c``) and the pure-Python one (``py``, which is what
runs when ``vllm.fs_io_C`` is not built).

What vLLM's code does with any failing block I/O, common to every case here
(read from the installed vLLM, confirmed by the tests):

* The worker thread of its ``DualQueueThreadPool`` catches the exception and
  logs ``ERROR ... Job <id> block I/O failed: <exc>`` (logger
  ``vllm.v1.kv_offload.tiering.fs.thread_pool``); the job comes back from
  ``get_finished_jobs`` as ``JobResult(success=False)``. Nothing is raised to
  the caller and the worker thread lives on: the tier keeps serving.
* A failed load additionally records how many blocks of the batch loaded
  before the bad one (``successful_keys``) and marks the rest a miss in its
  lookup cache (``mark_miss``): the scheduler recomputes them.
* A failed store removes its ``*.tmp`` file (a warning if that fails too).
* A load that reads fewer bytes than a block (a short read, e.g. a truncated
  file) unlinks the block file; any other error leaves the file alone.

Every successful load here is checked byte for byte against what was stored;
the buffer slots a load goes to are poisoned first, so a load that "succeeds"
without writing the bytes is caught too. Every wait is bounded.
"""

import contextlib
import errno
import hashlib
import logging
import mmap
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from unittest.mock import MagicMock

import numpy as np
import pytest

from conftest import is_mounted, wait_pid_exit

import torch
import vllm.v1.kv_offload.tiering.fs.manager as fs_manager
import vllm.v1.kv_offload.tiering.fs.io as fs_io

from vllm.v1.kv_offload.base import (  # noqa: E402
    OffloadingKVEventsConfig,
    OffloadKey,
    ReqContext,
    make_offload_key,
)
from vllm.v1.kv_offload.config import (  # noqa: E402
    OffloadingCacheConfig,
    OffloadingConfig,
    OffloadingModelConfig,
    OffloadingParallelConfig,
)
from vllm.v1.kv_offload.tiering.base import JobResult, TransferJob  # noqa: E402

FileSystemTierManager = fs_manager.FileSystemTierManager

BLOCK = 256 << 10  # bytes per KV block (one file each)
POISON = 0xA5
POOL_LOGGER = "vllm.v1.kv_offload.tiering.fs.thread_pool"


# ---------------------------------------------------------------------------
# A small harness around FileSystemTierManager
# ---------------------------------------------------------------------------


def make_spec() -> MagicMock:
    """The parts of an OffloadingSpec the fs tier reads (model, cache, parallel)."""
    spec = MagicMock()
    spec.config = OffloadingConfig(
        groups=(),
        worker_kv_bytes_per_block=0,
        enable_kv_cache_events=False,
        extra_config={},
        engine_id="kvfs-faults",
        model=OffloadingModelConfig(name="kvfs/faults-model", dtype="float16"),
        cache=OffloadingCacheConfig(tokens_per_hash=16, blocks_per_chunk=1),
        parallel=OffloadingParallelConfig(
            rank=0, world_size=1, tp_size=1, pp_size=1, pcp_size=1, dcp_size=1,
            data_parallel_index=0, data_parallel_size=1, data_parallel_rank_local=None,
            is_parallelism_agnostic=True,
        ),
    )
    spec.blocks_per_chunk = 1
    spec.kv_events_config = OffloadingKVEventsConfig(
        enable_kv_cache_events=False, self_describing_kv_events=False)
    return spec


def key(n: int) -> OffloadKey:
    return make_offload_key(hashlib.sha256(b"kvfs-faults-%d" % n).digest()[:16], 0)


def content(n: int) -> np.ndarray:
    """Block n's bytes: distinct per block and per offset."""
    return np.random.default_rng(n).integers(0, 256, BLOCK, dtype=np.uint8)


def aligned_buffer(n_chunks: int) -> torch.Tensor:
    """A page-aligned (O_DIRECT-able) uint8 tensor of n_chunks x BLOCK."""
    raw = torch.zeros(n_chunks * BLOCK + mmap.PAGESIZE, dtype=torch.uint8)
    shift = (-raw.data_ptr()) % mmap.PAGESIZE
    return raw[shift: shift + n_chunks * BLOCK].view(n_chunks, BLOCK)


@dataclass
class Outcome:
    """What came back for one job."""
    result: JobResult | None  # None: not finished by the deadline
    keys: list[int]
    chunks: list[int]
    load: bool
    took: float = 0.0


@dataclass
class Harness:
    """One FileSystemTierManager over root, with a CPU buffer of n_chunks blocks.

    Not thread-safe (like the real one, which vLLM calls under a lock)."""
    root: str
    n_chunks: int = 64
    threads: int = 4
    tier: FileSystemTierManager = field(init=False)
    buf: torch.Tensor = field(init=False)
    next_job: int = field(init=False, default=1)
    jobs: dict = field(init=False, default_factory=dict)
    t_submit: dict = field(init=False, default_factory=dict)

    def __post_init__(self):
        self.buf = aligned_buffer(self.n_chunks)
        self.tier = FileSystemTierManager(
            offloading_spec=make_spec(),
            primary_kv_view=memoryview(self.buf.numpy()),
            tier_type="fs",
            root_dir=self.root,
            n_read_threads=self.threads,
            n_write_threads=self.threads,
        )

    def _job(self, keys: list[int], chunks: list[int], load: bool) -> int:
        jid = self.next_job
        self.next_job += 1
        job = TransferJob(job_id=jid, keys=[key(k) for k in keys],
                          chunk_ids=np.array(chunks, dtype=np.int64), is_promotion=load,
                          req_context=ReqContext(req_id=f"r{jid}"))
        self.jobs[jid] = Outcome(None, list(keys), list(chunks), load)
        self.t_submit[jid] = time.monotonic()
        if load:
            self.tier.submit_load(job)
        else:
            self.tier.submit_store(job)
        return jid

    def store(self, keys: list[int], chunks: list[int] | None = None) -> int:
        """Fill the chunks with the keys' bytes and submit a store job."""
        chunks = list(range(len(keys))) if chunks is None else chunks
        for k, c in zip(keys, chunks):
            self.buf[c] = torch.from_numpy(content(k))
        return self._job(keys, chunks, load=False)

    def load(self, keys: list[int], chunks: list[int]) -> int:
        """Poison the chunks and submit a load (promotion) job into them."""
        for c in chunks:
            self.buf[c].fill_(POISON)
        return self._job(keys, chunks, load=True)

    def collect(self) -> list[int]:
        """get_finished_jobs() once; record results, return the finished ids."""
        done = []
        for r in self.tier.get_finished_jobs():
            o = self.jobs[r.job_id]
            o.result, o.took = r, time.monotonic() - self.t_submit[r.job_id]
            done.append(r.job_id)
        return done

    def wait(self, jids, timeout: float, first: bool = False) -> dict[int, Outcome]:
        """Wait (bounded, on the pool's own condition) until the jobs finished
        (first: until one of them has)."""
        jids = list(jids)
        pool = self.tier._pool
        deadline = time.monotonic() + timeout
        while True:
            self.collect()
            pending = [j for j in jids if self.jobs[j].result is None]
            left = deadline - time.monotonic()
            if not pending or left <= 0 or (first and len(pending) < len(jids)):
                return {j: self.jobs[j] for j in jids}
            with pool._condition:
                # notify_all()ed by a worker each time a job finishes.
                pool._condition.wait_for(lambda: len(pool._finished_q) > 0,
                                         timeout=min(left, 1.0))

    def run(self, jids, timeout: float = 30) -> dict[int, Outcome]:
        out = self.wait(jids, timeout)
        late = [j for j, o in out.items() if o.result is None]
        assert not late, f"jobs {late} not finished within {timeout}s"
        return out

    def loaded_ok(self, o: Outcome) -> list[int]:
        """The keys a finished load reports loaded; each is checked byte for byte."""
        r = o.result
        if r.success:
            good = o.keys
        else:
            n = len(r.successful_keys or ())
            good = o.keys[:n]
            assert [key(k) for k in good] == list(r.successful_keys or ())
        for k, c in zip(good, o.chunks):
            got = self.buf[c].numpy()
            want = content(k)
            if not np.array_equal(got, want):
                bad = np.flatnonzero(got != want)
                raise AssertionError(
                    f"job {r.job_id}: block {k} loaded WRONG BYTES into chunk {c}: "
                    f"{bad.size} bytes differ, first at offset {bad[0]} "
                    f"(got {got[bad[0]]:#x}, want {want[bad[0]]:#x})")
        return good

    def lookup(self, keys: list[int]) -> list[bool]:
        """The manager's own batch lookup (faccessat on each block file)."""
        return list(self.tier._lookup_manager.batch_lookup([key(k) for k in keys],
                                                           ReqContext(req_id="lookup")))

    def path(self, k: int) -> str:
        return self.tier.file_mapper.get_file_name(key(k))

    def shutdown(self, timeout: float = 30) -> bool:
        """tier.shutdown() (joins the workers), bounded: False if it did not return."""
        t = threading.Thread(target=self.tier.shutdown, daemon=True)
        t.start()
        t.join(timeout)
        return not t.is_alive()


@pytest.fixture(params=["c", "py"])
def io_path(request, monkeypatch):
    """vLLM's block I/O through fs_io_C, or its pure-Python fallback."""
    if request.param == "c":
        if not fs_io._HAS_FSIO_C:
            pytest.fail("vllm.fs_io_C did not load: the pinned vllm ships it")
        monkeypatch.setattr(fs_io, "_HAS_FSIO_C", True)
    else:
        monkeypatch.setattr(fs_io, "_HAS_FSIO_C", False)
    return request.param


@pytest.fixture
def harnesses():
    """Makes Harnesses; every one is shut down (bounded) at teardown."""
    made: list[Harness] = []

    def make(root, **kw) -> Harness:
        h = Harness(str(root), **kw)
        made.append(h)
        return h

    yield make
    stuck = [h.root for h in made if not h.shutdown()]
    assert not stuck, f"FileSystemTierManager.shutdown() did not return: {stuck}"


class PoolErrors(logging.Handler):
    """Captures the 'Job N block I/O failed: ...' errors vLLM's pool logs."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


@pytest.fixture
def pool_errors():
    h = PoolErrors()
    lg = logging.getLogger(POOL_LOGGER)
    lg.addHandler(h)
    yield h.lines
    lg.removeHandler(h)


@pytest.fixture
def dead_mounts():
    """Kvfs objects whose daemon was killed: if the test did not get as far as
    clearing the dead mount (or mounting again), it is lazily unmounted here."""
    dead: list = []
    yield dead
    for k in dead:
        if not k.mounted and is_mounted(str(k.mnt)):
            subprocess.run(["fusermount3", "-u", "-z", str(k.mnt)], timeout=30)


def admin_flush(k) -> None:
    k.admin("flush", "--wait", str(k.mnt))


def workers_alive(h: Harness) -> bool:
    return all(t.is_alive() for t in h.tier._pool._threads)


def errnos_of(lines: list[str]) -> set[str]:
    """The strerror texts named in the pool's error lines."""
    names = {e: os.strerror(e) for e in (errno.ENOENT, errno.EIO, errno.ENOSPC,
                                         errno.ENOTCONN, errno.ECONNABORTED, errno.EFBIG)}
    return {n for n in names.values() if any(n in ln for ln in lines)}


# ---------------------------------------------------------------------------
# 1. kill -9 of kvfs under a storing and loading vLLM tier
# ---------------------------------------------------------------------------


def test_kill9_mid_flight_then_remount(kvfs, harnesses, io_path, pool_errors, dead_mounts):
    """kvfs dies (SIGKILL) while vLLM's fs tier has stores and loads in flight,
    the dead mount is lazily unmounted, kvfs is mounted again over the same
    backing dir, and the SAME FileSystemTierManager goes on.

    What vLLM does (observed):
    * Jobs in flight at the kill, and jobs submitted against the dead mount,
      each come back from get_finished_jobs() as JobResult(success=False);
      the pool logs ``ERROR Job N block I/O failed: [Errno 107] Transport
      endpoint is not connected`` (ECONNABORTED for a call the kill cut off).
      No exception reaches the caller; every worker thread lives on.
    * A failed load reports the blocks before the failing one as
      successful_keys (checked byte for byte) and marks the rest a miss.
    * A failed store removes its tmp file (it cannot on the dead mount:
      ``WARNING Failed to remove temp file``); kvfs's tmp housekeeping
      (tmp_max_age) reaps what survives.
    * After the remount the same manager works as is (its paths are strings
      under the mount point; nothing to reopen): every block stored and
      flushed (``kvfs-admin flush --wait``) before the kill is found and
      loads its exact bytes; a store job reported successful but not flushed
      may be lost (then a miss, ENOENT), never returned with other bytes;
      storing everything again and loading it back gives the exact bytes.
    * A store cut off after kvfs flushed its tmp but before the rename leaves
      that tmp (vLLM's cleanup fails on the dead mount), under the thread's
      fixed tmp name, which vLLM creates O_EXCL: kvfs removes what a previous
      daemon left within a second of the mount, so the store succeeds again. A
      new manager over the same root finds the same blocks.
    """
    k = kvfs.mounted(opts="ram_prefault=0")
    h = harnesses(k.mnt, n_chunks=136)

    # Durable: stored, loaded back, flushed.
    durable = list(range(16))
    h.run([h.store(durable[i:i + 4], list(range(i, i + 4))) for i in range(0, 16, 4)])
    assert all(o.result.success for o in h.jobs.values())
    for o in h.run([h.load(durable, list(range(64, 80)))]).values():
        assert h.loaded_ok(o) == durable
    admin_flush(k)

    # In flight: 64 new blocks stored (chunks 0..63) while the durable ones
    # are loaded four times over (chunks 64..127).
    flight = list(range(100, 164))
    jids = []
    for i in range(16):
        jids.append(h.store(flight[4 * i: 4 * i + 4], list(range(4 * i, 4 * i + 4))))
        r = i % 4
        jids.append(h.load(durable[4 * r: 4 * r + 4],
                           list(range(64 + 16 * (i // 4) + 4 * r, 64 + 16 * (i // 4) + 4 * r + 4))))
    h.wait(jids, timeout=30, first=True)  # I/O is going on
    first_done = [j for j in jids if h.jobs[j].result is not None]
    pid = k.pid
    os.kill(pid, signal.SIGKILL)  # the crash; the mount stays, dead
    assert wait_pid_exit(pid, 30)
    k.pid = -1
    dead_mounts.append(k)
    in_flight = len(jids) - len(first_done)
    # Against the dead mount (not yet unmounted), more jobs.
    dead = [h.store([900, 901], [128, 129]), h.load(durable[:4], [130, 131, 132, 133])]
    out = h.run(jids + dead, timeout=60)  # nothing hangs on a dead mount
    assert workers_alive(h)
    for o in out.values():
        if o.load:
            h.loaded_ok(o)  # whatever a load reports loaded is the right bytes
    for j in dead:
        assert out[j].result.success is False, "a job on a dead mount succeeded"
    crash_errs = errnos_of(pool_errors)
    assert crash_errs & {os.strerror(errno.ENOTCONN), os.strerror(errno.ECONNABORTED)}, pool_errors
    subprocess.run(["fusermount3", "-u", "-z", str(k.mnt)], timeout=30)
    assert not is_mounted(str(k.mnt))

    stored_ok = {kk for j in jids if not h.jobs[j].load and h.jobs[j].result.success
                 for kk in h.jobs[j].keys}
    failed = [j for j in jids if not out[j].result.success]

    k.mount()
    # vLLM names its tmp file once per I/O thread and creates it O_EXCL; a tmp
    # the kill left (flushed before its rename, its cleanup refused by the
    # dead mount) would refuse that thread's next store of the block with
    # EEXIST. kvfs removes every tmp a previous daemon left within a second of
    # the mount (tmp housekeeping, whatever tmp_max_age): wait for it.
    def leftover_tmps() -> list[str]:
        return [os.path.join(dp, f) for dp, _, fs in os.walk(k.mnt) for f in fs
                if f.endswith(".tmp")]
    assert eventually(lambda: not leftover_tmps(), timeout=10), leftover_tmps()[:4]
    # Every durable block is found and loads its exact bytes (same manager).
    assert h.lookup(durable) == [True] * 16
    for o in h.run([h.load(durable, list(range(64, 80)))]).values():
        assert o.result.success, pool_errors[-3:]
        assert h.loaded_ok(o) == durable
    # Each in-flight block, one job each: found-and-right, or a clean miss.
    loads = {kk: h.load([kk], [64 + i]) for i, kk in enumerate(flight)}
    out2 = h.run(loads.values())
    lost_acked = []
    for kk, j in loads.items():
        if out2[j].result.success:
            h.loaded_ok(out2[j])
        elif kk in stored_ok:
            lost_acked.append(kk)
    # Store everything again (vLLM skips files that exist) and load it back.
    st = [h.store(flight[4 * i: 4 * i + 4], list(range(4 * i, 4 * i + 4))) for i in range(16)]
    restore_failed = [o for o in h.run(st).values() if not o.result.success]
    assert not restore_failed, pool_errors[-4:]
    ld = [h.load(flight[16 * i: 16 * i + 16], list(range(64 + 16 * i, 80 + 16 * i)))
          for i in range(4)]
    for o in h.run(ld).values():
        h.loaded_ok(o)  # never wrong bytes
    assert workers_alive(h)

    # A new manager over the same root sees the same blocks.
    h2 = harnesses(k.mnt, n_chunks=32)
    for o in h2.run([h2.load(durable, list(range(16)))]).values():
        assert h2.loaded_ok(o) == durable
    print(f"\n[{io_path}] kill -9 with {in_flight}/{len(jids)} jobs unfinished; "
          f"{len(failed)} failed; acked-but-lost after remount: {len(lost_acked)}; "
          f"errors seen: {sorted(crash_errs)}")


# ---------------------------------------------------------------------------
# 3. A stalled backing dir (a bindfs passthrough stopped with SIGSTOP)
# ---------------------------------------------------------------------------

IO_TIMEOUT = 2.0
SLACK = 4.0  # the stall detector's tick and a loaded machine; a hang is minutes


def eventually(pred, timeout: float, step: float = 0.05) -> bool:
    """pred() turned true within timeout (a bounded poll, for states with no event)."""
    deadline = time.monotonic() + timeout
    ev = threading.Event()
    while not pred():
        if time.monotonic() >= deadline:
            return False
        ev.wait(step)
    return True


class Bindfs:
    """A FUSE passthrough of real at mnt (direct_io: every read reaches it) that
    can be stopped (SIGSTOP: calls into it block like on a hung NFS server)."""

    def __init__(self, real: Path, mnt: Path):
        self.real, self.mnt, self.stopped = real, mnt, False
        real.mkdir()
        mnt.mkdir()
        self.proc = subprocess.Popen(["bindfs", "-f", "--no-allow-other", "-o", "direct_io",
                                      str(real), str(mnt)])
        assert eventually(lambda: is_mounted(str(mnt)) or self.proc.poll() is not None, 20)
        assert is_mounted(str(mnt)), f"bindfs did not mount (rc {self.proc.poll()})"

    def stop(self):
        os.kill(self.proc.pid, signal.SIGSTOP)
        self.stopped = True

    def resume(self):
        if self.stopped:
            os.kill(self.proc.pid, signal.SIGCONT)
        self.stopped = False

    def close(self):
        self.resume()
        subprocess.run(["fusermount3", "-u", str(self.mnt)], timeout=30)
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            subprocess.run(["fusermount3", "-u", "-z", str(self.mnt)], timeout=30)


@pytest.fixture
def stalling_backing(kvfs, tmp_path):
    """A bindfs passthrough to use as a kvfs backing dir. Teardown: SIGCONT,
    then every kvfs daemon unmounted (they flush into it), then bindfs goes."""
    if subprocess.run(["which", "bindfs"], capture_output=True).returncode != 0:
        pytest.fail("bindfs is not installed (tools/install-deps.sh --test)")
    b = Bindfs(tmp_path / "real", tmp_path / "stalling")
    yield b
    b.resume()
    try:
        for k in kvfs.all:
            k.unmount()
    finally:
        b.close()


def is_stalled(k) -> bool:
    return bool(k.stats().get("backing", {}).get("stalled", False))


def test_stalled_backing_dir(kvfs, harnesses, io_path, pool_errors, stalling_backing):
    """The backing dir stops answering (bindfs SIGSTOPped; kvfs io_timeout=2)
    while vLLM's fs tier loads and stores; then it answers again (SIGCONT).

    What vLLM does (observed):
    * A load of a block kvfs must read from the backing dir: kvfs answers the
      read with EIO after io_timeout; vLLM's worker logs ``ERROR Job N block
      I/O failed: [Errno 5] Input/output error``, the job is
      JobResult(success=False) within io_timeout + slack (a miss: the
      scheduler recomputes it). The file is NOT unlinked (an EIO is not a
      short read), so it loads again after the stall. Its worker thread is
      blocked no longer than that.
    * A load of blocks that are in kvfs's RAM tier (written since the mount,
      not yet flushed) succeeds at once with the right bytes, stall or not.
    * Lookups (faccessat) answer during the stall: cold blocks still HIT.
    * A store during the stall (exists check, mkdir, create, write, rename:
      all into RAM) succeeds, and its block loads back.
    * After SIGCONT (kvfs reports the stall over), the same manager loads the
      cold blocks with the right bytes; nothing stored was lost.
    """
    k = kvfs.mounted(backing=stalling_backing.mnt, opts=f"io_timeout={int(IO_TIMEOUT)},ram_prefault=0")
    h = harnesses(k.mnt, n_chunks=48)
    cold, hot, during = list(range(8)), list(range(20, 24)), list(range(40, 44))
    h.run([h.store(cold[:4], [0, 1, 2, 3]), h.store(cold[4:], [4, 5, 6, 7])])
    admin_flush(k)
    k.unmount()  # an empty RAM tier: the cold blocks are only in the backing dir
    k.mount()
    out = h.run([h.store(hot, [8, 9, 10, 11])])
    assert all(o.result.success for o in out.values())

    stalling_backing.stop()
    t0 = time.monotonic()
    cold_jobs = [h.load([c], [16 + i]) for i, c in enumerate(cold)]
    hot_job = h.load(hot, [24, 25, 26, 27])
    # RAM hits answer at once, while the cold reads are stuck.
    o = h.run([hot_job], timeout=SLACK)[hot_job]
    assert o.result.success, pool_errors[-3:]
    assert h.loaded_ok(o) == hot
    assert h.lookup(cold + hot) == [True] * 12  # names answer during the stall
    # Cold loads: failed (EIO), each within io_timeout (+ the time its worker
    # waited for an earlier one: 4 read threads, 8 jobs).
    out = h.run(cold_jobs, timeout=2 * (IO_TIMEOUT + SLACK) + 10)
    took = time.monotonic() - t0
    assert took <= 2 * (IO_TIMEOUT + SLACK), f"cold loads took {took:.1f}s"
    for j in cold_jobs:
        assert out[j].result.success is False, "a cold load succeeded during the stall"
        assert out[j].result.successful_keys is None
    assert os.strerror(errno.EIO) in errnos_of(pool_errors), pool_errors
    assert is_stalled(k), k.stats()
    assert all(os.path.exists(h.path(c)) for c in cold), "a cold block was unlinked"
    # A store during the stall goes into RAM and loads back.
    sj = h.store(during, [32, 33, 34, 35])
    o = h.run([sj], timeout=IO_TIMEOUT + SLACK)[sj]
    assert o.result.success, pool_errors[-3:]
    lj = h.load(during, [36, 37, 38, 39])
    assert h.loaded_ok(h.run([lj], timeout=SLACK)[lj]) == during
    assert workers_alive(h)

    stalling_backing.resume()
    assert eventually(lambda: not is_stalled(k), 30), "kvfs still reports the stall"
    lj = h.load(cold + hot + during, list(range(16, 32)))
    o = h.run([lj])[lj]
    assert o.result.success, pool_errors[-3:]
    assert h.loaded_ok(o) == cold + hot + during
    admin_flush(k)
    print(f"\n[{io_path}] stall: {len(cold)} cold loads failed in {took:.1f}s "
          f"(io_timeout {IO_TIMEOUT}s): {sorted(errnos_of(pool_errors))}")


# ---------------------------------------------------------------------------
# 2. The backing dir at its capacity
# ---------------------------------------------------------------------------

CAP_MIB = 16
SMALL = "segment_size=4M,flush_batch=1M,ram_prefault=0"


def store_waves(h: Harness, first: int, n_blocks: int, stop_at_failure: bool,
                between=None) -> tuple[list[int], list[int]]:
    """Store blocks first.. first+n_blocks-1 in waves of 8 (two jobs of 4, chunks
    0..7); returns (keys of jobs that succeeded, keys of jobs that failed)."""
    ok, bad = [], []
    for w in range(first, first + n_blocks, 8):
        jids = [h.store(list(range(w, w + 4)), [0, 1, 2, 3]),
                h.store(list(range(w + 4, w + 8)), [4, 5, 6, 7])]
        for o in h.run(jids).values():
            (ok if o.result.success else bad).extend(o.keys)
        if between:
            between()
        if bad and stop_at_failure:
            break
    return ok, bad


def load_each(h: Harness, keys: list[int], chunk0: int = 8) -> tuple[list[int], list[int]]:
    """Load every key in its own job (bytes verified), in the order given;
    returns (loaded, missed)."""
    loaded, missed = [], []
    for i in range(0, len(keys), 32):
        part = keys[i:i + 32]
        jids = {kk: h.load([kk], [chunk0 + n]) for n, kk in enumerate(part)}
        out = h.run(jids.values())
        for kk, j in jids.items():
            if out[j].result.success:
                assert h.loaded_ok(out[j]) == [kk]
                loaded.append(kk)
            else:
                missed.append(kk)
    return loaded, missed


def test_capacity_evicts_older_blocks(kvfs, harnesses, io_path, pool_errors):
    """vLLM stores 2.5x a small cap (capacity=32M, segment_size=4M,
    evict_grace=0 and no kernel cache timeouts: anything closed and flushed
    may be evicted at once): kvfs evicts to stay under the cap.

    What vLLM does (observed): nearly every store job succeeds (the writes go
    to the RAM tier; the flushers make room by evicting). A store can fail
    with ENOENT at ``os.replace(tmp, dest)`` (Python path) / the C path's
    rename: its closed, flushed tmp file was evicted before the rename (what
    evict_grace exists to prevent); vLLM logs ``ERROR Job N block I/O failed:
    [Errno 2] No such file or directory``, removes nothing more and reports
    the job failed: clean. A load of an evicted block fails at open() with
    ENOENT (same log line), JobResult(success=False), a miss; its lookup is
    False too. Nothing is unlinked by vLLM (no short read). Every block that
    loads has the right bytes. The tier keeps serving: with a grace set again
    (``kvfs-admin config evict_grace=60``), blocks stored again load back.
    """
    cap = 2 * CAP_MIB
    k = kvfs.mounted(opts=f"{SMALL},capacity={cap}M,evict_grace=0,"
                          "entry_timeout=0,attr_timeout=0,negative_timeout=0")
    h = harnesses(k.mnt, n_chunks=40)
    total = (cap * 5 // 2) * (1 << 20) // BLOCK

    def flush():
        k.admin("flush", "--wait", str(k.mnt), check=False)  # may wait for room

    ok, bad = store_waves(h, 0, total, stop_at_failure=False, between=flush)
    assert len(bad) <= total // 8, f"{len(bad)} of {total} stores failed: {pool_errors[-3:]}"
    store_errs = errnos_of(pool_errors)
    assert store_errs <= {os.strerror(errno.ENOENT), os.strerror(errno.ENOSPC)}, pool_errors[-3:]
    st = k.stats()
    used = st["backing"]["used_bytes"]
    assert st["backing"]["capacity_bytes"] == cap << 20
    assert used <= (cap + 4) << 20, f"backing dir holds {used} bytes, cap {cap} MiB"

    # Newest first: a load makes a block recently used.
    present = [kk for kk, hit in zip(bad, h.lookup(bad)) if hit]  # a failed job's prefix
    loaded, missed = load_each(h, (ok + present)[::-1])
    assert missed, "nothing was evicted: the cap did not bite"
    assert loaded, "everything was evicted"
    assert errnos_of(pool_errors) <= {os.strerror(errno.ENOENT), os.strerror(errno.ENOSPC)}
    assert not any(h.lookup(missed)), "an evicted block still looks present"

    # Still serving: evicted blocks stored again (under a grace) load back.
    k.admin("config", str(k.mnt), "evict_grace=60")
    again = missed[:8]
    jids = [h.store(again[:4], [0, 1, 2, 3]), h.store(again[4:], [4, 5, 6, 7])]
    assert all(o.result.success for o in h.run(jids).values()), pool_errors[-3:]
    assert sorted(load_each(h, again)[0]) == sorted(again)
    assert workers_alive(h)
    print(f"\n[{io_path}] cap {cap}M: {len(ok)} of {total} blocks stored ({len(bad)} store "
          f"jobs' blocks failed: {sorted(store_errs)}), {len(loaded)} still load, "
          f"{len(missed)} evicted (ENOENT misses); used {used >> 20} MiB; "
          f"evictions {st.get('evictions')}")


@pytest.fixture
def small_tmpfs(kvfs, tmp_path):
    """A 16 MiB tmpfs; every kvfs daemon is unmounted before it goes."""
    d = tmp_path / "tmpfs"
    d.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={CAP_MIB}M", "tmpfs", str(d)],
                       capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {r.stderr.strip()}")
    yield d
    try:
        for k in kvfs.all:
            k.unmount()
    finally:
        subprocess.run(["umount", "-l", str(d)], timeout=30)


@pytest.mark.parametrize("full", ["cap", "tmpfs"])
def test_capacity_full_stores_fail_enospc(kvfs, harnesses, io_path, pool_errors, full, request):
    """Nothing may be evicted (evict_grace=3600) and vLLM stores past the room:
    with ``cap`` kvfs's capacity=16M is the limit, with ``tmpfs`` the backing
    dir is a real 16 MiB tmpfs that fills up before kvfs's (larger) cap.

    What vLLM does (observed): once kvfs finds no room, a store job fails with
    ENOSPC (``ERROR Job N block I/O failed: [Errno 28] No space left on
    device``, at the write or the close of the tmp file); vLLM removes its tmp
    file and reports JobResult(success=False); the block is simply not in the
    tier. A job of several blocks stops at the first failing one; the blocks
    before it in the job stay published (vLLM reports the whole job failed,
    but a later lookup finds them) and load with the right bytes. Blocks whose store
    succeeded (including ones accepted into RAM and still waiting for room)
    load with the right bytes. Once room is made (the cap raised at run time
    with ``kvfs-admin config``, or the tmpfs grown with ``mount -o remount``)
    the same manager stores and loads again.
    """
    if full == "cap":
        k = kvfs.mounted(opts=f"{SMALL},capacity={CAP_MIB}M,evict_grace=3600")
    else:
        backing = request.getfixturevalue("small_tmpfs")
        k = kvfs.mounted(backing=backing, opts=f"{SMALL},capacity={4 * CAP_MIB}M,"
                                               "evict_grace=3600")
    h = harnesses(k.mnt, n_chunks=40)
    total = 2 * CAP_MIB * (1 << 20) // BLOCK

    def flush():
        k.admin("flush", "--wait", str(k.mnt), check=False)  # may fail: no room

    ok, bad = store_waves(h, 0, total, stop_at_failure=True, between=flush)
    assert bad, f"{len(ok)} blocks ({len(ok) * BLOCK >> 20} MiB) stored, none refused"
    assert os.strerror(errno.ENOSPC) in errnos_of(pool_errors), pool_errors[-3:]
    # A batch store stops at its first failing block: the blocks before it in
    # the same job are published. Whatever a lookup finds must load right.
    left = [kk for kk, hit in zip(bad, h.lookup(bad)) if hit]
    loaded, missed = load_each(h, ok + left)
    assert not missed, f"acknowledged blocks do not load: {missed[:8]} {pool_errors[-3:]}"
    st = k.stats()

    # Make room, then the same manager goes on.
    if full == "cap":
        k.admin("config", str(k.mnt), f"capacity={4 * CAP_MIB}M")
    else:
        # The volume grows (as an admin would). kvfs learns of the room when
        # its pending flushes retry: within a second, or at once on
        # `kvfs-admin flush` (docs/operations.md, ENOSPC); until then it
        # still refuses writes, so the admin's flush comes first.
        r = subprocess.run(["mount", "-o", f"remount,size={4 * CAP_MIB}M", str(k.backing)],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        k.admin("flush", "--wait", str(k.mnt))
    ok2, bad2 = store_waves(h, 10_000, 16, stop_at_failure=False, between=flush)
    assert not bad2, f"stores still fail after making room: {pool_errors[-3:]}"
    assert load_each(h, ok2)[0] == ok2
    print(f"\n[{io_path}/{full}] full after {len(ok)} blocks ({len(ok) * BLOCK >> 20} MiB); "
          f"{len(bad)} refused ({sorted(errnos_of(pool_errors))}); used "
          f"{st['backing']['used_bytes'] >> 20} MiB of cap {st['backing']['capacity_bytes'] >> 20}")
