"""The convergence scenario: train the same model the same way in every framework.

Same canonical initial weights (seeded per repeat), the same seeded batch order (every
framework sees the identical sequence of batches), SGD with momentum 0.9 at the spec's learning
rate (the papers' rates), E epochs. After each epoch dlbench itself computes training loss,
training accuracy and test accuracy over the full splits in eval mode, from the framework's
raw outputs, in NumPy, the same way for every framework (Liu et al. found frameworks computing
accuracy differently). Training time excludes evaluation; both are recorded. The loss of each of
the first ``log_steps`` steps is kept for the agreement check between frameworks.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from dlbench.data.dataset import Dataset
from dlbench.frameworks.base import Backend, OptimizerSpec
from dlbench.models.spec import ModelSpec
from dlbench.weights import init_weights


@dataclass(frozen=True)
class ConvergenceConfig:
    epochs: int = 10
    lr: float | None = None  # None: the spec's (the papers') learning rate
    momentum: float = 0.9
    log_steps: int = 50
    eval_batch: int = 256


def default_batch(spec: ModelSpec, train_size: int) -> int:
    """The spec's batch, but at least ten steps an epoch on a small data set."""
    return max(1, min(spec.default_batch, train_size // 10))


def evaluate(backend: Backend, model: Any, predict, dataset: Dataset, batch_size: int) -> tuple[float, float]:
    """(mean softmax cross-entropy, accuracy) over the whole split, computed here in float64."""
    total_loss, correct, count = 0.0, 0, 0
    for batch in dataset.batches(min(batch_size, len(dataset)), shuffle=False, drop_last=False):
        out = backend.to_numpy(predict(backend.place(batch, model))).astype(np.float64)
        logits = out.reshape(-1, out.shape[-1])
        labels = batch.y.reshape(-1)
        shifted = logits - logits.max(axis=1, keepdims=True)
        logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        total_loss += float(-logp[np.arange(labels.size), labels].sum())
        correct += int((logits.argmax(axis=1) == labels).sum())
        count += labels.size
    return total_loss / count, correct / count


def train(backend: Backend, spec: ModelSpec, train_set: Dataset, test_set: Dataset, batch_size: int, seed: int,
          config: ConvergenceConfig, device: str = "cpu", variant: str | None = None) -> dict[str, Any]:
    """Train and evaluate; returns the per-epoch curves and the first steps' losses."""
    model = backend.build(spec, init_weights(spec, seed), device, variant)
    step = backend.trainer(model, OptimizerSpec(lr=config.lr or spec.learning_rate, momentum=config.momentum))
    predict = backend.predictor(model)
    epochs, step_losses, elapsed = [], [], 0.0
    for epoch in range(config.epochs):
        t0 = time.perf_counter()
        seen = 0
        for batch in train_set.batches(batch_size, seed=seed * 100_003 + epoch):
            loss = step(backend.place(batch, model))
            seen += batch.size
            if len(step_losses) < config.log_steps:
                step_losses.append(float(backend.to_numpy(loss)))
        backend.sync(loss)
        train_s = time.perf_counter() - t0
        elapsed += train_s
        t0 = time.perf_counter()
        train_loss, train_acc = evaluate(backend, model, predict, train_set, config.eval_batch)
        test_loss, test_acc = evaluate(backend, model, predict, test_set, config.eval_batch)
        epochs.append({"epoch": epoch + 1, "train_loss": train_loss, "train_acc": train_acc, "test_loss": test_loss,
                       "test_acc": test_acc, "train_s": train_s, "eval_s": time.perf_counter() - t0,
                       "train_samples_per_s": seen / train_s,
                       "elapsed_train_s": elapsed})
    return {"epochs": epochs, "step_losses": step_losses, "batch": batch_size, "seed": seed,
            "lr": config.lr or spec.learning_rate}


def time_to_accuracy(epochs: list[dict], target: float) -> float | None:
    """Seconds of training until test accuracy first reaches ``target`` (DAWNBench), else None."""
    for e in epochs:
        if e["test_acc"] >= target:
            return e["elapsed_train_s"]
    return None


def first_departure(reference: list[float], other: list[float], tolerance: float = 0.01) -> int | None:
    """The first step (1-based) where ``other``'s loss differs from ``reference``'s by more than
    ``tolerance`` relative; None when they agree over all the steps both logged."""
    for i, (a, b) in enumerate(zip(reference, other, strict=False)):
        if abs(b - a) > tolerance * max(abs(a), 1e-12):
            return i + 1
    return None
