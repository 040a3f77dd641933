"""What every measuring process does before it times anything: the backend with its threads set,
the spec, the canonical weights and a batch (synthetic and seeded, or the first of a real data set in
the run's seeded order). Runs inside the worker, so it imports only what a framework's own
environment has (NumPy and dlbench)."""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from typing import Any

from dlbench.data import adapt, load_dataset
from dlbench.data.synthetic import Batch, make_batch
from dlbench.frameworks import Backend, get_backend
from dlbench.models import get_model
from dlbench.models.spec import ModelSpec
from dlbench.weights import Weights, init_weights


@dataclass
class Prepared:
    backend: Backend
    readback: dict[str, Any]  # the thread settings the framework reports
    spec: ModelSpec
    weights: Weights
    batch: Batch


def backend_for(job: dict[str, Any]) -> tuple[Backend, dict[str, Any]]:
    """The job's backend with its threads and precision set (before anything is built), and the
    thread settings it reports: every measuring process makes its backend here."""
    backend = get_backend(job["framework"])
    readback = backend.set_threads(job["threads"]) if job.get("threads") else {}
    backend.set_precision(job.get("precision", "fp32"))
    return backend, readback


def prepare(job: dict[str, Any]) -> Prepared:
    backend, readback = backend_for(job)
    spec = get_model(job["model"])
    weights = init_weights(spec, job.get("seed", 0))
    batch = real_batch(job, spec) if job.get("data", "synthetic") != "synthetic" else \
        make_batch(spec, job["batch"], job.get("seed", 0))
    return Prepared(backend, readback, spec, weights, batch)


def real_batch(job: dict[str, Any], spec: ModelSpec) -> Batch:
    """The first batch of the data set's training split in the run's seeded order."""
    dataset = adapt(load_dataset(job["data"], job.get("data_dir"), "train"), spec)
    return next(dataset.batches(job["batch"], seed=job.get("seed", 0)))


def versions(backend: Backend) -> dict[str, str]:
    """Installed versions of the backend's packages (recorded with every result)."""
    out = {}
    for pkg in backend.packages:
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out
