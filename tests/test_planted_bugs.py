"""The gate must catch a deliberately broken backend: each planted bug below fails it."""

import numpy as np
import pytest
import torch

from dlbench.frameworks.torch import Builder, TorchBackend, _same
from dlbench.models import layers as L
from dlbench.verify import verify_model
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
