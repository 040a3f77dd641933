"""What each precision does to the shipped trained checkpoint's next-token distribution, per framework
(issue #44; docs/checkpoints.md).

The checkpoint is ``src/dlbench/data/checkpoints/genesis-llama`` (a small Llama-shaped model trained on the
shipped text's training split). ``dlbench verify`` gates it at fp32, bf16 and int8 in every framework that
returns logits in the main environment; the gate's quality check (``dlbench.gate.quality``) measures, on the
held-out ``test`` split, the KL divergence of each framework's next-byte distribution from the float64
reference's, the top-1 agreement, the accuracy over the reference's and the perplexity, and holds them to the
precision's bound. The figures do not depend on the machine's load; no time is taken.

    python benchmarks/update_performance.py quality_genesis
"""

from __future__ import annotations

import json

from _common import dlbench, header

from dlbench.gate.quality import BOUNDS
from dlbench.scenarios.checkpoint_recipe import SHIPPED

FRAMEWORKS = "torch,jax,tensorflow,onnxruntime,openvino"
PRECISIONS = "fp32,bf16,int8"


def main() -> None:
    head = header("The shipped checkpoint at each precision: quality on held-out text against float64")
    argv = ["verify", "--model", f"hf:{SHIPPED}", "--framework", FRAMEWORKS, "--precision", PRECISIONS,
            "--threads", "2", "--json"]
    run = dlbench(*argv)
    shown = " ".join(a if not a.startswith("hf:") else "hf:src/dlbench/data/checkpoints/genesis-llama" for a in argv)
    print(head)
    print(f"- `dlbench {shown}`: exit code {run.returncode} (1: a pair failed the gate)\n")
    rows = json.loads(run.stdout)
    print("| framework | precision | verdict | forward error | KL divergence (nats/token) | top-1 agreement | "
          "accuracy / reference's | perplexity (reference) | bound: KL, top-1 | why not passed |")
    print("|---|---|---|---:|---:|---:|---:|---:|---|---|")
    for r in rows:
        q = r.get("quality") or {}
        b = BOUNDS.get(r["precision"])
        fig = ([f"{q['kl']:.2e}", f"{q['top1']:.3%}", f"{q['accuracy_ratio']:.3%}",
                f"{q['perplexity']:.4f} ({q['reference_perplexity']:.4f})"] if q else ["–"] * 4)
        fwd = "–" if r["forward_error"] is None else f"{r['forward_error']:.1e}"
        why = "" if r["verdict"] == "pass" else r["reason"][:160].replace("|", "/")
        print(f"| {r['framework']} | {r['precision']} | {r['verdict']} | {fwd} | {' | '.join(fig)} | "
              f"{b.kl:g}, {b.top1:.3%} | {why} |")
    tokens = next((r["quality"]["tokens"] for r in rows if r.get("quality")), 0)
    seq = next((r["quality"]["seq_len"] for r in rows if r.get("quality")), 0)
    print(f"\n{tokens} next-byte predictions of the held-out split in windows of {seq} bytes (the gate's input).")


if __name__ == "__main__":
    main()
