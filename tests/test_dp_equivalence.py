"""The data-parallel workers train the gated model: for torch, JAX and TensorFlow, two worker
processes over loopback (the workers' own code, run by tests/dp_probe.py) compute, on two halves of
a batch, the gradient one process computes on the whole batch, and their model is the backend's,
which passes the equivalence gate.

LeNet: no batch norm (with it, each worker normalises with its own half-batch's statistics and
the averaged gradient is not the whole batch's) and no dropout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dlbench.core.cell import Cell
from dlbench.core.job import DataParallelJob, encode
from dlbench.data.synthetic import make_batch
from dlbench.frameworks import data_parallel as common
from tests.conftest import requires

WORLD = 2
#: every probe's job, built by each framework's own backend ("default": the backend's first variant): a
#: global batch of 8 split over the two workers
JOB = DataParallelJob(threads=1, cell=Cell("probe", "default", "lenet", "scaling", 8, 1, workers=WORLD, scaling="strong"),
                      seed=0, protocol={}, collective_timeout_s=60.0, small=True)
FRAMEWORKS = [pytest.param(fw, marks=requires(module), id=fw)
              for fw, module in (("torch", "torch"), ("jax", "jax"), ("tensorflow", "tensorflow"))]


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.fixture(scope="module", params=FRAMEWORKS)
def probed(request, tmp_path_factory):
    """(framework, [rank 0's npz, rank 1's npz]) from two probe processes."""
    from dlbench.launch.torchrun import free_port

    framework, out = request.param, tmp_path_factory.mktemp(f"dp-{request.param}")
    (out / "job.json").write_text(json.dumps(encode(JOB)))
    addrs = ",".join(f"127.0.0.1:{free_port()}" for _ in range(WORLD))
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": f"{root / 'src'}{os.pathsep}{root}", "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, str(Path(__file__).with_name("dp_probe.py")), framework, str(rank),
                               str(WORLD), addrs, str(out / "job.json"), str(out)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True) for rank in range(WORLD)]
    try:
        logs = [p.communicate(timeout=240)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [p.returncode for p in procs] == [0] * WORLD, "\n".join(log[-3000:] for log in logs)
    return framework, [dict(np.load(out / f"rank{r}.npz")) for r in range(WORLD)]


def _backend_model(framework: str):
    """The single-process model: the backend's build of the job's model (what the gate verifies)."""
    from dlbench.frameworks import get_backend

    backend = get_backend(framework)
    if framework == "torch":
        backend.set_threads(1)
    spec, model = common.build_model(backend, JOB)
    return backend, spec, model


def _picked(npz: dict, prefix: str) -> dict[str, np.ndarray]:
    return {k.split("/", 1)[1]: v for k, v in npz.items() if k.startswith(prefix + "/")}


def test_averaged_gradient_of_two_workers_is_the_whole_batch_gradient(probed):
    framework, ranks = probed
    backend, spec, model = _backend_model(framework)
    # each worker had its own half of the batch (so equal to the whole batch's means averaged)
    assert [len(r["forward"]) for r in ranks] == [JOB.cell.global_batch // WORLD] * WORLD
    assert _rel(ranks[0]["forward"], ranks[1]["forward"]) > 1e-2
    whole = make_batch(spec, JOB.cell.global_batch, JOB.seed)
    _, full = backend.loss_and_grads(model, backend.place(whole, model))
    averaged = [_picked(r, "grad") for r in ranks]
    assert set(averaged[0]) == set(full) == set(spec.trainable_names())
    for name in full:
        assert np.array_equal(averaged[0][name], averaged[1][name]), name  # every worker applies the same update
        assert _rel(averaged[0][name], full[name]) <= 1e-5, name


def test_worker_model_is_the_backend_model_the_gate_passes(probed):
    from dlbench.gate.verify import verify_model

    framework, ranks = probed
    backend, spec, model = _backend_model(framework)
    built = backend.get_params(model)
    for rank, npz in enumerate(ranks):
        params = _picked(npz, "param")
        assert set(params) == set(built)
        assert all(np.array_equal(params[k], built[k]) for k in built)
        shard = common.shard(spec, JOB.cell.global_batch, rank, WORLD, JOB.seed)
        placed = backend.place(shard, model)
        expected = backend.to_numpy(backend.forward(model, placed)())
        assert _rel(npz["forward"], expected) <= 1e-6
    res = verify_model(backend, JOB.cell.model)
    assert res.passed, res.reason
