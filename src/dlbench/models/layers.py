"""Framework-neutral layer descriptions.

A layer is plain, frozen data: it knows how it changes the shape of one sample,
which parameters it owns (name -> shape, in dlbench's canonical layout), and how
many floating-point operations its forward pass costs (a multiply-add counts 2).
Every backend builds the same network from these, and :mod:`dlbench.gate.reference`
computes it in NumPy. Shapes never include the batch dimension.

Canonical parameter layouts (every backend converts to and from these):

* ``Conv2d.weight``: ``(out_channels, in_channels // groups, kh, kw)`` (OIHW), ``bias``: ``(out,)``
* ``Dense.weight``: ``(in_features, out_features)`` so that ``y = x @ W + b``
* ``TiedDense``: no weight of its own; uses ``W(tied_to).T``; own ``bias``
* ``BatchNorm.gamma``/``beta``: ``(channels,)``; running statistics are state, not parameters
* ``Embedding.weight``: ``(vocab, dim)``
* ``LSTM.w_x``: ``(in, 4H)``, ``w_h``: ``(H, 4H)``, ``b``: ``(4H,)``; gate order i, f, g, o
  (one bias per gate; frameworks with two load it into one and zeros into the other)
* ``Attention.wq``/``wk``/``wv``: ``(D, heads * head_dim)`` (``kv_heads`` for k and v), ``wo``:
  ``(heads * head_dim, D)``, so ``q = x @ wq + bq``; head ``h`` is columns ``h*hd:(h+1)*hd``
* ``SwiGLU.w_gate``/``w_up``: ``(D, hidden)``, ``w_down``: ``(hidden, D)``
* ``LayerNorm.weight``/``bias``, ``RMSNorm.weight``: ``(D,)``; ``PositionEmbedding.weight``: ``(max_len, D)``
* ``PatchEmbed.weight``: OIHW like a convolution, ``bias`` and ``cls``: ``(dim,)``
* ``LMHead``: no weight of its own; uses ``W(tied_to)`` (an ``Embedding``'s ``(vocab, D)``) as ``x @ W.T``
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

Shape = tuple[int, ...]


def _pool_out(size: int, kernel: int, stride: int, padding: int, ceil_mode: bool) -> int:
    """Output length of a pooling window sweep, Caffe/PyTorch rules.

    In ceil mode the last window may start in the padding only if it starts inside the
    input (or left padding); that is the clip both Caffe and PyTorch apply.
    """
    span = size + 2 * padding - kernel
    out = (math.ceil(span / stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + padding:
        out -= 1
    return out


def _conv_out(size: int, kernel: int, stride: int, padding: int) -> int:
    return (size + 2 * padding - kernel) // stride + 1


@dataclass(frozen=True)
class Layer:
    """Base class: a layer with no parameters that keeps the shape."""

    def out_shape(self, shape: Shape) -> Shape:
        return shape

    def params(self, shape: Shape) -> dict[str, Shape]:
        return {}

    def flops(self, shape: Shape) -> int:
        return 0

    @property
    def kind(self) -> str:
        return type(self).__name__


@dataclass(frozen=True)
class Conv2d(Layer):
    name: str
    out_channels: int
    kernel: int
    stride: int = 1
    padding: int = 0
    groups: int = 1
    bias: bool = True
    init: Literal["he", "glorot"] = "he"

    def out_shape(self, shape: Shape) -> Shape:
        c, h, w = shape
        if c % self.groups or self.out_channels % self.groups:
            raise ValueError(f"{self.name}: channels {c}->{self.out_channels} not divisible by groups {self.groups}")
        oh, ow = (_conv_out(s, self.kernel, self.stride, self.padding) for s in (h, w))
        if oh < 1 or ow < 1:
            raise ValueError(f"{self.name}: input {h}x{w} too small for kernel {self.kernel}")
        return (self.out_channels, oh, ow)

    def params(self, shape: Shape) -> dict[str, Shape]:
        c = shape[0]
        p = {f"{self.name}.weight": (self.out_channels, c // self.groups, self.kernel, self.kernel)}
        if self.bias:
            p[f"{self.name}.bias"] = (self.out_channels,)
        return p

    def flops(self, shape: Shape) -> int:
        _, oh, ow = self.out_shape(shape)
        return 2 * self.out_channels * (shape[0] // self.groups) * self.kernel**2 * oh * ow


@dataclass(frozen=True)
class Pool2d(Layer):
    """Max or average pooling. Average divides by the number of in-bounds elements (Caffe, PyTorch)."""

    op: Literal["max", "avg"]
    kernel: int
    stride: int
    padding: int = 0
    ceil_mode: bool = False

    def out_shape(self, shape: Shape) -> Shape:
        c, h, w = shape
        oh, ow = (_pool_out(s, self.kernel, self.stride, self.padding, self.ceil_mode) for s in (h, w))
        if oh < 1 or ow < 1:
            raise ValueError(f"pool: input {h}x{w} too small for kernel {self.kernel}")
        return (c, oh, ow)


@dataclass(frozen=True)
class GlobalAvgPool(Layer):
    """Mean over the spatial axes: (C, H, W) -> (C,)."""

    def out_shape(self, shape: Shape) -> Shape:
        return (shape[0],)


@dataclass(frozen=True)
class LRN(Layer):
    """Cross-channel local response normalisation, Caffe/AlexNet form:
    ``x / (k + alpha / size * sum_{window} x^2) ** beta``."""

    size: int = 5
    alpha: float = 1e-4
    beta: float = 0.75
    k: float = 1.0


@dataclass(frozen=True)
class BatchNorm(Layer):
    """Batch normalisation over the channel axis (axis 0 of a sample)."""

    name: str
    eps: float = 1e-5
    momentum: float = 0.1

    def params(self, shape: Shape) -> dict[str, Shape]:
        return {f"{self.name}.gamma": (shape[0],), f"{self.name}.beta": (shape[0],)}


@dataclass(frozen=True)
class Dense(Layer):
    """Fully connected layer on the last axis. ``trainable=False`` freezes it (SAE pre-training)."""

    name: str
    units: int
    bias: bool = True
    init: Literal["he", "glorot"] = "glorot"
    trainable: bool = True

    def out_shape(self, shape: Shape) -> Shape:
        return (*shape[:-1], self.units)

    def params(self, shape: Shape) -> dict[str, Shape]:
        p = {f"{self.name}.weight": (shape[-1], self.units)}
        if self.bias:
            p[f"{self.name}.bias"] = (self.units,)
        return p

    def flops(self, shape: Shape) -> int:
        return 2 * math.prod(shape) * self.units


@dataclass(frozen=True)
class TiedDense(Layer):
    """Decoder of a tied autoencoder: ``y = x @ W(tied_to).T + b``; only the bias is its own."""

    name: str
    tied_to: str
    units: int
    trainable: bool = True

    def out_shape(self, shape: Shape) -> Shape:
        return (*shape[:-1], self.units)

    def params(self, shape: Shape) -> dict[str, Shape]:
        return {f"{self.name}.bias": (self.units,)}

    def flops(self, shape: Shape) -> int:
        return 2 * math.prod(shape) * self.units


@dataclass(frozen=True)
class Activation(Layer):
    fn: Literal["relu", "tanh", "sigmoid"]


@dataclass(frozen=True)
class Dropout(Layer):
    """Inverted dropout; off in inference and in every equivalence check."""

    rate: float


@dataclass(frozen=True)
class Flatten(Layer):
    def out_shape(self, shape: Shape) -> Shape:
        return (math.prod(shape),)


@dataclass(frozen=True)
class Embedding(Layer):
    """Token ids (T,) -> vectors (T, dim)."""

    name: str
    vocab: int
    dim: int

    def out_shape(self, shape: Shape) -> Shape:
        return (*shape, self.dim)

    def params(self, shape: Shape) -> dict[str, Shape]:
        return {f"{self.name}.weight": (self.vocab, self.dim)}


@dataclass(frozen=True)
class LSTM(Layer):
    """One unidirectional LSTM layer over (T, in) returning every step's hidden state (T, units).

    Zero initial state; forget-gate bias initialised to 1 (Jozefowicz et al.). Padded steps
    after a sequence's end do not change the outputs of its valid steps, so masking is done
    by whatever consumes the outputs (:class:`MaskedMean`)."""

    name: str
    units: int

    def out_shape(self, shape: Shape) -> Shape:
        return (shape[0], self.units)

    def params(self, shape: Shape) -> dict[str, Shape]:
        h = self.units
        return {f"{self.name}.w_x": (shape[-1], 4 * h), f"{self.name}.w_h": (h, 4 * h), f"{self.name}.b": (4 * h,)}

    def flops(self, shape: Shape) -> int:
        t, d = shape
        return 2 * t * (d + self.units) * 4 * self.units


@dataclass(frozen=True)
class MaskedMean(Layer):
    """Mean over the valid time steps of (T, D) given the batch's mask: -> (D,)."""

    def out_shape(self, shape: Shape) -> Shape:
        return shape[1:]


