"""The gate must catch a deliberately broken backend: each planted bug below fails it."""

import numpy as np
import pytest
import torch

from dlbench.frameworks.torch import Builder, TorchBackend, _same
from dlbench.models import layers as L
from dlbench.verify import TOLERANCES, verify_model
from tests.conftest import requires

pytestmark = requires("torch")


class TransposedKernel(Builder):
    def make_conv2d(self, layer, shape):
        m = super().make_conv2d(layer, shape)
        t = self.params[f"{layer.name}.weight"][0]
        self.params[f"{layer.name}.weight"] = (t, lambda a: np.swapaxes(a, 2, 3), lambda a: np.swapaxes(a, 2, 3))
        return m


class DroppedBias(Builder):
    def make_dense(self, layer, shape):
        m = torch.nn.Linear(shape[-1], layer.units, bias=False)
        self.params[f"{layer.name}.weight"] = (m.weight, lambda a: a.T, lambda a: a.T)
        self.linears[layer.name] = m
        return m


class WrongPadding(Builder):
    def make_conv2d(self, layer, shape):
        m = super().make_conv2d(layer, shape)
        if layer.padding:
            m.padding = (layer.padding - 1, layer.padding - 1)
        return m


class WrongRounding(Builder):
    def make_pool2d(self, layer: L.Pool2d, shape):
        m = super().make_pool2d(layer, shape)
        m.ceil_mode = False
        return m


class UntiedLinear(torch.nn.Module):
    """A decoder with its own copy of the encoder's weight (copied on first use, after loading)."""

    def __init__(self, encoder, units, register: bool):
        super().__init__()
        self.encoder, self.register, self.copied = [encoder], register, False
        self.bias = torch.nn.Parameter(torch.zeros(units))
        weight = torch.nn.Parameter(torch.empty_like(encoder.weight))
        if register:
            self.own = weight
        else:
            self.hidden = [weight]

    def forward(self, x):
        w = self.own if self.register else self.hidden[0]
        if not self.copied:
            with torch.no_grad():
                w.copy_(self.encoder[0].weight)
            self.copied = True
        return torch.nn.functional.linear(x, w.t(), self.bias)


class Untied(Builder):
    register = True

    def make_tieddense(self, layer, shape):
        m = UntiedLinear(self.linears[layer.tied_to], layer.units, self.register)
        self.params[f"{layer.name}.bias"] = (m.bias, _same, _same)
        return m


class UntiedSameCount(Untied):
    """Untied, and hidden from the parameter count: only the gradient check can tell."""

    register = False


def broken(builder):
    return type("Broken", (TorchBackend,), {"builder_class": builder})()


@pytest.mark.parametrize(("builder", "model", "caught_by"), [
    (TransposedKernel, "lenet", "forward"),
    (DroppedBias, "fcn-r", "parameter count"),
    (WrongPadding, "alexnet-r", "Error"),
    (WrongRounding, "alexnet-r", "Error"),
    (Untied, "sae:phase=pretrain1", "parameter count"),
    (UntiedSameCount, "sae:phase=pretrain1", "gradient"),
])
def test_gate_catches(builder, model, caught_by):
    result = verify_model(broken(builder), model)
    assert result.verdict == "fail"
    assert caught_by in result.reason, result.reason


def test_untied_copy_still_matches_forward():
    """Untying does not change the forward pass at the start: only the gradient check finds it."""
    result = verify_model(broken(UntiedSameCount), "sae:phase=pretrain1")
    assert result.checks.get("forward") is True
    assert result.checks.get("gradient") is False


def test_unbroken_backend_passes_same_models():
    for model in ("lenet", "fcn-r", "alexnet-r", "sae:phase=pretrain1"):
        assert verify_model(TorchBackend(), model).verdict == "pass"


class ScaledGradient(TorchBackend):
    """Every gradient 1% too large: the forward and the loss are right, only the gradient check can tell."""

    def loss_and_grads(self, model, batch):
        loss, grads = super().loss_and_grads(model, batch)
        return loss, {k: g * 1.01 for k, g in grads.items()}


