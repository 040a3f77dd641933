"""A stored run, analysed: statistics and derived rates computed from the raw samples.

Everything shown to a user (summary, report, compare, export) goes through here, so the numbers
agree everywhere and are always recomputable from what the store keeps.
"""

from __future__ import annotations

from pathlib import Path

from dlbench.cell_result import CellResult, RunResults
from dlbench.scenarios import registry
from dlbench.store import CellRecord, Store

__all__ = ["CellResult", "RunResults", "analyse_cell", "load_run", "read_run"]


def analyse_cell(store: Store, cell: CellRecord, verified: str, peak: float | None) -> CellResult:
    """A stored cell's statistics, computed by its scenario from the raw samples."""
    res = CellResult(cell=cell, verified=verified)
    samples = store.samples(cell.id)
    registry.of_stored(cell.scenario).analyse(res, samples, peak)
    return res


def read_run(run_id: str | None, db: str | Path) -> RunResults:
    """A stored run (the latest when ``run_id`` is None) read from the database at ``db``, analysed."""
    store = Store(db, read_only=True)
    try:
        return load_run(store, run_id)
    finally:
        store.close()


def load_run(store: Store, run_id: str | None = None) -> RunResults:
    run_id = run_id or store.latest_run_id()
    run = store.get_run(run_id)
    peaks = store.peaks(run_id)
    verifications = store.verifications(run_id)
    cells = []
    for cell in store.cells(run_id):
        v = verifications.get((cell.framework, cell.variant, cell.model, cell.device, cell.precision),
                              {}).get("verdict", "unknown")
        rates = peaks.get(cell.threads)
        cells.append(analyse_cell(store, cell, v, max(rates.values()) if rates else None))
    return RunResults(run, store.environment(run_id), peaks, verifications, cells)
