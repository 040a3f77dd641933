"""Plain NumPy float64 forward pass of every layer type: the oracle of the equivalence gate.

Written to be read, not to be fast. Batches are NCHW for images, (N, T) for tokens,
(N, T, D) for sequences; a batch's padding mask reaches every attention layer (padded keys
hidden). Dropout is off here (and in every check). Batch norm uses the batch's statistics
(biased variance) when ``train`` is true and the running statistics otherwise.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from dlbench.data.synthetic import Batch
from dlbench.models import layers as L
from dlbench.models.layers import _pool_out
from dlbench.models.spec import ModelSpec
from dlbench.models.weights import Weights


def conv2d(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, stride: int, padding: int,
           groups: int) -> np.ndarray:
    n, c, h, wd = x.shape
    o, cg, k, _ = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    win = sliding_window_view(xp, (k, k), axis=(2, 3))[:, :, ::stride, ::stride]  # N C OH OW k k
    og = o // groups
    outs = [np.einsum("nchwij,ocij->nohw", win[:, g * cg:(g + 1) * cg], w[g * og:(g + 1) * og], optimize=True)
            for g in range(groups)]
    out = np.concatenate(outs, axis=1)
    return out if b is None else out + b[None, :, None, None]


def pool2d(x: np.ndarray, layer: L.Pool2d) -> np.ndarray:
    """Max or average pooling with padding and ceil mode. Average divides by the number of
    window positions inside the padded input (PyTorch ``count_include_pad``; with no padding
    that is Caffe's count of in-bounds elements)."""
    n, c, h, w = x.shape
    k, s, p = layer.kernel, layer.stride, layer.padding
    oh, ow = (_pool_out(d, k, s, p, layer.ceil_mode) for d in (h, w))
    extra_h = max(0, (oh - 1) * s + k - (h + 2 * p))
    extra_w = max(0, (ow - 1) * s + k - (w + 2 * p))
    pads = ((0, 0), (0, 0), (p, p + extra_h), (p, p + extra_w))
    if layer.op == "max":
        xp = np.pad(x, pads, constant_values=-np.inf)
        return sliding_window_view(xp, (k, k), axis=(2, 3))[:, :, ::s, ::s][:, :, :oh, :ow].max(axis=(4, 5))
    xp = np.pad(x, pads)
    inside = np.pad(np.ones((h + 2 * p, w + 2 * p)), ((0, extra_h), (0, extra_w)))
    total = sliding_window_view(xp, (k, k), axis=(2, 3))[:, :, ::s, ::s][:, :, :oh, :ow].sum(axis=(4, 5))
    count = sliding_window_view(inside, (k, k))[::s, ::s][:oh, :ow].sum(axis=(2, 3))
    return total / count


def lrn(x: np.ndarray, layer: L.LRN) -> np.ndarray:
    sq = np.pad(x * x, ((0, 0), (layer.size // 2, (layer.size - 1) // 2), (0, 0), (0, 0)))
    window = sliding_window_view(sq, layer.size, axis=1).sum(axis=-1)
    return x / (layer.k + layer.alpha / layer.size * window) ** layer.beta


def batch_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, mean: np.ndarray, var: np.ndarray,
               eps: float, train: bool) -> np.ndarray:
    axes = (0, 2, 3) if x.ndim == 4 else (0,)
    if train:
        mean, var = x.mean(axis=axes), x.var(axis=axes)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) * gamma.reshape(shape) + beta.reshape(shape)


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def lstm(x: np.ndarray, w_x: np.ndarray, w_h: np.ndarray, b: np.ndarray) -> np.ndarray:
    n, t, _ = x.shape
    hidden = w_h.shape[0]
    h = np.zeros((n, hidden))
    c = np.zeros((n, hidden))
    out = np.empty((n, t, hidden))
    xw = x @ w_x + b
    for step in range(t):
        z = xw[:, step] + h @ w_h
        i, f, g, o = (z[:, j * hidden:(j + 1) * hidden] for j in range(4))
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(c)
        out[:, step] = h
    return out


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(x.var(axis=-1, keepdims=True) + eps) * weight + bias


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * weight


#: the error function element-wise, from the standard library (a measuring process has NumPy and dlbench only)
_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu(x: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "tanh":
        return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1.0 + _erf(x / np.sqrt(2.0)))


def rope(x: np.ndarray, theta: float) -> np.ndarray:
    """Rotary embedding of (N, heads, T, hd) at positions 0..T-1: the first and second halves of each
    head are the pairs rotated (GPT-NeoX's and Llama's pairing), pair i at frequency theta^(-2i/hd)."""
    t, hd = x.shape[-2:]
    angles = np.arange(t)[:, None] * theta ** (-np.arange(0, hd, 2) / hd)[None, :]  # (T, hd/2)
    cos, sin = np.cos(angles), np.sin(angles)
    a, b = x[..., : hd // 2], x[..., hd // 2:]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)


def attention(x: np.ndarray, p: dict[str, np.ndarray], layer: L.Attention, mask: np.ndarray | None) -> np.ndarray:
    """Self-attention of (N, T, D) by the definition: every score, the masks as -inf, a softmax."""
    n, t, d = x.shape
    heads, kv, hd = layer.dims(d)
    name = layer.name

    def project(w: str, b: str, count: int) -> np.ndarray:
        y = x @ p[f"{name}.{w}"] + (p[f"{name}.{b}"] if layer.bias else 0.0)
        return y.reshape(n, t, count, hd).transpose(0, 2, 1, 3)  # (N, count, T, hd)

    q, k, v = project("wq", "bq", heads), project("wk", "bk", kv), project("wv", "bv", kv)
    if layer.rope_theta:
        q, k = rope(q, layer.rope_theta), rope(k, layer.rope_theta)
    k, v = np.repeat(k, heads // kv, axis=1), np.repeat(v, heads // kv, axis=1)
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(hd)  # (N, H, T, T)
    allowed = np.ones((n, 1, t, t), bool)
    if layer.causal:
        allowed &= np.tril(np.ones((t, t), bool))
    if mask is not None:
        allowed &= (mask > 0)[:, None, None, :]
    scores = np.where(allowed, scores, -np.inf)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    out = (weights @ v).transpose(0, 2, 1, 3).reshape(n, t, heads * hd)
    return out @ p[f"{name}.wo"] + (p[f"{name}.bo"] if layer.bias else 0.0)


def swiglu(x: np.ndarray, w_gate: np.ndarray, w_up: np.ndarray, w_down: np.ndarray) -> np.ndarray:
    gate = x @ w_gate
    return (gate * sigmoid(gate) * (x @ w_up)) @ w_down


def patch_embed(x: np.ndarray, w: np.ndarray, b: np.ndarray, cls: np.ndarray, patch: int) -> np.ndarray:
    """(N, C, H, W) -> (N, 1 + HW/p^2, dim): the patches' convolution, row-major, after the class token."""
    out = conv2d(x, w, b, patch, 0, 1)  # (N, dim, H/p, W/p)
    n, dim = out.shape[:2]
    seq = out.reshape(n, dim, -1).transpose(0, 2, 1)
    return np.concatenate([np.broadcast_to(cls, (n, 1, dim)), seq], axis=1)


ACTIVATIONS = {"relu": lambda x: np.maximum(x, 0.0), "tanh": np.tanh, "sigmoid": sigmoid}


def _run(layers: tuple[L.Layer, ...], x: np.ndarray, p: dict[str, np.ndarray], state: dict[str, np.ndarray],
         mask: np.ndarray | None, train: bool, marks: dict[str, np.ndarray]) -> np.ndarray:
    for layer in layers:
        if isinstance(layer, L.Conv2d):
            x = conv2d(x, p[f"{layer.name}.weight"], p.get(f"{layer.name}.bias"), layer.stride, layer.padding,
                       layer.groups)
        elif isinstance(layer, L.Pool2d):
            x = pool2d(x, layer)
        elif isinstance(layer, L.GlobalAvgPool):
            x = x.mean(axis=(2, 3))
        elif isinstance(layer, L.LRN):
            x = lrn(x, layer)
        elif isinstance(layer, L.BatchNorm):
            x = batch_norm(x, p[f"{layer.name}.gamma"], p[f"{layer.name}.beta"], state[f"{layer.name}.running_mean"],
                           state[f"{layer.name}.running_var"], layer.eps, train)
        elif isinstance(layer, L.Dense):
            x = x @ p[f"{layer.name}.weight"] + (p[f"{layer.name}.bias"] if layer.bias else 0.0)
        elif isinstance(layer, L.TiedDense):
            x = x @ p[f"{layer.tied_to}.weight"].T + p[f"{layer.name}.bias"]
        elif isinstance(layer, L.Activation):
            x = ACTIVATIONS[layer.fn](x)
        elif isinstance(layer, L.Dropout | L.Mark):
            if isinstance(layer, L.Mark):
                marks[layer.name] = x
        elif isinstance(layer, L.Flatten):
            x = x.reshape(x.shape[0], -1)
        elif isinstance(layer, L.Embedding):
            x = p[f"{layer.name}.weight"][x]
        elif isinstance(layer, L.LSTM):
            x = lstm(x, p[f"{layer.name}.w_x"], p[f"{layer.name}.w_h"], p[f"{layer.name}.b"])
        elif isinstance(layer, L.MaskedMean):
            m = np.ones(x.shape[:2]) if mask is None else mask.astype(np.float64)
            x = (x * m[:, :, None]).sum(axis=1) / m.sum(axis=1, keepdims=True)
        elif isinstance(layer, L.ZeroPadShortcut):
            x = x[:, :, ::layer.stride, ::layer.stride]
            x = np.pad(x, ((0, 0), (0, layer.out_channels - x.shape[1]), (0, 0), (0, 0)))
        elif isinstance(layer, L.Residual):
            body = _run(layer.body, x, p, state, mask, train, marks)
            short = _run(layer.shortcut, x, p, state, mask, train, marks)
            x = body + short
            if layer.post == "relu":
                x = np.maximum(x, 0.0)
        elif isinstance(layer, L.PositionEmbedding):
            x = x + p[f"{layer.name}.weight"][: x.shape[1]]
        elif isinstance(layer, L.SegmentEmbedding):
            x = x + p[f"{layer.name}.weight"][0]
        elif isinstance(layer, L.LayerNorm):
            x = layer_norm(x, p[f"{layer.name}.weight"], p[f"{layer.name}.bias"], layer.eps)
        elif isinstance(layer, L.RMSNorm):
            x = rms_norm(x, p[f"{layer.name}.weight"], layer.eps)
        elif isinstance(layer, L.GELU):
            x = gelu(x, layer.approximate)
        elif isinstance(layer, L.Attention):
            x = attention(x, p, layer, mask)
        elif isinstance(layer, L.SwiGLU):
            x = swiglu(x, p[f"{layer.name}.w_gate"], p[f"{layer.name}.w_up"], p[f"{layer.name}.w_down"])
        elif isinstance(layer, L.SkipBlock):
            x = _run(layer.post, x + _run(layer.body, x, p, state, mask, train, marks), p, state, mask, train, marks)
        elif isinstance(layer, L.PatchEmbed):
            x = patch_embed(x, p[f"{layer.name}.weight"], p[f"{layer.name}.bias"], p[f"{layer.name}.cls"],
                            layer.patch)
        elif isinstance(layer, L.TakeToken):
            x = x[:, layer.index]
        elif isinstance(layer, L.LMHead):
            x = x @ p[f"{layer.tied_to}.weight"].T
        else:  # pragma: no cover
            raise TypeError(f"reference: no rule for {layer.kind}")
    return x


def forward(spec: ModelSpec, weights: Weights, batch: Batch, train: bool = False) -> tuple[np.ndarray, dict]:
    """The network's output in float64 and the activations named by Mark layers."""
    p = {k: v.astype(np.float64) for k, v in weights.params.items()}
    state = {k: v.astype(np.float64) for k, v in weights.state.items()}
    x = batch.x if spec.input.kind == "tokens" else batch.x.astype(np.float64)
    marks: dict[str, np.ndarray] = {}
    out = _run(spec.layers, x, p, state, batch.mask, train, marks)
    return out, marks


def loss_value(spec: ModelSpec, output: np.ndarray, batch: Batch, marks: dict[str, np.ndarray]) -> float:
    """Softmax cross-entropy (mean over samples, and steps) or mean squared error."""
    if spec.loss.kind == "mse":
        target = marks[spec.loss.target] if spec.loss.target in marks else batch.x
        return float(np.mean((output - target) ** 2))
    logits = output.reshape(-1, output.shape[-1])
    labels = batch.y.reshape(-1)
    shifted = logits - logits.max(axis=1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return float(-logp[np.arange(labels.size), labels].mean())


def loss(spec: ModelSpec, weights: Weights, batch: Batch) -> float:
    """The training loss (batch norm on batch statistics, dropout off) in float64."""
    out, marks = forward(spec, weights, batch, train=True)
    return loss_value(spec, out, batch, marks)
