"""JAX backend: the spec built from Flax NNX layers, every closure one ``jax.jit``-compiled function.

Why Flax NNX and not Linen: Flax's own docs (0.10 onwards, still for 0.12) call NNX the core
API and encourage new code to use it; Linen stays supported but is the older API. NNX's
standard layers (``nnx.Conv``, ``nnx.Linear``, ``nnx.BatchNorm``, ``nnx.Embed``, ``nnx.Dropout``,
``nnx.RNN`` over ``nnx.OptimizedLSTMCell``, ``nnx.max_pool``/``nnx.avg_pool``) build the network;
plain ``jax.numpy``/``jax.lax`` covers what Flax has no layer for (LRN, the ceil-mode window
clip, the masked mean, ResNet's option-A shortcut). Shared references are part of an NNX graph,
so the tied SAE decoder holds its encoder module and reads the encoder's kernel transposed.
Transformers: ``nnx.LayerNorm``, ``nnx.RMSNorm``, ``jax.nn.gelu``, ``nnx.Linear`` projections and
``jax.nn.dot_product_attention`` in JAX's (N, T, heads, head_dim) layout (grouped-query heads
natively, ``is_causal``, the padding mask as a boolean key mask); rotary tables are constants of
the trace; the tied LM head is the embedding's own ``nnx.Embed.attend``.

Fast path and fairness settings:

* float32 everywhere (``jax_enable_x64`` off: token ids and labels are int32 on the device);
  on a GPU ``jax_default_matmul_precision='highest'`` so matmuls and convolutions are not
  silently TF32 (torch turns TF32 off too).
* layout: NHWC, XLA's preferred CPU layout. The input is transposed once in ``place`` (outside
  the timed closure); conv kernels go OIHW -> HWIO and the rows of the Dense after a Flatten are
  permuted at load time, so the network computes the spec's function unchanged.
* jit scope: Flax's functional pattern (``nnx.split`` once at build, ``nnx.merge`` inside the
  traced function, as Flax's performance guide recommends over ``nnx.jit``): ``forward``,
  ``gradient`` (``jax.value_and_grad`` of the training loss wrt the trainable parameters) and
  ``train_step`` (gradient + ``optax.sgd(lr, momentum=0.9)`` or ``optax.adamw`` + the BN
  running-statistics update)
  are each ONE ``jax.jit`` function taking the parameter pytrees as arguments (never baked in as
  constants).
* convergence: ``trainer`` calls ``train_step``'s jitted function and ``predictor`` ``forward``'s,
  with the batch arrays as arguments, so every batch of one shape reuses one executable.
  Variable-length token batches (lstm-imdb) are padded to the model's maximum length with mask 0
  before the call: the function is unchanged (causal LSTM, masked mean), and the step compiles
  once per batch size instead of once per distinct length.
* donation: ``train_step`` (and ``trainer``) donates its parameters, optimiser state, BN
  statistics and step counter; the updated state is stored on the model, so the closure can be
  called repeatedly.
* threads: XLA has no runtime thread setting; its CPU thread pool is sized from the process's
  CPU affinity, which ``dlbench.worker`` sets before the import. ``set_threads`` reports it.
* cache: if ``DLBENCH_CACHE_DIR`` is set, JAX's persistent compilation cache lives there with
  the minimum compile-time and entry-size thresholds at 0, so a second process starts warm.
* ``sync`` is ``jax.block_until_ready``; the outputs of one XLA executable complete together,
  so blocking on ``train_step``'s loss waits for its parameter update too.

Differences a reader should know:

* dropout: off in ``forward``; in ``gradient``/``train_step`` a PRNG key derived by folding a
  device-side step counter into a fixed key, so every call draws a fresh mask.
* ``gradient`` computes the batch-statistics forward (training mode) but discards the updated
  running statistics; only ``train_step`` stores them.
* Flax's BatchNorm updates the running variance with the biased batch variance (torch uses the
  unbiased one); the momentum is converted (Flax's decay = 1 - spec momentum). This affects only
  eval-mode outputs after training, never the equivalence gate.
* ``nnx.OptimizedLSTMCell`` has exactly one bias per gate (on the recurrent projection) and the
  spec's gate order i, f, g, o, so its parameter count equals the spec's.
* trace time: Flax 0.12's ``Variable.set_value`` probes ``value.sharding``, and on a tracer JAX
  0.10 builds that AttributeError's message by walking everything traced so far, so each BN
  running-statistics update costs time linear in the program (quadratic overall; about 40% of
  ResNet-56's first training trace; jax-ml/jax PR 40041). Not worked around: it is what a user of
  these versions pays, and it shows only in the first call (the ``compile`` scenario).
* devices: ``cpu:N`` is this process's N-th CPU device (``jax.local_devices``: in a multi-process
  run, such as the data-parallel worker's, ``jax.devices()`` lists the other processes' too), and
  ``cuda``/``gpu`` when a CUDA jaxlib is installed; the GPU path (device placement, TF32 off,
  allocator peak from ``memory_stats()``) ran the gate and timed cells on an H100 (docs/gpu.md).
"""

from __future__ import annotations

