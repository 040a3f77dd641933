"""The transformer layers of the torch backend, as ``torch.nn`` modules (imports torch).

Attention is ``F.scaled_dot_product_attention`` (torch's fused kernels: flash attention for the
causal, maskless case; a boolean mask for padding, combined with the causal triangle when both
apply, since SDPA takes ``is_causal`` or a mask, not both); grouped-query attention passes
``enable_gqa=True`` so the key/value heads are not copied. Rotary embeddings use cos/sin tables
made once at build for the model's length, in float32, cast to the activation's type per call
(as Hugging Face's Llama does). ``nn.LayerNorm``, ``nn.RMSNorm``, ``nn.GELU(approximate=...)`` and
``nn.Linear`` are torch's own; the tied LM head is ``F.linear`` with the embedding's weight.
Modules that take the batch's padding mask derive from :class:`TakesMask`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dlbench.models.layers import rope_angles


class TakesMask(nn.Module):
    """A module called as ``m(x, mask)`` (mask: float (N, T), 1 for valid steps, or None)."""


def run_masked(modules, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    for m in modules:
        x = m(x, mask) if isinstance(m, TakesMask) else m(x)
    return x


class PositionEmbedding(nn.Module):
    def __init__(self, max_len: int, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(max_len, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.weight[: x.shape[1]]


class SegmentEmbedding(nn.Module):
    """BERT's token types, every token type 0: adds row 0."""

    def __init__(self, types: int, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(types, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.weight[0]


def rope_tables(length: int, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin (length, head_dim), float32, from :func:`dlbench.models.layers.rope_angles`."""
    angles = torch.from_numpy(rope_angles(length, head_dim, theta))
    return angles.cos().float(), angles.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class Attention(TakesMask):
    def __init__(self, dim: int, heads: int, kv_heads: int, head_dim: int, causal: bool, rope_theta: float,
                 bias: bool, length: int):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim, self.causal = heads, kv_heads, head_dim, causal
        self.q = nn.Linear(dim, heads * head_dim, bias=bias)
        self.k = nn.Linear(dim, kv_heads * head_dim, bias=bias)
        self.v = nn.Linear(dim, kv_heads * head_dim, bias=bias)
        self.o = nn.Linear(heads * head_dim, dim, bias=bias)
        self.rope = bool(rope_theta)
        if self.rope:
            cos, sin = rope_tables(length, head_dim, rope_theta)
            self.register_buffer("cos", cos, persistent=False)
            self.register_buffer("sin", sin, persistent=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        n, t, _ = x.shape
        q = self.q(x).view(n, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k(x).view(n, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v(x).view(n, t, self.kv_heads, self.head_dim).transpose(1, 2)
        if self.rope:
            cos, sin = self.cos[:t].to(q.dtype), self.sin[:t].to(q.dtype)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        attn_mask, causal = None, self.causal
        if mask is not None:
            attn_mask = (mask > 0)[:, None, None, :]
            if causal:
                attn_mask = attn_mask & torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
                causal = False
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=causal,
                                             enable_gqa=self.kv_heads != self.heads)
        return self.o(out.transpose(1, 2).reshape(n, t, self.heads * self.head_dim))


class SwiGLU(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class SkipBlock(TakesMask):
    """``post(x + body(x))``."""

    def __init__(self, body: list[nn.Module], post: list[nn.Module]):
        super().__init__()
        self.body, self.post = nn.ModuleList(body), nn.ModuleList(post)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return run_masked(self.post, x + run_masked(self.body, x, mask), mask)


class PatchEmbed(nn.Module):
    def __init__(self, channels: int, dim: int, patch: int):
        super().__init__()
        self.proj = nn.Conv2d(channels, dim, patch, stride=patch)
        self.cls = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        seq = self.proj(x).flatten(2).transpose(1, 2)
        return torch.cat([self.cls.to(seq.dtype).expand(seq.shape[0], 1, -1), seq], dim=1)


class TakeToken(nn.Module):
    def __init__(self, index: int):
        super().__init__()
        self.index = index

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, self.index]


class TiedLMHead(nn.Module):
    """Logits ``x @ E.T`` with the embedding's own weight (held in a list, so it is not registered twice)."""

    def __init__(self, embedding: nn.Parameter):
        super().__init__()
        self.embedding = [embedding]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.embedding[0])
