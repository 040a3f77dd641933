"""The gate must catch a deliberately broken backend: each planted bug below fails it."""

import numpy as np
import pytest
import torch

from dlbench.frameworks.torch.backend import Builder, TorchBackend, _same
from dlbench.gate.verify import verify_model
from dlbench.models import layers as L
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
    from dlbench.data.synthetic import make_batch
    from dlbench.gate import reference
    from dlbench.gate.verify import VERIFY_BATCH
    from dlbench.models import verify_spec
    from dlbench.models.weights import init_weights

    spec = verify_spec(model).without_dropout()
    weights, batch = init_weights(spec, 0, mode="verify"), make_batch(spec, VERIFY_BATCH, 0)
    out, marks = reference.forward(spec, weights, batch, train=train)
    return spec, out, (reference.loss_value(spec, out, batch, marks) if train else None)


class ForwardOff(TorchBackend):
    """Its forward is the reference's moved in a fixed direction by a relative error of exactly ``error``: a fixed
    number, not one read from the tolerance table, so a loosened table lets the bug through and fails the test."""

    error = 0.0

    def forward(self, model, batch):
        _, ref, _ = _reference(model.spec.name, train=False)
        direction = np.random.default_rng(7).standard_normal(ref.shape)
        off = ref + direction * (self.error * np.linalg.norm(ref) / np.linalg.norm(direction))
        return lambda: torch.from_numpy(off)


class LossOff(TorchBackend):
    """Its training loss is the reference's times ``1 + error`` (a fixed relative error), its gradients its own."""

    error = 0.0

    def loss_and_grads(self, model, batch):
        _, grads = super().loss_and_grads(model, batch)
        _, _, loss = _reference(model.spec.name, train=True)
        return loss * (1 + self.error), grads


def _planted(cls, error: float):
    return type(cls.__name__, (cls,), {"error": error})()


@pytest.mark.parametrize(("precision", "over", "under"), [
    ("fp32", 1.5e-4, 0.5e-4),  # the bound: 1e-4
    ("bf16", 3e-2, 1e-2),  # 2e-2
    ("int8", 7.5e-2, 2.5e-2),  # 5e-2
])
def test_a_forward_just_over_its_bound_fails_and_just_under_passes(precision, over, under):
    """The only planted forward bug was 3,900x the fp32 bound: multiplying the bound by 100 failed no test. Then
    the planted errors were sized from the live bound, so int8's bound x10 still failed none. Now a forward error
    of a fixed size 1.5x the documented bound (docs/precision.md) fails the gate, and one of 0.5x passes it."""
    bad = verify_model(_planted(ForwardOff, over), "lenet", precision=precision)
    assert bad.verdict == "fail" and not bad.checks["forward"], bad.reason
    assert bad.forward_error == pytest.approx(over, rel=1e-3)
    good = verify_model(_planted(ForwardOff, under), "lenet", precision=precision)
    assert good.checks["forward"], good.reason


@pytest.mark.parametrize(("precision", "over", "under"), [
    ("fp32", 1.5e-4, 0.5e-4),  # the bound: 1e-4 of the loss
    # LeNet's loss 2.54 may move 0.053 (2.1%): as far as a 2e-2 forward error moves its logits (loss_allowed)
    ("bf16", 3e-2, 1e-2),
])
def test_a_loss_just_over_its_bound_fails_and_just_under_passes(precision, over, under):
    bad = verify_model(_planted(LossOff, over), "lenet", precision=precision)
    assert bad.verdict == "fail" and not bad.checks["loss"] and bad.checks["forward"], bad.reason
    good = verify_model(_planted(LossOff, under), "lenet", precision=precision)
    assert good.checks["loss"], good.reason


class NegatedGradient(TorchBackend):
    """Every gradient with its sign flipped (a descent that climbs): the forward and the loss are right."""

    def loss_and_grads(self, model, batch):
        loss, grads = super().loss_and_grads(model, batch)
        return loss, {k: -g for k, g in grads.items()}


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_a_negated_gradient_fails_the_gate_at_a_reduced_precision(precision):
    """The gradient bounds at a reduced precision are wide (bf16 1e-1, fp16 5e-2), and no planted bug tested
    them: the bf16 bound x10 failed no test. A gradient of the wrong sign is a gradient error of 0.46 on LeNet
    at either precision (along a random direction the error is floored at 1% of the gradient's norm, so it is
    not 2): it must fail, and a bound loosened to 1 lets it through."""
    result = verify_model(NegatedGradient(), "lenet", precision=precision)
    assert result.verdict == "fail" and result.checks["forward"] and result.checks["loss"], result.reason
    assert not result.checks["gradient"] and "gradient error" in result.reason, result.reason


class AttentionGradientOff(TorchBackend):
    """A wrong backward through attention alone: the gradients of the attention layers' weights 5% too large,
    every other gradient, the forward and the loss right."""

    def loss_and_grads(self, model, batch):
        loss, grads = super().loss_and_grads(model, batch)
        assert any(".attn." in k for k in grads), sorted(grads)  # the plant has something to act on
        return loss, {k: g * 1.05 if ".attn." in k else g for k, g in grads.items()}


#: transformer-shaped models small enough to gate in seconds: causal (GPT-2's blocks) and padded (BERT's)
TINY_TRANSFORMERS = ["gpt2:layers=2:dim=32:heads=2:vocab=64:seq_len=16",
                     "bert-base:layers=2:dim=32:heads=2:vocab=64:seq_len=16"]


@pytest.mark.parametrize("model", TINY_TRANSFORMERS)
def test_gate_catches_a_gradient_bug_inside_attention(model):
    """No test planted a gradient bug in a model with attention, so a gate that ignored the gradient verdict for
    attention models passed every test. The attention layers' gradients 5% off must fail the gradient check."""
    result = verify_model(AttentionGradientOff(), model)
    assert result.verdict == "fail" and result.checks["forward"] and result.checks["loss"], result.reason
    assert result.checks["gradient"] is False and "gradient error" in result.reason, result.reason
    assert verify_model(TorchBackend(), model).verdict == "pass"  # the unbroken backend passes the same model