import importlib.metadata
import os
import pathlib
from collections.abc import Callable
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from dlbench.core.cell import DEFAULT_DEVICE
from dlbench.core.precision import DEFAULT as DEFAULT_PRECISION
from dlbench.core.precision import get_precision
from dlbench.data.synthetic import Batch
from dlbench.frameworks.base import Backend, OptimizerSpec, UnsupportedError
from dlbench.frameworks.builder import LayerBuilder, make_optimizer
from dlbench.frameworks.jax import DECLARATION
from dlbench.frameworks.jax.layers import (  # the Flax layers the builder makes
    GELU,
    LRN,
    Activation,
    Attention,
    Context,
    Flatten,
    Frozen,
    GlobalAvgPool,
    LSTMLayer,
    Mark,
    MaskedMean,
    PatchEmbed,
    Pool,
    PositionEmbedding,
    Residual,
    SegmentEmbedding,
    Seq,
    SkipBlock,
    SwiGLU,
    TakeToken,
    TiedDense,
    TiedLMHead,
    ZeroPadShortcut,
)
from dlbench.frameworks.jax.profiler import jax_profile
from dlbench.measure.profile import ProfileTrace
from dlbench.models import layers as L
from dlbench.models.spec import ModelSpec
from dlbench.models.split import differentiates_input
from dlbench.models.weights import Weights


def _configure_cache() -> str | None:
    """Point JAX's persistent compilation cache at ``DLBENCH_CACHE_DIR`` (before any compile)."""
    cache_dir = os.environ.get("DLBENCH_CACHE_DIR")
    if cache_dir:
        os.makedirs(cache_dir, exist_ok=True)
        jax.config.update("jax_compilation_cache_dir", cache_dir)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return cache_dir


CACHE_DIR = _configure_cache()

# Compatibility (docs/versions.md). Flax before 0.12 has no nnx.List: a plain list attribute holding
# modules is a graph node there, as nnx.List is now. Flax before 0.11 (the releases that accept JAX
# 0.4.3x and 0.5) splits a module into VariableState copies, not the module's own Variables, has no
# nnx.to_flat_state, and reads and writes a variable through ``.value`` only: the helpers below.
_OLD_FLAX = tuple(int(p) for p in importlib.metadata.version("flax").split(".")[:2]) < (0, 11)


def _flat(state: nnx.State):
    if not _OLD_FLAX:
        return nnx.to_flat_state(state)
    flat = state.flat_state()  # Flax 0.10.2: a dict; 0.10.3 and later (JAX 0.5's line): a FlatState of (path, value)
    return flat.items() if isinstance(flat, dict) else flat


def _read(var) -> jax.Array:
    return var.value if _OLD_FLAX else var[...]


def _write(var: nnx.Variable, value: jax.Array) -> None:
    if _OLD_FLAX:
        var.value = value
    else:
        var[...] = value


def _variable_paths(net: nnx.Module, states: dict[str, nnx.State]) -> dict[int, tuple[str, tuple]]:
    """Each of the module's own Variables (by id) -> (collection, path). Flax 0.11+ splits into those very
    Variables, so the split states say it; before, the split holds copies and the module is walked."""
    if not _OLD_FLAX:
        return {id(var): (collection, path) for collection, state in states.items() for path, var in _flat(state)}
    kinds = (("frozen", Frozen), ("params", nnx.Param), ("stats", nnx.BatchStat))  # Frozen first: it is a Param
    return {id(node): (next(c for c, t in kinds if isinstance(node, t)), path) for path, node in nnx.iter_graph(net)
            if isinstance(node, Frozen | nnx.Param | nnx.BatchStat)}




# A binding ties a canonical parameter to a Flax variable: (variable, to_flax, from_flax).
Binding = tuple[nnx.Variable, Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]]


def _same(a: np.ndarray) -> np.ndarray:
    return a


def _oihw_to_hwio(a: np.ndarray) -> np.ndarray:
    return a.transpose(2, 3, 1, 0)


def _hwio_to_oihw(a: np.ndarray) -> np.ndarray:
    return a.transpose(3, 2, 0, 1)


def _flatten_rows(chw: tuple[int, int, int]) -> tuple[Callable, Callable]:
    """Row permutation of a Dense after Flatten: canonical rows follow (C, H, W), NHWC's (H, W, C)."""
    c, h, w = chw

    def to_flax(a: np.ndarray) -> np.ndarray:
        return a.reshape(c, h, w, -1).transpose(1, 2, 0, 3).reshape(c * h * w, -1)

    def from_flax(a: np.ndarray) -> np.ndarray:
        return a.reshape(h, w, c, -1).transpose(2, 0, 1, 3).reshape(c * h * w, -1)
    return to_flax, from_flax


