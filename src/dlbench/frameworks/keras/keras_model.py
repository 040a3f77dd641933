"""One Keras 3 model definition for every Keras backend, built from a dlbench ModelSpec.

The TensorFlow backend runs it inside ``tf.function``; the Keras backend runs the same model on
JAX, TensorFlow and PyTorch. Standard ``keras.layers`` are used wherever Keras has the op
(``Conv2D`` with ``groups``, ``MaxPooling2D``/``AveragePooling2D``, ``BatchNormalization``,
``Dense``, ``Embedding``, ``LSTM(return_sequences=True)``, ``Dropout``, ``Flatten``,
``Activation``, ``GlobalAveragePooling2D``, ``ZeroPadding2D``). Where Keras lacks the op, a small
``keras.layers.Layer`` written with ``keras.ops`` only (so it runs on every backend):

* :class:`LRN`: Caffe's cross-channel form ``x / (k + alpha/size * sum x^2) ** beta``;
* :class:`PaddedPool2D`: explicit padding and Caffe/PyTorch ceil mode; max pads with ``-inf``,
  average divides by the count of in-bounds positions (as :func:`dlbench.gate.reference.pool2d`);
* :class:`MaskedMean`: mean over each sequence's valid steps;
* :class:`ZeroPadShortcut`: ResNet option A (subsample, zero channels appended);
* :class:`TiedDense`: ``y = x @ W_enc.T + b`` reading the encoder's own variable (not a copy);
* :class:`Mark`: names the activation an SAE pre-training phase reconstructs;
* transformers: ``LayerNormalization``, ``RMSNormalization`` and ``Dense`` are Keras's own;
  :class:`Attention` projects with ``Dense`` and attends with ``keras.ops.dot_product_attention``
  (each backend's own kernel: einsums around a float32 softmax on TensorFlow,
  ``jax.nn.dot_product_attention`` on JAX, SDPA on torch), with rotary tables as constants and the
  padding mask (``valid``) as a boolean key mask; :class:`SkipBlock`, :class:`PatchEmbed`,
  :class:`PositionEmbedding`, :class:`GELU`, :class:`SwiGLU`, :class:`TiedLMHead` (the embedding's
  own variable) are small ``keras.ops`` layers.

Layout: channels_last (Keras's default and TensorFlow's fast CPU path). The backend transposes
NCHW input once when placing the batch (outside timing); the rows of a ``Dense`` after
``Flatten`` are permuted at load time from canonical (C, H, W) order to Keras's (H, W, C), so
the network computes the same function. Conv kernels go OIHW -> HWIO; Dense ``(in, out)`` and the
LSTM's ``kernel``/``recurrent_kernel``/``bias`` (gate order i, f, g, o) are already Keras's.
A conv whose padding is the "same" padding of a stride-1 odd kernel uses ``padding="same"``;
any other padding is an explicit ``ZeroPadding2D`` (Keras's "same" is asymmetric at stride 2).

Batch norm: Keras ``momentum = 1 - torch momentum`` (0.9), ``epsilon = 1e-5``. Keras updates the
moving variance with the biased batch variance (torch: unbiased); the gate does not compare
moving statistics after training and the forward uses the loaded ones.

The model's ``call(inputs, training)`` returns the network output; in training mode a model with
an MSE loss returns ``(output, target)`` (the Mark'd activation, or the input) and
:meth:`SpecModel.compute_loss` turns that into the mean squared error, so ``train_on_batch``
works with ``compile(loss=None)``. Softmax models compile with Keras's standard
``SparseCategoricalCrossentropy(from_logits=True)`` (mean over samples and steps).
"""

from __future__ import annotations

import contextlib
import inspect
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import keras
import numpy as np
from keras import ops

from dlbench.core.precision import DEFAULT as DEFAULT_PRECISION
from dlbench.core.precision import get_precision
from dlbench.frameworks.base import UnsupportedError
from dlbench.frameworks.builder import LayerBuilder
from dlbench.models import layers as L
from dlbench.models.layers import _pool_out
from dlbench.models.spec import ModelSpec
from dlbench.models.weights import Weights

#: the initializer of every kernel and embedding the builder makes: :func:`build_keras_model` replaces each
#: variable with the spec's weights before anything reads it (and fails on one it cannot bind), so an
#: initial value is never used, and Keras's default random initializers cost most of a model's build on
#: JAX (each shape compiled a random-number program of its own)
PLACEHOLDER = "zeros"


# --- layers Keras lacks ---------------------------------------------------------------------
class LRN(keras.layers.Layer):
    """Cross-channel local response normalisation over the last (channel) axis, Caffe form."""

    def __init__(self, size: int, alpha: float, beta: float, k: float, **kwargs):
        super().__init__(**kwargs)
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def call(self, x):
        channels = x.shape[-1]
        before, after = self.size // 2, (self.size - 1) // 2
        sq = ops.pad(ops.square(x), [[0, 0]] * (len(x.shape) - 1) + [[before, after]])
        window = sq[..., 0:channels]
        for i in range(1, self.size):
            window = window + sq[..., i:i + channels]
        return x / ops.power(self.k + (self.alpha / self.size) * window, self.beta)


