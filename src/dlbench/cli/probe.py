"""``dlbench probe``: each framework's GEMM, convolution and per-call floor (see :mod:`dlbench.engines.probe`)."""

from __future__ import annotations

import argparse
import json
import sys

from rich.markup import escape
from rich.table import Table

from dlbench.cli.common import console, names, thread_list
from dlbench.measure.peak import by_precision, peak_for
from dlbench.storage.store import DEFAULT_DB


def cmd_probe(args: argparse.Namespace) -> int:
    from dlbench import api
    from dlbench.cli.run import RichProgress
    from dlbench.engines import probe
    from dlbench.planning.estimate import Estimate

    protocol = {k: v for k, v in (("repeats", args.repeats),) if v is not None}
    threads = thread_list(args.threads) if args.threads is not None else None
    suite = probe.suite(names(args.framework, "--framework"), threads, protocol or None)
    if args.attach:
        probe.check_attach(args.db, args.attach)
    plan = api.plan(suite, db=args.db)  # planned once: the progress bar's cells are the run's
    progress = None if args.json else RichProgress(Estimate(suite, plan.todo, {}))
    try:
        res = api.run(plan, progress=progress, argv=sys.argv[1:])
    finally:
        if progress:
            progress.stop()
    found = probe.rows(res)
    if args.attach:
        probe.attach(args.db, args.attach, found, res.run_id)
    if args.json:
        print(json.dumps({"run_id": res.run_id, "attached_to": args.attach, "rows": [r.to_dict() for r in found]},
                         indent=2))
        return 0 if not res.errors else 1
    table = Table(title=f"dlbench probe (run {res.run_id})")
    numeric = ("threads", "ms", "GFLOP/s", "% of peak")
    for col in ("framework", "probe", "scenario", "threads", "ms", "GFLOP/s", "% of peak", "of the peak",
                "kernels, as the framework reports"):
        table.add_column(col, justify="right" if col in numeric else "left")
    for r in found:
        table.add_row(f"{r.framework}/{r.variant}", r.probe, r.scenario, str(r.threads),
                      f"{r.median_ms:.4g}" if r.median_ms is not None else f"– ({r.status})",
                      f"{r.gflops:,.1f}" if r.gflops else "–", f"{r.pct_peak:.0f}%" if r.pct_peak is not None else "–",
                      escape(r.peak or "–"), escape(r.kernels))
    console.print(table)
    peaks = Table(title="machine matmul peak per precision (GFLOP/s; int8: GOP/s)", title_justify="left")
    for col in ("threads", "precision", "peak", "engine"):
        peaks.add_column(col)
    for t in sorted(res.peaks):
        for precision in by_precision(res.peaks[t]):
            engine, rate = peak_for(res.peaks[t], precision) or ("–", 0.0)
            peaks.add_row(str(t), precision, f"{rate:,.0f}", engine)
    console.print(peaks)
    console.print("; ".join(f"{m}: {what}" for m, (what, _) in probe.PROBES.items()), highlight=False)
    if args.attach:
        console.print(f"figures attached to run {escape(args.attach)} (its environment's 'probes')", highlight=False)
    return 0 if not res.errors else 1


def register(sub) -> None:
    p = sub.add_parser("probe", help="each framework's GEMM, convolution and per-call floor, with its kernel library")
    p.add_argument("--framework", help="comma-separated frameworks (default: all installed)")
    p.add_argument("--threads", help="comma-separated thread counts (default: 1,all)")
    p.add_argument("--repeats", type=int, help="fresh processes per probe (default 3)")
    p.add_argument("--attach", metavar="RUN_ID", help="also store the figures with this run (its environment record)")
    p.add_argument("--db", default=str(DEFAULT_DB))
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_probe)