class Builder(LayerBuilder):
    """Turns layers into Flax modules holding the canonical weights, and records where each
    canonical parameter lives. Tests may subclass it to plant bugs.

    Each layer's initialisers return the converted canonical value: Flax's own random
    initialisers would compile one kernel per shape only to be overwritten."""

    builds_for = "jax backend"

    def __init__(self, weights: Weights, dtype: Any = None, param_dtype: Any = jnp.float32) -> None:
        self.weights = weights
        #: Flax's two type arguments of every layer: ``dtype`` the compute type (None: inferred from
        #: the inputs and parameters, float32 here), ``param_dtype`` the parameters' storage type
        self.dtype, self.param_dtype = dtype, param_dtype
        self.rngs = nnx.Rngs(0)  # required by the layers; the initialisers below ignore the key
        self.params: dict[str, Binding] = {}
        self.state: dict[str, nnx.Variable] = {}
        self.linears: dict[str, nnx.Linear] = {}
        self.embeds: dict[str, nnx.Embed] = {}  # for a tied LM head
        self.flattened: tuple[int, int, int] | None = None  # (C, H, W) before the last Flatten

    def init(self, name: str, to_flax: Callable[[np.ndarray], np.ndarray] = _same) -> Callable:
        """A Flax initialiser that returns canonical parameter ``name`` converted to Flax's layout."""
        value = np.ascontiguousarray(to_flax(self.weights.params[name]), dtype=np.float32)

        def initializer(key, shape, dtype=jnp.float32) -> jax.Array:
            if tuple(shape) != value.shape:
                raise ValueError(f"{name}: canonical {self.weights.params[name].shape} -> {value.shape}, "
                                 f"flax wants {tuple(shape)}")
            return jnp.asarray(value, dtype)
        return initializer

    def sequence(self, layers: tuple[L.Layer, ...], shape: tuple[int, ...]) -> tuple[Seq, tuple[int, ...]]:
        mods, shape = super().sequence(layers, shape)
        return Seq(mods), shape

    def after(self, layer: L.Layer) -> None:
        if not isinstance(layer, L.Flatten | L.Activation | L.Dropout | L.Dense):
            self.flattened = None

    def make_conv2d(self, layer: L.Conv2d, shape) -> nnx.Module:
        w, b = f"{layer.name}.weight", f"{layer.name}.bias"
        m = nnx.Conv(shape[0], layer.out_channels, (layer.kernel, layer.kernel), layer.stride, padding=layer.padding,
                     feature_group_count=layer.groups, use_bias=layer.bias, kernel_init=self.init(w, _oihw_to_hwio),
                     bias_init=self.init(b) if layer.bias else nnx.initializers.zeros, rngs=self.rngs,
                     dtype=self.dtype, param_dtype=self.param_dtype)
        self.params[w] = (m.kernel, _oihw_to_hwio, _hwio_to_oihw)
        if layer.bias:
            self.params[b] = (m.bias, _same, _same)
        return m

    def make_pool2d(self, layer: L.Pool2d, shape) -> nnx.Module:
        return Pool(layer, shape)

    def make_globalavgpool(self, layer, shape) -> nnx.Module:
        return GlobalAvgPool()

    def make_lrn(self, layer: L.LRN, shape) -> nnx.Module:
        return LRN(layer)

    def make_batchnorm(self, layer: L.BatchNorm, shape) -> nnx.Module:
        m = nnx.BatchNorm(shape[0], momentum=1.0 - layer.momentum, epsilon=layer.eps,
                          scale_init=self.init(f"{layer.name}.gamma"), bias_init=self.init(f"{layer.name}.beta"),
                          rngs=self.rngs, dtype=self.dtype, param_dtype=self.param_dtype)
        self.params[f"{layer.name}.gamma"] = (m.scale, _same, _same)
        self.params[f"{layer.name}.beta"] = (m.bias, _same, _same)
        for leaf, var in (("running_mean", m.mean), ("running_var", m.var)):
            self.state[f"{layer.name}.{leaf}"] = var
            _write(var, jnp.asarray(self.weights.state[f"{layer.name}.{leaf}"], jnp.float32))
        return m

    def make_dense(self, layer: L.Dense, shape) -> nnx.Module:
        to_flax, from_flax = _flatten_rows(self.flattened) if self.flattened else (_same, _same)
        self.flattened = None
        w, b = f"{layer.name}.weight", f"{layer.name}.bias"
        m = nnx.Linear(shape[-1], layer.units, use_bias=layer.bias, kernel_init=self.init(w, to_flax),
                       bias_init=self.init(b) if layer.bias else nnx.initializers.zeros, rngs=self.rngs,
                       dtype=self.dtype, param_dtype=self.param_dtype)
        if not layer.trainable:
            m.kernel = Frozen(m.kernel[...])
            if layer.bias:
                m.bias = Frozen(m.bias[...])
        self.params[w] = (m.kernel, to_flax, from_flax)
        if layer.bias:
            self.params[b] = (m.bias, _same, _same)
        self.linears[layer.name] = m
        return m

    def make_tieddense(self, layer: L.TiedDense, shape) -> nnx.Module:
        m = TiedDense(self.linears[layer.tied_to],
                      self.init(f"{layer.name}.bias")(None, (layer.units,), self.param_dtype),
                      layer.trainable)
        self.params[f"{layer.name}.bias"] = (m.bias, _same, _same)
        return m

    def make_activation(self, layer: L.Activation, shape) -> nnx.Module:
        return Activation(layer.fn)

    def make_dropout(self, layer: L.Dropout, shape) -> nnx.Module:
        return nnx.Dropout(layer.rate)

    def make_flatten(self, layer, shape) -> nnx.Module:
        self.flattened = tuple(shape) if len(shape) == 3 else None
        return Flatten()

    def make_embedding(self, layer: L.Embedding, shape) -> nnx.Module:
        m = nnx.Embed(layer.vocab, layer.dim, embedding_init=self.init(f"{layer.name}.weight"), rngs=self.rngs,
                      dtype=self.dtype, param_dtype=self.param_dtype)
        self.params[f"{layer.name}.weight"] = (m.embedding, _same, _same)
        self.embeds[layer.name] = m
        return m

    def make_lstm(self, layer: L.LSTM, shape) -> nnx.Module:
        n = layer.name
        m = LSTMLayer(nnx.OptimizedLSTMCell(shape[-1], layer.units, kernel_init=self.init(f"{n}.w_x"),
                                            recurrent_kernel_init=self.init(f"{n}.w_h"), bias_init=self.init(f"{n}.b"),
                                            rngs=self.rngs, dtype=self.dtype, param_dtype=self.param_dtype))
        cell = m.rnn.cell
        self.params[f"{n}.w_x"] = (cell.dense_i.kernel, _same, _same)
        self.params[f"{n}.w_h"] = (cell.dense_h.kernel, _same, _same)
        self.params[f"{n}.b"] = (cell.dense_h.bias, _same, _same)
        return m

    def make_maskedmean(self, layer, shape) -> nnx.Module:
        return MaskedMean()

    def make_mark(self, layer: L.Mark, shape) -> nnx.Module:
        return Mark(layer.name)

    def make_zeropadshortcut(self, layer: L.ZeroPadShortcut, shape) -> nnx.Module:
        return ZeroPadShortcut(layer.out_channels, layer.stride)

    def make_residual(self, layer: L.Residual, shape) -> nnx.Module:
        body, _ = self.sequence(layer.body, shape)
        short, _ = self.sequence(layer.shortcut, shape)
        return Residual(body, short, layer.post == "relu")

    # --- transformer layers ---
    def _linear(self, name: str, inputs: int, units: int, bias: str | None) -> nnx.Linear:
        m = nnx.Linear(inputs, units, use_bias=bias is not None, kernel_init=self.init(name),
                       bias_init=self.init(bias) if bias else nnx.initializers.zeros, rngs=self.rngs,
                       dtype=self.dtype, param_dtype=self.param_dtype)
        self.params[name] = (m.kernel, _same, _same)
        if bias:
            self.params[bias] = (m.bias, _same, _same)
        return m

    def _param(self, name: str) -> jax.Array:
        return jnp.asarray(self.weights.params[name], self.param_dtype)

    def make_positionembedding(self, layer: L.PositionEmbedding, shape) -> nnx.Module:
        m = PositionEmbedding(self._param(f"{layer.name}.weight"))
        self.params[f"{layer.name}.weight"] = (m.weight, _same, _same)
        return m

    def make_segmentembedding(self, layer: L.SegmentEmbedding, shape) -> nnx.Module:
        m = SegmentEmbedding(self._param(f"{layer.name}.weight"))
        self.params[f"{layer.name}.weight"] = (m.weight, _same, _same)
        return m

    def make_layernorm(self, layer: L.LayerNorm, shape) -> nnx.Module:
        m = nnx.LayerNorm(shape[-1], epsilon=layer.eps, scale_init=self.init(f"{layer.name}.weight"),
                          bias_init=self.init(f"{layer.name}.bias"), rngs=self.rngs, dtype=self.dtype,
                          param_dtype=self.param_dtype)
        self.params[f"{layer.name}.weight"] = (m.scale, _same, _same)
        self.params[f"{layer.name}.bias"] = (m.bias, _same, _same)
        return m

    def make_rmsnorm(self, layer: L.RMSNorm, shape) -> nnx.Module:
        m = nnx.RMSNorm(shape[-1], epsilon=layer.eps, scale_init=self.init(f"{layer.name}.weight"), rngs=self.rngs,
                        dtype=self.dtype, param_dtype=self.param_dtype)
        self.params[f"{layer.name}.weight"] = (m.scale, _same, _same)
        return m

    def make_gelu(self, layer: L.GELU, shape) -> nnx.Module:
        return GELU(layer.approximate)

    def make_attention(self, layer: L.Attention, shape) -> nnx.Module:
        d = shape[-1]
        heads, kv, hd = layer.dims(d)
        n = layer.name

        def bias(p: str) -> str | None:
            return f"{n}.b{p}" if layer.bias else None
        return Attention(self._linear(f"{n}.wq", d, heads * hd, bias("q")), self._linear(f"{n}.wk", d, kv * hd, bias("k")),
                         self._linear(f"{n}.wv", d, kv * hd, bias("v")), self._linear(f"{n}.wo", heads * hd, d, bias("o")),
                         layer, (heads, kv, hd))

    def make_swiglu(self, layer: L.SwiGLU, shape) -> nnx.Module:
        d, h, n = shape[-1], layer.hidden, layer.name
        return SwiGLU(self._linear(f"{n}.w_gate", d, h, None), self._linear(f"{n}.w_up", d, h, None),
                      self._linear(f"{n}.w_down", h, d, None))

    def make_skipblock(self, layer: L.SkipBlock, shape) -> nnx.Module:
        body, _ = self.sequence(layer.body, shape)
        post, _ = self.sequence(layer.post, shape)
        return SkipBlock(body, post)

    def make_patchembed(self, layer: L.PatchEmbed, shape) -> nnx.Module:
        w, b, p = f"{layer.name}.weight", f"{layer.name}.bias", layer.patch
        conv = nnx.Conv(shape[0], layer.dim, (p, p), p, padding="VALID", kernel_init=self.init(w, _oihw_to_hwio),
                        bias_init=self.init(b), rngs=self.rngs, dtype=self.dtype, param_dtype=self.param_dtype)
        m = PatchEmbed(conv, self._param(f"{layer.name}.cls"))
        self.params[w] = (conv.kernel, _oihw_to_hwio, _hwio_to_oihw)
        self.params[b] = (conv.bias, _same, _same)
        self.params[f"{layer.name}.cls"] = (m.cls, _same, _same)
        return m

    def make_taketoken(self, layer: L.TakeToken, shape) -> nnx.Module:
        return TakeToken(layer.index)

    def make_lmhead(self, layer: L.LMHead, shape) -> nnx.Module:
        return TiedLMHead(self.embeds[layer.tied_to])