class PaddedPool2D(keras.layers.Layer):
    """Pooling with explicit padding and ceil mode (channels_last).

    The input is padded by ``padding`` on every side plus the ceil-mode overhang on the bottom
    and right; max pads with -inf (padding never wins), average pads with zeros and multiplies
    the window mean by ``kernel**2 / count``, ``count`` being the window's positions inside the
    padded input (not the overhang): PyTorch's ``count_include_pad`` and Caffe's rule.
    """

    def __init__(self, op: str, kernel: int, stride: int, padding: int, ceil_mode: bool, in_hw: tuple[int, int],
                 **kwargs):
        super().__init__(**kwargs)
        self.op, self.kernel, self.stride, self.padding = op, kernel, stride, padding
        h, w = in_hw
        self.out_hw = tuple(_pool_out(d, kernel, stride, padding, ceil_mode) for d in in_hw)
        # the overhang makes a "valid" sweep of the padded input give exactly out_hw windows
        self.extra = tuple(max(0, (o - 1) * stride + kernel - (d + 2 * padding))
                           for o, d in zip(self.out_hw, in_hw, strict=True))
        scale = None
        if op == "avg":
            inside = np.pad(np.ones((h + 2 * padding, w + 2 * padding)), ((0, self.extra[0]), (0, self.extra[1])))
            win = np.lib.stride_tricks.sliding_window_view(inside, (kernel, kernel))[::stride, ::stride]
            count = win[: self.out_hw[0], : self.out_hw[1]].sum(axis=(2, 3))
            scale = (kernel * kernel / count)[None, :, :, None].astype(np.float32)
        self._scale = scale  # a NumPy constant, not a weight

    def call(self, x):
        p = self.padding
        pads = [[0, 0], [p, p + self.extra[0]], [p, p + self.extra[1]], [0, 0]]
        if self.op == "max":
            xp = ops.pad(x, pads, constant_values=-math.inf)
            out = ops.max_pool(xp, self.kernel, self.stride, padding="valid", data_format="channels_last")
        else:
            xp = ops.pad(x, pads)
            out = ops.average_pool(xp, self.kernel, self.stride, padding="valid", data_format="channels_last")
            out = out * ops.convert_to_tensor(self._scale, dtype=out.dtype)
        return out


class MaskedMean(keras.layers.Layer):
    """Mean over the time axis of (N, T, D), counting only steps where ``valid`` is 1."""

    def call(self, x, valid=None):
        if valid is None:
            return ops.mean(x, axis=1)
        w = ops.cast(valid, x.dtype)
        return ops.sum(x * ops.expand_dims(w, -1), axis=1) / ops.sum(w, axis=1, keepdims=True)


class ZeroPadShortcut(keras.layers.Layer):
    """ResNet option A: keep every ``stride``-th pixel, append zero channels up to ``out_channels``."""

    def __init__(self, out_channels: int, stride: int, **kwargs):
        super().__init__(**kwargs)
        self.out_channels, self.stride = out_channels, stride

    def call(self, x):
        s = self.stride
        if s > 1:
            x = x[:, ::s, ::s, :]
        extra = self.out_channels - x.shape[-1]
        return ops.pad(x, [[0, 0], [0, 0], [0, 0], [0, extra]]) if extra else x


class _Ref:
    """Holds a layer without Keras tracking it (so its weights are not counted twice)."""

    def __init__(self, layer: keras.layers.Layer):
        self.layer = layer


