"""Who is measuring a run: its lease in the store, and its temporary directory.

A driver (the process of ``dlbench run``) holds its run's lease while it measures: its pid, host,
a token naming that very process (boot id and start time: a recycled pid is not taken for it) and
a heartbeat time, renewed every ``HEARTBEAT_S`` by a thread and as cells finish. A second driver
resuming the run is refused while the holder lives (it measured the same cell beside the first,
skewing both, then failed on the store's UNIQUE constraint). A run whose driver is gone (SIGKILL,
a crash, a power cut) reads as ``stale``, not ``running`` forever, and can be resumed. Gone, on
this host: the process no longer exists; on another host, whose processes cannot be seen from
here: no heartbeat for ``STALE_AFTER_S``.

Every temporary directory the driver makes while it measures lies in one of its own,
``dlbench-run-<pid>-XXXX``, removed when the run ends however it ends (SIGKILL aside); each run
first removes those of drivers that are gone.
"""

from __future__ import annotations

import os
import platform
import shutil
import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from dlbench.core.errors import UsageError


class LeaseRows(Protocol):
    """What a lease needs of :class:`dlbench.storage.store.Store` (which imports this module to judge runs):
    its rows, and a fresh connection for the heartbeat thread."""

    def claim_lease(self, run_id: str, holder: dict[str, Any],
                    live: Callable[[dict[str, Any]], bool]) -> dict | None: ...

    def beat_lease(self, run_id: str, holder: dict[str, Any], now: float) -> None: ...

    def release_lease(self, run_id: str, holder: dict[str, Any]) -> None: ...

    def reopen(self) -> LeaseRows: ...

    def close(self) -> None: ...


#: seconds between heartbeats of a driver
HEARTBEAT_S = 30.0
#: a driver on another host without a heartbeat for this long is taken as gone (ten missed beats)
STALE_AFTER_S = 300.0
#: name of a driver's temporary directory: PREFIX + pid + "-" + random
PREFIX = "dlbench-run-"


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def process_token(pid: int) -> str | None:
    """``boot-id/start-time`` of a live process ("" where /proc cannot tell), None if it is gone or a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:  # another user's process: it exists
        pass
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return ""
    if fields[0] == "Z":
        return None
    return f"{_boot_id()}/{fields[19]}"


def process_alive(pid: int, token: str) -> bool:
    """Whether the process ``token`` was taken from still runs on this host (pid alone if either token is unknown)."""
    now = process_token(pid)
    return now is not None and (not now or not token or now == token)


def holder() -> dict[str, Any]:
    """This process as a lease holder."""
    pid = os.getpid()
    return {"pid": pid, "host": platform.node(), "token": process_token(pid) or "", "heartbeat": time.time()}


def _local(lease: dict[str, Any]) -> bool:
    """Written on this machine in this boot, so its pid can be looked up here."""
    boot = lease["token"].split("/")[0]
    return lease["host"] == platform.node() and (not boot or boot == _boot_id())


def live(lease: dict[str, Any], now: float | None = None) -> bool:
    if _local(lease):
        return process_alive(lease["pid"], lease["token"])
    return (now if now is not None else time.time()) - lease["heartbeat"] < STALE_AFTER_S


def judge(status: str, lease: dict[str, Any] | None) -> str:
    """A run's status as readers should see it: ``running`` with no live driver is ``stale``
    (no lease at all: written by a dlbench before leases, whose driver is long gone)."""
    if status == "running" and (lease is None or not live(lease)):
        return "stale"
    return status


def refusal(run_id: str, lease: dict[str, Any], what: str = "run") -> str:
    age = max(0.0, time.time() - lease["heartbeat"])
    line = (f"{what} {run_id} is still being measured by pid {lease['pid']} on host {lease['host']} (last heartbeat "
            f"{age:.0f} s ago); wait for it, or stop it (kill {lease['pid']}) and resume then")
    if not _local(lease):
        line += f" (a driver on another host counts as gone after {STALE_AFTER_S:.0f} s without a heartbeat)"
    return line


@contextmanager
def hold(store: LeaseRows, run_id: str) -> Iterator[Callable[[], None]]:
    """Hold ``run_id``'s lease while inside (UsageError if a live driver holds it); yields ``beat()``,
    which renews the heartbeat now. A thread renews it every HEARTBEAT_S on a connection of its own."""
    me = holder()
    held = store.claim_lease(run_id, me, live)
    if held is not None:
        raise UsageError(refusal(run_id, held))
    stop = threading.Event()
    thread = threading.Thread(target=_beat_until, args=(store.reopen, run_id, me, stop), name="dlbench-heartbeat",
                              daemon=True)
    thread.start()
    try:
        yield lambda: store.beat_lease(run_id, me, time.time())
    finally:
        stop.set()
        thread.join(timeout=5)
        store.release_lease(run_id, me)


def _beat_until(reopen: Callable[[], LeaseRows], run_id: str, me: dict[str, Any], stop: threading.Event) -> None:
    """The heartbeat thread: its own connection (SQLite's are not shared between threads)."""
    store = None
    try:
        while not stop.wait(HEARTBEAT_S):
            try:
                if store is None:
                    store = reopen()
                store.beat_lease(run_id, me, time.time())
            except (sqlite3.Error, UsageError):  # busy, a full disk, a moved file: the next beat tries again
                pass
    finally:
        if store is not None:
            store.close()


# --- the driver's temporary directory ------------------------------------------------------------
def sweep(root: str | Path | None = None) -> list[Path]:
    """Remove the temporary directories of this user's drivers that are gone (in ``root``, default
    the system's temporary directory); return them."""
    removed = []
    for d in Path(root or tempfile.gettempdir()).glob(f"{PREFIX}*-*"):
        pid = d.name[len(PREFIX):].split("-")[0]
        try:
            if not pid.isdigit() or d.is_symlink() or not d.is_dir() or d.stat().st_uid != os.getuid():
                continue
            token = (d / "owner").read_text() if (d / "owner").exists() else ""
        except OSError:
            continue
        if not process_alive(int(pid), token):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


@contextmanager
def scratch() -> Iterator[Path]:
    """A temporary directory of this driver's own for the run (after a sweep of dead drivers' ones);
    while inside, every temporary file or directory this process makes goes there (``tempfile.tempdir``):
    job directories, export and compile caches, distributed job directories. Removed on exit."""
    sweep()
    path = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-"))
    (path / "owner").write_text(process_token(os.getpid()) or "")
    previous = tempfile.tempdir
    tempfile.tempdir = str(path)
    try:
        yield path
    finally:
        tempfile.tempdir = previous
        shutil.rmtree(path, ignore_errors=True)
