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
from dlbench.job import CellJob
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


def backend_for(job: CellJob) -> tuple[Backend, dict[str, Any]]:
    """The job's backend with its threads and precision set (before anything is built), and the
    thread settings it reports: every measuring process makes its backend here."""
    backend = get_backend(job.cell.framework)
    readback = backend.set_threads(job.threads) if job.threads else {}
    backend.set_precision(job.cell.precision)
    return backend, readback


def prepare(job: CellJob) -> Prepared:
    backend, readback = backend_for(job)
    spec = get_model(job.cell.model)
    weights = init_weights(spec, job.seed)
    return Prepared(backend, readback, spec, weights, cell_batch(job, spec, job.cell.batch))


def cell_batch(job: CellJob, spec: ModelSpec, size: int) -> Batch:
    """``size`` samples of the cell's data: synthetic and seeded, or the first of the data set's
    training split in the run's seeded order."""
    if job.cell.data == "synthetic":
        return make_batch(spec, size, job.seed)
    dataset = adapt(load_dataset(job.cell.data, job.data_dir, "train"), spec)
    return next(dataset.batches(size, seed=job.seed))


def versions(backend: Backend) -> dict[str, str]:
    """Installed versions of the backend's packages (recorded with every result)."""
    out = {}
    for pkg in backend.packages:
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out
