"""JAX backend specifics: closures that carry state, frozen and tied SAE layers, BN statistics,
dropout keys, ceil-mode pooling, the NHWC flatten permutation, the persistent compile cache."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dlbench.data import make_batch
from dlbench.frameworks.base import OptimizerSpec
from dlbench.gate import reference
from dlbench.models import get_model
from dlbench.models import layers as L
from dlbench.models.spec import InputSpec, LossSpec, ModelSpec
from dlbench.models.weights import Weights, bn_state_names, init_weights
from tests.conftest import requires, requires_framework, run_in_framework

pytestmark = requires("jax")

SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.fixture(scope="module")
def backend():
    from dlbench.frameworks import get_backend

    return get_backend("jax")


def tiny(layers: tuple, shape: tuple, kind: str = "image", classes: int = 4) -> ModelSpec:
    return ModelSpec("tiny", layers, InputSpec(kind, shape, classes=classes), LossSpec("softmax_ce"))


@pytest.mark.parametrize("name", ["lenet", "alexnet", "resnet-50", "resnet-56", "lstm-ptb", "fcn-s", "sae",
                                  "sae:phase=pretrain3"])
def test_full_size_param_count_matches_spec(backend, name):
    spec = get_model(name)
    shapes = spec.param_shapes()
    zeros = Weights({k: np.zeros(s, np.float32) for k, s in shapes.items()},
                    {n: np.ones(shapes[n.rsplit(".", 1)[0] + ".gamma"], np.float32) for n in bn_state_names(spec)})
    model = backend.build(spec, zeros)
    assert backend.param_count_extra(spec) == (0, "")
    assert backend.param_count(model) == spec.param_count


def test_train_step_updates_weights_and_gradient_does_not(backend):
    spec = get_model("lenet")
    w = init_weights(spec, 0)
    model = backend.build(spec, w)
    batch = backend.place(make_batch(spec, 8), model)
    import jax

    loss, grads = backend.gradient(model, batch)()
    assert np.isfinite(float(loss)) and all(np.abs(np.asarray(g)).sum() > 0 for g in jax.tree.leaves(grads))
    after_grad = backend.get_params(model)  # also checks the NHWC conversions round-trip exactly
    assert all(np.array_equal(after_grad[k], w.params[k]) for k in w.params)
    step = backend.train_step(model, batch, OptimizerSpec(lr=0.1))
    losses = [float(step()) for _ in range(5)]
    after = backend.get_params(model)
    assert not np.array_equal(after["conv1.weight"], w.params["conv1.weight"])
    assert not np.array_equal(after["fc1.weight"], w.params["fc1.weight"])
    assert losses[-1] < losses[0]


def test_closures_follow_the_state_train_step_carries(backend):
    """Donated buffers are replaced on the model, so closures made earlier still run on the new weights."""
    spec = get_model("sae")
    model = backend.build(spec, init_weights(spec, 0))
    batch = backend.place(make_batch(spec, 8), model)
    forward = backend.forward(model, batch)
    before = np.asarray(forward())
    first = backend.train_step(model, batch, OptimizerSpec(lr=0.5))
    losses = [float(first()) for _ in range(10)]
    assert losses[-1] < losses[0]
    after = np.asarray(forward())
    assert not np.allclose(before, after)
    second = backend.train_step(model, batch, OptimizerSpec(lr=0.5))  # fresh momentum, same weights
    assert abs(float(second()) - losses[-1]) < losses[0] - losses[-1]
    backend.sync(backend.gradient(model, batch)())


def test_frozen_sae_encoders_stay_frozen_and_decoder_is_tied(backend):
    spec = get_model("sae:phase=pretrain2")
    w = init_weights(spec, 0)
    model = backend.build(spec, w)
    batch = backend.place(make_batch(spec, 8), model)
    _, grads = backend.loss_and_grads(model, batch)
    assert sorted(grads) == sorted(spec.trainable_names())
    assert "enc1.weight" not in grads and "dec2.weight" not in backend.get_params(model)
    step = backend.train_step(model, batch, OptimizerSpec(lr=0.5))
    for _ in range(3):
        step()
    after = backend.get_params(model)
    assert np.array_equal(after["enc1.weight"], w.params["enc1.weight"])
    assert np.array_equal(after["enc1.bias"], w.params["enc1.bias"])
    assert not np.array_equal(after["enc2.weight"], w.params["enc2.weight"])
    assert not np.array_equal(after["dec2.bias"], w.params["dec2.bias"])


def test_bn_running_stats_change_in_train_step_only(backend):
    spec = tiny((L.Conv2d("conv", 3, 3, bias=False), L.BatchNorm("bn"), L.Activation("relu"), L.GlobalAvgPool(),
                 L.Dense("fc", 4)), (2, 6, 6))
    w = init_weights(spec, 0, mode="verify")
    model = backend.build(spec, w)
    raw = make_batch(spec, 8)
    batch = backend.place(raw, model)
    backend.sync(backend.forward(model, batch)())
    backend.sync(backend.gradient(model, batch)())
    assert all(np.array_equal(v, w.state[k]) for k, v in backend.get_state(model).items())
    backend.sync(backend.train_step(model, batch, OptimizerSpec(lr=0.0))())
    state = backend.get_state(model)
    conv = reference.conv2d(raw.x.astype(np.float64), w.params["conv.weight"].astype(np.float64), None, 1, 0, 1)
    momentum = spec.layers[1].momentum
    expect_mean = (1 - momentum) * w.state["bn.running_mean"] + momentum * conv.mean(axis=(0, 2, 3))
    expect_var = (1 - momentum) * w.state["bn.running_var"] + momentum * conv.var(axis=(0, 2, 3))  # Flax: biased
    np.testing.assert_allclose(state["bn.running_mean"], expect_mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(state["bn.running_var"], expect_var, rtol=1e-4)


def test_dropout_is_real_in_training_and_off_in_forward(backend):
    spec = tiny((L.Dense("fc1", 64), L.Activation("relu"), L.Dropout(0.5), L.Dense("fc2", 4)), (16,), kind="vector")
    w = init_weights(spec, 0)
    model = backend.build(spec, w)
    raw = make_batch(spec, 8)
    batch = backend.place(raw, model)
    forward = backend.forward(model, batch)
    ref, _ = reference.forward(spec, w, raw)
    np.testing.assert_allclose(np.asarray(forward()), ref, rtol=1e-5, atol=1e-6)
    assert np.array_equal(np.asarray(forward()), np.asarray(forward()))
    gradient = backend.gradient(model, batch)
    losses = {float(gradient()[0]) for _ in range(3)}
    assert len(losses) == 3  # a fresh mask every call (the step counter is folded into the key)
    assert all(abs(loss - reference.loss(spec, w, raw)) > 1e-6 for loss in losses)


@pytest.mark.parametrize("pool", [
    L.Pool2d("avg", 3, 2, padding=1, ceil_mode=True),  # padding counts, the ceil overhang does not
    L.Pool2d("avg", 3, 2, ceil_mode=True),
    L.Pool2d("avg", 2, 2, padding=1),
    L.Pool2d("max", 3, 2, padding=1, ceil_mode=True),
])
def test_pooling_matches_reference(backend, pool):
    spec = tiny((pool,), (3, 8, 8))
    w = init_weights(spec, 0)
    raw = make_batch(spec, 2)
    model = backend.build(spec, w)
    out = np.asarray(backend.forward(model, backend.place(raw, model))())
    np.testing.assert_allclose(out, reference.forward(spec, w, raw)[0], rtol=1e-6, atol=1e-6)


def test_flatten_permutation_is_what_keeps_nhwc_equivalent(backend):
    """Conv -> Flatten -> Dense matches the reference only with the Dense rows permuted at load time."""
    from dlbench.frameworks.jax.backend import Builder, JaxBackend

    class NoPermutation(Builder):
        def make_flatten(self, layer, shape):
            out = super().make_flatten(layer, shape)
            self.flattened = None
            return out

    spec = tiny((L.Conv2d("conv", 3, 3), L.Activation("tanh"), L.Flatten(), L.Dense("fc", 4)), (2, 5, 5))
    w = init_weights(spec, 0, mode="verify")
    raw = make_batch(spec, 4)
    ref, _ = reference.forward(spec, w, raw)
    errors = []
    for b in (backend, type("Broken", (JaxBackend,), {"builder_class": NoPermutation})()):
        model = b.build(spec, w)
        out = np.asarray(b.forward(model, b.place(raw, model))())
        errors.append(np.linalg.norm(out - ref) / np.linalg.norm(ref))
        assert np.array_equal(b.get_params(model)["fc.weight"], w.params["fc.weight"])  # round trip either way
    assert errors[0] < 1e-5 < 0.1 < errors[1]


def test_set_threads_and_info_report_what_jax_sees(backend):
    report = backend.set_threads(1)
    assert report["cpu_affinity"] == len(os.sched_getaffinity(0))
    assert report["platform"] == "cpu" and report["device_count"] >= 1
    info = backend.info()
    assert all(info[p] for p in ("jax", "jaxlib", "flax", "optax"))
    assert backend.peak_device_memory("cpu") == {}


def test_persistent_compilation_cache(tmp_path):
    """A fresh process with DLBENCH_CACHE_DIR writes its compiled executables there."""
    code = (
        "from dlbench.frameworks import get_backend; from dlbench.models import get_model;"
        "from dlbench.data import make_batch; from dlbench.models.weights import init_weights;"
        "b = get_backend('jax'); s = get_model('sae:phase=pretrain1'); m = b.build(s, init_weights(s));"
        "b.sync(b.forward(m, b.place(make_batch(s, 4), m))()); print(b.info()['compilation_cache_dir'])"
    )
    env = {**os.environ, "DLBENCH_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": SRC}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(tmp_path / "cache")
    assert any((tmp_path / "cache").iterdir())


@pytest.fixture(scope="module")
def digits_lenet():
    from dlbench.data import adapt, load_dataset

    spec = get_model("lenet")
    return spec, adapt(load_dataset("digits"), spec), adapt(load_dataset("digits", split="test"), spec)


def test_convergence_agrees_with_torch_and_learns(backend, digits_lenet):
    """The cross-framework agreement check: same canonical weights, same batches, same SGD
    momentum, so the first steps' losses match torch's; one epoch lifts test accuracy."""
    pytest.importorskip("torch")
    from dlbench.frameworks import get_backend
    from dlbench.scenarios.convergence import ConvergenceConfig, default_batch, evaluate, train

    spec, train_set, test_set = digits_lenet
    batch, config = default_batch(spec, len(train_set)), ConvergenceConfig(epochs=1, log_steps=5)
    ours = train(backend, spec, train_set, test_set, batch, 0, config)
    theirs = train(get_backend("torch"), spec, train_set, test_set, batch, 0, config)
    assert len(ours["step_losses"]) == 5
    np.testing.assert_allclose(ours["step_losses"], theirs["step_losses"], rtol=1e-3)
    fresh = backend.build(spec, init_weights(spec, 0))
    _, initial_acc = evaluate(backend, fresh, backend.predictor(fresh), test_set, config.eval_batch)
    assert ours["epochs"][0]["test_acc"] > initial_acc + 0.2


def test_trainer_compiles_once_for_batches_of_one_shape(backend, digits_lenet):
    spec, train_set, _ = digits_lenet
    model = backend.build(spec, init_weights(spec, 0))
    opt = OptimizerSpec(lr=spec.learning_rate)
    step = backend.trainer(model, opt)
    before = {k: v.copy() for k, v in backend.get_params(model).items()}
    for i, batch in enumerate(train_set.batches(32, seed=1)):
        loss = step(backend.place(batch, model))
        if i == 3:
            break
    backend.sync(loss)
    assert model.train_fns[opt]._cache_size() == 1
    after = backend.get_params(model)
    assert not np.array_equal(after["conv1.weight"], before["conv1.weight"])


def test_trainer_pads_variable_length_tokens_without_changing_the_function(backend):
    """Token batches of different lengths share one executable (padded to the maximum length,
    mask 0) and train exactly as the unpadded batches do; the predictor's outputs match forward's."""
    spec = get_model("lstm-imdb", small=True, units=16, embed=8)
    w = init_weights(spec, 0)
    raws = [make_batch(spec, 6, seed=s) for s in range(4)]
    assert len({r.x.shape[1] for r in raws}) > 1 and any(r.x.shape[1] < spec.input.shape[0] for r in raws)
    opt = OptimizerSpec(lr=0.5)
    padded, unpadded = backend.build(spec, w), backend.build(spec, w)
    step = backend.trainer(padded, opt)
    predict = backend.predictor(padded)
    fn = backend._train_fn(unpadded, opt)
    for raw in raws:
        batch = backend.place(raw, padded)
        np.testing.assert_allclose(np.asarray(predict(batch)), np.asarray(backend.forward(padded, batch)()),
                                   rtol=1e-5, atol=1e-6)
        got = float(step(batch))
        want = float(backend._run_train_fn(unpadded, fn, batch["x"], batch["y"], batch["mask"]))
        assert abs(got - want) < 1e-5 * abs(want)
    assert padded.train_fns[opt]._cache_size() == 1
    assert unpadded.train_fns[opt]._cache_size() == len({r.x.shape[1] for r in raws})
    ours, theirs = backend.get_params(padded), backend.get_params(unpadded)
    for k in ours:
        np.testing.assert_allclose(ours[k], theirs[k], rtol=1e-4, atol=1e-6)


@requires_framework("jax==0.5.1")
def test_the_flax_of_jax_0_5_passes_the_gate():
    """JAX 0.5's line pins Flax 0.10.4, whose ``State.flat_state()`` is a FlatState (a sequence of (path,
    value) pairs), not Flax 0.10.2's dict: the gate failed there with "'FlatState' object has no attribute
    'items'" (found preparing docs/bisect.md's JAX bisection, which would have skipped every 0.5 release)."""
    out = run_in_framework("jax==0.5.1", """
        import json
        from dlbench.frameworks import get_backend
        from dlbench.gate.verify import verify_model
        b = get_backend("jax==0.5.1"); b.set_threads(1)
        r = verify_model(b, "lenet")
        print(json.dumps({"verdict": r.verdict, "reason": r.reason}))
    """)
    assert out == {"verdict": "pass", "reason": out["reason"]} and "FlatState" not in (out["reason"] or "")
