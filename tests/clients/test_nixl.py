# SPDX-License-Identifier: Apache-2.0
"""NIXL's own POSIX backend (the installed nixl Python API, not a replay of
its I/O) moving KV objects DRAM -> FILE ("WRITE") and FILE -> DRAM ("READ")
through O_DIRECT file descriptors, on a plain directory and on a kvfs mount.

Each 36 MiB object is one transfer of three requests of at most 16 MiB
(file offsets 0, 16 MiB and 32 MiB); the transfers of every object are posted
before any is polled, so all their requests are submitted together (the
kernel may still complete a size-extending O_DIRECT write inside the submit
call: strace shows io_submit/io_uring_enter taking the write's time on kvfs,
and io_submit on ext4, while reads always overlap). Buffers
are anonymous mmaps (page aligned, so 4 KiB aligned as O_DIRECT wants), the
read lands in fresh buffers and is compared byte for byte with what was
written.

The POSIX backend is run once with its libaio queue (use_aio) and once with
its io_uring queue (use_uring). That the queue asked for is really the one
used is checked three ways: the plugin's own log line naming its io queue
type, the kernel object the queue made (an "[aio]" ring mapping or an
"anon_inode:[io_uring]" fd, and not the other), and that object's completion
counters advancing by exactly the number of requests each phase submitted.

test_nixl_tmp_rename is LMCache's pattern: the object is written to
<name>.tmp.<uuid> opened O_RDWR|O_CREAT|O_TRUNC|O_DIRECT, closed, renamed over
the final name, and the final name reopened O_RDWR|O_DIRECT for the read.

On kvfs the mount's own counters must show the files and bytes, so the tests
cannot pass without kvfs serving them.
"""

import ctypes
import errno
import mmap
import os
import re
import sys
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

import pytest

# The POSIX plugin names the io queue it built in an INFO line; NIXL reads
# NIXL_LOG_LEVEL when its library is loaded, so set it before the import. If
# someone loaded nixl earlier in this process at another level, that line may
# be missing and only the kernel-side checks below are made.
_NIXL_PRELOADED = any(m == "nixl" or m.startswith(("nixl.", "nixl_cu")) for m in sys.modules)
os.environ.setdefault("NIXL_LOG_LEVEL", "INFO")
_LOG_INFO = (not _NIXL_PRELOADED
             and os.environ["NIXL_LOG_LEVEL"].upper() in ("INFO", "DEBUG", "TRACE"))

import numpy as np
import nixl._api as nixl_api

MiB = 1 << 20
OBJ_SIZE = 36 * MiB
CHUNK = 16 * MiB                       # largest single request, as LMCache/Dynamo issue them
N_OBJECTS = 4
DEADLINE_S = 30.0                      # per phase, all transfers of the phase together

# test param -> (POSIX backend init key, io queue type the plugin reports, kernel object)
ENGINES = {
    "libaio": ("use_aio", "AIO", "aio_ring"),
    "io_uring": ("use_uring", "URING", "io_uring_fd"),
}
ALL_ENGINE_KEYS = ("use_aio", "use_uring", "use_posix_aio")

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
SYS_io_setup, SYS_io_destroy, SYS_io_uring_setup = 206, 207, 425  # x86_64


def chunks(size: int = OBJ_SIZE, chunk: int = CHUNK) -> list[tuple[int, int]]:
    """(offset, length) of the requests one object is moved in: 16 + 16 + 4 MiB."""
    return [(off, min(chunk, size - off)) for off in range(0, size, chunk)]


REQS_PER_OBJECT = len(chunks())
_ABANDONED: list = []   # agents (and their buffers) whose transfers timed out


# ---------------------------------------------------------------- kernel side


def _aio_rings() -> dict[int, str]:
    """start address -> maps line of every libaio completion ring of this process."""
    out = {}
    with open("/proc/self/maps") as f:
        for line in f:
            if "/[aio]" in line:
                out[int(line.split("-", 1)[0], 16)] = line.strip()
    return out


def _uring_fds() -> set[int]:
    out = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}") == "anon_inode:[io_uring]":
                out.add(int(name))
        except OSError:
            pass
    return out


