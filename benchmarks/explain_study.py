"""The study of docs/explain.md: a layers run, the probe attached to it, and the two explanations the
issue asks for (torch vs TensorFlow on fcn-r's forward; torch vs JAX on resnet-56's gradient).

    python benchmarks/update_performance.py explain_study                 # the issue's run (long)
    python benchmarks/update_performance.py explain_study --args=--quick  # fcn-r and resnet-56, 1 thread

``--quick``: fcn-r and resnet-56 only, torch, JAX and TensorFlow, 1 thread, 2 processes per cell of
at least 0.5 s of sampling. Prints the report's per-part tables, the explanations and the probe.
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

FULL = ["--model", "fcn-r,resnet-56,lstm-imdb,alexnet-r", "--framework", "torch,jax,tensorflow,onnxruntime",
        "--threads", "1,2"]
QUICK = ["--model", "fcn-r,resnet-56", "--framework", "torch,jax,tensorflow", "--threads", "1", "--repeats", "2",
         "--min-time", "0.5"]
EXPLAIN = [("torch,tensorflow", "fcn-r", "forward"), ("torch,jax", "resnet-56", "gradient")]


def dlbench(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dlbench", *argv], capture_output=True, text=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    flags = QUICK if args.quick else FULL
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "results.db")
        t0 = time.perf_counter()
        run = dlbench("run", "--scenario", "layers", *flags, "--db", db, "--json")
        wall = time.perf_counter() - t0
        run_id = json.loads(run.stdout)["run_id"]
        frameworks = flags[flags.index("--framework") + 1]
        threads = flags[flags.index("--threads") + 1]
        probe = dlbench("probe", "--framework", frameworks, "--threads", threads, "--attach", run_id, "--db", db,
                        "--json")
        explained = [dlbench("explain", run_id, "--framework", pair, "--model", model, "--scenario", scenario,
                             "--db", db) for pair, model, scenario in EXPLAIN]
        dlbench("report", run_id, "--db", db, "--out", str(Path(tmp) / "report"))
        md = (Path(tmp) / "report" / "report.md").read_text()
    print(header("Where the time goes: layers, probe and explain" + (" (quick form)" if args.quick else "")))
    print(f"- run: `dlbench run --scenario layers {' '.join(flags)}`: {wall / 60:.1f} min, exit code {run.returncode}")
    print(f"- probe: `dlbench probe --framework {frameworks} --threads {threads} --attach RUN`, exit code "
          f"{probe.returncode}\n")
    for (pair, model, scenario), out in zip(EXPLAIN, explained, strict=True):
        print(f"`dlbench explain RUN --framework {pair} --model {model} --scenario {scenario}` (exit {out.returncode}):\n")
        print("```\n" + (out.stdout.strip() or out.stderr.strip()) + "\n```\n")
    if probe.returncode in (0, 1):
        print("| framework | probe | scenario | threads | ms | GFLOP/s | kernels |\n|---|---|---|---:|---:|---:|---|")
        for r in json.loads(probe.stdout)["rows"]:
            ms = f"{r['median_ms']:.4g}" if r["median_ms"] is not None else r["status"]
            gf = f"{r['gflops']:.1f}" if r["gflops"] else "–"
            print(f"| {r['framework']} | {r['probe']} | {r['scenario']} | {r['threads']} | {ms} | {gf} | {r['kernels']} |")
        print()
    if "## Where the time goes" in md:
        section = md[md.index("## Where the time goes"):]
        section = section[:section.index("\n## ", 3)] if "\n## " in section[3:] else section
        print(section.replace("## Where the time goes", "#### Per-part tables", 1).replace("\n### ", "\n##### "))


if __name__ == "__main__":
    main()
