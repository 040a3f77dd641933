"""The gate's update check (f) and its float64 reference: planted optimiser bugs fail it, the reference
steps are the textbook ones."""

import math

import numpy as np
import pytest

from dlbench.frameworks.base import OptimizerSpec
from dlbench.gate import chunked, reference_optim
from dlbench.gate.verify_update import GATE_OPTIMIZERS, gate_optimizer, step_error, update_tolerance
from tests.conftest import requires


def _one(x: float) -> dict[str, np.ndarray]:
    return {"w": np.array([x])}


def test_reference_sgd_momentum_is_torchs_form():
    opt = OptimizerSpec(lr=0.1, momentum=0.9)
    p, s = reference_optim.step(_one(1.0), _one(2.0), reference_optim.State(), opt)
    assert p["w"][0] == pytest.approx(1.0 - 0.1 * 2.0)  # the first buffer is the gradient itself
    p, s = reference_optim.step(p, _one(1.0), s, opt)
    assert p["w"][0] == pytest.approx(0.8 - 0.1 * (0.9 * 2.0 + 1.0))


def test_reference_adamw_bias_correction_and_decoupled_decay():
    opt = OptimizerSpec(name="adamw", lr=0.01, betas=(0.9, 0.999), eps=0.0, weight_decay=0.5)
    p, s = reference_optim.step(_one(2.0), _one(-3.0), reference_optim.State(), opt)
    # step 1: m_hat = g, v_hat = g^2, so the Adam step is sign(g); the decay is lr * wd * p, not in g
    assert p["w"][0] == pytest.approx(2.0 - 0.01 * 0.5 * 2.0 + 0.01)
    g2 = 1.0
    m = 0.9 * 0.1 * -3.0 + 0.1 * g2
    v = 0.999 * 0.001 * 9.0 + 0.001 * g2 ** 2
    m_hat, v_hat = m / (1 - 0.9 ** 2), v / (1 - 0.999 ** 2)
    q, _ = reference_optim.step(p, _one(g2), s, opt)
    assert q["w"][0] == pytest.approx(p["w"][0] * (1 - 0.005) - 0.01 * m_hat / math.sqrt(v_hat))


def test_reference_epsilon_forms_differ_only_by_the_corrected_epsilon():
    """Kingma & Ba's efficient form is the corrected form with epsilon * sqrt(1 - b2^t)."""
    opt = OptimizerSpec(name="adamw", lr=0.1, betas=(0.9, 0.999), eps=1e-3)
    g = {"w": np.array([1e-3, -2e-3, 0.5])}
    p0 = {"w": np.zeros(3)}
    hat, _ = reference_optim.adamw(p0, g, reference_optim.State(), opt, "hat")
    scaled = OptimizerSpec(name="adamw", lr=0.1, betas=(0.9, 0.999), eps=1e-3 / math.sqrt(1 - 0.999))
    corrected, _ = reference_optim.adamw(p0, g, reference_optim.State(), scaled, "corrected")
    np.testing.assert_allclose(hat["w"], corrected["w"], rtol=1e-12)
    with pytest.raises(ValueError, match="epsilon form"):
        reference_optim.adamw(p0, g, reference_optim.State(), opt, "inside")


