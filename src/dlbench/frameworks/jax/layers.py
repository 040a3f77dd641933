"""The Flax NNX layers the JAX backend builds a spec from, where Flax has no module for the spec's
layer kind (or the layer needs the forward's context: mask, mode, dropout keys, marks). The standard
ones (``nnx.Conv``, ``nnx.Linear``, ``nnx.BatchNorm``, ...) are Flax's own, made by the backend's
:class:`~dlbench.frameworks.jax.backend.Builder`; the module docstring of
:mod:`dlbench.frameworks.jax.backend` says why NNX and how each layer computes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from dlbench.models import layers as L

# Flax before 0.12 has no nnx.List: a plain list attribute holding modules is a graph node there
_ModuleList = nnx.List if hasattr(nnx, "List") else list


class Frozen(nnx.Param):
    """A parameter held out of differentiation (the lower encoders in SAE pre-training).
    Still an ``nnx.Param``, so Flax's own parameter count includes it, as the spec's does."""


@dataclass
class Context:
    """What a forward pass needs besides the activations: mask, mode, dropout keys, marks."""

    mask: jax.Array | None = None
    train: bool = False
    rngs: nnx.Rngs | None = None
    marks: dict[str, jax.Array] = field(default_factory=dict)
    #: when a list, the output type of every computing layer is appended to it (precision_info)
    dtypes: list | None = None


class Op(nnx.Module):
    """A layer Flax has no module for (or one that needs the context); called as ``op(x, ctx)``."""

    def __call__(self, x: jax.Array, ctx: Context) -> jax.Array:  # pragma: no cover - abstract
        raise NotImplementedError


class Seq(Op):
    """Runs layers in order, giving each the arguments its kind takes."""

    def __init__(self, layers: list[nnx.Module]):
        self.layers = _ModuleList(layers)

    def __call__(self, x: jax.Array, ctx: Context) -> jax.Array:
        for m in self.layers:
            if isinstance(m, Op):
                x = m(x, ctx)
            elif isinstance(m, nnx.BatchNorm):
                x = m(x, use_running_average=not ctx.train)
            elif isinstance(m, nnx.Dropout):
                x = m(x, deterministic=not ctx.train, rngs=ctx.rngs)
            else:
                x = m(x)
            if ctx.dtypes is not None and isinstance(m, _COMPUTING):
                ctx.dtypes.append(x.dtype)
        return x


_ACTIVATIONS = {"relu": nnx.relu, "tanh": nnx.tanh, "sigmoid": nnx.sigmoid}


class Activation(Op):
    def __init__(self, fn: str):
        self.fn = fn

    def __call__(self, x, ctx):
        return _ACTIVATIONS[self.fn](x)


class Pool(Op):
    """Max or average pooling, NHWC. Ceil mode is the window clip of :func:`layers._pool_out`:
    extra high-side padding that never counts as an element (-inf for max; excluded from the
    divisor for average, which divides by the in-bounds count as the reference does)."""

    def __init__(self, layer: L.Pool2d, shape: tuple[int, ...]):
        _, h, w = shape
        k, s, p = layer.kernel, layer.stride, layer.padding
        _, oh, ow = layer.out_shape(shape)
        self.op, self.kernel, self.stride, self.padding = layer.op, k, s, p
        self.extra = (max(0, (oh - 1) * s + k - (h + 2 * p)), max(0, (ow - 1) * s + k - (w + 2 * p)))

    def __call__(self, x, ctx):
        k, s, p = (self.kernel,) * 2, (self.stride,) * 2, self.padding
        eh, ew = self.extra
        if self.op == "max":
            return nnx.max_pool(x, k, s, padding=((p, p + eh), (p, p + ew)))
        if eh == 0 and ew == 0:  # every window lies inside the padded input: divide by k*k
            return nnx.avg_pool(x, k, s, padding=((p, p), (p, p)), count_include_pad=True)
        if p:  # symmetric padding counts (count_include_pad), the ceil-mode overhang does not
            x = jnp.pad(x, ((0, 0), (p, p), (p, p), (0, 0)))
        return nnx.avg_pool(x, k, s, padding=((0, eh), (0, ew)), count_include_pad=False)


class GlobalAvgPool(Op):
    def __call__(self, x, ctx):
        return x.mean(axis=(1, 2))


class LRN(Op):
    """Cross-channel LRN over the last (channel) axis: ``x / (k + alpha/size * sum x^2) ** beta``."""

    def __init__(self, layer: L.LRN):
        self.size, self.alpha, self.beta, self.k = layer.size, layer.alpha, layer.beta, layer.k

    def __call__(self, x, ctx):
        pad = ((0, 0),) * (x.ndim - 1) + ((self.size // 2, (self.size - 1) // 2),)
        window = jax.lax.reduce_window(x * x, 0.0, jax.lax.add, (1,) * (x.ndim - 1) + (self.size,),
                                       (1,) * x.ndim, pad)
        return x / (self.k + self.alpha / self.size * window) ** self.beta


class Flatten(Op):
    def __call__(self, x, ctx):
        return x.reshape(x.shape[0], -1)


class MaskedMean(Op):
    def __call__(self, x, ctx):
        if ctx.mask is None:
            return x.mean(axis=1)
        mask = ctx.mask.astype(x.dtype)  # a float32 mask would promote a bf16 activation to float32
        return (x * mask[:, :, None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)


class Mark(Op):
    def __init__(self, name: str):
        self.name = name

    def __call__(self, x, ctx):
        ctx.marks[self.name] = x
        return x


class ZeroPadShortcut(Op):
    """ResNet option A, NHWC: subsample by the stride and zero-pad the channels."""

    def __init__(self, out_channels: int, stride: int):
        self.out_channels, self.stride = out_channels, stride

    def __call__(self, x, ctx):
        x = x[:, :: self.stride, :: self.stride, :]
        return jnp.pad(x, ((0, 0), (0, 0), (0, 0), (0, self.out_channels - x.shape[-1])))


class Residual(Op):
    def __init__(self, body: Seq, shortcut: Seq, relu: bool):
        self.body, self.shortcut, self.relu = body, shortcut, relu

    def __call__(self, x, ctx):
        out = self.body(x, ctx) + self.shortcut(x, ctx)
        return nnx.relu(out) if self.relu else out


class LSTMLayer(Op):
    """``nnx.RNN`` over an ``nnx.OptimizedLSTMCell`` (fused gates), batch-major, zero initial state."""

    def __init__(self, cell: nnx.OptimizedLSTMCell):
        self.units = cell.hidden_features
        self.rnn = nnx.RNN(cell, rngs=False)

    def __call__(self, x, ctx):
        # made like x: under the data-parallel worker's shard_map it then varies over the processes as
        # x does, and the scan's carry keeps one type (zeros made from a shape would be replicated)
        zeros = jnp.zeros_like(x, shape=(x.shape[0], self.units))
        return self.rnn(x, initial_carry=(zeros, zeros))  # carry is (c, h)


class TiedDense(Op):
    """Decoder sharing its encoder: ``y = x @ W_enc.T + b``; the encoder is a shared node of the graph."""

    def __init__(self, encoder: nnx.Linear, bias: jax.Array, trainable: bool):
        self.encoder = encoder
        self.bias = (nnx.Param if trainable else Frozen)(bias)

    def __call__(self, x, ctx):
        # computes in the activation's type, as the encoder's nnx.Linear (its ``dtype``) does
        return x @ self.encoder.kernel[...].T.astype(x.dtype) + self.bias[...].astype(x.dtype)


# --- transformer layers: sequences are (N, T, D); attention is jax.nn.dot_product_attention ---------
class PositionEmbedding(Op):
    def __init__(self, table: jax.Array):
        self.weight = nnx.Param(table)

    def __call__(self, x, ctx):
        return x + self.weight[...][: x.shape[1]].astype(x.dtype)


class SegmentEmbedding(Op):
    """BERT's token types, every token type 0: adds row 0."""

    def __init__(self, table: jax.Array):
        self.weight = nnx.Param(table)

    def __call__(self, x, ctx):
        return x + self.weight[...][0].astype(x.dtype)


