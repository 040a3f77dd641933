"""The precision study of docs/precision.md: the gate's errors against float64 at each precision over
the zoo, one timed run of four models at fp32, bf16, amp-bf16 and int8, and LeNet trained on digits at
amp-bf16 beside fp32.

    python benchmarks/update_performance.py precision_study            # the issue's measurement
    python benchmarks/update_performance.py precision_study --args=--quick

``--quick``: the gate over four models, the timed run of LeNet at 1 thread with a short protocol,
and 2 convergence epochs. Prints the error table, the report's "Precision" section of the run (speed-up
over fp32, errors, the CPU's native precisions) and the convergence comparison.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from _common import dlbench, header

FRAMEWORKS = "torch,jax,tensorflow,onnxruntime"
VERIFY_PRECISIONS = "bf16,amp-bf16,fp16,amp-fp16,int8"
RUN_PRECISIONS = "fp32,bf16,amp-bf16,int8"
MODELS = "lenet,resnet-56,lstm-imdb,fcn-r"
#: --quick: LeNet alone at 1 thread (fcn-r's training at batch 1024 in emulated bf16 takes minutes a step here)
QUICK_MODELS = "lenet"
QUICK_PROTOCOL = ["--repeats", "1", "--warmup", "2", "--min-iters", "5", "--min-time", "0.3"]



def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    models = QUICK_MODELS if args.quick else MODELS
    verify_models = MODELS if args.quick else ",".join(_zoo())
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "results.db")
        t0 = time.perf_counter()
        gate = dlbench("verify", "--model", verify_models, "--framework", FRAMEWORKS, "--precision",
                       VERIFY_PRECISIONS, "--threads", "1", "--json")
        gate_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        run_argv = ["run", "--model", models, "--framework", FRAMEWORKS, "--scenario", "forward,train_step",
                    "--precision", RUN_PRECISIONS, "--threads", "1" if args.quick else "1,2",
                    *(QUICK_PROTOCOL if args.quick else [])]
        run = dlbench(*run_argv, "--db", db, "--json")
        run_s = time.perf_counter() - t0
        run_id = json.loads(run.stdout)["run_id"]
        dlbench("report", run_id, "--db", db, "--out", str(Path(tmp) / "report"))
        md = (Path(tmp) / "report" / "report.md").read_text()
        epochs = "2" if args.quick else "10"
        conv_argv = ["run", "--scenario", "convergence", "--model", "lenet", "--data", "digits", "--framework",
                     "torch,jax,tensorflow", "--precision", "fp32,amp-bf16", "--epochs", epochs, "--threads", "1",
                     "--repeats", "1"]
        conv = dlbench(*conv_argv, "--db", db, "--json")
        from dlbench import api

        conv_res = api.results(json.loads(conv.stdout)["run_id"], db)

    print(header("Precision: error against float64 and speed" + (" (quick form)" if args.quick else "")))
    print(f"- gate: `dlbench verify --model {verify_models} --framework {FRAMEWORKS} --precision {VERIFY_PRECISIONS} "
          f"--threads 1`: exit code {gate.returncode}, {gate_s / 60:.1f} min")
    print(f"- run: `dlbench {' '.join(run_argv)}`: exit code {run.returncode}, {run_s / 60:.1f} min")
    print(f"- convergence: `dlbench {' '.join(conv_argv)}`: exit code {conv.returncode}\n")
    print("#### The gate at each precision (errors against the float64 reference)\n")
    print("| model | framework | precision | verdict | forward error | gradient error | types held | reason |")
    print("|---|---|---|---|---:|---:|---|---|")
    for r in json.loads(gate.stdout or "[]"):
        types = "/".join(r["dtypes"].values()) if r.get("dtypes") else "–"
        print(f"| {r['model']} | {r['framework']} | {r['precision']} | {r['verdict']} | {_e(r['forward_error'])} | "
              f"{_e(r['gradient_error'])} | {types} | {(r['reason'] or '')[:160]} |")
    section = md[md.index("## Precision: speed against error"):]
    section = section[:section.index("\n## ", 3)]
    print()
    print(section.replace("## Precision", "#### Precision", 1).replace("\n### ", "\n##### "))
    print("#### LeNet on digits: final test accuracy at fp32 and amp-bf16\n")
    print("| framework | precision | status | final test accuracy | reason |\n|---|---|---|---:|---|")
    for c in conv_res.cells:
        acc = c.convergence.get("final_test_acc_mean") if c.ok else None
        print(f"| {c.cell.framework} | {c.cell.precision} | {c.cell.status} | "
              f"{'–' if acc is None else f'{acc:.4f}'} | {c.cell.reason[:160]} |")


def _e(value: float | None) -> str:
    return "–" if value is None else f"{value:.1e}"


def _zoo() -> list[str]:
    from dlbench.models import list_models

    return [m for m in list_models() if m not in ("gemm", "conv", "dense-1")]


if __name__ == "__main__":
    main()