def kernel_refusal(engine: str) -> str | None:
    """Why the kernel (or a seccomp filter) refuses this engine's setup call,
    found by making that call; None when it works."""
    if engine == "io_uring":
        params = ctypes.create_string_buffer(120)          # struct io_uring_params
        fd = _libc.syscall(SYS_io_uring_setup, 8, params)
        if fd >= 0:
            os.close(fd)
            return None
        e = ctypes.get_errno()
        why = f"io_uring_setup(8) -> {errno.errorcode.get(e, e)} ({os.strerror(e)})"
        try:
            why += f"; kernel.io_uring_disabled={Path('/proc/sys/kernel/io_uring_disabled').read_text().strip()}"
        except OSError:
            pass
        return why
    ctx = ctypes.c_ulong(0)
    if _libc.syscall(SYS_io_setup, 8, ctypes.byref(ctx)) == 0:
        _libc.syscall(SYS_io_destroy, ctx)
        return None
    e = ctypes.get_errno()
    why = f"io_setup(8) -> {errno.errorcode.get(e, e)} ({os.strerror(e)})"
    try:
        why += (f"; fs.aio-nr={Path('/proc/sys/fs/aio-nr').read_text().strip()}"
                f" fs.aio-max-nr={Path('/proc/sys/fs/aio-max-nr').read_text().strip()}")
    except OSError:
        pass
    return why


class QueueProbe:
    """The kernel object behind the POSIX backend's io queue, found by what
    create_backend added to the process, and a count of the requests it has
    completed (libaio: the tail of the mmapped completion ring; io_uring: the
    CQ tail in /proc/self/fdinfo)."""

    def __init__(self):
        self.rings0 = _aio_rings()
        self.urings0 = _uring_fds()
        self.kind = None
        self.ring_addr = None
        self.uring_fd = None

    def attach(self) -> None:
        new_rings = sorted(set(_aio_rings()) - set(self.rings0))
        new_urings = sorted(_uring_fds() - self.urings0)
        found = []
        if new_rings:
            found.append(("aio_ring", f"{len(new_rings)} new [aio] ring mapping(s)"))
        if new_urings:
            found.append(("io_uring_fd", f"{len(new_urings)} new io_uring fd(s) {new_urings}"))
        assert len(found) == 1 and len(new_rings) + len(new_urings) == 1, (
            f"expected exactly one new io queue kernel object, found: {found or 'none'}")
        self.kind = found[0][0]
        if new_rings:
            self.ring_addr = new_rings[0]
        else:
            self.uring_fd = new_urings[0]

    def completions(self) -> int:
        """Completions so far, modulo the ring size (libaio) or 2**32 (io_uring)."""
        if self.kind == "aio_ring":
            # struct aio_ring { unsigned id, nr, head, tail, magic, ... }; the
            # mapping is the agent's and lives while it does (checked first).
            assert self.ring_addr in _aio_rings(), "the libaio ring went away"
            magic = ctypes.c_uint32.from_address(self.ring_addr + 16).value
            assert magic == 0xA10A10A1, f"not an aio ring (magic {magic:#x})"
            return ctypes.c_uint32.from_address(self.ring_addr + 12).value
        info = Path(f"/proc/self/fdinfo/{self.uring_fd}").read_text()
        return int(re.search(r"^CqTail:\s*(\d+)", info, re.M).group(1))

    def delta(self, before: int, after: int) -> int:
        if self.kind == "aio_ring":
            nr = ctypes.c_uint32.from_address(self.ring_addr + 4).value
            return (after - before) % nr
        return (after - before) % (1 << 32)


# ---------------------------------------------------------------- NIXL side


