"""The real two-run check of `dlbench compare`, on a quiet machine (the tests check the statistics
on constructed samples; this checks them on measured ones).

1. Run A and run B: the same tiny suite twice (fakefw ``ok``: plain torch). `compare A B` must
   find no significant change (noise alone must not trip the gate).
2. Run C: the same cells with fakefw ``slow``, which sleeps 30% of each call on top of it. Its cells
   are copied into run C' under the variant name ``ok`` (compare matches cells by variant too), and
   `compare A C'` must flag every cell slower, with a ratio near 1.3, and `--fail-above 10` must
   exit 1.

    python benchmarks/compare_selfcheck.py [--quick] [--db PATH]

Exit 0 when both hold. On a shared, busy machine step 1 can fail: that is the noise this check
exists to expose, not a bug in compare.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FAKE = ROOT / "tests" / "fakefw.py"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="database to use (default: a temporary one)")
    parser.add_argument("--quick", action="store_true", help="a short protocol (plumbing check; statistics weak)")
    args = parser.parse_args()

    os.environ["DLBENCH_PLUGINS"] = str(FAKE)
    sys.path.insert(0, str(ROOT / "src"))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from _common import header

    from dlbench import api
    from dlbench.cli.main import main as cli
    from dlbench.frameworks import load_plugins
    from dlbench.report.compare import compare_runs
    from dlbench.storage.store import Store

    load_plugins()
    db = Path(args.db) if args.db else Path(tempfile.mkdtemp(prefix="dlbench-selfcheck-")) / "results.db"
    protocol = ({"warmup": 2, "min_iters": 15, "min_time_s": 0.2, "repeats": 1} if args.quick
                else {"warmup": 10, "min_iters": 50, "min_time_s": 1.0, "repeats": 6})
    axes = {"models": ["lenet"], "frameworks": ["fakefw"], "scenarios": ["forward", "train_step"], "batches": [16],
            "threads": [1], "protocol": protocol}

    a = api.run(db=db, variants=["ok"], **axes)
    b = api.run(db=db, variants=["ok"], **axes)
    c = api.run(db=db, variants=["slow"], **axes)

    store = Store(db)  # C': run C's cells and samples under the variant name "ok"
    try:
        c_ok = store.create_run("selfcheck-slow-as-ok", {"copied_from": c.run_id})
        store.save_environment(c_ok, c.environment)
        for cell in store.cells(c.run_id):
            d = {k: getattr(cell, k) for k in ("framework", "model", "scenario", "batch", "threads", "device")}
            d["variant"] = "ok"
            d["key"] = cell.key.replace("/slow/", "/ok/")
            store.save_cell(c_ok, d, cell.status, cell.reason, cell.seconds, cell.warnings, cell.metrics,
                            store.samples(cell.id))
        store.finish_run(c_ok, "complete")
    finally:
        store.close()

    same = compare_runs(a, b)
    slow = compare_runs(a, api.results(c_ok, db))
    ok = True
    print(header("compare self-check: two identical runs, and a planted 30% slowdown"))
    print(f"- protocol {protocol}; runs A={a.run_id} B={b.run_id} C'={c_ok}")
    runs = {"A": a, "B": b, "C'": api.results(c_ok, db)}
    for name, run in runs.items():
        for cr in run.cells:
            meds = ", ".join(f"{x:.2f}" for x in cr.repeat_medians_ms)
            print(f"- run {name} {cr.cell.key}: per-process medians {meds} ms")
    for label, cmp in (("A vs B ", same), ("A vs C'", slow)):
        for m in cmp.matched:
            print(f"- {label} {m.key}: ratio {m.ratio:.3f} [{m.ci_low:.3f}, {m.ci_high:.3f}] p={m.p_value:.2g} "
                  f"({m.test}) **{m.verdict}**")
    if same.slower or same.faster:
        print("FAIL: two runs of the same suite differ significantly (a noisy machine?)")
        ok = False
    if len(slow.slower) != len(slow.matched) or not slow.matched:
        print("FAIL: the planted 30% slowdown was not flagged on every cell")
        ok = False
    if any(not 1.15 < m.ratio < 1.45 for m in slow.slower):
        print("FAIL: a flagged ratio is far from the planted 1.3")
        ok = False
    gate = cli(["compare", a.run_id, c_ok, "--db", str(db), "--fail-above", "10"])
    if gate != 1:
        print(f"FAIL: --fail-above 10 exited {gate}, expected 1")
        ok = False
    print("- selfcheck:", "**OK**" if ok else "**FAILED**")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
