"""The convergence scenario: train the same model the same way in every framework.

Same canonical initial weights (seeded per repeat), the same seeded batch order (every
framework sees the identical sequence of batches), the run's optimiser (by default SGD with
momentum 0.9 at the spec's learning rate, the papers' rates; or AdamW), E epochs. After each
epoch dlbench itself computes training loss, training accuracy and test accuracy over the full
splits in eval mode, from the framework's raw outputs, in NumPy, the same way for every framework
(Liu et al. found frameworks computing accuracy differently). Training time excludes evaluation;
both are recorded. The loss of each of the first ``log_steps`` steps is kept for the agreement check
between frameworks.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from dlbench.core.cell import DEFAULT_DEVICE
from dlbench.core.errors import UsageError
from dlbench.core.job import CellJob
from dlbench.data import DataError, adapt, load_dataset
from dlbench.data.dataset import Dataset
from dlbench.frameworks.base import Backend, OptimizerSpec, UnsupportedError
from dlbench.models import get_model
from dlbench.models.spec import ModelSpec
from dlbench.models.weights import init_weights
from dlbench.scenarios.base import MAX_COUNT, CellOutcome, Context, Flag, Scenario, Shown, check_range, run_in_turn
from dlbench.scenarios.prepare import backend_for, versions
from dlbench.storage.store import Sample


@dataclass
class ConvergenceSettings:
    """Settings of the convergence scenario (a suite file's ``convergence:``)."""

    __pydantic_config__ = {"extra": "forbid"}  # noqa: RUF012  (read by pydantic, the registry's validator)
    epochs: int = 10
    target_accuracy: float = 0.95
    #: None: the run's optimiser's (``--lr``; SGD: the spec's, the papers'; AdamW: 5e-5); set, it wins for
    #: convergence cells (a suite file's ``convergence: lr:``)
    lr: float | None = None
    log_steps: int = 50

    def __post_init__(self) -> None:
        check_range(self, "epochs", ge=1, le=100_000)
        check_range(self, "target_accuracy", gt=0, le=1)
        check_range(self, "lr", gt=0, le=1000)
        check_range(self, "log_steps", ge=1, le=MAX_COUNT)


@dataclass(frozen=True)
class ConvergenceConfig:
    epochs: int = 10
    lr: float | None = None  # None: the optimiser's (SGD: the spec's, the papers'; AdamW: 5e-5)
    momentum: float = 0.9
    log_steps: int = 50
    eval_batch: int = 256
    #: the run's optimiser (``Suite.optimizer``, as :attr:`CellJob.optimizer` carries it); None: SGD with
    #: ``momentum`` (a caller training outside a run)
    optimizer: dict | None = None


def default_batch(spec: ModelSpec, train_size: int) -> int:
    """The spec's batch, but at least ten steps an epoch on a small data set."""
    return max(1, min(spec.default_batch, train_size // 10))


def evaluate(backend: Backend, model: Any, predict, dataset: Dataset, batch_size: int) -> tuple[float, float]:
    """(mean softmax cross-entropy, accuracy) over the whole split, computed here in float64."""
    total_loss, correct, count = 0.0, 0, 0
    # a small split (the shipped text's 10 KB test bytes) holds fewer rows than the evaluation batch
    for batch in dataset.batches(max(1, min(batch_size, dataset.max_batch)), shuffle=False, drop_last=False):
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
          config: ConvergenceConfig, device: str = DEFAULT_DEVICE, variant: str | None = None) -> dict[str, Any]:
    """Train and evaluate; returns the per-epoch curves and the first steps' losses."""
    model = backend.build(spec, init_weights(spec, seed), device, variant)
    return train_built(backend, model, spec, train_set, test_set, batch_size, seed, config)


def train_built(backend: Backend, model: Any, spec: ModelSpec, train_set: Dataset, test_set: Dataset, batch_size: int,
                seed: int, config: ConvergenceConfig) -> dict[str, Any]:
    """:func:`train` on a model already built (the trained checkpoint's recipe keeps it to write its weights)."""
    opt = (OptimizerSpec(lr=config.lr or spec.learning_rate, momentum=config.momentum) if config.optimizer is None
           else OptimizerSpec.from_settings(config.optimizer, spec.learning_rate, config.lr))
    step = backend.trainer(model, opt)
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
            "lr": opt.lr, "optimizer": opt.describe()}


def time_to_accuracy(epochs: list[dict], target: float) -> float | None:
    """Seconds of training until test accuracy first reaches ``target`` (DAWNBench), else None."""
    for e in epochs:
        if e["test_acc"] >= target:
            return e["elapsed_train_s"]
    return None


def summarise_curves(repeats: list[dict], target: float) -> dict[str, Any]:
    """Mean and spread over repeats of each epoch's figures, final accuracy and time-to-accuracy."""
    if not repeats:
        return {}
    epochs = min(len(r["epochs"]) for r in repeats)
    keys = ("train_loss", "train_acc", "test_acc", "elapsed_train_s", "eval_s", "train_samples_per_s")
    per_epoch = {k: np.array([[r["epochs"][e][k] for e in range(epochs)] for r in repeats]) for k in keys}
    final = per_epoch["test_acc"][:, -1]
    tta = [time_to_accuracy(r["epochs"], target) for r in repeats]
    reached = [t for t in tta if t is not None]
    return {
        "repeats": len(repeats), "epochs": epochs, "target_accuracy": target,
        "final_test_acc_mean": float(final.mean()),
        "final_test_acc_std": float(final.std(ddof=1)) if len(final) > 1 else 0.0,
        "final_test_acc_min": float(final.min()), "final_test_acc_max": float(final.max()),
        "time_to_accuracy_s": float(np.mean(reached)) if len(reached) == len(tta) else None,
        "reached": f"{len(reached)}/{len(tta)}",
        "train_samples_per_s": float(np.median(per_epoch["train_samples_per_s"])),
        "curves": {k: {"mean": v.mean(axis=0).tolist(), "std": v.std(axis=0).tolist()} for k, v in per_epoch.items()},
    }


class Convergence(Scenario):
    """E epochs on a real data set in ``repeats`` fresh processes, repeat r from seed ``seed + r``."""

    name = "convergence"
    description = "E epochs on a real data set: accuracy curves, time-to-accuracy, agreement between frameworks"
    requires = ("train_step",)
    trains = True
    updates = True
    per_iteration = False
    # accuracy curves do not depend on the thread count: train to accuracy once, on every core, unless
    # --threads asks for more (1 and all cores doubled the run's time)
    default_threads = ["all"]
    settings_model = ConvergenceSettings
    flags = (Flag("--epochs", "epochs", "convergence: epochs of training (default 10)", int),
             Flag("--target-accuracy", "target_accuracy",
                  "convergence: test accuracy whose time-to-reach is reported (default 0.95)", float))

    def default_batch(self, spec: ModelSpec, data: str, data_dir: str | None) -> int:
        """On a real data set, at least ten steps an epoch."""
        if data == "synthetic":
            return spec.default_batch
        try:
            return default_batch(spec, len(load_dataset(data, data_dir, "train")))
        except DataError:
            return spec.default_batch  # the runner's data check reports the problem

    def check(self, cells, suite) -> None:
        synthetic = sorted({c.model for c in cells if c.scenario == self.name and c.data == "synthetic"})
        if synthetic:
            raise UsageError(f"convergence needs a real data set for {', '.join(synthetic)} (--data digits, or "
                             "--data mnist|cifar10|imdb|ptb with --data-dir)")

    def measure(self, cell, ctx: Context) -> CellOutcome:
        suite = ctx.suite
        out = CellOutcome("ok")
        jobs = (replace(self.job(cell, suite), seed=suite.seed + r) for r in range(suite.protocol.repeats))
        settings = self.settings_of(suite)
        results = run_in_turn(cell, ctx, jobs, suite.protocol.timeout_s * settings.epochs, out)
        if out.status == "unsupported":
            return out
        repeats = [result["curves"] for result in results]
        for r, curves in enumerate(repeats):
            out.samples += [Sample(r, e["epoch"] - 1, "epoch_train", e["train_s"] * 1e9) for e in curves["epochs"]]
        out.metrics = {"convergence": repeats, "target_accuracy": settings.target_accuracy}
        return out

    def estimate(self, cell, suite, step_s: float, start_s: float, epoch_samples: int) -> float:
        """``epochs`` passes over the training split per process (evaluation not counted)."""
        steps = self.settings_of(suite).epochs * -(-epoch_samples // cell.batch)
        return suite.protocol.repeats * (start_s + steps * step_s)

    def work(self, job: CellJob, settings: ConvergenceSettings) -> dict[str, Any]:
        """Train on the real data set for the configured epochs; curves measured by dlbench itself."""
        backend, readback = backend_for(job)
        spec = get_model(job.cell.model)
        train_set = adapt(load_dataset(job.cell.data, job.data_dir, "train"), spec)
        test_set = adapt(load_dataset(job.cell.data, job.data_dir, "test"), spec)
        config = ConvergenceConfig(epochs=settings.epochs, lr=settings.lr, log_steps=settings.log_steps,
                                   optimizer=job.optimizer)
        try:
            curves = train(backend, spec, train_set, test_set, job.cell.batch, job.seed, config, job.cell.device,
                           job.cell.variant)
        except UnsupportedError as exc:
            return {"unsupported": str(exc)}
        return {"curves": curves, "threads_readback": readback, "python": sys.executable, "versions": versions(backend)}

    def analyse(self, res, samples, peak) -> None:
        res.convergence = summarise_curves(res.cell.metrics.get("convergence", []),
                                           res.cell.metrics.get("target_accuracy", 1.0))
        res.samples_per_s = res.convergence.get("train_samples_per_s")

    def text(self, res) -> str:
        if not res.convergence:
            return f"– ({res.cell.status})"
        v = res.convergence
        tta = f"{v['time_to_accuracy_s']:.1f} s" if v["time_to_accuracy_s"] is not None else f"not reached ({v['reached']})"
        return (f"test acc {v['final_test_acc_mean']:.3f} ± {v['final_test_acc_std']:.3f} after {v['epochs']} epochs; "
                f"to {v['target_accuracy']:.0%}: {tta}")

    def throughput(self, res) -> float | None:
        return None  # training samples/s is in the curves (report), not a per-batch rate

    @property
    def column(self) -> str:
        return "convergence"

    def summary_fields(self, res) -> dict[str, Any]:
        return {"convergence": res.convergence if res is not None else None}

    # --- its report -------------------------------------------------------------------------------
    def report_sections(self, res):
        from dlbench.scenarios.convergence_report import section

        return [section(self.cells_of(res))]

    def report_plots(self, res):
        from dlbench.scenarios.convergence_report import convergence_curves

        return convergence_curves(self.cells_of(res))

    def show(self, res, db) -> Shown | None:
        from dlbench.scenarios.convergence_report import agreement_table

        table = agreement_table(self.cells_of(res))
        return Shown(table) if table.rows else None


SCENARIOS = (Convergence(),)
