"""Behaviour checks of a backend's closures, shared by the TensorFlow tests (in process) and the
Keras tests (one subprocess per Keras backend: ``python -m tests.frameworks.closure_checks``).

Each check raises AssertionError with what went wrong; :func:`main` runs them all (or the ones named
after the backend and variant, comma-separated) for the backend named on the command line and prints
``{check: "ok" | reason}`` as JSON.
"""

from __future__ import annotations

import json
import sys
import traceback

import numpy as np


def _setup(backend, model: str, variant: str, seed: int = 0, small: bool = False):
    from dlbench.data import make_batch
    from dlbench.models import get_model
    from dlbench.models.weights import init_weights

    spec = get_model(model, small=small)
    weights = init_weights(spec, seed)
    built = backend.build(spec, weights, "cpu", variant)
    return spec, weights, built, backend.place(make_batch(spec, 8), built)


def train_step_updates_and_gradient_does_not(backend, variant: str) -> None:
    from dlbench.frameworks.base import OptimizerSpec

    _, w, model, batch = _setup(backend, "lenet", variant)
    grad = backend.gradient(model, batch)
    for _ in range(2):
        backend.sync(grad())
    after_grad = backend.get_params(model)
    changed = [k for k in w.params if not np.array_equal(after_grad[k], w.params[k])]
    assert not changed, f"the gradient closure changed {changed[:3]}"
    step = backend.train_step(model, batch, OptimizerSpec(lr=0.1))
    losses = []
    for _ in range(5):
        out = step()
        backend.sync(out)
        losses.append(float(backend.to_numpy(out)))
    after = backend.get_params(model)
    assert not np.array_equal(after["conv1.weight"], w.params["conv1.weight"]), "train_step did not update conv1"
    assert losses[-1] < losses[0], f"loss did not fall: {losses}"


def frozen_encoders_stay_frozen(backend, variant: str) -> None:
    from dlbench.frameworks.base import OptimizerSpec

    _, w, model, batch = _setup(backend, "sae:phase=pretrain2", variant)
    step = backend.train_step(model, batch, OptimizerSpec(lr=0.5))
    for _ in range(3):
        backend.sync(step())
    after = backend.get_params(model)
    for name in ("enc1.weight", "enc1.bias"):
        assert np.array_equal(after[name], w.params[name]), f"frozen {name} changed"
    for name in ("enc2.weight", "dec2.bias"):
        assert not np.array_equal(after[name], w.params[name]), f"trainable {name} did not change"
    _, grads = backend.loss_and_grads(model, batch)
    assert "enc1.weight" not in grads and "enc2.weight" in grads


def repeated_calls_agree(backend, variant: str) -> None:
    """Each closure can be called again and again: the same forward and gradient every time
    (no hidden state leaks between calls), and a train step keeps training (its loss changes;
    that it falls is checked on LeNet)."""
    from dlbench.frameworks.base import OptimizerSpec

    for ref in ("lstm-imdb", "alexnet-r"):
        _, _, model, batch = _setup(backend, ref, variant, small=True)
        fwd = backend.forward(model, batch)
        outs = []
        for _ in range(3):
            out = fwd()
            backend.sync(out)
            outs.append(np.array(backend.to_numpy(out)))
        assert all(np.allclose(o, outs[0], rtol=1e-5, atol=1e-6) for o in outs), f"{ref}: forward differs between calls"
        losses = []
        grad = backend.gradient(model, batch)
        for _ in range(3):
            out = grad()
            backend.sync(out)
            losses.append(float(backend.to_numpy(out)))
        assert np.allclose(losses, losses[0], rtol=1e-5), f"{ref}: gradient-closure loss differs: {losses}"
        step = backend.train_step(model, batch, OptimizerSpec(lr=0.01))
        steps = []
        for _ in range(4):
            out = step()
            backend.sync(out)
            steps.append(float(backend.to_numpy(out)))
        assert len(set(steps)) > 1 and all(np.isfinite(steps)), f"{ref}: train steps {steps}"