class PosixAgent:
    """One nixl_agent with only the POSIX backend, on the engine asked for."""

    def __init__(self, engine: str, capfd):
        key, queue_type, kernel_kind = ENGINES[engine]
        self.name = f"kvfs-nixl-{engine}-{uuid.uuid4().hex[:8]}"
        self.agent = nixl_api.nixl_agent(
            self.name, nixl_api.nixl_agent_config(enable_prog_thread=False, backends=[]))
        assert "POSIX" in self.agent.get_plugin_list()
        defaults = self.agent.get_plugin_params("POSIX")
        assert key in defaults, f"POSIX plugin has no {key!r} parameter: {defaults}"
        params = {k: ("true" if k == key else "false") for k in ALL_ENGINE_KEYS if k in defaults}

        probe = QueueProbe()
        capfd.readouterr()
        try:
            self.agent.create_backend("POSIX", params)
        except Exception as e:  # noqa: BLE001 - nixlBind raises its own types
            log = capfd.readouterr().err
            refusal = kernel_refusal(engine)
            if refusal:
                said = re.findall(r"Failed to create engine: (.*)", log)
                pytest.skip(f"{engine} unavailable in this sandbox: {refusal}"
                            + (f"; NIXL: {said[-1].strip()}" if said else ""))
            raise AssertionError(f"create_backend(POSIX, {params}) failed although the kernel "
                                 f"accepts {engine}: {e!r}\n{log[-2000:]}") from e
        log = capfd.readouterr().err
        sys.stderr.write(log)           # keep it for the report of a failing test
        reported = re.findall(r"POSIX backend initialized using io queue type: (\w+)", log)
        if _LOG_INFO:
            assert reported == [queue_type], (
                f"asked for {key}=true, NIXL reports io queue type(s) {reported}:\n{log[-2000:]}")
        else:
            assert reported in ([], [queue_type]), reported
        probe.attach()
        assert probe.kind == kernel_kind, (
            f"asked for {key}=true ({queue_type}) but the backend made a {probe.kind}")
        self.probe = probe
        self.engine = engine
        self.keep: list = []

    # -- memory registration

    def register_dram(self, buf: mmap.mmap):
        addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
        assert addr % 4096 == 0
        descs = self.agent.register_memory([(addr, len(buf), 0, "")], "DRAM")
        return addr, descs

    def register_file(self, fd: int, size: int = OBJ_SIZE):
        # fd mode: devId is the fd, metaInfo is not a "<modes>:<path>" spec
        return self.agent.register_memory([(0, size, fd, "")], "FILE")

    # -- transfers

    def start(self, op: str, addr: int, fd: int):
        local = self.agent.get_xfer_descs([(addr + off, ln, 0) for off, ln in chunks()], "DRAM")
        remote = self.agent.get_xfer_descs([(off, ln, fd) for off, ln in chunks()], "FILE")
        h = self.agent.initialize_xfer(op, local, remote, self.name)
        assert self.agent.query_xfer_backend(h) == "POSIX"
        state = self.agent.transfer(h)
        assert state in ("PROC", "DONE"), f"{op} fd {fd}: transfer() -> {state}"
        return h

    def run_phase(self, op: str, pairs: list[tuple[int, int]]) -> float:
        """Post one transfer per (addr, fd), all before any is polled, then poll
        them all to DONE within DEADLINE_S; the io queue must have completed
        exactly 3 requests per object. Returns the seconds taken."""
        c0 = self.probe.completions()
        t0 = time.monotonic()
        handles = [self.start(op, addr, fd) for addr, fd in pairs]
        pending = list(handles)
        deadline = t0 + DEADLINE_S
        try:
            while pending:
                still = []
                for h in pending:
                    s = self.agent.check_xfer_state(h)
                    assert s != "ERR", f"{op}: check_xfer_state -> ERR ({self.engine})"
                    if s == "PROC":
                        still.append(h)
                pending = still
                if pending:
                    assert time.monotonic() < deadline, (
                        f"{op}: {len(pending)}/{len(handles)} transfers not DONE after {DEADLINE_S}s")
                    os.sched_yield()
            took = time.monotonic() - t0
        finally:
            if pending:
                # never free (or deregister) what the kernel may still write into
                _ABANDONED.append((self, handles))
            else:
                for h in handles:
                    self.agent.release_xfer_handle(h)
        done = self.probe.delta(c0, self.probe.completions())
        assert done == REQS_PER_OBJECT * len(pairs), (
            f"{op}: the {self.probe.kind} completed {done} requests, expected "
            f"{REQS_PER_OBJECT} x {len(pairs)} objects")
        return took


# ---------------------------------------------------------------- fixtures


@pytest.fixture(params=list(ENGINES))
def agent(request, capfd):
    return PosixAgent(request.param, capfd)


def kvfs_counters(request) -> dict | None:
    k = getattr(request.node, "kvfs_mount", None)
    if k is None:
        return None
    s = k.stats()
    return {"files": s["files"], "logical_bytes": s["logical_bytes"],
            "read_bytes": s["cache"]["ram_hit_bytes"] + s["cache"]["ram_miss_bytes"]}


def check_kvfs(request, before: dict | None, stage: str, n: int) -> None:
    """On kvfs: the mount itself counted the objects (and, after the read, the bytes)."""
    if before is None:
        return
    after = kvfs_counters(request)
    if stage == "written":
        assert after["files"] - before["files"] == n, (before, after)
        assert after["logical_bytes"] - before["logical_bytes"] == n * OBJ_SIZE, (before, after)
    else:
        assert after["read_bytes"] - before["read_bytes"] >= n * OBJ_SIZE, (before, after)


def make_buffers(stack: ExitStack, agent: PosixAgent, n: int, seed: int):
    """n written (random) and n fresh read buffers, all DRAM-registered."""
    rng = np.random.default_rng(seed)
    src, dst = [], []
    for _ in range(n):
        for lst, fill in ((src, None), (dst, 0xA5)):
            m = mmap.mmap(-1, OBJ_SIZE)
            agent.keep.append(m)  # outlives any I/O still in flight if the test fails
            a = np.frombuffer(m, dtype=np.uint8)
            if fill is None:
                a[:] = rng.integers(0, 256, OBJ_SIZE, dtype=np.uint8)
            else:
                a[:] = fill
            addr, descs = agent.register_dram(m)
            stack.callback(agent.agent.deregister_memory, descs)
            lst.append((m, a, addr))
    return src, dst