class TiedDense(keras.layers.Layer):
    """Decoder of a tied autoencoder: ``x @ W_enc.T + b``; W_enc is the encoder's variable."""

    def __init__(self, encoder: keras.layers.Dense, units: int, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self._encoder = _Ref(encoder)

    def build(self, input_shape):
        self.bias = self.add_weight(shape=(self.units,), initializer="zeros", name="bias")

    def call(self, x):
        return ops.matmul(x, ops.transpose(self._encoder.layer.kernel)) + self.bias


class Mark(keras.layers.Layer):
    """Identity that names the activation a reconstruction loss targets (read by :class:`SpecModel`)."""

    def call(self, x):
        return x


# --- transformer layers (sequences (N, T, D); attention through keras.ops.dot_product_attention) ----------
class TakesValid:
    """A layer called as ``layer(x, valid=...)`` with the batch's padding mask (None: no padding)."""


def _run_valid(layers: list, x, valid, training):
    """Calls each layer with the mask where it takes one and ``training`` where it takes that (see _run)."""
    for layer in layers:
        if isinstance(layer, TakesValid):
            x = layer(x, valid=valid)
        else:
            x = layer(x, training=training) if _takes_training(layer) else layer(x)
        _record(layer, x)
    return x


class PositionEmbedding(keras.layers.Layer):
    """Learned positions: ``x + weight[:T]``."""

    def __init__(self, max_len: int, dim: int, **kwargs):
        super().__init__(**kwargs)
        self.max_len, self.dim = max_len, dim

    def build(self, input_shape):
        self.weight = self.add_weight(shape=(self.max_len, self.dim), initializer="zeros", name="weight")

    def call(self, x):
        return x + ops.cast(self.weight[: x.shape[1]], x.dtype)


class SegmentEmbedding(keras.layers.Layer):
    """BERT's token types, every token type 0: adds row 0 of the table."""

    def __init__(self, types: int, dim: int, **kwargs):
        super().__init__(**kwargs)
        self.types, self.dim = types, dim

    def build(self, input_shape):
        self.weight = self.add_weight(shape=(self.types, self.dim), initializer="zeros", name="weight")

    def call(self, x):
        return x + ops.cast(self.weight[0], x.dtype)


class GELU(keras.layers.Layer):
    def __init__(self, approximate: bool, **kwargs):
        super().__init__(**kwargs)
        self.approximate = approximate

    def call(self, x):
        return keras.activations.gelu(x, approximate=self.approximate)


def _rope(x, theta: float):
    """Rotary embedding of (N, T, heads, hd), half-split pairs; the tables are NumPy constants."""
    t, hd = x.shape[1], x.shape[-1]
    angles = L.rope_angles(t, hd, theta)[None, :, None, :]
    cos = ops.convert_to_tensor(np.cos(angles).astype(np.float32), dtype=x.dtype)
    sin = ops.convert_to_tensor(np.sin(angles).astype(np.float32), dtype=x.dtype)
    half = hd // 2
    return x * cos + ops.concatenate([-x[..., half:], x[..., :half]], axis=-1) * sin


class Attention(TakesValid, keras.layers.Layer):
    """``Dense`` projections, heads in (N, T, heads, hd) and ``keras.ops.dot_product_attention``
    (TensorFlow: two einsums around a float32 softmax; grouped-query key/value heads repeated;
    ``is_causal``; the padding mask as a boolean key mask)."""

    def __init__(self, layer: L.Attention, dims: tuple[int, int, int], dim: int, **kwargs):
        super().__init__(**kwargs)
        self.heads, self.kv_heads, self.head_dim = dims
        self.causal, self.rope_theta = layer.causal, layer.rope_theta
        h, kv, hd = dims
        self.wq = keras.layers.Dense(h * hd, use_bias=layer.bias, kernel_initializer=PLACEHOLDER, name="wq")
        self.wk = keras.layers.Dense(kv * hd, use_bias=layer.bias, kernel_initializer=PLACEHOLDER, name="wk")
        self.wv = keras.layers.Dense(kv * hd, use_bias=layer.bias, kernel_initializer=PLACEHOLDER, name="wv")
        self.wo = keras.layers.Dense(dim, use_bias=layer.bias, kernel_initializer=PLACEHOLDER, name="wo")

    def call(self, x, valid=None):
        t = x.shape[1]
        q = ops.reshape(self.wq(x), (-1, t, self.heads, self.head_dim))
        k = ops.reshape(self.wk(x), (-1, t, self.kv_heads, self.head_dim))
        v = ops.reshape(self.wv(x), (-1, t, self.kv_heads, self.head_dim))
        if self.rope_theta:
            q, k = _rope(q, self.rope_theta), _rope(k, self.rope_theta)
        mask = None if valid is None else ops.cast(valid, "bool")[:, None, None, :]
        out = ops.dot_product_attention(q, k, v, mask=mask, is_causal=self.causal)
        return self.wo(ops.reshape(out, (-1, t, self.heads * self.head_dim)))


class SwiGLU(keras.layers.Layer):
    def __init__(self, dim: int, hidden: int, **kwargs):
        super().__init__(**kwargs)
        self.gate = keras.layers.Dense(hidden, use_bias=False, kernel_initializer=PLACEHOLDER, name="w_gate")
        self.up = keras.layers.Dense(hidden, use_bias=False, kernel_initializer=PLACEHOLDER, name="w_up")
        self.down = keras.layers.Dense(dim, use_bias=False, kernel_initializer=PLACEHOLDER, name="w_down")

    def call(self, x):
        return self.down(ops.silu(self.gate(x)) * self.up(x))


class SkipBlock(TakesValid, keras.layers.Layer):
    """``post(x + body(x))``."""

    def __init__(self, body: list, post: list, **kwargs):
        super().__init__(**kwargs)
        self.body, self.post = body, post

    def call(self, x, valid=None, training=None):
        return _run_valid(self.post, x + _run_valid(self.body, x, valid, training), valid, training)


class PatchEmbed(keras.layers.Layer):
    """``Conv2D`` with stride = kernel = patch (channels_last), positions row-major, the class token first."""

    def __init__(self, dim: int, patch: int, **kwargs):
        super().__init__(**kwargs)
        self.dim = dim
        self.conv = keras.layers.Conv2D(dim, patch, strides=patch, padding="valid", kernel_initializer=PLACEHOLDER,
                                        name="proj")

    def build(self, input_shape):
        self.cls = self.add_weight(shape=(self.dim,), initializer="zeros", name="cls")

    def call(self, x):
        y = self.conv(x)
        seq = ops.reshape(y, (-1, y.shape[1] * y.shape[2], self.dim))
        cls = ops.zeros_like(seq[:, :1]) + ops.cast(self.cls, seq.dtype)
        return ops.concatenate([cls, seq], axis=1)


class TakeToken(keras.layers.Layer):
    def __init__(self, index: int, **kwargs):
        super().__init__(**kwargs)
        self.index = index

    def call(self, x):
        return x[:, self.index]


class TiedLMHead(keras.layers.Layer):
    """Logits ``x @ E.T`` with the token embedding's own variable (read through its binding, not copied)."""

    def __init__(self, table: Callable[[], Any], **kwargs):
        super().__init__(**kwargs)
        self._table = table

    def call(self, x):
        return ops.matmul(x, ops.transpose(ops.cast(self._table(), x.dtype)))


def _takes_training(layer: keras.layers.Layer) -> bool:
    return "training" in inspect.signature(layer.call).parameters


#: while :func:`activation_dtypes` probes a model: the output types of its computing layers
_RECORD: list[str] | None = None


def _record(layer: keras.layers.Layer, x) -> None:
    if _RECORD is not None and isinstance(layer, keras.layers.Conv2D | keras.layers.Dense | keras.layers.LSTM
                                          | TiedDense | Attention | SwiGLU | TiedLMHead | PatchEmbed):
        _RECORD.append(keras.backend.standardize_dtype(x.dtype))


def _run(layers: list, flags: list[bool], x, training):
    """Calls each layer, handing ``training`` to those that take it. Explicitly: Keras's
    ``stateless_call`` (JAX) calls ``model.call`` directly, so the training flag is not in the
    call context that ``Layer.__call__`` would otherwise propagate to sublayers."""
    for layer, takes in zip(layers, flags, strict=True):
        x = layer(x, training=training) if takes else layer(x)
        _record(layer, x)
    return x


class Residual(keras.layers.Layer):
    """``post(body(x) + shortcut(x))``; an empty shortcut is the identity."""

    def __init__(self, body: list, shortcut: list, relu: bool, **kwargs):
        super().__init__(**kwargs)
        self.body, self.shortcut, self.relu = body, shortcut, relu
        self._body_flags = [_takes_training(layer) for layer in body]
        self._short_flags = [_takes_training(layer) for layer in shortcut]

    def call(self, x, training=None):
        out = _run(self.body, self._body_flags, x, training) + _run(self.shortcut, self._short_flags, x, training)
        return ops.relu(out) if self.relu else out


# --- the model --------------------------------------------------------------------------------
class SpecModel(keras.Model):
    """The spec's layers in order. ``inputs`` is the batch tensor, or ``{"x", "valid"}`` when the
    spec averages over valid steps. In training mode an MSE model returns ``(output, target)``."""

    def __init__(self, steps: list, reconstructs: bool, **kwargs):
        super().__init__(**kwargs)
        self.steps = steps
        self.reconstructs = reconstructs
        self._flags = [_takes_training(layer) for layer in steps]

    def build(self, input_shape):
        """Nothing to create here: each layer builds on the first call, which ``build_keras_model`` makes."""

    def call(self, inputs, training=None):
        if isinstance(inputs, dict):
            x, valid = inputs["x"], inputs.get("valid")
        else:
            x, valid = inputs, None
        target = x
        for layer, takes in zip(self.steps, self._flags, strict=True):
            if isinstance(layer, Mark):
                target = x
            elif isinstance(layer, MaskedMean | TakesValid):
                x = layer(x, valid=valid)
            else:  # training passed explicitly, see _run
                x = layer(x, training=training) if takes else layer(x)
            _record(layer, x)
        if training and self.reconstructs:
            return x, target
        return x

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        if self.reconstructs and isinstance(y_pred, tuple | list):
            out, target = (ops.cast(t, "float32") for t in y_pred)  # the loss in float32, as Keras's losses do
            return ops.mean(ops.square(out - target))
        return super().compute_loss(x, y, y_pred, sample_weight, training)


class LogitsCrossentropy(keras.losses.SparseCategoricalCrossentropy):
    """Keras's sparse softmax cross-entropy of the model's output as it is. On the TensorFlow backend
    Keras's sigmoid and softmax attach their input to their output (``_keras_logits``), and its
    cross-entropy then takes that input instead: a model ending in a sigmoid (fcn-r's parts #1 and #2)
    got a loss over other values than in every other framework, and failed the gate. A copy of the
    output carries no such attribute."""

    def __init__(self) -> None:
        super().__init__(from_logits=True)

    def call(self, y_true, y_pred):
        return super().call(y_true, keras.ops.copy(y_pred))


def keras_loss(spec: ModelSpec) -> keras.losses.Loss | None:
    """The loss ``compile`` gets: Keras's sparse softmax cross-entropy from logits for softmax models
    (:class:`LogitsCrossentropy`); None for MSE ones (their loss is :meth:`SpecModel.compute_loss`,
    which needs the model's target output)."""
    if spec.loss.kind == "mse":
        return None
    return LogitsCrossentropy()


# --- precision ------------------------------------------------------------------------------------
#: the Keras dtype policy of each precision dlbench runs through Keras: a ``mixed_*`` policy keeps
#: the variables float32 and computes in the low type (Keras's mixed-precision API); a plain
#: ``bfloat16``/``float16`` policy makes the variables and the compute that type
POLICIES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16",
            "amp-bf16": "mixed_bfloat16", "amp-fp16": "mixed_float16"}
