"""The standalone JAX and TensorFlow data-parallel workers: their networks compute the NumPy
reference's loss from the canonical weights, and two processes end a run with identical weights."""

import numpy as np
import pytest

from dlbench import reference
from dlbench.data.synthetic import make_batch
from dlbench.models import get_model
from dlbench.weights import init_weights
from tests.conftest import requires

MODELS = ["lenet", "fcn-r", "resnet-56", "alexnet-r"]


def _case(model):
    spec = get_model(model, small=True)
    weights = init_weights(spec, 0, mode="verify")  # random biases and BN parameters: nothing passes by luck
    batch = make_batch(spec, 4, 0)
    return spec, weights, batch, reference.loss(spec, weights, batch)


@requires("jax")
@pytest.mark.parametrize("model", MODELS)
def test_jax_worker_network_matches_reference(model):
    import jax.numpy as jnp

    from dlbench.distributed import jax_dp

    spec, w, b, ref = _case(model)
    got = float(jax_dp.loss_fn(spec)({k: jnp.asarray(v) for k, v in w.params.items()}, jnp.asarray(b.x),
                                     jnp.asarray(b.y)))
    assert got == pytest.approx(ref, rel=1e-5)


@requires("tensorflow")
@pytest.mark.parametrize("model", MODELS)
def test_tf_worker_network_matches_reference(model):
    import tensorflow as tf

    from dlbench.distributed import tf_dp

    spec, w, b, ref = _case(model)
    params = {k: tf.constant(tf_dp.to_tf(k, v)) for k, v in w.params.items()}
    got = float(tf_dp.loss_fn(spec)(params, tf.constant(tf_dp.to_input(b.x)), tf.constant(b.y)))
    assert got == pytest.approx(ref, rel=1e-5)
    for k, v in w.params.items():
        assert np.array_equal(tf_dp.from_tf(k, tf_dp.to_tf(k, v)), v)


@requires("jax")
def test_uncovered_layers_are_unsupported_with_the_reason():
    from dlbench.distributed import jax_dp

    with pytest.raises(jax_dp.UnsupportedLayer, match="LSTM|Embedding"):
        jax_dp.loss_fn(get_model("lstm-imdb", small=True))
    with pytest.raises(jax_dp.UnsupportedLayer, match="Dropout"):
        jax_dp.loss_fn(get_model("alexnet:lrn=0", small=True))


@pytest.mark.slow
@pytest.mark.parametrize("framework", [pytest.param("jax", marks=requires("jax")),
                                       pytest.param("tensorflow", marks=requires("tensorflow"))])
def test_two_processes_end_with_identical_weights(framework):
    from dlbench.distributed.scaling import Network, measure_cell
    from dlbench.plan import Cell, suite_from_dict

    suite = suite_from_dict({"models": ["lenet"], "scenarios": ["scaling"], "protocol": {
        "warmup": 2, "min_iters": 3, "min_time_s": 0, "repeats": 1, "timeout_s": 300}})
    cell = Cell(framework, "default", "lenet", "scaling", 8, 1, workers=2, scaling="weak", exchange="allreduce")
    out = measure_cell(cell, suite, Network())
    assert out.status == "ok", out.reason
    assert out.metrics["params_identical"] and len(out.metrics["digests"]) == 1
    assert {s.phase for s in out.samples} == {"warmup", "measure", "comm", "compute"}
