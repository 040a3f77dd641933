"""PyTorch backend specifics: full-size parameter counts, closures, the compile variant."""

import numpy as np
import pytest

from tests.conftest import requires

pytestmark = requires("torch")


@pytest.fixture(scope="module")
def backend():
    from dlbench.frameworks import get_backend

    return get_backend("torch")


@pytest.mark.parametrize("name", ["lenet", "alexnet", "resnet-50", "resnet-56", "lstm-ptb", "fcn-s", "sae"])
def test_full_size_param_count_matches_spec(backend, name):
    from dlbench.models import get_model
    from dlbench.models.weights import Weights

    spec = get_model(name)
    zeros = Weights({k: np.zeros(s, np.float32) for k, s in spec.param_shapes().items()},
                    {k: np.zeros(s[0], np.float32) for k, s in []})
    from dlbench.models.weights import bn_state_names

    for n in bn_state_names(spec):
        zeros.state[n] = np.ones(spec.param_shapes()[n.rsplit(".", 1)[0] + ".gamma"], np.float32)
    model = backend.build(spec, zeros)
    extra, _ = backend.param_count_extra(spec)
    assert backend.param_count(model) == spec.param_count + extra


def test_train_step_updates_weights_and_gradient_does_not(backend):
    from dlbench.data import make_batch
    from dlbench.frameworks.base import OptimizerSpec
    from dlbench.models import get_model
    from dlbench.models.weights import init_weights

    spec = get_model("lenet")
    w = init_weights(spec, 0)
    model = backend.build(spec, w)
    batch = backend.place(make_batch(spec, 8), model)
    backend.gradient(model, batch)()
    after_grad = backend.get_params(model)
    assert all(np.array_equal(after_grad[k], w.params[k]) for k in w.params)
    step = backend.train_step(model, batch, OptimizerSpec(lr=0.1))
    losses = [float(step()) for _ in range(5)]
    after = backend.get_params(model)
    assert not np.array_equal(after["conv1.weight"], w.params["conv1.weight"])
    assert losses[-1] < losses[0]


def test_frozen_sae_layers_stay_frozen(backend):
    from dlbench.data import make_batch
    from dlbench.frameworks.base import OptimizerSpec
    from dlbench.models import get_model
    from dlbench.models.weights import init_weights

    spec = get_model("sae:phase=pretrain2")
    w = init_weights(spec, 0)
    model = backend.build(spec, w)
    step = backend.train_step(model, backend.place(make_batch(spec, 8), model), OptimizerSpec(lr=0.5))
    for _ in range(3):
        step()
    after = backend.get_params(model)
    assert np.array_equal(after["enc1.weight"], w.params["enc1.weight"])
    assert not np.array_equal(after["enc2.weight"], w.params["enc2.weight"])


def test_compile_variant_passes_gate(backend):
    from dlbench.gate.verify import verify_model

    result = verify_model(backend, "lenet", "compile")
    assert result.verdict == "pass", result.reason