#: precisions whose float inputs the backends cast to the low type when placing a batch
INPUT_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}
#: the static loss scale of the custom-loop gradients at amp-fp16 (``train_on_batch`` uses Keras's
#: dynamic ``LossScaleOptimizer`` instead); the JAX backend's value, see ``dlbench.frameworks.jax.backend``
LOSS_SCALE = 2.0 ** 12


def unsupported_reason(precision: str) -> str | None:
    """Why Keras models cannot be built at ``precision`` (None: they can)."""
    if precision in POLICIES:
        return None
    if precision == "int8":
        return ("Keras 3's int8 path (Model.quantize('int8')) quantizes Dense, EinsumDense and Embedding only, not "
                "Conv2D or LSTM, so most of the zoo would stay float32; TF Lite's dynamic-range quantization works "
                "only through a SavedModel (docs/engines.md)")
    return f"{precision} is a GPU precision (TF32 matmuls); dlbench runs Keras models on TF/JAX/torch CPU kernels"


@contextlib.contextmanager
def dtype_policy(precision: str) -> Iterator[None]:
    """Keras's global dtype policy set to ``precision``'s while layers are made, then restored: the
    policy is process-wide state that each layer reads when it is constructed, so the next build
    in the same process starts from the policy it had before."""
    before = keras.config.dtype_policy()
    keras.config.set_dtype_policy(POLICIES[precision])
    try:
        yield
    finally:
        keras.config.set_dtype_policy(before)


