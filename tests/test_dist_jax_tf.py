"""The JAX and TensorFlow data-parallel workers end to end: two processes end a run with identical
weights, and what they cannot build (the backend's variant, TensorFlow's xla step) makes the cell
unsupported with the reason; the JAX step runs the backend's LSTM under shard_map.
(That their model is the backend's, and their gradient the whole batch's: tests/test_dp_equivalence.py.)"""

import pytest

from tests.conftest import over_budget, requires

FRAMEWORKS = [pytest.param("jax", marks=requires("jax")), pytest.param("tensorflow", marks=requires("tensorflow"))]


def _measure(framework, variant="default", workers=2):
    from dlbench.distributed.scaling import Network, measure_cell
    from dlbench.planning.plan import Cell, suite_from_dict

    suite = suite_from_dict({"models": ["lenet"], "scenarios": ["scaling"], "protocol": {
        "warmup": 2, "min_iters": 3, "min_time_s": 0, "repeats": 1, "timeout_s": 300}})
    cell = Cell(framework, variant, "lenet", "scaling", 8, 1, workers=workers, scaling="weak", exchange="allreduce")
    return measure_cell(cell, suite, Network())


#: TensorFlow's run is the nightly set's (DLBENCH_SLOW_TESTS=1): in CI JAX's takes the scaling cell end to end,
#: and TensorFlow's worker code exchanges gradients between two processes in tests/test_dp_equivalence.py
END_TO_END = [FRAMEWORKS[0], pytest.param("tensorflow", marks=[requires("tensorflow"), over_budget])]


@pytest.mark.slow
@pytest.mark.parametrize("framework", END_TO_END)
def test_two_processes_end_with_identical_weights(framework):
    out = _measure(framework)
    assert out.status == "ok", out.reason
    assert out.metrics["params_identical"] and len(out.metrics["digests"]) == 1
    assert {s.phase for s in out.samples} == {"warmup", "measure", "comm", "compute"}


@pytest.mark.parametrize("framework,variant,reason", [
    pytest.param("jax", "no-such-variant", "jax has no variant 'no-such-variant'", marks=requires("jax")),
    pytest.param("tensorflow", "xla", "cannot compile the step's all-reduce with XLA", marks=requires("tensorflow"))])
def test_what_the_worker_cannot_build_is_unsupported_with_its_reason(framework, variant, reason):
    out = _measure(framework, variant=variant, workers=1)
    assert out.status == "unsupported"
    assert reason in out.reason


@requires("jax")
def test_jax_worker_step_runs_an_lstm_and_averages_its_gradient(monkeypatch):
    """The JAX worker's step (jax_dp.Trainer) on the backend's LSTM, over a mesh of two devices of one
    process: the step's gradient (lr 0, momentum 0: the momentum buffer holds it) is the whole batch's.
    The LSTM's zero state used to be made from a shape, replicated, while the scan's output varies
    over the processes: shard_map refused the scan (carry types differ)."""
    from tests.conftest import run_in_framework

    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    out = run_in_framework("jax", """
        import json
        import jax, numpy as np, optax
        from jax.sharding import Mesh
        from dlbench.data.synthetic import make_batch
        from dlbench.core.cell import Cell
        from dlbench.core.job import DataParallelJob
        from dlbench.frameworks import data_parallel as common
        from dlbench.frameworks.jax import dp_worker as jax_dp
        from dlbench.frameworks.base import OptimizerSpec
        from dlbench.frameworks.jax.backend import JaxBackend

        backend = JaxBackend()
        job = DataParallelJob(threads=None, cell=Cell("jax", "default", "lstm-ptb", "scaling", 4, 1, workers=2),
                              seed=0, protocol={}, collective_timeout_s=60.0, small=True)
        spec, model = common.build_model(backend, job)
        batch = make_batch(spec, 4, 0)
        _, whole = backend.loss_and_grads(model, backend.place(batch, model))
        spec, model = common.build_model(backend, job)
        mesh = Mesh(np.array(jax.devices()), (jax_dp.AXIS,))
        trainer = jax_dp.Trainer(model, OptimizerSpec(0.0, 0.0), mesh, backend.place(batch, model))
        jax.block_until_ready(trainer.step())
        trainer.into_model()
        step = backend.grads_to_canonical(model, optax.tree_utils.tree_get(model.opt_state, "trace"))
        rel = {k: float(np.linalg.norm(step[k] - whole[k]) / np.linalg.norm(whole[k])) for k in whole}
        print(json.dumps({"devices": len(mesh.devices), "rel": rel}))
    """, timeout=300)
    assert out["devices"] == 2
    assert max(out["rel"].values()) <= 1e-5, out["rel"]
