"""The recipe of the trained checkpoint dlbench ships (``src/dlbench/data/checkpoints/genesis-llama``).

Random weights give nearly flat next-token distributions, so KL divergence and top-1 agreement say
little about what a precision does to a real model (issue #44). The shipped checkpoint is a small
Llama-shaped model (smollm2-135m's family, shrunk) trained by the convergence scenario's own training
closure (:func:`dlbench.scenarios.convergence.train`) in torch on the shipped text's training split,
then written by the export path (:func:`dlbench.gate.hf_transformers.save_folder`) as a Hugging Face
folder that ``--model hf:DIR`` reads. ``scripts/make_trained_checkpoint.py`` runs it; a test retrains a
few steps so the recipe keeps running, the shipped weights are not regenerated in CI.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from dlbench.data import adapt, load_dataset
from dlbench.data.dataset import Dataset
from dlbench.frameworks import get_backend
from dlbench.frameworks.base import ADAMW_LR
from dlbench.models import get_model
from dlbench.models.weights import Weights, init_weights
from dlbench.scenarios.convergence import ConvergenceConfig, train_built

#: the shipped checkpoint's folder (``--model hf:`` it)
SHIPPED = Path(__file__).resolve().parents[1] / "data" / "checkpoints" / "genesis-llama"
#: smollm2-135m's architecture at a size a 2-core CPU trains in minutes: 2 blocks, width 128, 4 query
#: heads sharing 2 key/value heads (grouped-query attention), SwiGLU 384, byte vocabulary, 64-byte windows and context
MODEL = "smollm2-135m:layers=2:dim=128:heads=4:kv_heads=2:head_dim=32:hidden=384:vocab=256:seq_len=64:max_positions=64"
#: the recipe's settings (recorded in the checkpoint's training.json)
RECIPE: dict[str, Any] = {"model": MODEL, "data": "genesis", "split": "train", "framework": "torch", "seed": 0,
                          "epochs": 5, "batch": 32, "threads": 2,
                          "optimizer": {"name": "adamw", "lr": 1e-3, "momentum": 0.9, "betas": [0.9, 0.999],
                                        "eps": 1e-8, "weight_decay": 0.0}}


def splits(model: str = MODEL) -> tuple[Dataset, Dataset]:
    """The shipped text's training split and its held-out test split, in the model's windows."""
    spec = get_model(model)
    return (adapt(load_dataset("genesis", None, "train"), spec), adapt(load_dataset("genesis", None, "test"), spec))


def train_checkpoint(folder: str | Path, recipe: dict[str, Any] = RECIPE, train_set: Dataset | None = None,
                     test_set: Dataset | None = None) -> dict[str, Any]:
    """Train ``recipe`` and write the model to ``folder`` (config.json, model.safetensors) with its record,
    ``training.json`` (the recipe and the per-epoch loss curve); the record. ``train_set``/``test_set``
    (default: the shipped text's train and test splits) let a test train on a few windows."""
    from dlbench.gate.hf_transformers import save_folder

    spec = get_model(recipe["model"])
    default_train, default_test = splits(recipe["model"])
    train_set = default_train if train_set is None else train_set
    test_set = default_test if test_set is None else test_set
    backend = get_backend(recipe["framework"])
    backend.set_threads(recipe["threads"])
    config = replace(ConvergenceConfig(epochs=recipe["epochs"], optimizer=recipe["optimizer"]),
                     lr=recipe["optimizer"]["lr"] or ADAMW_LR)
    model = backend.build(spec, init_weights(spec, recipe["seed"]))
    curves = train_built(backend, model, spec, train_set, test_set, recipe["batch"], recipe["seed"], config)
    params = backend.get_params(model)
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    files = save_folder(spec, Weights(params), path)
    record = {"recipe": recipe, "curves": curves, "files": files,
              "train_windows": len(train_set) // spec.input.shape[0], "test_tokens": len(test_set)}
    (path / "training.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    (path / "README.md").write_text(readme(record))
    return record


def readme(record: dict[str, Any]) -> str:
    """The checkpoint folder's README: what it is, the command that made it, and its loss curve."""
    r = record["recipe"]
    opt = r["optimizer"]
    rows = "\n".join(f"| {e['epoch']} | {e['train_loss']:.4f} | {e['test_loss']:.4f} | {e['test_acc']:.4f} |"
                      for e in record["curves"]["epochs"])
    return f"""# genesis-llama: a small Llama-shaped model trained on the shipped text

A Hugging Face folder (`config.json`, `model.safetensors`) that `dlbench run --model hf:DIR` reads: the
Llama architecture of smollm2-135m shrunk (`{r['model']}`:
grouped-query attention, RoPE, SwiGLU, RMSNorm, tied head), {record['curves']['batch']}-window batches of
64 bytes of the Book of Genesis (`--data genesis`, bytes as tokens), trained in {r['framework']} by the
convergence scenario's training closure on the `{r['split']}` split only ({record['train_windows']} windows);
the `test` split ({record['test_tokens']} bytes) is held out for the quality figures (docs/checkpoints.md).

Made by `PYTHONPATH=src python scripts/make_trained_checkpoint.py` (dlbench.scenarios.checkpoint_recipe):
seed {r['seed']}, {r['epochs']} epochs, {opt['name']} lr {opt['lr']:g} (betas {opt['betas'][0]:g},
{opt['betas'][1]:g}, eps {opt['eps']:g}, weight decay {opt['weight_decay']:g}), batch {r['batch']},
{r['threads']} threads, float32. `training.json` holds the recipe, every epoch's figures and the first
{len(record['curves']['step_losses'])} steps' losses.

Loss curve (mean next-byte cross-entropy in nats, computed by dlbench in float64 over the whole split):

| epoch | train loss | test loss | test next-byte accuracy |
|---:|---:|---:|---:|
{rows}
"""