def activation_dtypes(build: KerasBuild) -> list[str]:
    """The output types of the model's computing layers (Conv2D, Dense, LSTM, TiedDense) in one
    eager inference call on a zero sample, as the framework produced them."""
    global _RECORD
    spec = build.spec
    dummy = np.zeros((1, *spec.input.shape), np.int64 if spec.input.kind == "tokens" else np.float32)
    _RECORD = []
    try:
        build.model(keras_inputs(spec, dummy, None), training=False)
        return _RECORD
    finally:
        _RECORD = None


def precision_info(build: KerasBuild) -> dict[str, str]:
    """``param_dtype``: the type of the Keras variables holding the spec's parameters;
    ``compute_dtype``: :func:`activation_dtypes` (``"mixed:a,b"`` when the layers differ)."""
    params = [keras.backend.standardize_dtype(b.get().dtype) for b in build.params.values()]
    return {"param_dtype": _one_name(params), "compute_dtype": _one_name(activation_dtypes(build))}


class PolicyPrecision:
    """The precision members of a backend whose models are made under a Keras dtype policy (TensorFlow's
    and Keras 3's backends): the precisions it offers, the one asked, and the types a built model holds."""

    precisions = tuple(POLICIES)
    precision = DEFAULT_PRECISION

    def set_precision(self, precision: str) -> None:
        get_precision(precision)
        reason = unsupported_reason(precision)
        if reason:
            raise UnsupportedError(reason)
        self.precision = precision

    def precision_info(self, model: Any) -> dict[str, str]:
        """The Keras variables' type and the computing layers' output types in one eager call
        (:func:`precision_info`); ``model`` holds its :class:`KerasBuild` as ``build``."""
        return precision_info(model.build)


def _one_name(names: list[str]) -> str:
    distinct = sorted(set(names))
    if not distinct:
        return "none"
    return distinct[0] if len(distinct) == 1 else "mixed:" + ",".join(distinct)


def _float32(a: np.ndarray) -> np.ndarray:
    """A bfloat16/float16 array upcast (exactly) to float32; others unchanged."""
    return a.astype(np.float32) if a.dtype.name in ("bfloat16", "float16") else a


# --- building and loading -------------------------------------------------------------------------
def _name(canonical: str) -> str:
    """A Keras layer name for a canonical one: torch (Keras's torch backend registers variables
    as module parameters under the layer name) rejects "." in names."""
    return canonical.replace(".", "_")


def _same(a: np.ndarray) -> np.ndarray:
    return a


def _oihw_to_hwio(a: np.ndarray) -> np.ndarray:
    return np.transpose(a, (2, 3, 1, 0))


