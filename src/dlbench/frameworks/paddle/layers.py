"""The transformer layers of the Paddle backend, as ``paddle.nn`` layers (imports paddle).

Attention is ``paddle.nn.functional.scaled_dot_product_attention`` (Paddle 3's SDPA, in its own
(N, T, heads, head_dim) layout, so no transposes; on the CPU it runs its ``math`` path, and for
grouped-query attention it repeats the key/value heads itself). SDPA ignores a mask when
``is_causal`` is set, so a padded causal batch passes the causal triangle and the padding in one
boolean mask, as the torch backend does. Rotary embeddings use cos/sin tables made once at build
for the model's length. ``nn.LayerNorm``, ``nn.GELU(approximate=...)`` and ``nn.Linear`` are
Paddle's own; RMSNorm is composed (``x * rsqrt(mean(x^2) + eps) * w``, as PaddleNLP's Llama does:
Paddle's fused ``rms_norm`` is a CUDA kernel). The tied LM head is a matmul with the embedding's
weight. Layers that take the batch's padding mask derive from :class:`TakesMask`.
"""

from __future__ import annotations

import numpy as np
import paddle
import paddle.nn.functional as F
from paddle import nn

from dlbench.models.layers import rope_angles


class TakesMask(nn.Layer):
    """A layer called as ``m(x, mask)`` (mask: float (N, T), 1 for valid steps, or None)."""


def run_masked(layers, x, mask):
    for m in layers:
        x = m(x, mask) if isinstance(m, TakesMask) else m(x)
    return x


class PositionEmbedding(nn.Layer):
    def __init__(self, max_len: int, dim: int):
        super().__init__()
        self.weight = self.create_parameter([max_len, dim])

    def forward(self, x):
        return x + self.weight[: x.shape[1]]


class SegmentEmbedding(nn.Layer):
    """BERT's token types, every token type 0: adds row 0."""

    def __init__(self, types: int, dim: int):
        super().__init__()
        self.weight = self.create_parameter([types, dim])

    def forward(self, x):
        return x + self.weight[0]


class RMSNorm(nn.Layer):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = self.create_parameter([dim], default_initializer=nn.initializer.Constant(1.0))

    def forward(self, x):
        return x * paddle.rsqrt((x * x).mean(axis=-1, keepdim=True) + self.eps) * self.weight


def rope_tables(length: int, head_dim: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin (length, 1, head_dim) for the (N, T, heads, head_dim) layout (:func:`rope_angles`)."""
    angles = rope_angles(length, head_dim, theta)[:, None, :]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def apply_rope(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = paddle.concat([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin


class Attention(TakesMask):
    def __init__(self, dim: int, heads: int, kv_heads: int, head_dim: int, causal: bool, rope_theta: float,
                 bias: bool, length: int):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim, self.causal = heads, kv_heads, head_dim, causal
        bias_attr = None if bias else False
        self.q = nn.Linear(dim, heads * head_dim, bias_attr=bias_attr)
        self.k = nn.Linear(dim, kv_heads * head_dim, bias_attr=bias_attr)
        self.v = nn.Linear(dim, kv_heads * head_dim, bias_attr=bias_attr)
        self.o = nn.Linear(heads * head_dim, dim, bias_attr=bias_attr)
        self.rope = bool(rope_theta)
        if self.rope:
            cos, sin = rope_tables(length, head_dim, rope_theta)
            self.register_buffer("cos", paddle.to_tensor(cos), persistable=False)
            self.register_buffer("sin", paddle.to_tensor(sin), persistable=False)

    def forward(self, x, mask=None):
        n, t = x.shape[0], x.shape[1]
        q = self.q(x).reshape([n, t, self.heads, self.head_dim])
        k = self.k(x).reshape([n, t, self.kv_heads, self.head_dim])
        v = self.v(x).reshape([n, t, self.kv_heads, self.head_dim])
        if self.rope:
            cos, sin = self.cos[:t].astype(q.dtype), self.sin[:t].astype(q.dtype)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        attn_mask, causal = None, self.causal
        if mask is not None:
            attn_mask = (mask > 0)[:, None, None, :]
            if causal:
                attn_mask = paddle.logical_and(attn_mask, paddle.tril(paddle.ones([t, t], dtype="bool")))
                causal = False
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=causal, training=self.training)
        return self.o(out.reshape([n, t, self.heads * self.head_dim]))


class SwiGLU(nn.Layer):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.gate = nn.Linear(dim, hidden, bias_attr=False)
        self.up = nn.Linear(dim, hidden, bias_attr=False)
        self.down = nn.Linear(hidden, dim, bias_attr=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class SkipBlock(TakesMask):
    """``post(x + body(x))``."""

    def __init__(self, body: list[nn.Layer], post: list[nn.Layer]):
        super().__init__()
        self.body, self.post = nn.LayerList(body), nn.LayerList(post)

    def forward(self, x, mask=None):
        return run_masked(self.post, x + run_masked(self.body, x, mask), mask)


class PatchEmbed(nn.Layer):
    def __init__(self, channels: int, dim: int, patch: int):
        super().__init__()
        self.proj = nn.Conv2D(channels, dim, patch, stride=patch)
        self.cls = self.create_parameter([dim])

    def forward(self, x):
        seq = self.proj(x).flatten(2).transpose([0, 2, 1])
        cls = self.cls.astype(seq.dtype).reshape([1, 1, -1]).expand([seq.shape[0], 1, seq.shape[2]])
        return paddle.concat([cls, seq], axis=1)


class TakeToken(nn.Layer):
    def __init__(self, index: int):
        super().__init__()
        self.index = index

    def forward(self, x):
        return x[:, self.index]


class TiedLMHead(nn.Layer):
    """Logits ``x @ E.T`` with the embedding's own weight (held in a list, so it is not registered twice)."""

    def __init__(self, embedding):
        super().__init__()
        self.embedding = [embedding]

    def forward(self, x):
        return paddle.matmul(x, self.embedding[0], transpose_y=True)
