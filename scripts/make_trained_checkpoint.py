"""Make the trained checkpoint dlbench ships: src/dlbench/data/checkpoints/genesis-llama (issue #44).

A small Llama-shaped model (``dlbench.scenarios.checkpoint_recipe.MODEL``) trained by the convergence
scenario's training closure in torch on the shipped text's training split, seed 0, AdamW lr 1e-3, batch 32,
written as a Hugging Face folder (config.json, model.safetensors) with training.json (recipe, loss curve).
Deterministic with its seed on one machine and thread count (2 threads as shipped).

    PYTHONPATH=src python scripts/make_trained_checkpoint.py              # rewrites the shipped folder
    PYTHONPATH=src python scripts/make_trained_checkpoint.py --out DIR --epochs 1
"""

from __future__ import annotations

import argparse
from pathlib import Path

from dlbench.scenarios.checkpoint_recipe import RECIPE, SHIPPED, train_checkpoint


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=SHIPPED)
    ap.add_argument("--epochs", type=int, default=RECIPE["epochs"])
    ap.add_argument("--seed", type=int, default=RECIPE["seed"])
    args = ap.parse_args()
    record = train_checkpoint(args.out, {**RECIPE, "epochs": args.epochs, "seed": args.seed})
    for e in record["curves"]["epochs"]:
        print(f"epoch {e['epoch']}: train loss {e['train_loss']:.4f}, test loss {e['test_loss']:.4f}, "
              f"test next-byte accuracy {e['test_acc']:.4f} ({e['train_s']:.0f} s)")
    print(f"written to {args.out}: {', '.join(record['files'])}")


if __name__ == "__main__":
    main()