Path = tuple[Any, ...]

#: the two Flax type arguments (``dtype`` = compute, ``param_dtype`` = storage) of each precision
_FLAX_DTYPES: dict[str, tuple[Any, Any]] = {
    "fp32": (None, jnp.float32),
    "bf16": (jnp.bfloat16, jnp.bfloat16),
    "fp16": (jnp.float16, jnp.float16),
    "amp-bf16": (jnp.bfloat16, jnp.float32),
    "amp-fp16": (jnp.float16, jnp.float32),
}
#: precisions whose inputs ``place`` casts (parameters and compute both in the low type)
_CAST = {"bf16": jnp.bfloat16, "fp16": jnp.float16}
#: amp-fp16's static loss scale (optax has no loss scaling; torch's GradScaler starts at 2**16 and
#: halves on overflow; 2**12 keeps a loss of order 10 times it far below float16's 65504 while
#: lifting gradients of order 1e-8, which would flush to zero in float16, into its normal range)
LOSS_SCALE = 2.0 ** 12


class JaxModel:
    """The split network (graph + state pytrees on the device) and its jitted functions.

    ``params`` (trainable), ``frozen``, ``stats`` (BN running statistics) and ``rest`` are the
    current state; ``train_step`` replaces them after every call. ``bindings`` map a canonical
    name to (collection, path in that collection, to_flax, from_flax)."""

    def __init__(self, spec: ModelSpec, net: Seq, builder: Builder, device: jax.Device, variant: str,
                 precision: str = DEFAULT_PRECISION):
        self.spec, self.device, self.variant, self.precision = spec, device, variant, precision
        #: the type ``place`` gives a float input: the compute type for a cast model (bf16, fp16);
        #: float32 otherwise (under amp-* the first layer casts it, as Flax's ``dtype`` does)
        self.input_dtype = jnp.dtype(_CAST.get(precision, jnp.float32))
        self.loss_scale = LOSS_SCALE if precision == "amp-fp16" else None
        missing = set(spec.param_shapes()) - set(builder.params)
        if missing:
            raise ValueError(f"parameters not bound to a flax variable: {sorted(missing)}")
        self.graphdef, frozen, params, stats, rest = nnx.split(net, Frozen, nnx.Param, nnx.BatchStat, ...)
        self.frozen, self.params, self.stats, self.rest = jax.device_put((frozen, params, stats, rest), device)
        where = _variable_paths(net, {"frozen": frozen, "params": params, "stats": stats})
        # split returns the module's own Variable objects, so identity finds each binding's path
        self.bindings = {name: (*where[id(var)], to_flax, from_flax)
                         for name, (var, to_flax, from_flax) in builder.params.items()}
        self.state_paths = {name: where[id(var)][1] for name, var in builder.state.items()}
        self.step = jax.device_put(jnp.zeros((), jnp.uint32), device)
        self.key = jax.device_put(jax.random.key(0), device)
        self.forward_fn, self.grad_fn = _make_functions(spec, self.graphdef, self.loss_scale,
                                                        differentiates_input(spec))
        self.train_fns: dict[OptimizerSpec, Callable] = {}
        self.opt_state: Any = None


