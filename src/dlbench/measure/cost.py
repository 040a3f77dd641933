"""Where a cell's wall time went: what to make cheaper.

A measuring process reports how long its parts took (:class:`WorkClock`: from the moment its
scenario's work began, the preparation (framework import, threads, weights, batch), the build
(model, export, compile, placing the batch, making the closure), the warm-up (the fixed calls and
any found in the samples) and the timed calls). The parent knows the process's whole wall time, so
the time before the work began (the interpreter's start, dlbench's imports, pinning) is the
difference. Per process::

    start_s   = process wall time - work time + preparation   (process start and imports)
    build_s, warmup_s, timed_s                                 (as reported)
    rest_s    = process wall time - the four above             (profile, result, exit)

A cell's breakdown is the sum over its processes; the gate's share (its verification process over
the cells it serves) is added where a run is shown (``dlbench show --cost``). A scenario whose
processes report no parts (compile, convergence, serving, scaling) has its whole wall time in
``rest_s``.
"""

from __future__ import annotations

import time
from typing import Any

#: the parts of a cell's wall time, in the order they happen
PARTS = ("start_s", "build_s", "warmup_s", "timed_s", "rest_s")


class WorkClock:
    """Marks taken inside a measuring process: ``mark(name)`` closes the part that ran since the last."""

    def __init__(self) -> None:
        self.began = self.last = time.perf_counter()
        self.parts: dict[str, float] = {}

    def mark(self, name: str) -> None:
        now = time.perf_counter()
        self.parts[name] = self.parts.get(name, 0.0) + now - self.last
        self.last = now

    def to_dict(self, **extra: float) -> dict[str, float]:
        """The parts, ``extra`` ones (measured elsewhere, e.g. by the timer) and the whole ``work_s``."""
        return {**self.parts, **extra, "work_s": time.perf_counter() - self.began}


def process_cost(process_s: float, work: dict[str, float] | None) -> dict[str, float]:
    """One process's breakdown from its wall time and what it reported (None: nothing reported)."""
    if not work:
        return {**dict.fromkeys(PARTS, 0.0), "rest_s": process_s}
    start = max(process_s - work.get("work_s", 0.0), 0.0) + work.get("prepare_s", 0.0)
    out = {"start_s": start, "build_s": work.get("build_s", 0.0), "warmup_s": work.get("warmup_s", 0.0),
           "timed_s": work.get("timed_s", 0.0)}
    out["rest_s"] = max(process_s - sum(out.values()), 0.0)
    return out


def cell_cost(processes: list[tuple[float, dict[str, float] | None]]) -> dict[str, Any]:
    """A cell's breakdown: the sum over its processes of :func:`process_cost`, and their count."""
    total = dict.fromkeys(PARTS, 0.0)
    for process_s, work in processes:
        for k, v in process_cost(process_s, work).items():
            total[k] += v
    return {**total, "processes": len(processes)}