def _hwio_to_oihw(a: np.ndarray) -> np.ndarray:
    return np.transpose(a, (3, 2, 0, 1))


def _flatten_rows(chw: tuple[int, int, int]) -> tuple[Callable, Callable]:
    """Row permutation of a Dense after Flatten: canonical rows are (C, H, W) ordered, Keras's (H, W, C)."""
    c, h, w = chw

    def to_keras(a: np.ndarray) -> np.ndarray:
        return a.reshape(c, h, w, -1).transpose(1, 2, 0, 3).reshape(c * h * w, -1)

    def from_keras(a: np.ndarray) -> np.ndarray:
        return a.reshape(h, w, c, -1).transpose(2, 0, 1, 3).reshape(c * h * w, -1)
    return to_keras, from_keras


@dataclass
class Binding:
    """Where a canonical parameter lives: a getter for the Keras variable (it exists only once
    the model is built) and the layout conversions both ways."""

    get: Callable[[], Any]
    to_keras: Callable[[np.ndarray], np.ndarray] = _same
    from_keras: Callable[[np.ndarray], np.ndarray] = _same


@dataclass
class KerasBuild:
    """A built, loaded model with the maps the backends need."""

    spec: ModelSpec
    model: SpecModel
    params: dict[str, Binding]
    state: dict[str, Binding]
    trainable_names: list[str] = field(default_factory=list)  # aligned with model.trainable_variables
    precision: str = DEFAULT_PRECISION

    @property
    def loss_scale(self) -> float | None:
        """The static loss scale of a custom-loop gradient at amp-fp16 (None otherwise)."""
        return LOSS_SCALE if self.precision == "amp-fp16" else None

    def variable(self, name: str):
        return self.params[name].get()

    def moving_statistics(self) -> list:
        return [b.get() for b in self.state.values()]


