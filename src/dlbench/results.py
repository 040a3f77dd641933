"""A stored run, analysed: statistics and derived rates computed from the raw samples.

Everything shown to a user (summary, report, compare, export) goes through here, so the numbers
agree everywhere and are always recomputable from what the store keeps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dlbench.cell_result import CellResult
from dlbench.damage import Damaged, check_metrics, check_samples
from dlbench.measure.peak import describe, peak_for
from dlbench.scenarios import registry
from dlbench.store import CellRecord, Store

__all__ = ["CellResult", "RunResults", "analyse_cell", "load_run"]


@dataclass
class RunResults:
    run: dict[str, Any]
    environment: dict[str, Any]
    peaks: dict[int, dict[str, float]]
    verifications: dict
    cells: list[CellResult]
    #: what was found damaged while reading the run and set aside, one line each (dlbench.damage)
    damaged: list[str] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        return self.run["id"]

    @property
    def failed(self) -> list[CellResult]:
        """Every cell without a time, ``unsupported`` ones included (the summary lists them all)."""
        return [c for c in self.cells if not c.ok]

    @property
    def errors(self) -> list[CellResult]:
        """Cells that went wrong: crashed, timed out, ran out of memory, failed the gate. ``unsupported``
        (a scenario or model the framework cannot express, with its reason) is a fact about the framework,
        not an error: the quick suite's ONNX Runtime training cells must not make ``dlbench run`` exit 1."""
        return [c for c in self.failed if c.cell.status != "unsupported"]

    def peak_gflops(self, threads: int, precision: str = "fp32") -> float | None:
        """The measured peak of ``precision``'s compute type at ``threads`` (None: not measured)."""
        found = peak_for(self.peaks.get(threads), precision)
        return found[1] if found else None

    def to_dict(self) -> dict[str, Any]:
        return {"run": self.run, "environment": self.environment,
                "peaks": {str(k): v for k, v in self.peaks.items()},
                "verifications": [{"framework": k[0], "variant": k[1], "model": k[2], "device": k[3],
                                   "precision": k[4], **v}
                                  for k, v in self.verifications.items()],
                "cells": [c.to_dict() for c in self.cells]}


def analyse_cell(store: Store, cell: CellRecord, verified: str, peaks: dict[str, float] | None) -> CellResult:
    """A stored cell's statistics, computed by its scenario from the raw samples; its share of the
    peak of its own precision among ``peaks`` (engine -> GFLOP/s at the cell's thread count).
    :class:`Damaged` when its samples or metrics cannot be what dlbench stored (a time that is text,
    zero, negative or infinite), or its figures cannot be computed from them."""
    res = CellResult(cell=cell, verified=verified)
    samples = store.samples(cell.id)
    check_samples(samples)
    check_metrics(cell.metrics)
    found = peak_for(peaks, cell.precision) if cell.device == "cpu" else None
    try:
        registry.of_stored(cell.scenario).analyse(res, samples, found[1] if found else None)
    except (TypeError, ValueError, ArithmeticError, KeyError, IndexError, AttributeError) as exc:
        raise Damaged(f"its figures cannot be computed from what is stored ({type(exc).__name__}: {exc})") from None
    if found and res.pct_peak is not None:
        res.peak = describe(*found)
    return res


def analyse_or_set_aside(store: Store, cell: CellRecord, verified: str,
                         peaks: dict[str, float] | None) -> CellResult | None:
    """:func:`analyse_cell`, or None for a damaged cell, noted in ``store.damage`` with its run and key."""
    try:
        return analyse_cell(store, cell, verified, peaks)
    except Damaged as exc:
        store.damage.append(f"run {cell.run_id}: cell {cell.key} set aside: {exc}")
        return None


def load_run(store: Store, run_id: str | None = None) -> RunResults:
    run_id = run_id or store.latest_run_id()
    run = store.get_run(run_id)
    peaks = store.peaks(run_id)
    verifications = store.verifications(run_id)
    cells = []
    for cell in store.cells(run_id):
        v = verifications.get((cell.framework, cell.variant, cell.model, cell.device, cell.precision),
                              {}).get("verdict", "unknown")
        if (res := analyse_or_set_aside(store, cell, v, peaks.get(cell.threads))) is not None:
            cells.append(res)
    environment = store.environment(run_id)
    return RunResults(run, environment, peaks, verifications, cells,
                      [n for n in store.damage if n.startswith(f"run {run_id}:")])
