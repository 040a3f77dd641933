"""Speed beside quality on the shipped trained checkpoint: the forward of each framework at each precision,
timed in one run, next to its KL divergence and top-1 agreement against the float64 reference on held-out
text (issue #44; docs/checkpoints.md). Every timed cell is gated first (the quality bound included): a pair
beyond its bound is ``not_equivalent`` and shows no time.

    python benchmarks/update_performance.py quality_speed_genesis

Times are compared as ratios to torch's fp32 forward measured in the same run (a shared machine is noisy).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from _common import dlbench, header

from dlbench.scenarios.checkpoint_recipe import SHIPPED

FRAMEWORKS = "torch,jax,tensorflow,onnxruntime,openvino"
PRECISIONS = "fp32,bf16,int8"
BATCH = "32"
THREADS = "2"


def main() -> None:
    head = header("The shipped checkpoint: forward time beside quality, per framework and precision")
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "q.db")
        argv = ["run", "--model", f"hf:{SHIPPED}", "--framework", FRAMEWORKS, "--precision", PRECISIONS,
                "--scenario", "forward", "--batch", BATCH, "--threads", THREADS, "--db", db]
        run = dlbench(*argv)
        shown = " ".join("hf:src/dlbench/data/checkpoints/genesis-llama" if a.startswith("hf:")
                         else ("DB" if a == db else a) for a in argv)
        if run.returncode not in (0, 1):
            sys.exit(f"dlbench run failed ({run.returncode}): {run.stderr.strip()[-400:]}")
        summary = json.loads(dlbench("show", "--db", db, "--json").stdout)
    print(head)
    print(f"- `dlbench {shown}`: exit code {run.returncode} (1: a cell failed or a pair failed its gate)\n")
    rows = [r for model_rows in summary["models"].values() for r in model_rows]
    base = next((r["forward_ms"]["median"] for r in rows
                 if r["framework"] == "torch" and r["precision"] == "fp32" and r.get("forward_ms")), None)
    print("| framework | precision | verified | forward median (ms) | 95% CI (ms) | x torch fp32 | KL divergence | "
          "top-1 agreement | perplexity |")
    print("|---|---|---|---:|---|---:|---:|---:|---:|")
    for r in sorted(rows, key=lambda r: (r["framework"], PRECISIONS.split(",").index(r["precision"]))):
        t = r.get("forward_ms") or {}
        q = r.get("quality") or {}
        median = t.get("median")
        ci = f"{t['ci_low']:.2f} – {t['ci_high']:.2f}" if t.get("ci_low") is not None else "–"
        ratio = f"{median / base:.2f}" if median and base else "–"
        figs = ([f"{q['kl']:.2e}", f"{q['top1']:.3%}", f"{q['perplexity']:.4f}"] if q else ["–"] * 3)
        print(f"| {r['framework']} | {r['precision']} | {r['verified']} | "
              f"{'–' if median is None else f'{median:.2f}'} | {ci} | {ratio} | {' | '.join(figs)} |")
    failed = [*(summary.get("failed") or []), *({**u, "status": "unsupported"} for u in summary.get("unsupported") or [])]
    if failed:
        print("\nCells without a time, with the reason stored:\n")
        for f in failed:
            key = f["key"].replace(str(SHIPPED), "src/dlbench/data/checkpoints/genesis-llama")  # no machine's path
            print(f"- `{key}`: {f['status']}: {str(f['reason'])[:200]}")


if __name__ == "__main__":
    main()