class Builder(LayerBuilder):
    """Turns spec layers into Keras layers and records where each canonical parameter lives.
    Tests may subclass it to plant bugs, as with the torch backend's builder."""

    builds_for = "the Keras model builder"

    def __init__(self) -> None:
        self.params: dict[str, Binding] = {}
        self.state: dict[str, Binding] = {}
        self.dense: dict[str, keras.layers.Dense] = {}
        self._flattened: tuple[int, int, int] | None = None  # canonical (C, H, W) of a pending Flatten

    def after(self, layer: L.Layer) -> None:
        if not isinstance(layer, L.Flatten | L.Activation | L.Dropout | L.Dense):
            self._flattened = None

    def make_conv2d(self, layer: L.Conv2d, shape):
        k, p, s = layer.kernel, layer.padding, layer.stride
        same = s == 1 and k % 2 == 1 and p == k // 2 and p > 0
        conv = keras.layers.Conv2D(layer.out_channels, k, strides=s, padding="same" if same else "valid",
                                   groups=layer.groups, use_bias=layer.bias, kernel_initializer=PLACEHOLDER,
                                   name=_name(layer.name))
        self.params[f"{layer.name}.weight"] = Binding(lambda: conv.kernel, _oihw_to_hwio, _hwio_to_oihw)
        if layer.bias:
            self.params[f"{layer.name}.bias"] = Binding(lambda: conv.bias)
        if p and not same:
            return [keras.layers.ZeroPadding2D(p), conv]
        return conv

    def make_pool2d(self, layer: L.Pool2d, shape):
        _, h, w = shape
        k, s, p = layer.kernel, layer.stride, layer.padding
        fits = all(_pool_out(d, k, s, p, layer.ceil_mode) == _pool_out(d, k, s, p, False) for d in (h, w))
        if p == 0 and fits:  # Keras's own layer computes exactly this
            cls = keras.layers.MaxPooling2D if layer.op == "max" else keras.layers.AveragePooling2D
            return cls(k, s, padding="valid")
        return PaddedPool2D(layer.op, k, s, p, layer.ceil_mode, (h, w))

    def make_globalavgpool(self, layer, shape):
        return keras.layers.GlobalAveragePooling2D()

    def make_lrn(self, layer: L.LRN, shape):
        return LRN(layer.size, layer.alpha, layer.beta, layer.k)

    def make_batchnorm(self, layer: L.BatchNorm, shape):
        bn = keras.layers.BatchNormalization(axis=-1, momentum=1.0 - layer.momentum, epsilon=layer.eps,
                                             name=_name(layer.name))
        self.params[f"{layer.name}.gamma"] = Binding(lambda: bn.gamma)
        self.params[f"{layer.name}.beta"] = Binding(lambda: bn.beta)
        self.state[f"{layer.name}.running_mean"] = Binding(lambda: bn.moving_mean)
        self.state[f"{layer.name}.running_var"] = Binding(lambda: bn.moving_variance)
        return bn

    def make_dense(self, layer: L.Dense, shape):
        dense = keras.layers.Dense(layer.units, use_bias=layer.bias, trainable=layer.trainable,
                                   kernel_initializer=PLACEHOLDER, name=_name(layer.name))
        to_k, from_k = _same, _same
        if self._flattened is not None and math.prod(self._flattened[1:]) > 1:
            to_k, from_k = _flatten_rows(self._flattened)
        self._flattened = None
        self.params[f"{layer.name}.weight"] = Binding(lambda: dense.kernel, to_k, from_k)
        if layer.bias:
            self.params[f"{layer.name}.bias"] = Binding(lambda: dense.bias)
        self.dense[layer.name] = dense
        return dense

    def make_tieddense(self, layer: L.TiedDense, shape):
        tied = TiedDense(self.dense[layer.tied_to], layer.units, trainable=layer.trainable, name=_name(layer.name))
        self.params[f"{layer.name}.bias"] = Binding(lambda: tied.bias)
        return tied

    def make_activation(self, layer: L.Activation, shape):
        return keras.layers.Activation(layer.fn)

    def make_dropout(self, layer: L.Dropout, shape):
        return keras.layers.Dropout(layer.rate)

    def make_flatten(self, layer, shape):
        self._flattened = tuple(shape) if len(shape) == 3 else None
        return keras.layers.Flatten()

    def make_embedding(self, layer: L.Embedding, shape):
        emb = keras.layers.Embedding(layer.vocab, layer.dim, embeddings_initializer=PLACEHOLDER, name=_name(layer.name))
        self.params[f"{layer.name}.weight"] = Binding(lambda: emb.embeddings)
        return emb

    def make_lstm(self, layer: L.LSTM, shape):
        # (a bfloat16/float16 variable could not take the default orthogonal recurrent initializer either: a QR
        # decomposition, which neither TF nor JAX's LAPACK has in that type)
        lstm = keras.layers.LSTM(layer.units, return_sequences=True, kernel_initializer=PLACEHOLDER,
                                 recurrent_initializer=PLACEHOLDER, name=_name(layer.name))
        self.params[f"{layer.name}.w_x"] = Binding(lambda: lstm.cell.kernel)
        self.params[f"{layer.name}.w_h"] = Binding(lambda: lstm.cell.recurrent_kernel)
        self.params[f"{layer.name}.b"] = Binding(lambda: lstm.cell.bias)
        return lstm

    def make_maskedmean(self, layer, shape):
        return MaskedMean()

    def make_mark(self, layer: L.Mark, shape):
        return Mark(name=_name(f"mark_{layer.name}"))

    def make_zeropadshortcut(self, layer: L.ZeroPadShortcut, shape):
        return ZeroPadShortcut(layer.out_channels, layer.stride)

    def make_residual(self, layer: L.Residual, shape):
        body, _ = self.sequence(layer.body, shape)
        short, _ = self.sequence(layer.shortcut, shape)
        return Residual(body, short, layer.post == "relu")

    # --- transformer layers ---
    def make_positionembedding(self, layer: L.PositionEmbedding, shape):
        m = PositionEmbedding(layer.max_len, layer.dim, name=_name(layer.name))
        self.params[f"{layer.name}.weight"] = Binding(lambda: m.weight)
        return m

    def make_segmentembedding(self, layer: L.SegmentEmbedding, shape):
        m = SegmentEmbedding(layer.types, layer.dim, name=_name(layer.name))
        self.params[f"{layer.name}.weight"] = Binding(lambda: m.weight)
        return m

    def make_layernorm(self, layer: L.LayerNorm, shape):
        m = keras.layers.LayerNormalization(axis=-1, epsilon=layer.eps, name=_name(layer.name))
        self.params[f"{layer.name}.weight"] = Binding(lambda: m.gamma)
        self.params[f"{layer.name}.bias"] = Binding(lambda: m.beta)
        return m

    def make_rmsnorm(self, layer: L.RMSNorm, shape):
        m = keras.layers.RMSNormalization(axis=-1, epsilon=layer.eps, name=_name(layer.name))
        self.params[f"{layer.name}.weight"] = Binding(lambda: m.scale)
        return m

    def make_gelu(self, layer: L.GELU, shape):
        return GELU(layer.approximate == "tanh")

    def make_attention(self, layer: L.Attention, shape):
        m = Attention(layer, layer.dims(shape[-1]), shape[-1], name=_name(layer.name))
        for proj in "qkvo":
            dense = getattr(m, f"w{proj}")
            self.params[f"{layer.name}.w{proj}"] = Binding(lambda d=dense: d.kernel)
            if layer.bias:
                self.params[f"{layer.name}.b{proj}"] = Binding(lambda d=dense: d.bias)
        return m

    def make_swiglu(self, layer: L.SwiGLU, shape):
        m = SwiGLU(shape[-1], layer.hidden, name=_name(layer.name))
        for leaf, dense in (("w_gate", m.gate), ("w_up", m.up), ("w_down", m.down)):
            self.params[f"{layer.name}.{leaf}"] = Binding(lambda d=dense: d.kernel)
        return m

    def make_skipblock(self, layer: L.SkipBlock, shape):
        body, _ = self.sequence(layer.body, shape)
        post, _ = self.sequence(layer.post, shape)
        return SkipBlock(body, post)

    def make_patchembed(self, layer: L.PatchEmbed, shape):
        m = PatchEmbed(layer.dim, layer.patch, name=_name(layer.name))
        self.params[f"{layer.name}.weight"] = Binding(lambda: m.conv.kernel, _oihw_to_hwio, _hwio_to_oihw)
        self.params[f"{layer.name}.bias"] = Binding(lambda: m.conv.bias)
        self.params[f"{layer.name}.cls"] = Binding(lambda: m.cls)
        return m

    def make_taketoken(self, layer: L.TakeToken, shape):
        return TakeToken(layer.index)

    def make_lmhead(self, layer: L.LMHead, shape):
        return TiedLMHead(self.params[f"{layer.tied_to}.weight"].get)


