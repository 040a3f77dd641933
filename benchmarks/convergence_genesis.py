"""A small GPT trained on the shipped text in torch, JAX and TensorFlow from the same weights and batches
(issue #32's convergence on real text; docs/transformers.md).

The text is the Book of Genesis bundled with dlbench (``--data genesis``: bytes as tokens, vocabulary 256,
public domain); the model is gpt2's architecture at a size a 2-core CPU trains in minutes (2 blocks, width
128, 4 heads, 64-byte windows). Each framework starts from the same canonical weights and reads the same
sequence of batches; the report's convergence section gives the final next-byte accuracy, time to
accuracy and the agreement check of the training losses step by step.

    python benchmarks/update_performance.py convergence_genesis
    python benchmarks/convergence_genesis.py --epochs 1          # shorter
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from _common import header, report_section, reported_run

MODEL = "gpt2:layers=2:dim=128:heads=4:vocab=256:seq_len=64"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", default="3")
    ap.add_argument("--workdir", type=Path, help="keep the database and the finished run here (resumable)")
    args = ap.parse_args()
    head = header("A small GPT on the shipped text: convergence in torch, JAX and TensorFlow")
    argv = ["run", "--scenario", "convergence", "--model", MODEL, "--data", "genesis", "--framework",
            "torch,jax,tensorflow", "--epochs", args.epochs, "--batch", "32", "--threads", "2", "--repeats", "1",
            "--optimizer", "adamw", "--lr", "0.001"]
    with tempfile.TemporaryDirectory() as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        db = str(work / "results.db")
        run, _, md = reported_run(work, "run", argv, db)
    print(head)
    print(f"- `dlbench {' '.join(argv)}`: exit code {run['returncode']}, {run['seconds'] / 60:.1f} min\n")
    print(report_section(md, "Convergence"))


if __name__ == "__main__":
    main()
