"""The deployment study of docs/serving.md: tail latency and MLPerf LoadGen's offline and server
scenarios for LeNet, ResNet-56 and the IMDB LSTM in every inference engine, at 1 and 2 threads.

    python benchmarks/update_performance.py serving_study            # LoadGen's rules, 3 x 3,500 calls
    python benchmarks/update_performance.py serving_study --args=--quick
    python benchmarks/update_performance.py serving_study_bert     # MLPerf's BERT shape (issue #32)

``--model``, ``--framework``, ``--threads`` and ``--latency-calls`` change the grid (``serving_study_bert``
is bert-base at sequence length 384 in torch, ONNX Runtime and OpenVINO at 2 threads, 100 latency calls
a process: a call takes a few hundred milliseconds here).

``--quick`` shortens everything (1,000 calls in 2 processes: no p99.9; LoadGen runs of 2 s, marked
as not meeting LoadGen's rules). Prints the report's "Latency and load" section of the run, and the
tail ratio p99 / p50 per cell (how heavy each framework's tail is beside its median).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import header

MODELS = "lenet,resnet-56,lstm-imdb"
FRAMEWORKS = "torch,jax,tensorflow,onnxruntime,openvino"
QUICK = ["--repeats", "2", "--loadgen-min-duration", "2"]
QUICK_CALLS = "1000"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--db", help="keep the run in this database (default: a scratch one)")
    ap.add_argument("--model", default=MODELS)
    ap.add_argument("--framework", default=FRAMEWORKS)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--latency-calls", help="calls per process of the latency scenario (default: dlbench's)")
    args = ap.parse_args()
    calls = args.latency_calls or (QUICK_CALLS if args.quick else None)
    grid = ["--model", args.model, "--framework", args.framework, "--threads", args.threads,
            *(QUICK if args.quick else []), *(["--latency-calls", calls] if calls else [])]
    # the load average before the study, not after
    head = header("Deployment: latency percentiles and MLPerf LoadGen" + (" (quick form)" if args.quick else ""))
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(args.db) if args.db else Path(tmp) / "results.db"
        argv = [sys.executable, "-m", "dlbench", "run", "--scenario", "latency,loadgen-offline,loadgen-server",
                *grid, "--db", str(db), "--json"]
        t0 = time.perf_counter()
        out = subprocess.run(argv, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        summary = json.loads(out.stdout)
        subprocess.run([sys.executable, "-m", "dlbench", "report", summary["run_id"], "--db", str(db), "--out",
                        str(Path(tmp) / "report")], check=True, capture_output=True)
        md = (Path(tmp) / "report" / "report.md").read_text()
        from dlbench import api

        res = api.results(summary["run_id"], db)
    section = md[md.index("## Latency and load"):]
    section = section[:section.index("\n## ", 3)]
    print(head)
    print(f"- run: `dlbench run --scenario latency,loadgen-offline,loadgen-server {' '.join(grid)}`; "
          f"{len(res.cells)} cells in {wall / 60:.1f} min, exit code {out.returncode}")
    for c in res.cells:
        if not c.ok:
            print(f"- no figure: `{c.cell.key}`: {c.cell.status}: {c.cell.reason[:200]}")
    print()
    print(section.replace("## Latency and load", "#### Latency and load", 1).replace("\n### ", "\n##### "))
    print("##### Tail ratio (p99 / p50 of single calls)\n")
    print("| model | threads | framework | p50 ms | p99 ms | p99 / p50 |\n|---|---:|---|---:|---:|---:|")
    for c in sorted(res.cells, key=lambda c: (c.cell.model, c.cell.threads, c.cell.framework)):
        if c.ok and c.cell.scenario == "latency":
            p = {x["q"]: x["value"] for x in c.cell.metrics["latency"]["pooled"]}
            if p.get(50.0) and p.get(99.0):
                print(f"| {c.cell.model} | {c.cell.threads} | {c.cell.framework} | {p[50.0]:.3g} | {p[99.0]:.3g} | "
                      f"{p[99.0] / p[50.0]:.2f} |")


if __name__ == "__main__":
    main()
