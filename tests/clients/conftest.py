# SPDX-License-Identifier: Apache-2.0
"""Fixtures for the client interop tests: a real kvfs mount (the daemon built
in build/, or KVFS_BIN) over a real backing directory, and the same test run
against a plain directory beside it.

Every wait here is bounded: a daemon that does not mount, unmount or die in
time fails the test instead of hanging it. The daemon's log is printed when a
test fails.
"""

import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# tools/run-tests.sh builds in build-test/ and names the binaries; by hand the
# newest of build-test/ and build/ is used.
_BUILD = max((REPO / d for d in ("build-test", "build")),
             key=lambda d: (d / "fs" / "kvfs").stat().st_mtime if (d / "fs" / "kvfs").exists() else 0)
KVFS_BIN = os.environ.get("KVFS_BIN", str(_BUILD / "fs" / "kvfs"))
KVFS_ADMIN_BIN = os.environ.get("KVFS_ADMIN_BIN", str(_BUILD / "tools" / "kvfs-admin"))

sys.path.insert(0, str(Path(__file__).resolve().parent))


def wait_pid_exit(pid: int, timeout: float) -> bool:
    """True once pid has exited (a pidfd turns readable), False after timeout."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        p = select.poll()
        p.register(fd, select.POLLIN)
        return bool(p.poll(int(timeout * 1000)))
    finally:
        os.close(fd)


def is_mounted(path: str) -> bool:
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


class Kvfs:
    """One kvfs daemon: BACKING mounted at MNT. Not thread-safe (a test drives it)."""

    def __init__(self, root: Path, backing: Path | None = None, node_id: str | None = None,
                 ram_size: str = "512M", opts: str = ""):
        name = node_id or "solo"
        self.root = root
        self.backing = Path(backing) if backing else root / "backing"
        self.mnt = root / f"mnt-{name}"
        self.index = root / f"index-{name}"
        self.log = root / f"kvfs-{name}.log"
        self.node_id = node_id
        self.ram_size = ram_size
        self.opts = opts
        self.pid = -1
        for d in (self.backing, self.mnt):
            d.mkdir(parents=True, exist_ok=True)

    def options(self, extra: str = "") -> str:
        o = [f"index_dir={self.index}", f"ram_size={self.ram_size}", f"log_file={self.log}"]
        if self.node_id:
            o.append(f"node_id={self.node_id}")
        for s in (self.opts, extra):
            if s:
                o.append(s)
        return ",".join(o)

    def mount(self, extra: str = "") -> None:
        r = subprocess.run([KVFS_BIN, str(self.backing), str(self.mnt), "-o", self.options(extra)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"kvfs did not mount (rc {r.returncode}): {r.stdout}{r.stderr}"
        lock = self.backing / (f"kvfs.{self.node_id}.lock" if self.node_id else "kvfs.lock")
        self.pid = int(lock.read_text().split()[0])
        assert is_mounted(str(self.mnt))

    @property
    def mounted(self) -> bool:
        return self.pid > 0

    def unmount(self, timeout: float = 120) -> None:
        """umount, then wait for the daemon to have written every dirty file and exited."""
        if not self.mounted:
            return
        r = subprocess.run(["fusermount3", "-u", str(self.mnt)], capture_output=True, text=True,
                           timeout=timeout)
        if r.returncode != 0:
            subprocess.run(["fusermount3", "-u", "-z", str(self.mnt)], timeout=30)
        exited = wait_pid_exit(self.pid, timeout)
        self.pid = -1
        assert r.returncode == 0, f"fusermount3 -u: {r.stderr}"
        assert exited, "kvfs did not exit after umount"

    def kill9(self) -> None:
        """The daemon dies at once (a crash); the dead mount is cleared."""
        if not self.mounted:
            return
        os.kill(self.pid, signal.SIGKILL)
        assert wait_pid_exit(self.pid, 30)
        self.pid = -1
        subprocess.run(["fusermount3", "-u", "-z", str(self.mnt)], timeout=30)

    def admin(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        r = subprocess.run([KVFS_ADMIN_BIN, *args], capture_output=True, text=True, timeout=60)
        if check:
            assert r.returncode == 0, f"kvfs-admin {' '.join(args)}: rc {r.returncode} {r.stderr}"
        return r

    def stats(self) -> dict:
        return json.loads(self.admin("stats", "--json", str(self.mnt)).stdout)

    def log_tail(self, n: int = 8000) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError:
            return ""


class KvfsFactory:
    """Makes Kvfs daemons under one temporary root and cleans them all up."""

    def __init__(self, root: Path):
        self.root = root
        self.all: list[Kvfs] = []

    def __call__(self, **kw) -> Kvfs:
        k = Kvfs(self.root, **kw)
        self.all.append(k)
        return k

    def mounted(self, **kw) -> Kvfs:
        k = self(**kw)
        k.mount()
        return k

    def cleanup(self, failed: bool) -> list[str]:
        errors = []
        for k in self.all:
            try:
                k.unmount()
            except Exception as e:  # noqa: BLE001 - teardown must reach every daemon
                errors.append(f"{k.mnt}: {e}")
                if k.pid > 0:
                    os.kill(k.pid, signal.SIGKILL)
                subprocess.run(["fusermount3", "-u", "-z", str(k.mnt)], timeout=30)
            if failed or errors:
                sys.stderr.write(f"---- kvfs log {k.log} (tail) ----\n{k.log_tail()}\n---- end ----\n")
        return errors


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


@pytest.fixture
def kvfs(request, tmp_path):
    """A factory: kvfs(node_id=..., backing=..., opts=...) -> Kvfs (not yet mounted);
    kvfs.mounted(...) mounts it. Every daemon is unmounted at teardown, and a
    clean unmount (every dirty file written, the daemon exited) is asserted."""
    f = KvfsFactory(tmp_path)
    yield f
    rep = getattr(request.node, "rep_call", None)
    errors = f.cleanup(failed=bool(rep and rep.failed))
    assert not errors, f"unmount failed: {errors}"


@pytest.fixture(params=["plain", "kvfs"])
def root_dir(request, kvfs, tmp_path):
    """The directory a client is given as its root: a plain directory on the
    local disk, or a kvfs mount over one (the test runs once for each)."""
    if request.param == "plain":
        d = tmp_path / "plain"
        d.mkdir()
        yield str(d)
    else:
        k = kvfs.mounted()
        request.node.kvfs_mount = k
        yield str(k.mnt)