@dataclass(frozen=True)
class Mark(Layer):
    """Names the activation at this point (e.g. the target an autoencoder reconstructs)."""

    name: str


@dataclass(frozen=True)
class ZeroPadShortcut(Layer):
    """ResNet option A shortcut: subsample by ``stride`` and zero-pad channels to ``out_channels``."""

    out_channels: int
    stride: int

    def out_shape(self, shape: Shape) -> Shape:
        c, h, w = shape
        return (self.out_channels, -(-h // self.stride), -(-w // self.stride))


@dataclass(frozen=True)
class Residual(Layer):
    """``post(body(x) + shortcut(x))``; an empty shortcut is the identity."""

    body: tuple[Layer, ...]
    shortcut: tuple[Layer, ...] = field(default_factory=tuple)
    post: Literal["relu", "none"] = "relu"

    def out_shape(self, shape: Shape) -> Shape:
        out = sequence_shape(self.body, shape)
        short = sequence_shape(self.shortcut, shape)
        if out != short:
            raise ValueError(f"residual: body gives {out}, shortcut gives {short}")
        return out

    def params(self, shape: Shape) -> dict[str, Shape]:
        return {**sequence_params(self.body, shape), **sequence_params(self.shortcut, shape)}

    def flops(self, shape: Shape) -> int:
        return sequence_flops(self.body, shape) + sequence_flops(self.shortcut, shape)


# --- transformer layers: sequences are (T, D); the batch's padding mask reaches attention ----------
@dataclass(frozen=True)
class PositionEmbedding(Layer):
    """Learned absolute positions: (T, D) + ``weight[:T]``; the table holds ``max_len`` rows."""

    name: str
    max_len: int
    dim: int

    def out_shape(self, shape: Shape) -> Shape:
        if shape[0] > self.max_len or shape[-1] != self.dim:
            raise ValueError(f"{self.name}: sequence {shape} exceeds {self.max_len} positions of {self.dim}")
        return shape

    def params(self, shape: Shape) -> dict[str, Shape]:
        return {f"{self.name}.weight": (self.max_len, self.dim)}


@dataclass(frozen=True)
class SegmentEmbedding(Layer):
    """BERT's token-type embedding: ``types`` rows, every token of dlbench's one-segment inputs is
    type 0, so the layer adds ``weight[0]`` (the other rows are parameters, as the published count has)."""

    name: str
    types: int
    dim: int

    def params(self, shape: Shape) -> dict[str, Shape]:
        return {f"{self.name}.weight": (self.types, self.dim)}


@dataclass(frozen=True)
class LayerNorm(Layer):
    """Layer normalisation over the last axis: ``(x - mean) / sqrt(var + eps) * weight + bias``."""

    name: str
    eps: float = 1e-5

    def params(self, shape: Shape) -> dict[str, Shape]:
        return {f"{self.name}.weight": (shape[-1],), f"{self.name}.bias": (shape[-1],)}


@dataclass(frozen=True)
class RMSNorm(Layer):
    """Root-mean-square normalisation over the last axis (Llama): ``x / sqrt(mean(x^2) + eps) * weight``."""

    name: str
    eps: float = 1e-5

    def params(self, shape: Shape) -> dict[str, Shape]:
        return {f"{self.name}.weight": (shape[-1],)}


@dataclass(frozen=True)
class GELU(Layer):
    """``x * Phi(x)``: ``approximate="none"`` the exact erf form (BERT, ViT), ``"tanh"`` the tanh
    approximation (GPT-2's ``gelu_new``)."""

    approximate: Literal["none", "tanh"] = "none"


def rope_angles(length: int, head_dim: int, theta: float) -> np.ndarray:
    """The rotary embedding's angles (length, head_dim), float64: position times ``theta ** (-2i / hd)``,
    each half repeated (the half-split pairing of GPT-NeoX and Llama). Every backend and decoder builds
    its cos/sin tables from this; the float64 reference computes its own, so a wrong table here fails the gate."""
    inv = theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    angles = np.arange(length, dtype=np.float64)[:, None] * inv[None, :]
    return np.concatenate([angles, angles], axis=-1)


@dataclass(frozen=True)
class Attention(Layer):
    """Multi-head self-attention over (T, D) -> (T, D), with its projections.

    ``heads`` query heads of ``head_dim`` (default D / heads) and ``kv_heads`` key/value heads
    (default ``heads``; fewer is grouped-query attention, query head h reading key/value head
    ``h // (heads / kv_heads)``). Scores are ``q k^T / sqrt(head_dim)``; ``causal`` hides later
    positions, and the batch's padding mask (if any) hides padded keys. ``rope_theta`` > 0 rotates
    q and k by rotary position embeddings (Su et al.; the half-split pairing of GPT-NeoX and Llama).
    Parameters: ``wq`` (D, heads*hd), ``wk``/``wv`` (D, kv_heads*hd), ``wo`` (heads*hd, D), and with
    ``bias`` ``bq``, ``bk``, ``bv``, ``bo``. FLOPs count the full T x T score and value products (what
    a dense kernel computes; a causal flash kernel skips about half of them)."""

    name: str
    heads: int
    kv_heads: int = 0
    head_dim: int = 0
    causal: bool = False
    rope_theta: float = 0.0
    bias: bool = True

    def dims(self, dim: int) -> tuple[int, int, int]:
        """(heads, kv_heads, head_dim) for a model width ``dim``."""
        kv = self.kv_heads or self.heads
        hd = self.head_dim or dim // self.heads
        if self.heads % kv or (not self.head_dim and dim % self.heads) or (self.rope_theta and hd % 2):
            raise ValueError(f"{self.name}: {self.heads} heads, {kv} kv heads, head dim {hd} do not fit width {dim}")
        return self.heads, kv, hd

    def params(self, shape: Shape) -> dict[str, Shape]:
        d = shape[-1]
        h, kv, hd = self.dims(d)
        n = self.name
        p = {f"{n}.wq": (d, h * hd), f"{n}.wk": (d, kv * hd), f"{n}.wv": (d, kv * hd), f"{n}.wo": (h * hd, d)}
        if self.bias:
            p.update({f"{n}.bq": (h * hd,), f"{n}.bk": (kv * hd,), f"{n}.bv": (kv * hd,), f"{n}.bo": (d,)})
        return p

    def flops(self, shape: Shape) -> int:
        t, d = shape
        h, kv, hd = self.dims(d)
        return 2 * t * d * (h + 2 * kv) * hd + 2 * t * h * hd * d + 4 * t * t * h * hd


@dataclass(frozen=True)
class SwiGLU(Layer):
    """Llama's MLP: ``(silu(x @ w_gate) * (x @ w_up)) @ w_down``, no biases; (T, D) -> (T, D)."""

    name: str
    hidden: int

    def params(self, shape: Shape) -> dict[str, Shape]:
        d = shape[-1]
        return {f"{self.name}.w_gate": (d, self.hidden), f"{self.name}.w_up": (d, self.hidden),
                f"{self.name}.w_down": (self.hidden, d)}

    def flops(self, shape: Shape) -> int:
        return 6 * math.prod(shape) * self.hidden


@dataclass(frozen=True)
class SkipBlock(Layer):
    """A transformer's residual: ``post(x + body(x))``. A pre-norm block puts its norm first in
    ``body`` (GPT-2, ViT, Llama); a post-norm block has it in ``post`` (BERT). The body's attention
    sees the batch's padding mask."""

    body: tuple[Layer, ...]
    post: tuple[Layer, ...] = field(default_factory=tuple)

    def out_shape(self, shape: Shape) -> Shape:
        out = sequence_shape(self.body, shape)
        if out != shape:
            raise ValueError(f"skip block: body gives {out} for input {shape}")
        return sequence_shape(self.post, shape)

    def params(self, shape: Shape) -> dict[str, Shape]:
        return {**sequence_params(self.body, shape), **sequence_params(self.post, shape)}

    def flops(self, shape: Shape) -> int:
        return sequence_flops(self.body, shape) + sequence_flops(self.post, shape)


@dataclass(frozen=True)
class PatchEmbed(Layer):
    """ViT's patch embedding: a ``patch`` x ``patch`` stride-``patch`` convolution to ``dim``
    channels, its (H/p * W/p) positions in row-major order as a sequence, a learned class token
    first: (C, H, W) -> (1 + HW/p^2, dim). ``weight`` OIHW, ``bias`` (dim,), ``cls`` (dim,)."""

    name: str
    dim: int
    patch: int

    def out_shape(self, shape: Shape) -> Shape:
        _, h, w = shape
        if h % self.patch or w % self.patch:
            raise ValueError(f"{self.name}: image {h}x{w} is not a whole number of {self.patch}-pixel patches")
        return (1 + (h // self.patch) * (w // self.patch), self.dim)

    def params(self, shape: Shape) -> dict[str, Shape]:
        return {f"{self.name}.weight": (self.dim, shape[0], self.patch, self.patch),
                f"{self.name}.bias": (self.dim,), f"{self.name}.cls": (self.dim,)}

    def flops(self, shape: Shape) -> int:
        return 2 * (self.out_shape(shape)[0] - 1) * self.dim * shape[0] * self.patch**2


@dataclass(frozen=True)
class TakeToken(Layer):
    """One position of the sequence, (T, D) -> (D,): the class token (ViT) or [CLS] (BERT's pooler)."""

    index: int = 0

    def out_shape(self, shape: Shape) -> Shape:
        return shape[1:]


@dataclass(frozen=True)
class LMHead(Layer):
    """The tied language-model head: logits ``x @ E.T`` with ``E`` the token embedding ``tied_to``
    (vocab, D); no parameters of its own, no bias."""

    tied_to: str
    vocab: int

    def out_shape(self, shape: Shape) -> Shape:
        return (*shape[:-1], self.vocab)

    def flops(self, shape: Shape) -> int:
        return 2 * math.prod(shape) * self.vocab



def sequence_shape(layers: tuple[Layer, ...], shape: Shape) -> Shape:
    for layer in layers:
        shape = layer.out_shape(shape)
    return shape


def sequence_params(layers: tuple[Layer, ...], shape: Shape) -> dict[str, Shape]:
    out: dict[str, Shape] = {}
    for layer in layers:
        for name, s in layer.params(shape).items():
            if name in out:
                raise ValueError(f"duplicate parameter name {name}")
            out[name] = s
        shape = layer.out_shape(shape)
    return out


def sequence_flops(layers: tuple[Layer, ...], shape: Shape) -> int:
    total = 0
    for layer in layers:
        total += layer.flops(shape)
        shape = layer.out_shape(shape)
    return total


def walk(layers: tuple[Layer, ...]):
    """Every layer, depth first, including those inside residual blocks."""
    for layer in layers:
        yield layer
        if isinstance(layer, Residual):
            yield from walk(layer.body)
            yield from walk(layer.shortcut)
        elif isinstance(layer, SkipBlock):
            yield from walk(layer.body)
            yield from walk(layer.post)
