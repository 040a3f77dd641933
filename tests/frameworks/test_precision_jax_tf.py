"""Reduced precision in the JAX, TensorFlow and Keras (on TensorFlow) backends, against the float64 reference.

For every precision a backend declares, LeNet is built at it and its forward, loss and gradient
are compared with :mod:`dlbench.gate.reference` (float64) under the tolerances below, and the types the
framework reports (``precision_info``) must be :func:`dlbench.core.precision.expected_dtypes`. The gate's
own per-precision tolerances live in ``dlbench.gate.verify``; these are this test's, with why.

Keras fixes its backend at import: the TensorFlow and Keras cases skip when this process already
imported Keras on another backend (the Keras tests run other backends in subprocesses).
"""

import sys

import numpy as np
import pytest

from dlbench.core.errors import UsageError
from dlbench.core.precision import expected_dtypes
from dlbench.data import make_batch
from dlbench.frameworks.base import OptimizerSpec, UnsupportedError
from dlbench.gate import reference
from dlbench.models import get_model
from dlbench.models.weights import Weights, init_weights
from tests.conftest import requires

#: relative (L2) error of the logits vs float64. bf16 keeps 8 significant bits (unit roundoff
#: 2**-9 = 2e-3): a few roundings per layer through LeNet's layers measure 4e-3 (JAX) to 7e-3 (TF),
#: so 2e-2. fp16 keeps 11 bits (2**-12 = 2.4e-4): 7e-4 measured, so 4e-3. amp computes in its low type: the
#: same bounds (its float32 master weights are rounded to the low type when a layer reads them).
FORWARD_TOL = {"fp32": 1e-4, "bf16": 2e-2, "fp16": 4e-3, "amp-bf16": 2e-2, "amp-fp16": 4e-3}
#: the directional derivative vs the float64 central difference (see :func:`_gradient_error`), looser
#: than the forward: the backward rounds as many times again, and small gradients lose relative
#: accuracy (measured 8e-3 to 1.4e-2 at bf16, 8e-3 at fp16, 1.2e-5 at fp32)
GRADIENT_TOL = {"fp32": 1e-3, "bf16": 6e-2, "fp16": 3e-2, "amp-bf16": 6e-2, "amp-fp16": 3e-2}
#: the loss, computed in float32 from low-precision logits (measured 1e-4 to 8e-4 at bf16, 7e-5 at fp16)
LOSS_TOL = {"fp32": 1e-4, "bf16": 5e-3, "fp16": 1e-3, "amp-bf16": 5e-3, "amp-fp16": 1e-3}
LOW = ("bf16", "fp16", "amp-bf16", "amp-fp16")
FRAMEWORKS = [pytest.param("jax", marks=requires("jax")), pytest.param("tensorflow", marks=requires("tensorflow")),
              pytest.param("keras", marks=requires("tensorflow"))]
_backends: dict = {}


def backend_for(name: str):
    if name != "jax" and "keras" in sys.modules and sys.modules["keras"].backend.backend() != "tensorflow":
        pytest.skip("Keras was imported on another backend in this process")
    if name not in _backends:
        from dlbench.frameworks import get_backend

        _backends[name] = get_backend(name)
    return _backends[name]


@pytest.fixture(scope="module")
def lenet():
    spec = get_model("lenet").without_dropout()
    return spec, init_weights(spec, 0, mode="verify"), make_batch(spec, 8, 0)


def _rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def _gradient_error(spec, weights, batch, grads: dict, seed: int = 1) -> float:
    """The gate's check (c) over the normalised gradient itself and two random unit directions v:
    ``|<grad, v> - d| / max(|d|, 0.01 ||grad||)``, d the central difference of the float64 loss along v
    (the floor keeps a direction nearly orthogonal to the gradient from amplifying rounding)."""
    names = spec.trainable_names()
    gnorm = np.sqrt(sum(float((grads[k].astype(np.float64) ** 2).sum()) for k in names))
    rng = np.random.default_rng(seed)
    directions = [{k: grads[k].astype(np.float64) for k in names}]
    directions += [{k: rng.standard_normal(grads[k].shape) for k in names} for _ in range(2)]
    eps, worst = 1e-4, 0.0
    for v in directions:
        norm = np.sqrt(sum((a ** 2).sum() for a in v.values()))
        v = {k: a / norm for k, a in v.items()}

        def shifted(sign, v=v):
            return Weights({k: a.astype(np.float64) + sign * eps * v.get(k, 0.0) for k, a in weights.params.items()},
                           weights.state)
        numeric = (reference.loss(spec, shifted(1), batch) - reference.loss(spec, shifted(-1), batch)) / (2 * eps)
        analytic = sum(float((grads[k].astype(np.float64) * v[k]).sum()) for k in v)
        worst = max(worst, abs(analytic - numeric) / max(abs(numeric), 0.01 * gnorm))
    return worst