def repeated_gradients_agree(backend, variant: str) -> None:
    """The gradient closure returns the same gradients call after call, from a freshly built model:
    keras-torch's ``net.zero_grad()`` cleared nothing before the model's first ``train_on_batch``, so
    the second call returned twice the gradient (the gate's update check found it)."""
    _, _, model, batch = _setup(backend, "lenet", variant, small=True)
    _, first = backend.loss_and_grads(model, batch)
    first = {k: np.array(g) for k, g in first.items()}
    _, second = backend.loss_and_grads(model, batch)
    for k, g in first.items():
        np.testing.assert_allclose(second[k], g, rtol=1e-5, atol=1e-7, err_msg=f"{k}: the second call's gradient")


def optimizer_steps_agree_with_the_reference(backend, variant: str) -> None:
    """Two steps of each optimiser against the float64 reference (the gate's check (f)) on LeNet."""
    from dlbench.gate.verify import verify_model

    result = verify_model(backend, "lenet", variant)
    assert result.checks.get("update") is True, result.reason
    assert set(result.update) == {"sgd", "adamw"}, result.update


def train_step_runs_in_training_mode(backend, variant: str) -> None:
    """The first train step's loss (computed before its update) is the reference training loss,
    batch norm on batch statistics: BN must not run in inference mode while training."""
    from dlbench.data import make_batch
    from dlbench.frameworks.base import OptimizerSpec
    from dlbench.gate import reference
    from dlbench.models import get_model
    from dlbench.models.weights import init_weights

    spec = get_model("resnet-56:n=1", small=True)
    weights = init_weights(spec, 0, mode="verify")
    batch = make_batch(spec, 8)
    model = backend.build(spec, weights, "cpu", variant)
    out = backend.train_step(model, backend.place(batch, model), OptimizerSpec(lr=0.01))()
    backend.sync(out)
    loss, expected = float(backend.to_numpy(out)), reference.loss(spec, weights, batch)
    assert abs(loss - expected) <= 1e-4 * abs(expected), f"first train-step loss {loss} vs reference {expected}"


def get_params_round_trips(backend, variant: str) -> None:
    """Loading then reading every parameter gives the canonical weights back (layouts, flatten rows)."""
    for ref in ("lenet", "alexnet-r", "lstm-imdb", "sae:phase=pretrain2"):
        _, w, model, _ = _setup(backend, ref, variant, small=True)
        got = backend.get_params(model)
        assert set(got) == set(w.params), f"{ref}: parameter names differ"
        for k, v in w.params.items():
            assert np.array_equal(got[k], v), f"{ref}: {k} does not round-trip"