def _loss(spec: ModelSpec, out: jax.Array, x: jax.Array, y: jax.Array | None, marks: dict) -> jax.Array:
    """The mean loss, computed in float32 whatever the network's compute type (the output and
    target are upcast first), as every framework's mixed-precision recipe keeps the softmax and
    the reduction in float32."""
    out = out.astype(jnp.float32)
    if spec.loss.kind == "mse":
        target = marks.get(spec.loss.target, x).astype(jnp.float32)
        return jnp.mean((out - target) ** 2)
    logits = out.reshape(-1, out.shape[-1])
    return optax.softmax_cross_entropy_with_integer_labels(logits, y.reshape(-1)).mean()


def _training_loss(spec: ModelSpec, graphdef: nnx.GraphDef) -> Callable:
    """``(params, frozen, stats, rest, x, y, mask, key) -> (loss, new BN statistics)``."""
    def loss_fn(params, frozen, stats, rest, x, y, mask, key):
        # Variables a function mutates must be made in its own trace (here value_and_grad's,
        # not the enclosing jit's), so the BN statistics are rebuilt before the merge.
        stats = jax.tree.map(lambda a: a, stats)
        net = nnx.merge(graphdef, frozen, params, stats, rest)
        ctx = Context(mask=mask, train=True, rngs=nnx.Rngs(dropout=key))
        out = net(x, ctx)
        return _loss(spec, out, x, y, ctx.marks), nnx.state(net, nnx.BatchStat)
    return loss_fn


def _scaled(loss_fn: Callable, loss_scale: float | None) -> Callable:
    """``loss_fn`` returning ``(loss * loss_scale, (loss, aux))``: the value to differentiate (a
    scaled loss keeps small float16 gradients from flushing to zero on the way back) and the true
    loss. Without a scale the differentiated value is the loss itself."""
    def scaled(*args):
        loss, aux = loss_fn(*args)
        return (loss if loss_scale is None else loss * loss_scale), (loss, aux)
    return scaled


def _unscale(grads: Any, loss_scale: float | None) -> Any:
    """The true gradients of a scaled loss (divided in float32: the master parameters' type)."""
    return grads if loss_scale is None else jax.tree.map(lambda g: g / jnp.asarray(loss_scale, g.dtype), grads)


