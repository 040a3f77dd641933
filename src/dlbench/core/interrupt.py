"""Stopping a run by a signal: SIGTERM and SIGINT end it the same way.

SIGTERM is what ``timeout``, systemd, Slurm and CI cancellation send; with Python's default
action the driver died on the spot (exit 143), the run stayed ``running``, its worker went on
measuring and its temporary directories stayed. While a run is measured both signals raise
:class:`Interrupted` in the main thread instead, so the same unwinding as Ctrl-C happens: the
worker's process group is killed (``launch.subprocess.run_job``), temporary directories are
removed, the run is marked ``interrupted`` and the command line prints how to resume it.
"""

from __future__ import annotations

import shlex
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class Interrupted(KeyboardInterrupt):
    """A run stopped by ``signum``; ``run_id`` and ``db`` are set by the runner once the run it
    stopped is known. A KeyboardInterrupt, so every ``except KeyboardInterrupt`` clean-up runs for
    SIGTERM too."""

    def __init__(self, signum: int, run_id: str | None = None, db: str | Path | None = None):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.run_id = run_id
        self.db = db

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, as a shell reports a process the signal ended (143, 130)."""
        return 128 + self.signum


def _raise(signum: int, frame) -> None:
    raise Interrupted(signum)


@contextmanager
def signals_interrupt() -> Iterator[None]:
    """While inside, SIGTERM and SIGINT raise :class:`Interrupted` (main thread only: Python runs
    handlers there). A signal ignored when we start (SIGINT of a background job of a script, a
    SIGTERM someone chose to ignore) stays ignored; the previous handlers come back on exit."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        if signal.getsignal(sig) is not signal.SIG_IGN:
            previous[sig] = signal.signal(sig, _raise)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)  # None: not set from Python


def explain(exc: KeyboardInterrupt) -> tuple[str, int]:
    """What to tell the user about an interrupted command, and its exit status (130 for Ctrl-C,
    143 for SIGTERM); with the exact command that resumes the run when one was stopped."""
    if not isinstance(exc, Interrupted):
        return "interrupted", 130
    by = f"interrupted by {signal.Signals(exc.signum).name}"
    if exc.run_id is None:
        return by, exc.exit_code
    return (f"{by}; run {exc.run_id} is marked interrupted and keeps its finished cells; resume with: "
            f"dlbench run --resume {exc.run_id} --db {shlex.quote(str(exc.db))}", exc.exit_code)
