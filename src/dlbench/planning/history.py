"""What this machine's earlier runs say a cell will cost: the estimate's evidence.

A guess from FLOPs at a fixed rate was 4x to 20x off on one machine (gpt2 on a CPU with AVX-512
ran at five times the assumed rate; a generation's guess counted the whole sequence per token). The
results database already holds what each cell cost: the median of its timed samples (one call, or
one generation) and where each process's wall time went (``metrics.cost``). So before a run, dlbench
reads the recent runs made on a machine like this one (:func:`dlbench.measure.environment.machine`:
the same CPU model and flags, cores and GPUs) and learns:

* **one call** of each cell key it has measured (the median ``measure`` sample of its latest ok cell);
* **the overhead of one process** (start-up, imports, build, and the rest: the cost parts that are not
  warm-up or timed calls) per framework, variant and scenario, else per framework;
* **the rate** this machine's cells reached, in FLOP/s per thread (per device on a GPU), the median
  over the cells whose scenario counts FLOPs; it replaces the fixed guess for cells never measured.

Nothing here is trusted beyond a guess: a database of another machine, or none, leaves the protocol's
rough constants in place (:mod:`dlbench.planning.estimate`).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from dlbench.core.cell import Cell
from dlbench.core.errors import UsageError
from dlbench.measure.environment import machine, this_machine
from dlbench.models import UnknownModelError
from dlbench.scenarios import registry
from dlbench.storage.store import Store

#: how many recent runs of the database are read (newest first)
RUNS = 30


@dataclass
class History:
    """Per cell key, one call's seconds; per (framework, variant, scenario) a process's overhead; per
    device kind the FLOP rate per thread. Empty: nothing known."""

    calls: dict[str, float] = field(default_factory=dict)
    overhead: dict[tuple[str, str, str], float] = field(default_factory=dict)
    overhead_framework: dict[str, float] = field(default_factory=dict)
    rate: dict[str, float] = field(default_factory=dict)  # "cpu" or "gpu" -> FLOP/s per thread (per device)
    runs: int = 0  # runs read
    #: (framework, variant) -> a process's overhead as this machine's calibration measured it
    #: (:mod:`dlbench.planning.calibration`), for the frameworks the database knows nothing of
    calibrated: dict[tuple[str, str], float] = field(default_factory=dict)

    def call_s(self, cell: Cell) -> float | None:
        return self.calls.get(cell.key)

    def start_s(self, cell: Cell) -> float | None:
        known = self.overhead.get((cell.framework, cell.variant, cell.scenario))
        return known if known is not None else self.process_s(cell.framework, cell.variant)

    def process_s(self, framework: str, variant: str) -> float | None:
        """One process of ``framework``'s overhead: learned from its runs here, else calibrated here (the
        variant's, else another variant's), else None (unknown)."""
        if framework in self.overhead_framework:
            return self.overhead_framework[framework]
        if (framework, variant) in self.calibrated:
            return self.calibrated[(framework, variant)]
        return next((s for (f, _), s in self.calibrated.items() if f == framework), None)

    def flops_per_s(self, cell: Cell) -> float | None:
        """The rate a cell never measured may expect: per thread on the CPU, per device on a GPU."""
        if cell.device == "cpu":
            per_thread = self.rate.get("cpu")
            return None if per_thread is None else per_thread * cell.threads
        return self.rate.get("gpu")


def flops_of_call(cell: Cell) -> float | None:
    """FLOPs of one call of the cell's closure, where its scenario counts them (None elsewhere)."""
    try:
        return registry.of_stored(cell.scenario).call_flops(cell)
    except UnknownModelError:
        return None


def load_history(db: str | Path, here: dict | None = None) -> History:
    """The evidence of the database's recent runs on this machine (``here``: :func:`this_machine`)."""
    if not Path(db).is_file():
        return History()
    try:
        store = Store(db, create=False, read_only=True)
    except UsageError:  # not a database dlbench can read: no evidence, the run itself will say why
        return History()
    try:
        return _read(store, this_machine() if here is None else here)
    finally:
        store.close()


def _read(store: Store, here: dict) -> History:
    out = History()
    overhead: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    by_framework: dict[str, list[float]] = defaultdict(list)
    rates: dict[str, list[float]] = defaultdict(list)
    for run in sorted(store.list_runs(), key=lambda r: r["started_at"], reverse=True)[:RUNS]:
        if machine(store.environment(run["id"])) != here:
            continue
        out.runs += 1
        for rec in store.cells(run["id"]):
            if rec.status != "ok":
                continue
            try:
                per_process, call = _evidence(store, rec)
            except (TypeError, ValueError, KeyError, ArithmeticError):  # a damaged row is no evidence
                continue
            if per_process is not None:
                overhead[(rec.framework, rec.variant, rec.scenario)].append(per_process)
                by_framework[rec.framework].append(per_process)
            if call is None or rec.key in out.calls:  # none, or a newer run measured it already
                continue
            out.calls[rec.key] = call
            cell = Cell(rec.framework, rec.variant, rec.model, rec.scenario, rec.batch, rec.threads, rec.device,
                        rec.data, precision=rec.precision)
            try:
                flops = flops_of_call(cell) if cell.key == rec.key else None  # not a scaling cell's workers
            except (UsageError, ValueError):  # a scenario or model this dlbench does not know (a plug-in's)
                flops = None
            if flops:
                kind = "cpu" if rec.device == "cpu" else "gpu"
                rates[kind].append(flops / call / (rec.threads if kind == "cpu" else 1))
    out.overhead = {k: statistics.median(v) for k, v in overhead.items()}
    out.overhead_framework = {k: statistics.median(v) for k, v in by_framework.items()}
    out.rate = {k: statistics.median(v) for k, v in rates.items()}
    return out


def _evidence(store: Store, rec) -> tuple[float | None, float | None]:
    """A stored cell's overhead per process (None: its processes reported no parts) and its median
    timed sample in seconds (None: no ``measure`` samples)."""
    cost = rec.metrics.get("cost") or {}
    processes = cost.get("processes") or 0
    per_process = None
    if processes and cost.get("timed_s"):  # a scenario whose processes report their parts
        per_process = float(cost["start_s"] + cost["build_s"] + cost["rest_s"]) / processes
    values = [s.value_ns for s in store.samples(rec.id, "measure")]
    call = statistics.median(values) / 1e9 if values else None
    if (per_process is not None and not per_process >= 0) or (call is not None and not 0 < call < float("inf")):
        raise ValueError("not a time")
    return per_process, call
