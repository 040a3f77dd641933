"""The JAX and TensorFlow data-parallel workers end to end: two processes end a run with identical
weights, and what they cannot build (the backend's variant, TensorFlow's xla step) makes the cell
unsupported with the reason.
(That their model is the backend's, and their gradient the whole batch's: tests/test_dp_equivalence.py.)"""

import pytest

from tests.conftest import requires

FRAMEWORKS = [pytest.param("jax", marks=requires("jax")), pytest.param("tensorflow", marks=requires("tensorflow"))]


def _measure(framework, variant="default", workers=2):
    from dlbench.distributed.scaling import Network, measure_cell
    from dlbench.plan import Cell, suite_from_dict

    suite = suite_from_dict({"models": ["lenet"], "scenarios": ["scaling"], "protocol": {
        "warmup": 2, "min_iters": 3, "min_time_s": 0, "repeats": 1, "timeout_s": 300}})
    cell = Cell(framework, variant, "lenet", "scaling", 8, 1, workers=workers, scaling="weak", exchange="allreduce")
    return measure_cell(cell, suite, Network())


@pytest.mark.slow
@pytest.mark.parametrize("framework", FRAMEWORKS)
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
