"""How long does loading a run take, and how much of it is the hierarchical bootstrap?

Every view of a run (``dlbench report``, ``explain``, ``compare``) recomputes each cell's 95% interval
on load: a bootstrap over the cell's processes and samples (``measure.stats.hierarchical_medians``).
This times it (vectorised up to ``VECTORISED_WIDTH`` values a resample, by definition past that)
against its definition, one resample at a time (``hierarchical_medians_by_definition``), in one
process, alternating:

* per cell, for cells of 3 processes of 10 to 1,000 samples each (sizes differing by process);
* loading a whole stored run (``api.results``) with each of the two: a synthetic run of 120 cells of
  3 x 10 samples (the size of a layers run's cells), or ``--db DB --run RUN``, a stored run.

    python benchmarks/bootstrap_speed.py [--db DB --run RUN]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import numpy as np  # noqa: E402
from _common import header  # noqa: E402

from dlbench import api  # noqa: E402
from dlbench.measure import stats  # noqa: E402
from dlbench.storage.store import Sample, Store  # noqa: E402

ROUNDS = 3
WAYS = {"hierarchical_medians": stats.hierarchical_medians, "by definition": stats.hierarchical_medians_by_definition}


def _cell(n: int, rng: np.random.Generator) -> list[np.ndarray]:
    return [rng.normal(10.0, 0.5, n + d) for d in (0, n // 10, -(n // 10))]


def _synthetic_run(db: Path, cells: int, per_process: int) -> str:
    store = Store(db)
    run = store.create_run("bootstrap_speed", {})
    rng = np.random.default_rng(0)
    for i in range(cells):
        cell = {"framework": "fw", "variant": "v", "model": f"m{i}", "scenario": "forward", "batch": 1,
                "threads": 1, "device": "cpu", "data": "synthetic", "key": f"fw/v/m{i}/forward/b1/t1/cpu"}
        samples = [Sample(r, j, "measure", float(t) * 1e6) for r, g in enumerate(_cell(per_process, rng))
                   for j, t in enumerate(g)]
        store.save_cell(run, cell, "ok", "", 1.0, [], {}, samples)
    store.close()
    return run


def _load_s(db: Path, run: str, way: str) -> float:
    with mock.patch.object(stats, "hierarchical_medians", WAYS[way]):
        t0 = time.perf_counter()
        api.results(run, db)
        return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", type=Path, help="a results database (with --run): time loading that run")
    ap.add_argument("--run", help="the run in --db")
    args = ap.parse_args()
    if bool(args.db) != bool(args.run):
        ap.error("--db and --run go together")
    print(header("Loading a run: the hierarchical bootstrap, hierarchical_medians and by definition"))
    print("| samples per process (3 processes) | hierarchical_medians ms per cell | by definition ms per cell | speed-up |")
    print("|---:|---:|---:|---:|")
    rng = np.random.default_rng(1)
    for n in (10, 100, 500, 1000):
        groups = _cell(n, rng)
        times: dict[str, list[float]] = {w: [] for w in WAYS}
        for r in range(ROUNDS):
            for way in WAYS if r % 2 == 0 else reversed(WAYS):
                t0 = time.perf_counter()
                WAYS[way](groups)
                times[way].append(time.perf_counter() - t0)
        fast, slow = (1e3 * min(times[w]) for w in WAYS)
        print(f"| {n} | {fast:.1f} | {slow:.1f} | {slow / fast:.1f}x |")
    with tempfile.TemporaryDirectory() as tmp:
        if args.db:
            db, run, what = args.db, args.run, f"stored run {args.run}"
        else:
            db, what = Path(tmp) / "r.db", "synthetic run of 120 cells, 3 x 10 samples each"
            run = _synthetic_run(db, 120, 10)
        loads = {w: [] for w in WAYS}
        for r in range(ROUNDS):
            for way in WAYS if r % 2 == 0 else reversed(WAYS):
                loads[way].append(_load_s(db, run, way))
        fast, slow = (min(loads[w]) for w in WAYS)
        print(f"\nLoading the {what} (`api.results`, best of {ROUNDS}): hierarchical_medians {fast:.2f} s, "
              f"by definition {slow:.2f} s ({slow / fast:.1f}x).")


if __name__ == "__main__":
    main()