def test_the_reference_steps_slice_by_slice_are_the_whole_array_formulas_bit_for_bit():
    """The reference works a slice at a time (gate/chunked.py); over several slices, with a transposed
    gradient (a backend's layout) and a frozen parameter, a step is the textbook formula on whole arrays."""
    rng = np.random.default_rng(3)
    n = chunked.CHUNK * 2 + 5
    p = rng.standard_normal((n // 5, 5)).astype(np.float32)
    g1, g2 = (np.asarray(rng.standard_normal((5, n // 5)).astype(np.float32)).T for _ in range(2))
    params, frozen = {"w": p, "f": np.ones(3, np.float32)}, np.ones(3)
    sgd = OptimizerSpec(lr=0.1, momentum=0.9)
    after, state = reference_optim.step(params, {"w": g1}, reference_optim.State(), sgd)
    after, state = reference_optim.step(after, {"w": g2}, state, sgd)
    buf = 0.9 * g1.astype(np.float64) + g2
    assert np.array_equal(after["w"], p.astype(np.float64) - 0.1 * g1.astype(np.float64) - 0.1 * buf)
    assert np.array_equal(after["f"], frozen) and np.array_equal(state.buf["w"], buf)
    adamw = OptimizerSpec(name="adamw", lr=0.01, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.5)
    for form in reference_optim.EPS_FORMS:
        after, state = reference_optim.adamw(params, {"w": g1}, reference_optim.State(), adamw, form)
        m = 0.9 * 0.0 + (1.0 - 0.9) * g1.astype(np.float64)
        v = 0.999 * 0.0 + (1.0 - 0.999) * g1.astype(np.float64) * g1
        c1, c2 = 1.0 - 0.9, 1.0 - 0.999
        step = ((m / c1) / (np.sqrt(v / c2) + 1e-6) if form == "corrected"
                else math.sqrt(c2) / c1 * m / (np.sqrt(v) + 1e-6))
        p64 = p.astype(np.float64)
        assert np.array_equal(after["w"], p64 - 0.01 * 0.5 * p64 - 0.01 * step), form
        assert np.array_equal(state.m["w"], m) and np.array_equal(state.v["w"], v)


def test_slice_by_slice_sums_are_the_whole_arrays_sums():
    rng = np.random.default_rng(4)
    a = rng.standard_normal((3, chunked.CHUNK + 7)).astype(np.float32)
    b = rng.standard_normal(a.shape[::-1]).T
    assert chunked.squared_distance(a, b) == pytest.approx(float(((a.astype(np.float64) - b) ** 2).sum()), rel=1e-12)
    assert chunked.squared_distance(a) == pytest.approx(float((a.astype(np.float64) ** 2).sum()), rel=1e-12)
    assert chunked.dot(a, b) == pytest.approx(float((a.astype(np.float64) * b).sum()), rel=1e-10)
    empty = np.zeros((0, 4), np.float32)
    assert chunked.squared_distance(empty) == 0.0
    assert chunked.elementwise(lambda x, y: (x + y,), empty, None)[0].shape == (0, 4)


def test_gate_learning_rates_move_the_parameters_by_one_percent():
    params = {"a": np.full(100, 0.05), "frozen": np.ones(3)}
    grads = {"a": np.full(100, 0.02)}
    for base in GATE_OPTIMIZERS:
        opt = gate_optimizer(base, params, grads)
        after, _ = reference_optim.step(params, grads, reference_optim.State(), opt)
        moved = np.linalg.norm(after["a"] - params["a"]) / np.linalg.norm(params["a"])
        assert moved == pytest.approx(0.01, rel=0.05), (opt.name, moved)  # AdamW: + lr wd |p| (2.5%)
        assert np.array_equal(after["frozen"], params["frozen"])


def test_step_error_counts_a_frozen_parameter_that_moved_and_names_the_worst():
    before = {"a": np.zeros(4), "b": np.zeros(4)}
    expected = {"a": np.ones(4), "b": np.zeros(4)}
    assert step_error(expected, expected, before) == (0.0, "a")
    err, where = step_error({"a": np.ones(4), "b": np.full(4, 0.1)}, expected, before)
    assert where == "b" and err == pytest.approx(0.1)
    assert step_error({"a": np.full(4, np.nan), "b": np.zeros(4)}, expected, before)[0] == math.inf


def test_update_tolerance_applies_where_parameters_are_float32():
    assert update_tolerance("fp32", 1e-3) == 1e-3
    assert update_tolerance("amp-bf16", 1e-1) == 1e-1
    assert update_tolerance("bf16", 1e-1) is None and update_tolerance("int8", math.inf) is None


# --- planted optimiser bugs in the torch backend ------------------------------------------------------
torch_only = requires("torch")


def _planted(make):
    from dlbench.frameworks.torch.backend import TorchBackend

    class Planted(TorchBackend):
        @staticmethod
        def optimizer(params, opt):
            return make(params, opt) or TorchBackend.optimizer(params, opt)
    return Planted()


def _adamw_without_bias_correction(params, opt):
    """BERT's original AdamWeightDecayOptimizer (and GluonNLP's BERTAdam): no bias correction."""
    import torch

    class NoCorrection(torch.optim.Optimizer):
        def __init__(self, params):
            super().__init__(params, {})

        @torch.no_grad()
        def step(self):
            b1, b2 = opt.betas
            for group in self.param_groups:
                for p in group["params"]:
                    st = self.state[p]
                    if not st:
                        st["m"], st["v"] = torch.zeros_like(p), torch.zeros_like(p)
                    st["m"].mul_(b1).add_(p.grad, alpha=1 - b1)
                    st["v"].mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                    p.mul_(1 - opt.lr * opt.weight_decay)
                    p.sub_(opt.lr * st["m"] / (st["v"].sqrt() + opt.eps))
    return NoCorrection(params) if opt.name == "adamw" else None


def _adam_with_coupled_decay(params, opt):
    """``torch.optim.Adam(weight_decay=...)``: L2 added to the gradient, not decoupled."""
    import torch

    if opt.name == "adamw":
        return torch.optim.Adam(params, lr=opt.lr, betas=opt.betas, eps=opt.eps, weight_decay=opt.weight_decay)
    return None


def _sgd_with_wrong_momentum(params, opt):
    import torch

    return torch.optim.SGD(params, lr=opt.lr, momentum=0.5) if opt.name == "sgd" else None


def _sgd_with_dampening(params, opt):
    """Momentum as an exponential average (``buf = m buf + (1 - m) g``), as some frameworks define it."""
    import torch

    return torch.optim.SGD(params, lr=opt.lr, momentum=opt.momentum, dampening=opt.momentum) \
        if opt.name == "sgd" else None


@torch_only
@pytest.mark.parametrize(("make", "caught"), [
    (_adamw_without_bias_correction, "adamw step 1"),
    (_adam_with_coupled_decay, "adamw step 1"),
    (_sgd_with_wrong_momentum, "sgd step 2"),
    (_sgd_with_dampening, "sgd step 2"),
])
def test_gate_catches_a_planted_optimiser_bug(make, caught):
    from dlbench.gate.verify import verify_model

    result = verify_model(_planted(make), "lenet")
    assert result.verdict == "fail" and result.checks["update"] is False, result.reason
    assert caught in result.reason and "update error" in result.reason, result.reason
    assert result.checks["forward"] and result.checks["gradient"], "only the update is wrong"


@torch_only
def test_gate_catches_a_wrong_epsilon_form():
    """torch's AdamW puts epsilon after the bias correction; declared as Kingma & Ba's form it fails."""
    from dlbench.frameworks.torch.backend import TorchBackend
    from dlbench.gate.verify import verify_model

    wrong = type("WrongForm", (TorchBackend,), {"adamw_eps": "hat"})()
    result = verify_model(wrong, "lenet")
    assert result.verdict == "fail" and "adamw step 1" in result.reason, result.reason


@torch_only
def test_gate_passes_the_unbroken_update_and_records_it():
    from dlbench.frameworks.torch.backend import TorchBackend
    from dlbench.gate.verify import verify_model

    result = verify_model(TorchBackend(), "sae:phase=pretrain1")  # frozen encoders must stay put
    assert result.verdict == "pass", result.reason
    assert set(result.update) == {"sgd", "adamw"} and result.update_error <= 1e-3
    assert all(len(r["errors"]) == 2 and r["lr"] > 0 for r in result.update.values())


@torch_only
def test_gate_skips_the_update_check_where_parameters_are_low_precision():
    from dlbench.frameworks.torch.backend import TorchBackend
    from dlbench.gate.verify import verify_model

    result = verify_model(TorchBackend(), "lenet", precision="bf16")
    assert result.update_error is None and "no update check" in result.update["not_applied"]


# --- every framework that trains, through ``dlbench verify`` (environment frameworks in their own) ------------
def _training_frameworks():
    from dlbench.frameworks import FRAMEWORKS
    from tests.conftest import requires_framework

    return [pytest.param(fw, marks=[requires_framework(fw), pytest.mark.xdist_group(f"gate-{fw}")])
            for fw, info in FRAMEWORKS.items() if "gradient" in info.closures]


#: the model of a framework that builds only Hugging Face's families (sae's otherwise)
UPDATE_MODEL = {"transformers": "gpt2"}


@pytest.mark.parametrize("framework", _training_frameworks())
def test_the_update_check_passes_in_every_training_framework(framework, shared_dir):
    """Both optimisers, two steps each, on the stacked autoencoder's last phase (a small MLP whose first
    layers are frozen: they must not move), in the framework's first variant, through ``dlbench verify``
    (the framework's session gate of tests/frameworks/test_equivalence.py, which runs this model: one
    gate process per framework, not two); Keras's other back ends and TensorFlow's XLA variant run it on
    LeNet in tests/frameworks/closure_checks.py. transformers builds only its families: gpt2."""
    from tests.frameworks.test_equivalence import gate_result

    result = gate_result(framework, UPDATE_MODEL.get(framework, "sae:phase=pretrain3"), shared_dir)
    assert result.verdict == "pass", result.reason
    assert set(result.update) == {"sgd", "adamw"}, result.update
    assert all(len(r["errors"]) == 2 and max(r["errors"]) <= 1e-3 for r in result.update.values()), result.update
