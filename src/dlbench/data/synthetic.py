"""Seeded synthetic batches shaped by a spec's input (the papers' "synthetic data" runs)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dlbench.core.cell import DEFAULT_SEED
from dlbench.models.spec import ModelSpec


@dataclass
class Batch:
    """One mini-batch in NumPy: inputs ``x``, labels ``y`` (None when the loss needs none) and,
    for variable-length sequences, a float32 ``mask`` (batch, steps) of 1 for valid steps."""

    x: np.ndarray
    y: np.ndarray | None = None
    mask: np.ndarray | None = None

    @property
    def size(self) -> int:
        return int(self.x.shape[0])


def make_batch(spec: ModelSpec, batch_size: int, seed: int = DEFAULT_SEED) -> Batch:
    """A reproducible batch for ``spec``: standard-normal images/vectors (sigmoid models get
    values in [0, 1), like pixels), uniform token ids, uniform labels, and for variable-length
    inputs lengths uniform in [min_length, max_len] padded to the longest in the batch."""
    if batch_size < 1:
        raise ValueError(f"batch size must be >= 1, got {batch_size}")
    inp = spec.input
    rng = np.random.default_rng([seed, batch_size])
    mask = None
    if inp.kind == "tokens":
        steps = inp.shape[0]
        if inp.variable_length:
            lengths = rng.integers(inp.min_length, steps + 1, batch_size)
            steps = int(lengths.max())
            mask = (np.arange(steps)[None, :] < lengths[:, None]).astype(np.float32)
        x = rng.integers(0, inp.vocab, (batch_size, steps)).astype(np.int64)
        if mask is not None:
            x = np.where(mask > 0, x, 0)
    elif inp.labels == "none" or inp.kind == "vector":
        x = rng.random((batch_size, *inp.shape), dtype=np.float32)
    else:
        x = rng.standard_normal((batch_size, *inp.shape), dtype=np.float32)
    if inp.labels == "class":
        y = rng.integers(0, inp.classes, batch_size).astype(np.int64)
    elif inp.labels == "sequence":  # one label per step (x is (N, T) ids, or (N, T, D) for a transformer's part)
        y = rng.integers(0, inp.classes, x.shape[:2]).astype(np.int64)
    else:
        y = None
    return Batch(x, y, mask)
