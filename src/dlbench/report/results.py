"""A stored run, analysed: statistics and derived rates computed from the raw samples.

Everything shown to a user (summary, report, compare, export) goes through here, so the numbers
agree everywhere and are always recomputable from what the store keeps.
"""

from __future__ import annotations

from pathlib import Path

from dlbench.measure.energy import figures as energy_figures
from dlbench.measure.peak import describe, peak_for
from dlbench.scenarios import registry
from dlbench.storage.cell_result import CellResult, RunResults
from dlbench.storage.damage import Damaged, check_metrics, check_samples
from dlbench.storage.store import CellRecord, Store

__all__ = ["CellResult", "RunResults", "analyse_cell", "analyse_or_set_aside", "load_run", "read_run"]


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
        if cell.status == "ok":
            res.energy = energy_figures(cell.metrics.get("energy"))
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
        store.set_aside(cell.run_id, cell.key, str(exc))
        return None


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
        if (res := analyse_or_set_aside(store, cell, v, peaks.get(cell.threads))) is not None:
            cells.append(res)
    environment = store.environment(run_id)
    return RunResults(run, environment, peaks, verifications, cells,
                      [n for n in store.damage if n.startswith(f"run {run_id}:")],
                      dict(store.cells_set_aside.get(run_id, {})))
