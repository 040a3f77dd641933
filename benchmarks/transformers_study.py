"""The transformer tables of docs/transformers.md (issue #32): forward and train_step of bert-base, gpt2,
vit-b16 and smollm2-135m in fp32 and bf16, in torch, JAX and TensorFlow, plus ONNX Runtime's and
OpenVINO's forward, every cell behind the equivalence gate; then ``dlbench explain`` on the largest gap
between two frameworks (the ``layers`` scenario with the whole model's profile in each).

    python benchmarks/update_performance.py transformers_study             # the table (about 45 min on 2 cores)
    python benchmarks/update_performance.py transformers_study --args "--threads 1,2"   # the issue's both counts
    python benchmarks/transformers_study.py --tiny                          # checks the script runs

Sized for a 2-core CPU: batch 1, 2 processes per cell, 1 warm-up call and at least 3 timed calls (gpt2's
forward at its default batch of 8 takes 5 s a call on one such core, its train_step three times that, so
the default protocol would take hours). ``--workdir DIR`` keeps the database and the finished parts.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from _common import header, study_part

MODELS = "bert-base,gpt2,vit-b16,smollm2-135m"
FRAMEWORKS = "torch,jax,tensorflow,onnxruntime,openvino"
PROTOCOL = ["--batch", "1", "--repeats", "2", "--warmup", "1", "--min-iters", "3", "--min-time", "0"]
TINY = ["--model", "gpt2", "--framework", "torch,jax", "--scenario", "forward", "--precision", "fp32",
        "--threads", "2", *PROTOCOL]


def cell_text(c) -> str:
    if not c.ok or c.time_ms is None:
        return f"– ({c.cell.status})"
    t = c.time_ms
    return f"{t.median:,.1f} [{t.ci_low:,.1f}, {t.ci_high:,.1f}]"


def table(res) -> tuple[str, tuple | None]:
    """One row per model, framework, precision and thread count, forward and train_step side by side with
    each one's ratio to torch's; and the largest forward gap between two frameworks (model, a, b, ratio)."""
    by = {(c.cell.model, c.cell.framework, c.cell.precision, c.cell.threads, c.cell.scenario): c for c in res.cells}
    rows = sorted({k[:4] for k in by}, key=lambda k: (k[0], k[3], k[2], k[1] != "torch", k[1]))
    lines = ["| model | threads | precision | framework | forward ms [95% CI] | vs torch | train_step ms [95% CI] | "
             "vs torch |", "|---|---:|---|---|---:|---:|---:|---:|"]
    gap = None
    for model, fw, prec, threads in rows:
        cols = []
        for scenario in ("forward", "train_step"):
            c, ref = by.get((model, fw, prec, threads, scenario)), by.get((model, "torch", prec, threads, scenario))
            ratio = "–"
            if c is not None and ref is not None and c.ok and ref.ok and c.time_ms and ref.time_ms:
                r = c.time_ms.median / ref.time_ms.median
                ratio = f"{r:.2f}x"
                if scenario == "forward" and fw != "torch" and prec == "fp32":
                    far = max(r, 1 / r)
                    if gap is None or far > gap[3]:
                        gap = (model, "torch", fw, far, threads)
            cols += [cell_text(c) if c is not None else "–", ratio]
        lines.append(f"| {model} | {threads} | {prec} | {fw} | " + " | ".join(cols) + " |")
    return "\n".join(lines), gap


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--threads", default="2", help="thread counts (the issue asks for 1,2; 2 alone halves the time)")
    ap.add_argument("--workdir", type=Path, help="keep the database and finished parts here (resumable)")
    args = ap.parse_args()
    head = header("Transformers: forward and train_step, fp32 and bf16" + (" (tiny)" if args.tiny else ""))
    from dlbench import api

    grid = TINY if args.tiny else ["--model", MODELS, "--framework", FRAMEWORKS, "--scenario", "forward,train_step",
                                   "--precision", "fp32,bf16", "--threads", args.threads, *PROTOCOL]
    with tempfile.TemporaryDirectory() as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        db = str(work / "results.db")
        run = study_part(work / "grid.json", ["run", *grid, "--db", db, "--json"], db=db)
        res = api.results(json.loads(run["stdout"])["run_id"], db)
        text, gap = table(res)
        explained = None
        if gap is not None:
            model, a, b, _, threads = gap
            # two blocks of the model's own width: its blocks are alike, so two stand for all of them at a
            # tenth of the cells (a part per block: 25 parts in gpt2, 61 in smollm2-135m)
            layers_argv = ["run", "--scenario", "layers", "--model", f"{model}:layers=2", "--framework", f"{a},{b}",
                           "--precision", "fp32", "--threads", str(threads), "--profile", "3", *PROTOCOL]
            layers = study_part(work / "layers.json", [*layers_argv, "--db", db, "--json"], db=db)
            layers_id = json.loads(layers["stdout"])["run_id"]
            explain_argv = ["explain", layers_id, "--framework", f"{a},{b}", "--model", f"{model}:layers=2",
                            "--scenario", "forward"]
            explained = (layers_argv, layers, explain_argv,
                         study_part(work / "explain.json", [*explain_argv, "--db", db]))

    print(head)
    print(f"- grid: `dlbench {' '.join(grid)}`: exit code {run['returncode']}, {run['seconds'] / 60:.1f} min")
    failed = [c for c in res.cells if not c.ok]
    print(f"- cells: {len(res.cells)}, {len(res.cells) - len(failed)} measured (each after the gate)"
          + (": not measured: " + "; ".join(f"{c.cell.key}: {c.cell.status} ({c.cell.reason[:100]})"
                                           for c in failed)[:2500] if failed else "") + "\n")
    print(text)
    if explained is not None:
        layers_argv, layers, explain_argv, out = explained
        print(f"\n#### The largest forward gap: {gap[2]} against torch on {gap[0]} ({gap[3]:.2f}x, fp32, "
              f"{gap[4]} threads)\n")
        print(f"`explain` on {gap[0]} with two of its blocks (`{gap[0]}:layers=2`: the same widths, its blocks alike), "
              "each block's attention and MLP a part of their own:\n")
        print(f"`dlbench {' '.join(layers_argv)}` (exit code {layers['returncode']}, {layers['seconds'] / 60:.1f} min), "
              f"then `dlbench {' '.join(explain_argv[:1] + ['RUN'] + explain_argv[2:])}`:\n")
        print("```\n" + out["stdout"].strip() + "\n```")


if __name__ == "__main__":
    main()