def trainer_and_predictor(backend, variant: str) -> None:
    """The convergence scenario's pair: the trainer's first step is ``train_step``'s first step
    (same loss from the same weights), it carries its optimiser state from batch to batch (the
    loss falls on a repeated batch), and the predictor computes ``forward``'s output."""
    from dlbench.data import make_batch
    from dlbench.frameworks.base import OptimizerSpec
    from dlbench.models import get_model
    from dlbench.models.weights import init_weights

    spec = get_model("lenet", small=True)
    w = init_weights(spec, 0)
    opt = OptimizerSpec(lr=0.05)
    trained, timed = backend.build(spec, w, "cpu", variant), backend.build(spec, w, "cpu", variant)
    batches = [make_batch(spec, n, seed=s) for s, n in ((1, 8), (2, 8), (3, 5))]  # a ragged last batch too
    step, predict = backend.trainer(trained, opt), backend.predictor(trained)
    first = step(backend.place(batches[0], trained))
    expected = backend.train_step(timed, backend.place(batches[0], timed), opt)()
    backend.sync(expected)
    a, b = float(backend.to_numpy(first)), float(backend.to_numpy(expected))
    assert abs(a - b) <= 1e-5 * abs(b), f"trainer's first loss {a} vs train_step's {b}"
    losses = [float(backend.to_numpy(step(backend.place(batch, trained)))) for batch in batches[1:]]
    assert all(np.isfinite(losses)), losses
    again = [float(backend.to_numpy(step(backend.place(batches[0], trained)))) for _ in range(4)]
    assert again[-1] < a, f"the trainer did not learn: {a} then {again}"
    for batch in batches:
        placed = backend.place(batch, trained)
        got, want = backend.to_numpy(predict(placed)), backend.to_numpy(backend.forward(trained, placed)())
        assert got.shape == (batch.size, spec.input.classes), got.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def part_gradient_differentiates_its_input(backend, variant: str) -> None:
    """A part after the first differentiates its input too (``models.split.differentiates_input``):
    its gradient closure returns the parameters' gradients and, last, the input's; the first part's
    does not."""
    for k in (0, 1, 2):
        _, _, model, batch = _setup(backend, f"lenet#{k}", variant, small=True)
        _, grads = backend.gradient(model, batch)()
        params = len(model.net.trainable_variables)
        assert len(grads) == params + (k > 0), (k, len(grads), params)
        if k > 0:
            x = batch["inputs"]
            assert tuple(grads[-1].shape) == tuple(x.shape), (k, grads[-1].shape, x.shape)
            assert float(np.abs(np.asarray(grads[-1], np.float32)).sum()) > 0, f"part {k}: a zero input gradient"


def profile_writes_a_chrome_trace(backend, variant: str) -> None:
    """The framework's own profiler over the forward closure (Keras: its backend's) writes a Chrome
    trace whose operations make the top-operations table."""
    import tempfile
    from pathlib import Path

    from dlbench.measure.profile import profile_closure, read_trace

    _, _, model, batch = _setup(backend, "lenet", variant, small=True)
    run = backend.forward(model, batch)
    backend.sync(run())
    with tempfile.TemporaryDirectory() as tmp:
        p = profile_closure(backend.profile, run, 2, Path(tmp))
        spans = [e for e in read_trace(Path(tmp) / p["trace"]) if e.get("ph") == "X"]
    assert p["ops"] and p["self_us_total"] > 0, p
    assert spans and all({"name", "ts", "dur", "pid", "tid"} <= e.keys() for e in spans)


CHECKS = {f.__name__: f for f in (train_step_updates_and_gradient_does_not, frozen_encoders_stay_frozen,
                                  repeated_calls_agree, repeated_gradients_agree,
                                  optimizer_steps_agree_with_the_reference, train_step_runs_in_training_mode,
                                  get_params_round_trips,
                                  trainer_and_predictor, part_gradient_differentiates_its_input,
                                  profile_writes_a_chrome_trace)}


def run_all(backend, variant: str, only: list[str] | None = None) -> dict[str, str]:
    results = {}
    for name, check in CHECKS.items():
        if only is not None and name not in only:
            continue
        try:
            check(backend, variant)
            results[name] = "ok"
        except Exception as exc:  # reported, not raised: the parent test asserts per check
            results[name] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"
    return results


def main(argv: list[str]) -> int:
    from dlbench.frameworks import get_backend

    framework, variant = argv[1], argv[2]
    only = argv[3].split(",") if len(argv) > 3 else None  # the named checks only (CI's budget)
    backend = get_backend(framework)
    results = run_all(backend, variant, only)
    if framework == "keras" and (only is None or "refuses_other_variants" in only):
        # a process runs Keras on one backend and must refuse the others, saying why
        from dlbench.gate.verify import verify_model

        other = next(v for v in backend.variants if v != variant)
        r = verify_model(backend, "sae", other)
        ok = r.verdict == "unsupported" and f"KERAS_BACKEND={other[6:]}" in r.reason
        results["refuses_other_variants"] = "ok" if ok else f"{other}: {r.verdict}: {r.reason}"
    print("RESULT " + json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
