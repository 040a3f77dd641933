"""The study of docs/explain.md: a layers run, the probe attached to it, and the two explanations the
issue asks for (torch vs TensorFlow on fcn-r's forward; torch vs JAX on resnet-56's gradient).

    python benchmarks/update_performance.py explain_study                 # the issue's run (long)
    python benchmarks/update_performance.py explain_study --args=--quick  # fcn-r and resnet-56, 1 thread

``--quick``: one run per explanation (fcn-r in torch and TensorFlow, resnet-56 in torch and JAX), 1
thread, one process per cell of at least 0.5 s of sampling. Prints the explanations, the probe and
the report's per-part tables.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from _common import dlbench, header

FULL = ["--model", "fcn-r,resnet-56,lstm-imdb,alexnet-r", "--framework", "torch,jax,tensorflow,onnxruntime",
        "--threads", "1,2"]
#: the issue's two explanations: (frameworks A,B, model, scenario)
EXPLAIN = [("torch,tensorflow", "fcn-r", "forward"), ("torch,jax", "resnet-56", "gradient")]
#: --quick: one run per explanation, of its model and two frameworks only, 1 thread, 1 process per cell
QUICK = ["--threads", "1", "--repeats", "1", "--min-time", "0.5"]



def main() -> None:
    from dlbench.probe import ProbeRow, attach

    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    # the load average before the study, not after
    head = header("Where the time goes: layers, probe and explain" + (" (quick form)" if args.quick else ""))
    runs = ([[*QUICK, "--model", model, "--framework", pair] for pair, model, _ in EXPLAIN] if args.quick
            else [FULL])
    frameworks = "torch,jax,tensorflow" if args.quick else "torch,jax,tensorflow,onnxruntime"
    threads = "1" if args.quick else "1,2"
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "results.db")
        t0 = time.perf_counter()
        done = [dlbench("run", "--scenario", "layers", *flags, "--db", db, "--json") for flags in runs]
        wall = time.perf_counter() - t0
        run_ids = [json.loads(d.stdout)["run_id"] for d in done]
        probe = dlbench("probe", "--framework", frameworks, "--threads", threads, "--attach", run_ids[0], "--db", db,
                        "--json")
        found = json.loads(probe.stdout)
        for run_id in run_ids[1:]:
            attach(db, run_id, [ProbeRow(**r) for r in found["rows"]], found["run_id"])
        explained = [dlbench("explain", run_ids[min(i, len(run_ids) - 1)], "--framework", pair, "--model", model,
                             "--scenario", scenario, "--db", db) for i, (pair, model, scenario) in enumerate(EXPLAIN)]
        sections = []
        for run_id in run_ids:
            dlbench("report", run_id, "--db", db, "--out", str(Path(tmp) / run_id))
            md = (Path(tmp) / run_id / "report.md").read_text()
            if "## Where the time goes" in md:
                section = md[md.index("## Where the time goes"):]
                sections.append(section[:section.index("\n## ", 3)] if "\n## " in section[3:] else section)
    print(head)
    for flags, d in zip(runs, done, strict=True):
        print(f"- `dlbench run --scenario layers {' '.join(flags)}`: exit code {d.returncode}")
    print(f"- {len(runs)} run(s) in {wall / 60:.1f} min; `dlbench probe --framework {frameworks} --threads {threads} "
          f"--attach RUN`: exit code {probe.returncode}\n")
    for (pair, model, scenario), out in zip(EXPLAIN, explained, strict=True):
        print(f"`dlbench explain RUN --framework {pair} --model {model} --scenario {scenario}` (exit {out.returncode}):\n")
        print("```\n" + (out.stdout.strip() or out.stderr.strip()) + "\n```\n")
    print("| framework | probe | scenario | threads | ms | GFLOP/s | kernels |\n|---|---|---|---:|---:|---:|---|")
    for r in found["rows"]:
        ms = f"{r['median_ms']:.4g}" if r["median_ms"] is not None else r["status"]
        gf = f"{r['gflops']:.1f}" if r["gflops"] else "–"
        print(f"| {r['framework']} | {r['probe']} | {r['scenario']} | {r['threads']} | {ms} | {gf} | {r['kernels']} |")
    print()
    for section in sections:
        print(section.replace("## Where the time goes", "#### Per-part tables", 1).replace("\n### ", "\n##### "))


if __name__ == "__main__":
    main()