def test_gate_replaces_a_direction_whose_finite_difference_is_not_smooth():
    """resnet-56's part 10 (the first stride-2 block, built alone) has seeded directions along which the
    float64 reference's central difference changes with the step: before, torch and JAX both failed
    with gradient error 3.0e-3, agreeing with each other to 1e-7."""
    result = verify_model(TorchBackend(), "resnet-56#10")
    assert result.verdict == "pass", result.reason
    assert result.kinked_directions > 0


@pytest.mark.parametrize("model", ["lenet", "resnet-56#10"])
def test_gate_still_catches_a_one_percent_gradient_error_where_directions_are_replaced(model):
    result = verify_model(ScaledGradient(), model)
    assert result.verdict == "fail"
    assert "gradient error" in result.reason, result.reason


class OverflowedGradient(TorchBackend):
    """One gradient entry overflowed to inf (a float16 backward without enough loss scaling)."""

    def loss_and_grads(self, model, batch):
        loss, grads = super().loss_and_grads(model, batch)
        first = next(iter(grads))
        grads[first] = grads[first].copy()
        grads[first].flat[0] = np.inf
        return loss, grads


def test_gate_fails_a_non_finite_gradient():
    """The gradient check's floor is relative to the gradient's norm: an infinite norm made every
    direction's error inf/inf = NaN, which no comparison fails, and the gate passed."""
    result = verify_model(OverflowedGradient(), "lenet")
    assert result.verdict == "fail" and "non-finite gradient" in result.reason, result.reason


# --- bugs just over the forward and the loss bounds --------------------------------------------------------
def _reference(model: str, train: bool):
    """The gate's own reference output (and loss, in training mode) for ``model``: same spec, weights, batch."""
    from dlbench import reference
    from dlbench.data.synthetic import make_batch
    from dlbench.models import verify_spec
    from dlbench.verify import VERIFY_BATCH
    from dlbench.weights import init_weights

    spec = verify_spec(model).without_dropout()
    weights, batch = init_weights(spec, 0, mode="verify"), make_batch(spec, VERIFY_BATCH, 0)
    out, marks = reference.forward(spec, weights, batch, train=train)
    return spec, out, (reference.loss_value(spec, out, batch, marks) if train else None)


class ForwardOff(TorchBackend):
    """Its forward is the reference's plus ``times`` x the precision's forward bound, in a fixed direction:
    a relative error of exactly ``times * TOLERANCES[precision].forward``."""

    times = 1.0

    def forward(self, model, batch):
        from dlbench.verify import TOLERANCES

        _, ref, _ = _reference(model.spec.name, train=False)
        direction = np.random.default_rng(7).standard_normal(ref.shape)
        off = ref + direction * (self.times * TOLERANCES[self.precision].forward * np.linalg.norm(ref)
                                 / np.linalg.norm(direction))
        return lambda: torch.from_numpy(off)


class LossOff(TorchBackend):
    """Its training loss is the reference's plus ``times`` x what the gate allows at this precision."""

    times = 1.0

    def loss_and_grads(self, model, batch):
        from dlbench.verify import TOLERANCES, loss_allowed

        _, grads = super().loss_and_grads(model, batch)
        spec, out, loss = _reference(model.spec.name, train=True)
        return loss + self.times * loss_allowed(spec, TOLERANCES[self.precision], out, loss), grads


def _planted(cls, times: float):
    return type(cls.__name__, (cls,), {"times": times})()


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_forward_just_over_its_bound_fails_and_just_under_passes(precision):
    """The only planted forward bug was 3,900x the fp32 bound: multiplying the bound by 100 failed no test.
    Now a forward 1.5x its bound fails the gate, at fp32 and at bf16, and one at 0.5x passes it."""
    over = verify_model(_planted(ForwardOff, 1.5), "lenet", precision=precision)
    assert over.verdict == "fail" and not over.checks["forward"], over.reason
    assert over.forward_error == pytest.approx(1.5 * TOLERANCES[precision].forward, rel=1e-3)
    under = verify_model(_planted(ForwardOff, 0.5), "lenet", precision=precision)
    assert under.checks["forward"], under.reason


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_loss_just_over_its_bound_fails_and_just_under_passes(precision):
    over = verify_model(_planted(LossOff, 1.5), "lenet", precision=precision)
    assert over.verdict == "fail" and not over.checks["loss"] and over.checks["forward"], over.reason
    under = verify_model(_planted(LossOff, 0.5), "lenet", precision=precision)
    assert under.checks["loss"], under.reason