def keras_inputs(spec: ModelSpec, x: np.ndarray, mask: np.ndarray | None) -> Any:
    """NumPy model inputs in Keras layout: NCHW -> NHWC, token ids int32, and the mask as ``valid``."""
    if spec.input.kind == "image":
        x = np.ascontiguousarray(np.transpose(x, (0, 2, 3, 1)))
    elif spec.input.kind == "tokens":
        x = x.astype(np.int32)
    # the mask is over token steps: a transformer's part (a sequence or image input) has none, and its
    # MaskedMean (the part's pooling, models.split) averages every step
    if spec.input.kind == "tokens" and (any(isinstance(layer, L.MaskedMean) for layer in L.walk(spec.layers)) or (
            spec.input.variable_length and any(isinstance(layer, L.Attention) for layer in L.walk(spec.layers)))):
        valid = np.ones(x.shape[:2], np.float32) if mask is None else mask.astype(np.float32)
        return {"x": x, "valid": valid}
    return x


def build_keras_model(spec: ModelSpec, weights: Weights, builder: Builder | None = None,
                      precision: str = DEFAULT_PRECISION) -> KerasBuild:
    """The spec as a :class:`SpecModel` holding ``weights`` (converted from canonical layout), its
    layers made under ``precision``'s dtype policy (:data:`POLICIES`)."""
    builder = builder or Builder()
    with dtype_policy(precision):
        steps, _ = builder.sequence(spec.layers, spec.input.shape)
        model = SpecModel(steps, reconstructs=spec.loss.kind == "mse")
    dummy = np.zeros((1, *spec.input.shape), np.int64 if spec.input.kind == "tokens" else np.float32)
    model(keras_inputs(spec, dummy, None), training=False)  # one sample through: creates the variables
    for name, binding in builder.params.items():
        _assign(name, binding, weights.params[name])
    for name, binding in builder.state.items():
        _assign(name, binding, weights.state[name])
    build = KerasBuild(spec, model, builder.params, builder.state, precision=precision)
    by_id = {id(b.get()): n for n, b in builder.params.items()}
    unbound = [v.path for v in model.trainable_variables if id(v) not in by_id]
    if unbound:
        raise ValueError(f"trainable Keras variables with no canonical parameter: {unbound[:3]}")
    build.trainable_names = [by_id[id(v)] for v in model.trainable_variables]
    expected = set(spec.trainable_names())
    if set(build.trainable_names) != expected:
        raise ValueError(f"trainable variables {sorted(set(build.trainable_names) ^ expected)[:4]} differ from the spec's")
    return build


def _assign(name: str, binding: Binding, value: np.ndarray) -> None:
    var = binding.get()
    converted = np.ascontiguousarray(binding.to_keras(value)).astype(np.float32)
    if tuple(converted.shape) != tuple(var.shape):
        raise ValueError(f"{name}: canonical {value.shape} -> {converted.shape} vs Keras {tuple(var.shape)}")
    var.assign(converted)


def get_params(build: KerasBuild) -> dict[str, np.ndarray]:
    """Current parameters in canonical layout."""
    return {n: _float32(b.from_keras(np.asarray(ops.convert_to_numpy(b.get())))).copy()
            for n, b in build.params.items()}


def grads_to_canonical(build: KerasBuild, grads: list) -> dict[str, np.ndarray]:
    """Gradients aligned with ``model.trainable_variables`` (NumPy arrays or None) in canonical layout."""
    out = {}
    for name, g in zip(build.trainable_names, grads, strict=True):
        binding = build.params[name]
        if g is None:
            g = np.zeros(tuple(binding.get().shape), np.float32)
        out[name] = _float32(binding.from_keras(np.asarray(g)))
    return out


def param_count(build: KerasBuild) -> int:
    """Keras's own ``count_params()`` (every weight, trainable or not, counted once) minus the batch
    norm moving mean and variance, which the spec counts as state, not parameters."""
    moving = sum(math.prod(v.shape) for v in build.moving_statistics())
    return int(build.model.count_params()) - int(moving)