def _make_functions(spec: ModelSpec, graphdef: nnx.GraphDef, loss_scale: float | None = None,
                    with_input: bool = False) -> tuple[Callable, Callable]:
    """The jitted forward and gradient; ``with_input``: the gradient is ``(parameters' gradients, the
    input's)`` (a part after the first, models/split.py)."""
    loss_fn = _scaled(_training_loss(spec, graphdef), loss_scale)
    argnums = (0, 4) if with_input else 0

    @jax.jit
    def forward_fn(params, frozen, stats, rest, x, mask):
        net = nnx.merge(graphdef, frozen, params, stats, rest)
        out = net(x, Context(mask=mask, train=False))
        return out.transpose(0, 3, 1, 2) if out.ndim == 4 else out  # an image output goes back to NCHW

    @jax.jit
    def grad_fn(params, frozen, stats, rest, x, y, mask, step, key):
        (_, (loss, _)), grads = jax.value_and_grad(loss_fn, argnums=argnums, has_aux=True)(
            params, frozen, stats, rest, x, y, mask, jax.random.fold_in(key, step))
        return loss, _unscale(grads, loss_scale), step + 1
    return forward_fn, grad_fn


def optimizer(opt: OptimizerSpec) -> optax.GradientTransformation:
    """The optax transformation of ``opt``: SGD with (PyTorch-form) momentum, or ``optax.adamw``
    (epsilon after the bias correction, as torch's; decoupled decay ``lr * wd * p``): the backend's
    rules (:func:`make_optimizer`)."""
    return make_optimizer(JaxBackend, opt)


def train_update(spec: ModelSpec, graphdef: nnx.GraphDef, tx: optax.GradientTransformation,
                 reduce_loss: Callable[[jax.Array], jax.Array] | None = None,
                 loss_scale: float | None = None) -> Callable:
    """The training step as a pure function, not jitted: ``(params, opt_state, stats, step, frozen,
    rest, x, y, mask, key) -> (params, opt_state, stats, step, loss)``. ``train_step`` jits it as it
    is. The JAX data-parallel worker (:mod:`dlbench.frameworks.jax.dp_worker`) runs it under ``shard_map``
    with ``reduce_loss`` = the mean over its processes, applied to the loss before it is
    differentiated (a data-parallel loss as JAX's shard_map guide writes it): the gradient with
    respect to the replicated parameters is then the mean of the processes' gradients, JAX's
    autodiff summing them over the processes. So the worker's model is this backend's.
    ``loss_scale`` (amp-fp16): the loss is multiplied by it before differentiation and the
    gradients divided by it before the update (a static loss scale; see :data:`LOSS_SCALE`)."""
    local_loss = _training_loss(spec, graphdef)

    def reduced(*args):
        loss, new_stats = local_loss(*args)
        return (loss if reduce_loss is None else reduce_loss(loss)), new_stats
    loss_fn = _scaled(reduced, loss_scale)

    def train_fn(params, opt_state, stats, step, frozen, rest, x, y, mask, key):
        (_, (loss, new_stats)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            params, frozen, stats, rest, x, y, mask, jax.random.fold_in(key, step))
        updates, opt_state = tx.update(_unscale(grads, loss_scale), opt_state, params)
        return optax.apply_updates(params, updates), opt_state, new_stats, step + 1, loss
    return train_fn


def _make_train_fn(spec: ModelSpec, graphdef: nnx.GraphDef, tx: optax.GradientTransformation,
                   loss_scale: float | None = None) -> Callable:
    return jax.jit(train_update(spec, graphdef, tx, loss_scale=loss_scale), donate_argnums=(0, 1, 2, 3))


@partial(jax.jit, static_argnums=2)
def _pad_steps(x: jax.Array, mask: jax.Array, steps: int) -> tuple[jax.Array, jax.Array]:
    extra = ((0, 0), (0, steps - x.shape[1]))
    return jnp.pad(x, extra), jnp.pad(mask, extra)


def _full_length(model: JaxModel, batch: dict) -> tuple[jax.Array, jax.Array | None]:
    """``(x, mask)`` of a variable-length token batch padded (token 0, mask 0) to the model's
    maximum length; other batches unchanged. The spec's function is unchanged: the LSTM runs
    forward in time, so the added trailing steps never reach a valid step's output, and the masked
    mean multiplies them by an exact 0 (which also stops every gradient through them). What it
    buys: one executable of the training step per batch size instead of one per distinct length
    (IMDB reviews cut at 100 tokens are mostly full length, so the extra compute is small). The
    pad itself is a tiny jitted program, compiled once per distinct length."""
    x, mask = batch["x"], batch["mask"]
    steps = model.spec.input.shape[0]
    if mask is None or not model.spec.input.variable_length or x.shape[1] >= steps:
        return x, mask
    return _pad_steps(x, mask, steps)


def _one_name(dtypes) -> str:
    """The NumPy name of the one type in ``dtypes``, or ``"mixed:a,b"`` listing them."""
    names = sorted({jnp.dtype(d).name for d in dtypes})
    if not names:
        return "none"
    return names[0] if len(names) == 1 else "mixed:" + ",".join(names)


def jax_device(device: str) -> jax.Device:
    """dlbench device name -> this process's JAX device. On a GPU, float32 matmuls and convolutions
    are kept at 'highest' precision: XLA's GPU default is TF32, an error of about 1e-3 that the
    gate's float32 tolerance refuses (the models and the decoders alike)."""
    kind, _, index = device.partition(":")
    platform = {"cpu": "cpu", "cuda": "gpu", "gpu": "gpu"}.get(kind)
    if platform is None:
        raise UnsupportedError(f"jax backend knows devices cpu, cuda/gpu; got {device!r}")
    try:  # this process's own devices (in a multi-process JAX run jax.devices() lists every process's)
        devices = jax.local_devices(backend=platform)
    except RuntimeError as exc:
        raise UnsupportedError(f"no {platform} device in this jaxlib: {exc}") from None
    i = int(index or 0)
    if i >= len(devices):
        raise UnsupportedError(f"{device}: only {len(devices)} {platform} device(s)")
    if platform == "gpu":
        jax.config.update("jax_default_matmul_precision", "highest")
    return devices[i]


