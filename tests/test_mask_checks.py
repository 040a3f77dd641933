"""The gate's attention-mask checks (dlbench.gate.mask_checks) fail a backend that leaks, pass one that does not."""

import pytest
import torch

from dlbench.frameworks.torch import layers as TL
from dlbench.frameworks.torch.backend import Builder, TorchBackend
from dlbench.gate.mask_checks import applies
from dlbench.gate.verify import verify_model
from dlbench.models import verify_spec
from tests.conftest import requires

pytestmark = requires("torch")


class PeekingAttention(TL.Attention):
    """Causal, except that every position also sees the token after it (a band one step too wide)."""

    def forward(self, x, mask=None):
        n, t, _ = x.shape
        q = self.q(x).view(n, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k(x).view(n, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v(x).view(n, t, self.kv_heads, self.head_dim).transpose(1, 2)
        if self.rope:
            q, k = TL.apply_rope(q, self.cos[:t], self.sin[:t]), TL.apply_rope(k, self.cos[:t], self.sin[:t])
        band = torch.ones(t, t, dtype=torch.bool).tril(diagonal=1)
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=band,
                                                               enable_gqa=self.kv_heads != self.heads)
        return self.o(out.transpose(1, 2).reshape(n, t, self.heads * self.head_dim))


class UnmaskedAttention(TL.Attention):
    """Ignores the batch's padding mask: padded keys are attended to."""

    def forward(self, x, mask=None):
        return super().forward(x, None)


def _planted(attention_class):
    class Planted(Builder):
        def make_attention(self, layer, shape):
            m = super().make_attention(layer, shape)
            m.__class__ = attention_class
            return m
    return type("Planted", (TorchBackend,), {"builder_class": Planted})()


@pytest.mark.parametrize("model", ["gpt2", "smollm2-135m"])
def test_a_position_that_sees_a_later_token_fails(model):
    result = verify_model(_planted(PeekingAttention), model)
    assert result.verdict == "fail"
    assert result.checks["causal_mask"] is False
    assert "causal mask leaks" in result.reason, result.reason


def test_attending_to_padding_fails():
    result = verify_model(_planted(UnmaskedAttention), "bert-base")
    assert result.verdict == "fail"
    assert result.checks["padding_mask"] is False
    assert "padding mask leaks" in result.reason, result.reason


@pytest.mark.parametrize(("model", "checks"), [("gpt2", {"causal_mask"}), ("smollm2-135m", {"causal_mask"}),
                                               ("bert-base", {"padding_mask"}), ("vit-b16", set())])
def test_sound_backend_passes_the_checks_that_apply(model, checks):
    assert {k for k, v in applies(verify_spec(model)).items() if v} == checks
    result = verify_model(TorchBackend(), model)
    assert result.verdict == "pass", result.reason
    assert {k for k in result.checks if k.endswith("_mask")} == checks
    assert all(result.checks[k] for k in checks)
    assert all(v == 0.0 or v < 1e-6 for v in result.mask_changes.values()), result.mask_changes