class GELU(Op):
    def __init__(self, approximate: str):
        self.tanh = approximate == "tanh"

    def __call__(self, x, ctx):
        return jax.nn.gelu(x, approximate=self.tanh)


def _rope(x: jax.Array, theta: float) -> jax.Array:
    """Rotary embedding of (N, T, heads, hd), half-split pairs; the tables are constants of the trace."""
    t, hd = x.shape[1], x.shape[-1]
    angles = L.rope_angles(t, hd, theta)[None, :, None, :]
    cos, sin = jnp.asarray(np.cos(angles), x.dtype), jnp.asarray(np.sin(angles), x.dtype)
    half = hd // 2
    return x * cos + jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1) * sin


class Attention(Op):
    """Projections by ``nnx.Linear``, heads kept in JAX's (N, T, heads, hd) layout, and
    ``jax.nn.dot_product_attention`` (grouped-query heads natively; ``is_causal``; the padding mask
    as a boolean (N, 1, 1, T) mask over the keys)."""

    def __init__(self, q: nnx.Linear, k: nnx.Linear, v: nnx.Linear, o: nnx.Linear, layer: L.Attention,
                 dims: tuple[int, int, int]):
        self.q, self.k, self.v, self.o = q, k, v, o
        self.heads, self.kv_heads, self.head_dim = dims
        self.causal, self.rope_theta = layer.causal, layer.rope_theta

    def __call__(self, x, ctx):
        n, t, _ = x.shape
        q = self.q(x).reshape(n, t, self.heads, self.head_dim)
        k = self.k(x).reshape(n, t, self.kv_heads, self.head_dim)
        v = self.v(x).reshape(n, t, self.kv_heads, self.head_dim)
        if self.rope_theta:
            q, k = _rope(q, self.rope_theta), _rope(k, self.rope_theta)
        mask = None if ctx.mask is None else (ctx.mask > 0)[:, None, None, :]
        out = jax.nn.dot_product_attention(q, k, v, mask=mask, is_causal=self.causal)
        return self.o(out.reshape(n, t, self.heads * self.head_dim))


