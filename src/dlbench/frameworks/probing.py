"""What every probe shares: LeNet's batches, parameter files and their comparison.

All probes train the same LeNet (dlbench's ``lenet`` spec: conv 20x5x5, max-pool, tanh, conv
50x5x5, max-pool, tanh, dense 500 ReLU, dense 10) with SGD, lr 0.01, momentum 0.9, on seeded
synthetic MNIST-shaped batches, so the checkpoint check of one framework reads like another's.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from dlbench.data.synthetic import make_batch
from dlbench.models import get_model
from dlbench.models.weights import init_weights

LR, MOMENTUM, BATCH = 0.01, 0.9, 8
#: the key of a forward check's device entry holding its output on :func:`reference_case`'s batch: the
#: survey replaces it with the largest difference from the float64 reference (the reference is the gate's,
#: a layer above the framework folders, so a probe hands its output up rather than importing it)
OUTPUT = "output_on_reference_case"


def lenet_spec():
    return get_model("lenet")


def reference_case():
    """LeNet, its canonical seed-0 weights and a seeded batch of 4: what a forward check runs when it
    returns its output under :data:`OUTPUT` for the survey to compare with the float64 reference."""
    spec = lenet_spec()
    return spec, init_weights(spec, 0), make_batch(spec, 4, 0)


def batch(step: int, channels_last: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The batch of training step ``step`` (NCHW, or NHWC for channels-last frameworks)."""
    b = make_batch(lenet_spec(), BATCH, seed=100 + step)
    x = np.ascontiguousarray(b.x.transpose(0, 2, 3, 1)) if channels_last else b.x
    return x.astype(np.float32), b.y.astype(np.int64)


def save_params(directory: str, tag: str, params: dict[str, np.ndarray]) -> str:
    path = str(Path(directory) / f"params_{tag}.npz")
    np.savez(path, **{k: np.asarray(v, np.float32) for k, v in params.items()})
    return path


def compare_params(a: str, b: str) -> dict:
    """Largest absolute difference between two parameter files with the same names."""
    pa, pb = np.load(a), np.load(b)
    if sorted(pa.files) != sorted(pb.files):
        return {"same_names": False, "max_abs_diff": None}
    diff = max(float(np.abs(pa[k] - pb[k]).max()) for k in pa.files)
    return {"same_names": True, "max_abs_diff": diff, "tensors": len(pa.files),
            "values": int(sum(pa[k].size for k in pa.files))}


def train_phase(job: dict, steps_total: int, run_steps, save, load) -> dict:
    """The three phases of the checkpoint/restart check, framework callbacks doing the work.

    ``uninterrupted`` trains ``steps_total`` steps; ``save`` trains the first half and writes a
    checkpoint with the framework's own API; ``resume`` (a new process) reads it and trains the
    second half. ``run_steps(first, last)`` returns (losses, params); ``save(dir)``, ``load(dir)``.
    """
    half = steps_total // 2
    phase, directory = job["phase"], job["dir"]
    if phase == "uninterrupted":
        losses, params = run_steps(0, steps_total)
    elif phase == "save":
        losses, params = run_steps(0, half)
        save(os.path.join(directory, "ckpt"))
    elif phase == "resume":
        load(os.path.join(directory, "ckpt"))
        losses, params = run_steps(half, steps_total)
    else:
        raise ValueError(f"unknown phase {phase!r}")
    return {"pid": os.getpid(), "phase": phase, "losses": [float(v) for v in losses],
            "params_file": save_params(directory, phase, params)}
