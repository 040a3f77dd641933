"""The figures issue 31 found claiming more than they held, measured after the fixes: the machine's
matmul peak per precision and each cell's share of its own precision's peak; per-part GFLOP/s
counted from what each part's closure computes; latency percentiles with intervals over the
processes; LoadGen's server figures beside the harness's own floor.

    python benchmarks/update_performance.py trust_figures
    python benchmarks/update_performance.py trust_figures --args=--quick

Four runs in one scratch database (or ``--db``): fcn-r forward at fp32, bf16 and int8 in torch and
ONNX Runtime (the peak per precision; "% of peak" names the peak it divides by); fcn-r's parts
(``--scenario layers``, forward and gradient, torch); LeNet's batch-1 latency in torch and ONNX
Runtime (3 processes; the per-process p50 and p99 beside the pooled ones and their interval); LeNet
under LoadGen's server scenario at a light load (``--qps 20``) with the harness floor beside it.
``--quick`` shortens the protocol (2 processes, 1,000 latency calls, 2 s LoadGen runs): the form
that checks the script runs, not figures to keep.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from _common import dlbench, header

QUICK = ["--repeats", "2", "--warmup", "3", "--min-iters", "5", "--min-time", "0.3"]
RUNS = {
    "peak": ["--model", "fcn-r", "--framework", "torch,onnxruntime", "--scenario", "forward", "--threads", "1",
             "--precision", "fp32,bf16,int8"],
    "layers": ["--model", "fcn-r", "--framework", "torch", "--scenario", "layers", "--threads", "1"],
    "latency": ["--model", "lenet", "--framework", "torch,onnxruntime", "--scenario", "latency", "--threads", "1"],
    "loadgen": ["--model", "lenet", "--framework", "torch,onnxruntime", "--scenario", "loadgen-server",
                "--threads", "1", "--qps", "20"],
}
QUICK_EXTRA = {"latency": ["--latency-calls", "1000"], "loadgen": ["--loadgen-min-duration", "2"]}


def _run(name: str, db: Path, quick: bool) -> tuple[str, float, int]:
    argv = ["run", *RUNS[name], "--db", str(db), "--json"]
    if quick:
        argv += QUICK_EXTRA.get(name, []) + (QUICK if name != "loadgen" else ["--repeats", "2"])
    t0 = time.perf_counter()
    out = dlbench(*argv)
    wall = time.perf_counter() - t0
    if not out.stdout.strip().startswith("{"):
        sys.stderr.write(out.stderr[-3000:])
        raise SystemExit(f"dlbench run ({name}) printed no JSON (exit {out.returncode})")
    return json.loads(out.stdout)["run_id"], wall, out.returncode


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--db", help="keep the runs in this database (default: a scratch one)")
    args = ap.parse_args()
    head = header("Figures that hold what they claim: peak per precision, per-part GFLOP/s, latency intervals, "
                  "LoadGen's harness floor" + (" (quick form)" if args.quick else ""))
    from dlbench import api
    from dlbench.measure.peak import by_precision
    from dlbench.report.markdown import table_md
    from dlbench.scenarios.latency_report import latency_tables
    from dlbench.scenarios.layers_report import layer_tables

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(args.db) if args.db else Path(tmp) / "results.db"
        done = {name: _run(name, db, args.quick) for name in RUNS}
        res = {name: api.results(run_id, db) for name, (run_id, _, _) in done.items()}
    print(head)
    for name, (_, wall, code) in done.items():
        shown = [*RUNS[name], *(QUICK_EXTRA.get(name, []) if args.quick else [])]
        print(f"- {name}: `dlbench run {' '.join(shown)}`; "
              f"{len(res[name].cells)} cells in {wall / 60:.1f} min, exit code {code}")
    print()

    print("#### Matmul peak per precision, and each cell's share of its own\n")
    print("| threads | " + " | ".join(f"{p} peak GFLOP/s" for p in ("fp32", "bf16", "int8")) + " |\n|---:|---:|---:|---:|")
    for t, rates in sorted(res["peak"].peaks.items()):
        best = by_precision(rates)
        print(f"| {t} | " + " | ".join(f"{best[p]:,.0f}" if p in best else "not measured"
                                       for p in ("fp32", "bf16", "int8")) + " |")
    print("\n| framework | precision | ms per batch | GFLOP/s | % of peak | of the peak |\n|---|---|---:|---:|---:|---|")
    for c in sorted(res["peak"].cells, key=lambda c: (c.cell.framework, c.cell.precision)):
        if c.ok and c.time_ms:
            print(f"| {c.cell.framework} | {c.cell.precision} | {c.time_ms.median:.3g} | {c.gflops:,.1f} | "
                  f"{c.pct_peak:.0f}% | {c.peak or '-'} |")
        else:
            print(f"| {c.cell.framework} | {c.cell.precision} | {c.cell.status}: {c.cell.reason[:80]} | | | |")

    print("\n#### fcn-r part by part: GFLOP/s from what each closure computes\n")
    for table in layer_tables(res["layers"]):
        print(f"##### {table.title}\n")
        print("\n".join(table_md(table)))

    print("#### Latency: pooled percentiles with intervals over the processes, and each process's own\n")
    print("| framework | p | pooled ms [95% interval] | per process ms |\n|---|---|---|---|")
    for c in res["latency"].cells:
        if not c.ok:
            continue
        lat = c.cell.metrics["latency"]
        for j, p in enumerate(lat["pooled"]):
            if p["value"] is None:
                continue
            own = ", ".join(f"{pp[j]['value']:.3g}" if pp[j]["value"] is not None else "-" for pp in lat["per_process"])
            print(f"| {c.cell.framework} | p{p['q']:g} | {p['value']:.3g} [{p['ci_low']:.3g}, {p['ci_high']:.3g}] | "
                  f"{own} |")
    warned = [(c.cell.framework, w) for c in res["latency"].cells for w in c.cell.warnings if "disagree" in w]
    for fw, w in warned:
        print(f"\n- {fw}: {w}")

    print("\n#### LoadGen server at 20 QPS, beside the harness floor\n")
    for table in latency_tables(res["loadgen"]):
        if table.title == "MLPerf LoadGen":
            print("\n".join(table_md(table)))
    for c in res["loadgen"].cells:
        for w in c.cell.warnings:
            if "harness floor" in w:
                print(f"- {c.cell.framework}: {w}")


if __name__ == "__main__":
    main()