class JaxBackend(Backend):
    declaration = DECLARATION
    packages = ("jax", "jaxlib", "flax", "optax")
    builder_class = Builder
    precision = DEFAULT_PRECISION

    def set_precision(self, precision: str) -> None:
        """bf16/fp16: every layer's Flax ``param_dtype`` and ``dtype`` the low type, inputs cast in
        ``place``; amp-*: ``param_dtype`` float32 (master parameters) and ``dtype`` the low type, so
        each layer casts its parameters and input to it and computes there (Flax's mixed-precision
        API); amp-fp16 trains with a static loss scale (:data:`LOSS_SCALE`)."""
        get_precision(precision)
        if precision == "int8":
            raise UnsupportedError("JAX has no post-training quantization API (int8 needs a separate library "
                                   "such as AQT or Qwix, rewriting the model's dots)")
        if precision not in self.precisions:
            raise UnsupportedError(f"jax runs {', '.join(self.precisions)}; {precision} is a GPU precision "
                                   "(dlbench's JAX GPU path keeps matmuls at 'highest' precision)")
        self.precision = precision

    def precision_info(self, model: JaxModel) -> dict[str, str]:
        """``param_dtype``: the type of Flax's parameter arrays (trainable and frozen); ``compute_dtype``:
        the output type of every computing layer (convolutions, dense layers, LSTMs) in the traced
        forward of one sample, through ``jax.eval_shape`` (JAX's own type inference of the program
        the jitted forward compiles). Either is ``"mixed:a,b"`` when they differ."""
        dtypes: list = []
        shape = model.spec.input.shape
        if model.spec.input.kind == "image":
            shape = (*shape[1:], shape[0])  # NHWC, as place gives it
        x = jax.ShapeDtypeStruct((1, *shape), jnp.int32 if model.spec.input.kind == "tokens" else model.input_dtype)

        def run(params, frozen, stats, rest, x):
            return nnx.merge(model.graphdef, frozen, params, stats, rest)(x, Context(dtypes=dtypes))
        jax.eval_shape(run, model.params, model.frozen, model.stats, model.rest, x)
        leaves = jax.tree.leaves((model.params, model.frozen))
        return {"param_dtype": _one_name(leaf.dtype for leaf in leaves), "compute_dtype": _one_name(dtypes)}

    def set_threads(self, n: int) -> dict[str, Any]:
        return {
            "requested": n,
            "cpu_affinity": len(os.sched_getaffinity(0)),
            "platform": jax.default_backend(),
            "device_count": jax.device_count(),
            "note": "XLA has no runtime thread setting; its CPU thread pool follows the process's CPU affinity",
        }

    def build(self, spec: ModelSpec, weights: Weights, device: str = DEFAULT_DEVICE, variant: str | None = None) -> JaxModel:
        variant = variant or "jit"
        if variant not in self.variants:
            raise UnsupportedError(f"jax has no variant {variant!r}")
        dev = jax_device(device)
        dtype, param_dtype = _FLAX_DTYPES[self.precision]
        builder = self.builder_class(weights, dtype=dtype, param_dtype=param_dtype)
        with jax.default_device(jax.local_devices(backend="cpu")[0]):  # built on the host, then placed as a whole
            net, _ = builder.sequence(spec.layers, spec.input.shape)
        return JaxModel(spec, net, builder, dev, variant, self.precision)

    def place(self, batch: Batch, model: JaxModel) -> dict[str, jax.Array | None]:
        x = batch.x
        if model.spec.input.kind == "image":
            x = x.transpose(0, 2, 3, 1)  # NCHW -> NHWC, once, outside the timed closure
        x = np.ascontiguousarray(x, np.int32 if model.spec.input.kind == "tokens" else model.input_dtype)

        def put(a: np.ndarray | None, dtype) -> jax.Array | None:
            return None if a is None else jax.device_put(np.asarray(a, dtype), model.device)
        return {"x": put(x, x.dtype), "y": put(batch.y, np.int32), "mask": put(batch.mask, np.float32)}

    def forward(self, model: JaxModel, batch) -> Callable[[], Any]:
        fn, x, mask = model.forward_fn, batch["x"], batch["mask"]

        def run():
            return fn(model.params, model.frozen, model.stats, model.rest, x, mask)
        return run

    def gradient(self, model: JaxModel, batch) -> Callable[[], Any]:
        fn, x, y, mask = model.grad_fn, batch["x"], batch["y"], batch["mask"]

        def run():
            loss, grads, model.step = fn(model.params, model.frozen, model.stats, model.rest, x, y, mask,
                                         model.step, model.key)
            return loss, grads
        return run

    @staticmethod
    def optimizer_sgd(opt: OptimizerSpec) -> optax.GradientTransformation:
        return optax.sgd(opt.lr, momentum=opt.momentum)

    @staticmethod
    def optimizer_adamw(opt: OptimizerSpec) -> optax.GradientTransformation:
        return optax.adamw(opt.lr, b1=opt.betas[0], b2=opt.betas[1], eps=opt.eps, weight_decay=opt.weight_decay)

    def _train_fn(self, model: JaxModel, opt: OptimizerSpec) -> Callable:
        """The model's one jitted training step for ``opt`` (made once, shared by ``train_step`` and
        ``trainer``), with a fresh optimiser state put on the model."""
        tx = optimizer(opt)
        if opt not in model.train_fns:
            model.train_fns[opt] = _make_train_fn(model.spec, model.graphdef, tx, model.loss_scale)
        model.opt_state = jax.device_put(tx.init(model.params), model.device)
        return model.train_fns[opt]

    def _run_train_fn(self, model: JaxModel, fn: Callable, x, y, mask) -> jax.Array:
        model.params, model.opt_state, model.stats, model.step, loss = fn(
            model.params, model.opt_state, model.stats, model.step, model.frozen, model.rest, x, y, mask, model.key)
        return loss

    def train_step(self, model: JaxModel, batch, opt: OptimizerSpec) -> Callable[[], Any]:
        """A closure doing one step of ``opt`` on the model's state. Making a closure starts a fresh
        optimiser state (held on the model, so it is shared with earlier closures)."""
        fn = self._train_fn(model, opt)
        x, y, mask = batch["x"], batch["y"], batch["mask"]

        def run():
            return self._run_train_fn(model, fn, x, y, mask)
        return run

    def trainer(self, model: JaxModel, opt: OptimizerSpec) -> Callable[[Any], Any]:
        """The same jitted step as ``train_step``, with the batch as its argument: batches of one
        shape reuse one executable. Token batches cut to their longest sequence are padded to the
        model's maximum length first (see :func:`_full_length`), so they do too."""
        fn = self._train_fn(model, opt)

        def step(batch):
            x, mask = _full_length(model, batch)
            return self._run_train_fn(model, fn, x, batch["y"], mask)
        return step

    def predictor(self, model: JaxModel) -> Callable[[Any], Any]:
        """``forward``'s jitted function (eval-mode BN, no dropout) on the model's current state."""
        fn = model.forward_fn

        def predict(batch):
            x, mask = _full_length(model, batch)
            return fn(model.params, model.frozen, model.stats, model.rest, x, mask)
        return predict

    def sync(self, out: Any) -> None:
        jax.block_until_ready(out)

    def profile(self, run: Callable[[], Any], calls: int, outdir: pathlib.Path) -> ProfileTrace:
        return jax_profile(run, calls, outdir)

    def to_numpy(self, out: Any) -> np.ndarray:
        """The output as NumPy; a bfloat16/float16 one upcast (exactly) to float32."""
        if isinstance(out, tuple):  # gradient's (loss, grads)
            out = out[0]
        out = np.asarray(out)
        return out.astype(np.float32) if out.dtype in (jnp.bfloat16, np.float16) else out

    def param_count(self, model: JaxModel) -> int:
        """Flax's params pytree (trainable and frozen ``nnx.Param``s; BN statistics are not params)."""
        return sum(int(leaf.size) for leaf in jax.tree.leaves((model.params, model.frozen)))

    def _canonical(self, model: JaxModel, states: dict[str, nnx.State], names: list[str]) -> dict[str, np.ndarray]:
        """Values of ``names`` read from Flax state pytrees (by collection) into canonical layout."""
        flats = {collection: dict(_flat(state)) for collection, state in states.items()}
        out = {}
        for name in names:
            collection, path, _, from_flax = model.bindings[name]
            if collection not in flats:
                raise ValueError(f"{name} is in the {collection!r} collection, expected one of {sorted(flats)}")
            out[name] = np.array(from_flax(np.asarray(_read(flats[collection][path]))), np.float32)
        return out

    def get_params(self, model: JaxModel) -> dict[str, np.ndarray]:
        return self._canonical(model, {"params": model.params, "frozen": model.frozen}, list(model.bindings))

    def get_state(self, model: JaxModel) -> dict[str, np.ndarray]:
        """BN running statistics under their canonical names (not part of the Backend contract)."""
        flat = dict(_flat(model.stats))
        return {name: np.array(_read(flat[path]), np.float32) for name, path in model.state_paths.items()}

    def grads_to_canonical(self, model: JaxModel, grads: nnx.State) -> dict[str, np.ndarray]:
        """A gradient pytree shaped like ``model.params`` (e.g. the data-parallel worker's averaged
        gradient) as canonical arrays under the trainable parameters' names."""
        return self._canonical(model, {"params": grads}, model.spec.trainable_names())

    def loss_and_grads(self, model: JaxModel, batch) -> tuple[float, dict[str, np.ndarray]]:
        loss, grads = self.gradient(model, batch)()  # the timed closure: a part's input gradient too
        if differentiates_input(model.spec):
            grads = grads[0]
        return float(loss), self.grads_to_canonical(model, grads)

    def peak_device_memory(self, device: str) -> dict[str, int]:
        if device.startswith(("cuda", "gpu")):
            stats = jax_device(device).memory_stats() or {}
            if "peak_bytes_in_use" in stats:
                return {"allocator_peak_bytes": int(stats["peak_bytes_in_use"])}
        return {}

    def info(self) -> dict[str, Any]:
        versions = {}
        for dist in self.packages:
            try:
                versions[dist] = importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                versions[dist] = None
        return {
            **versions,
            "platform": jax.default_backend(),
            "kernels": f"XLA:{jax.default_backend().upper()} (jaxlib {versions.get('jaxlib')}): dots and convolutions "
                       "compiled by XLA",
            "devices": [str(d) for d in jax.devices()],
            "cpu_affinity": len(os.sched_getaffinity(0)),
            "x64": bool(jax.config.jax_enable_x64),
            "matmul_precision": jax.config.jax_default_matmul_precision,
            "compilation_cache_dir": CACHE_DIR,
            "xla_flags": os.environ.get("XLA_FLAGS", ""),
        }


Backend_ = JaxBackend