def open_registered(stack: ExitStack, agent: PosixAgent, path: str, flags: int):
    fd = os.open(path, flags | os.O_DIRECT, 0o644)
    closed = []

    def close():
        if not closed:
            agent.agent.deregister_memory(descs)
            os.close(fd)
            closed.append(True)
    stack.callback(close)
    descs = agent.register_file(fd)
    return fd, close


def verify(src, dst) -> None:
    for i, ((_, a, _), (_, b, _)) in enumerate(zip(src, dst)):
        if not np.array_equal(a, b):
            bad = np.flatnonzero(a != b)
            pytest.fail(f"object {i}: {bad.size} bytes differ, first at {bad[0]} "
                        f"(chunk {bad[0] // CHUNK}), last at {bad[-1]}")


# ---------------------------------------------------------------- tests


def test_nixl_posix_roundtrip(request, root_dir, agent):
    """N objects written (one 3-request transfer each, all in flight), read
    back into fresh buffers through new O_DIRECT fds, compared."""
    before = kvfs_counters(request)
    names = [os.path.join(root_dir, f"layer{i}@0x0@{uuid.uuid4().hex}.data") for i in range(N_OBJECTS)]
    with ExitStack() as stack:
        src, dst = make_buffers(stack, agent, N_OBJECTS, seed=1)
        wfds = [open_registered(stack, agent, p, os.O_RDWR | os.O_CREAT | os.O_TRUNC) for p in names]
        agent.run_phase("WRITE", [(s[2], fd) for s, (fd, _) in zip(src, wfds)])
        for _, close in wfds:
            close()
        assert [os.stat(p).st_size for p in names] == [OBJ_SIZE] * N_OBJECTS
        check_kvfs(request, before, "written", N_OBJECTS)

        rfds = [open_registered(stack, agent, p, os.O_RDONLY) for p in names]
        agent.run_phase("READ", [(d[2], fd) for d, (fd, _) in zip(dst, rfds)])
        verify(src, dst)
        check_kvfs(request, before, "read", N_OBJECTS)
        for _, close in rfds:
            close()

        k = getattr(request.node, "kvfs_mount", None)
        if k is not None:
            # what kvfs flushed is what NIXL wrote: a fresh daemon serves it
            k.unmount()
            k.mount()
            before = kvfs_counters(request)
            for _, b, _ in dst:
                b[:] = 0xA5
            rfds = [open_registered(stack, agent, p, os.O_RDONLY) for p in names]
            agent.run_phase("READ", [(d[2], fd) for d, (fd, _) in zip(dst, rfds)])
            verify(src, dst)
            check_kvfs(request, before, "read", N_OBJECTS)
            s = k.stats()
            # the RAM tier started empty: every byte came up from the backing dir
            assert s["files"] >= N_OBJECTS, s["files"]
            assert s["backing"]["read_bytes"] >= N_OBJECTS * OBJ_SIZE, s["backing"]


def test_nixl_tmp_rename(request, root_dir, agent):
    """LMCache's pattern: <name>.tmp.<uuid> O_RDWR|O_CREAT|O_TRUNC|O_DIRECT,
    written by NIXL, closed, renamed over <name>, reopened O_RDWR|O_DIRECT and
    read by NIXL."""
    n = 2
    before = kvfs_counters(request)
    finals = [os.path.join(root_dir, f"model@0x0@{uuid.uuid4().hex}.data") for _ in range(n)]
    tmps = [f"{p}.tmp.{uuid.uuid4()}" for p in finals]
    with ExitStack() as stack:
        src, dst = make_buffers(stack, agent, n, seed=2)
        wfds = [open_registered(stack, agent, t, os.O_RDWR | os.O_CREAT | os.O_TRUNC) for t in tmps]
        agent.run_phase("WRITE", [(s[2], fd) for s, (fd, _) in zip(src, wfds)])
        for (_, close), t, p in zip(wfds, tmps, finals):
            close()
            os.rename(t, p)
        listing = set(os.listdir(root_dir))
        assert not any(".tmp." in e for e in listing), listing
        assert {os.path.basename(p) for p in finals} <= listing
        assert [os.stat(p).st_size for p in finals] == [OBJ_SIZE] * n
        check_kvfs(request, before, "written", n)

        rfds = [open_registered(stack, agent, p, os.O_RDWR) for p in finals]
        agent.run_phase("READ", [(d[2], fd) for d, (fd, _) in zip(dst, rfds)])
        verify(src, dst)
        check_kvfs(request, before, "read", n)