def _build(backend, precision, lenet, variant=None):
    spec, weights, batch = lenet
    backend.set_precision(precision)
    try:
        model = backend.build(spec, weights, variant=variant)
    finally:
        backend.set_precision("fp32")
    return model, backend.place(batch, model)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_declares_the_five_float_precisions(framework):
    assert backend_for(framework).precisions == ("fp32", "bf16", "fp16", "amp-bf16", "amp-fp16")


@pytest.mark.parametrize("precision", ["fp32", *LOW])
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_forward_loss_gradient_against_float64(framework, precision, lenet):
    backend = backend_for(framework)
    spec, weights, batch = lenet
    model, placed = _build(backend, precision, lenet)
    assert backend.precision_info(model) == expected_dtypes(precision)

    out = backend.forward(model, placed)()
    backend.sync(out)
    out = backend.to_numpy(out)
    assert out.dtype == np.float32  # a low-precision output is handed back upcast, exactly
    ref, _ = reference.forward(spec, weights, batch)
    forward_error = _rel(out, ref)
    assert forward_error <= FORWARD_TOL[precision]
    if precision in LOW:  # really computed in the low type: float32 would be 1e4 times closer
        assert forward_error > 1e-5

    loss, grads = backend.loss_and_grads(model, placed)
    ref_loss = reference.loss(spec, weights, batch)
    assert abs(loss - ref_loss) / ref_loss <= LOSS_TOL[precision]
    assert set(grads) == set(spec.trainable_names())
    assert all(g.dtype == np.float32 and np.isfinite(g).all() for g in grads.values())
    gradient_error = _gradient_error(spec, weights, batch, grads)
    assert gradient_error <= GRADIENT_TOL[precision]
    # the parameters read back in canonical layout are the loaded ones, rounded to the storage type
    params = backend.get_params(model)
    storage_error = max(_rel(params[k], weights.params[k]) for k in spec.trainable_names())
    assert storage_error <= (1e-7 if expected_dtypes(precision)["param_dtype"] == "float32" else 5e-3)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_info_is_read_from_the_model_not_the_request(framework, lenet):
    """A backend that built float32 while bf16 was asked for must say float32 (the planted bug the
    gate catches): the report comes from the model's arrays, so asking afterwards changes nothing."""
    backend = backend_for(framework)
    model, _ = _build(backend, "fp32", lenet)
    backend.set_precision("amp-bf16")
    try:
        assert backend.precision_info(model) == expected_dtypes("fp32")
    finally:
        backend.set_precision("fp32")


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_int8_and_tf32_unsupported_with_reason_unknown_is_usage_error(framework):
    backend = backend_for(framework)
    for precision, words in (("int8", "quantiz"), ("tf32", "GPU")):
        with pytest.raises(UnsupportedError, match=words):
            backend.set_precision(precision)
    with pytest.raises(UsageError):
        backend.set_precision("fp8")
    assert backend.precision == "fp32"  # a refused precision leaves the backend as it was


@pytest.mark.parametrize("framework", [pytest.param("tensorflow", marks=requires("tensorflow")),
                                       pytest.param("keras", marks=requires("tensorflow"))])
def test_keras_policy_does_not_leak_into_the_next_build(framework, lenet):
    import keras

    backend = backend_for(framework)
    _build(backend, "amp-bf16", lenet)
    assert keras.config.dtype_policy().name == "float32"
    model, _ = _build(backend, "fp32", lenet)
    assert backend.precision_info(model) == expected_dtypes("fp32")


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_amp_fp16_trains_float32_master_weights(framework, lenet):
    """amp-fp16's training step (loss scaling, then the update on float32 master weights) lowers the loss."""
    backend = backend_for(framework)
    model, placed = _build(backend, "amp-fp16", lenet)
    step = backend.train_step(model, placed, OptimizerSpec(lr=0.05))
    losses = [float(np.asarray(step())) for _ in range(4)]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
    assert backend.precision_info(model) == expected_dtypes("amp-fp16")
    assert all(np.isfinite(p).all() for p in backend.get_params(model).values())
