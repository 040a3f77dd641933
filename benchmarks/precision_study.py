"""The precision study of docs/precision.md: the gate's errors against float64 at each precision over
the zoo, one timed run of four models at fp32, bf16, amp-bf16 and int8, and LeNet trained on digits at
amp-bf16 beside fp32.

    python benchmarks/update_performance.py precision_study            # the issue's measurement
    python benchmarks/update_performance.py precision_study --args=--quick

The full form runs the gate over the whole zoo at the issue's precisions (bf16, amp-bf16, int8), the
four models at all cores (2 here) with a short protocol (2 processes, 2 warm-up, at least 5 calls and
0.5 s: the default protocol at 1 and 2 threads is estimated at 6.6 h on a 2-core machine, before
emulated bf16 slows it further), and 10 convergence epochs. ``--quick``: the gate over four models at
five precisions, the timed run of LeNet at 1 thread, and 2 convergence epochs. Prints the error table,
the report's "Precision" section of the run (speed-up over fp32, errors, the CPU's native precisions)
and the convergence comparison.

``--workdir DIR`` keeps the database and each finished part there, so an interrupted study resumes:
a finished part is read back, an interrupted timed run is finished with ``dlbench run --resume``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from _common import dlbench, header, study_part

FRAMEWORKS = "torch,jax,tensorflow,onnxruntime"
VERIFY_PRECISIONS = "bf16,amp-bf16,int8"
QUICK_VERIFY_PRECISIONS = "bf16,amp-bf16,fp16,amp-fp16,int8"
RUN_PRECISIONS = "fp32,bf16,amp-bf16,int8"
MODELS = "lenet,resnet-56,lstm-imdb,fcn-r"
#: --quick: LeNet alone at 1 thread (fcn-r's training at batch 1024 in emulated bf16 takes minutes a step here)
QUICK_MODELS = "lenet"
QUICK_PROTOCOL = ["--repeats", "1", "--warmup", "2", "--min-iters", "5", "--min-time", "0.3"]
PROTOCOL = ["--repeats", "2", "--warmup", "2", "--min-iters", "5", "--min-time", "0.5"]



def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--workdir", type=Path, help="keep the database and finished parts here (resumable)")
    args = ap.parse_args()
    # the load average before the study, not after
    head = header("Precision: error against float64 and speed" + (" (quick form)" if args.quick else ""))
    models = QUICK_MODELS if args.quick else MODELS
    verify_models = MODELS if args.quick else ",".join(_zoo())
    verify_precisions = QUICK_VERIFY_PRECISIONS if args.quick else VERIFY_PRECISIONS
    with tempfile.TemporaryDirectory() as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        db = str(work / "results.db")
        gate_argv = ["verify", "--model", verify_models, "--framework", FRAMEWORKS, "--precision",
                     verify_precisions, "--threads", "1", "--json"]
        gate = study_part(work / "gate.json", gate_argv)
        run_argv = ["run", "--model", models, "--framework", FRAMEWORKS, "--scenario", "forward,train_step",
                    "--precision", RUN_PRECISIONS, "--threads", "1" if args.quick else "2",
                    *(QUICK_PROTOCOL if args.quick else PROTOCOL)]
        run = study_part(work / "run.json", [*run_argv, "--db", db, "--json"], db=db)
        run_id = json.loads(run["stdout"])["run_id"]
        dlbench("report", run_id, "--db", db, "--out", str(work / "report"))
        md = (work / "report" / "report.md").read_text()
        epochs = "2" if args.quick else "10"
        conv_argv = ["run", "--scenario", "convergence", "--model", "lenet", "--data", "digits", "--framework",
                     "torch,jax,tensorflow", "--precision", "fp32,amp-bf16", "--epochs", epochs, "--threads", "1",
                     "--repeats", "1"]
        conv = study_part(work / "convergence.json", [*conv_argv, "--db", db, "--json"], db=db)
        from dlbench import api

        conv_res = api.results(json.loads(conv["stdout"])["run_id"], db)

    print(head)
    print(f"- gate: `dlbench {' '.join(gate_argv[:-1])}`: exit code {gate['returncode']}, "
          f"{gate['seconds'] / 60:.1f} min")
    print(f"- run: `dlbench {' '.join(run_argv)}`: exit code {run['returncode']}, {run['seconds'] / 60:.1f} min")
    print(f"- convergence: `dlbench {' '.join(conv_argv)}`: exit code {conv['returncode']}, "
          f"{conv['seconds'] / 60:.1f} min")
    read_back = [p["read_back"] for p in (gate, run, conv) if "read_back" in p]
    if read_back:
        print(f"- read back from the work directory, measured by an earlier invocation: {', '.join(read_back)} "
              "(the load average above is this invocation's)")
    print()
    print("#### The gate at each precision (errors against the float64 reference)\n")
    print("| model | framework | precision | verdict | forward error | gradient error | types held | reason |")
    print("|---|---|---|---|---:|---:|---|---|")
    for r in json.loads(gate["stdout"] or "[]"):
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