class SwiGLU(Op):
    def __init__(self, gate: nnx.Linear, up: nnx.Linear, down: nnx.Linear):
        self.gate, self.up, self.down = gate, up, down

    def __call__(self, x, ctx):
        return self.down(nnx.silu(self.gate(x)) * self.up(x))


class SkipBlock(Op):
    def __init__(self, body: Seq, post: Seq):
        self.body, self.post = body, post

    def __call__(self, x, ctx):
        return self.post(x + self.body(x, ctx), ctx)


class PatchEmbed(Op):
    """``nnx.Conv`` with stride = kernel = patch on the NHWC image, its positions row-major, the class token first."""

    def __init__(self, conv: nnx.Conv, cls: jax.Array):
        self.conv, self.cls = conv, nnx.Param(cls)

    def __call__(self, x, ctx):
        y = self.conv(x)
        seq = y.reshape(y.shape[0], -1, y.shape[-1])
        cls = jnp.broadcast_to(self.cls[...].astype(seq.dtype), (seq.shape[0], 1, seq.shape[-1]))
        return jnp.concatenate([cls, seq], axis=1)


class TakeToken(Op):
    def __init__(self, index: int):
        self.index = index

    def __call__(self, x, ctx):
        return x[:, self.index]


class TiedLMHead(Op):
    """Logits with the token embedding's own table: ``nnx.Embed.attend`` (``x @ E.T``)."""

    def __init__(self, embed: nnx.Embed):
        self.embed = embed

    def __call__(self, x, ctx):
        return self.embed.attend(x)


#: the layers whose output type is the network's compute type (they hold the dots and convolutions)
_COMPUTING = (nnx.Conv, nnx.Linear, LSTMLayer, TiedDense, Attention, SwiGLU, TiedLMHead, PatchEmbed)
