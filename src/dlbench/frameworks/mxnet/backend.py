"""Apache MXNet backend: the spec built from standard Gluon blocks (``mxnet.gluon.nn``, ``gluon.rnn``).

Runs in its own environment (``dlbench envs create mxnet``: MXNet 1.9.1, the last 1.x release, with
NumPy 1.23, because MXNet calls ``np.bool``, which NumPy 1.24 removed). The pip wheel is built with
oneDNN (MKLDNN), OpenMP and OpenBLAS; ``info()`` lists its build features.

Fast path and fairness settings:

* float32, NCHW (Gluon's default layout), oneDNN kernels on (``MXNET_MKLDNN_ENABLED`` default).
* variants: ``imperative`` (Gluon blocks called eagerly, each op pushed to the engine) and
  ``hybridize`` (``HybridBlock.hybridize(static_alloc=True, static_shape=True)``: the network
  *and* its loss are one cached static graph with pre-planned memory, MXNet's fastest Gluon mode).
* sync: MXNet's engine is asynchronous (a call returns before the math is done, the bug behind
  early wrong MXNet timings); ``sync`` is ``mx.nd.waitall()``.
* threads: the operators' parallelism is OpenMP, read from ``OMP_NUM_THREADS`` when the library
  loads (the launcher sets it before the import) and set again with ``MXSetNumOMPThreads`` in
  ``set_threads``; ``MXNET_CPU_WORKER_NTHREADS`` (engine workers: how many operators may run at
  once, default 1) is left at 1 so one process uses ``n`` cores, as for the other backends.
* optimiser: ``gluon.Trainer(..., "sgd", momentum=0.9)`` with no kvstore (one device);
  ``trainer.step(1)`` because the loss is already a batch mean. MXNet's SGD keeps
  ``mom = m * mom - lr * g; w += mom``, the same update as torch's for a constant learning rate.
  AdamW: MXNet 1.9 has the fused kernel (``mx.nd.contrib.adamw_update``) but no optimiser class, so
  :class:`AdamW` is written out around it for the same ``gluon.Trainer``, as GluonNLP drove that kernel,
  with the bias corrections folded into the kernel's learning rate as MXNet's own ``Adam`` does
  (Kingma & Ba's efficient form: the gate's ``hat`` epsilon) and decay ``w -= lr wd w``.
* LSTM: ``gluon.rnn.LSTM`` (fused RNN operator, layout NTC, gate order i, f, c, o) has two biases
  per gate; the canonical bias goes into ``i2h_bias`` and ``h2h_bias`` is held at zero with
  ``grad_req="null"`` (4 x units extra parameters in MXNet's own count, reported by the gate).
* Batch norm: MXNet's ``momentum`` is the weight of the old running value, so it is 1 - the spec's.
* labels are given to the loss as float32 (``pick`` indexes with floats; exact below 2**24).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon
from mxnet.gluon import nn, rnn

from dlbench.core.cell import DEFAULT_DEVICE
from dlbench.data.synthetic import Batch
from dlbench.frameworks.base import Backend, OptimizerSpec, UnsupportedError
from dlbench.frameworks.builder import LayerBuilder, make_optimizer
from dlbench.frameworks.mxnet import DECLARATION
from dlbench.measure.profile import ProfileTrace, paired_events, read_trace
from dlbench.models import layers as L
from dlbench.models.spec import ModelSpec
from dlbench.models.split import differentiates_input
from dlbench.models.weights import Weights

CTX = mx.cpu()


class Seq(gluon.HybridBlock):
    """Runs blocks in order, passing the mask to a masked mean. With ``with_target`` it also returns
    the Mark'd activation (the reconstruction target of an autoencoder). The inference network and
    the one inside the loss are two Seq over the same blocks (so the same parameters), each with
    its own cached graph when hybridized."""

    def __init__(self, blocks: list[gluon.Block], with_target: bool = False, **kw):
        super().__init__(**kw)
        self.with_target = with_target and any(isinstance(b, MarkBlock) for b in blocks)
        for i, b in enumerate(blocks):
            self.register_child(b, f"l{i}")
        self.blocks = list(blocks)

    def hybrid_forward(self, F, x, *mask):
        target = None
        for b in self.blocks:
            if isinstance(b, MarkBlock):
                target = x
            elif isinstance(b, MaskedMean):
                x = b(x, *mask)
            else:
                x = b(x)
        return (x, target) if self.with_target else x


class MarkBlock(gluon.HybridBlock):
    def hybrid_forward(self, F, x):  # pragma: no cover - Seq handles it
        return x


class MaskedMean(gluon.HybridBlock):
    def hybrid_forward(self, F, x, *mask):
        if not mask:
            return F.mean(x, axis=1)
        m = mask[0]
        return F.broadcast_div(F.sum(F.broadcast_mul(x, F.expand_dims(m, -1)), axis=1), F.sum(m, axis=1, keepdims=True))


class GlobalAvgPool(gluon.HybridBlock):
    def hybrid_forward(self, F, x):
        return F.mean(x, axis=(2, 3))


class LRN(gluon.HybridBlock):
    def __init__(self, layer: L.LRN, **kw):
        super().__init__(**kw)
        self.layer = layer

    def hybrid_forward(self, F, x):
        lr = self.layer
        return F.LRN(x, alpha=lr.alpha, beta=lr.beta, knorm=lr.k, nsize=lr.size)


class TiedDense(gluon.HybridBlock):
    """Decoder sharing its encoder's weight: y = x @ W_enc + b with MXNet's W_enc = canonical W.T."""

    def __init__(self, encoder: nn.Dense, units: int, **kw):
        super().__init__(**kw)
        self.enc_weight = encoder.weight  # the same Parameter: gradients from both uses add up
        with self.name_scope():
            self.bias = self.params.get("bias", shape=(units,), init="zeros")

    def hybrid_forward(self, F, x, enc_weight, bias):
        return F.broadcast_add(F.dot(x, enc_weight), bias)


class ZeroPadShortcut(gluon.HybridBlock):
    def __init__(self, in_channels: int, out_channels: int, stride: int, **kw):
        super().__init__(**kw)
        self.in_channels, self.out_channels, self.stride = in_channels, out_channels, stride

    def hybrid_forward(self, F, x):
        s = self.stride
        x = F.slice(x, begin=(None, None, None, None), end=(None, None, None, None), step=(1, 1, s, s))
        missing, parts = self.out_channels - self.in_channels, [x]
        while missing > 0:
            take = min(missing, self.in_channels)
            parts.append(F.zeros_like(F.slice_axis(x, axis=1, begin=0, end=take)))
            missing -= take
        return F.concat(*parts, dim=1) if len(parts) > 1 else x


class Residual(gluon.HybridBlock):
    def __init__(self, body: list, shortcut: list, relu: bool, **kw):
        super().__init__(**kw)
        self.relu = relu
        with self.name_scope():
            self.body = nn.HybridSequential(prefix="body_")
            self.body.add(*body)
            self.shortcut = nn.HybridSequential(prefix="short_")
            if shortcut:
                self.shortcut.add(*shortcut)

    def hybrid_forward(self, F, x):
        out = self.body(x) + (self.shortcut(x) if len(self.shortcut) else x)
        return F.relu(out) if self.relu else out


class LossBlock(gluon.HybridBlock):
    """Network + loss as one block, so ``hybridize`` puts the loss in the cached graph too."""

    def __init__(self, blocks: list[gluon.Block], kind: str, **kw):
        super().__init__(**kw)
        self.kind = kind
        self.net = Seq(blocks, with_target=True)

    def hybrid_forward(self, F, x, y, *mask):
        if self.kind == "mse":
            out, target = self.net(x, *mask) if self.net.with_target else (self.net(x, *mask), x)
            return F.mean(F.square(out - target))
        out = self.net(x, *mask)
        logp = F.log_softmax(out, axis=-1)
        return -F.mean(F.pick(logp, y, axis=-1))


def _same(a: np.ndarray) -> np.ndarray:
    return a


def _t(a: np.ndarray) -> np.ndarray:
    return a.T


# A binding ties a canonical parameter to an MXNet Parameter: (parameter, to_mx, from_mx).
Binding = tuple[gluon.Parameter, Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]]


class Builder(LayerBuilder):
    """Turns layers into Gluon blocks and records where each canonical parameter lives."""

    builds_for = "mxnet backend"

    def __init__(self) -> None:
        self.params: dict[str, Binding] = {}
        self.state: dict[str, gluon.Parameter] = {}
        self.dense: dict[str, nn.Dense] = {}
        self.frozen: list[gluon.Parameter] = []
        self.extra: list[gluon.Parameter] = []  # MXNet parameters outside the spec (LSTM h2h bias)

    def make_conv2d(self, layer: L.Conv2d, shape) -> gluon.Block:
        b = nn.Conv2D(layer.out_channels, layer.kernel, layer.stride, layer.padding, groups=layer.groups,
                      use_bias=layer.bias, in_channels=shape[0])
        self.params[f"{layer.name}.weight"] = (b.weight, _same, _same)
        if layer.bias:
            self.params[f"{layer.name}.bias"] = (b.bias, _same, _same)
        return b

    def make_pool2d(self, layer: L.Pool2d, shape) -> gluon.Block:
        if layer.op == "max":
            return nn.MaxPool2D(layer.kernel, layer.stride, layer.padding, ceil_mode=layer.ceil_mode)
        return nn.AvgPool2D(layer.kernel, layer.stride, layer.padding, ceil_mode=layer.ceil_mode,
                            count_include_pad=True)

    def make_globalavgpool(self, layer, shape) -> gluon.Block:
        return GlobalAvgPool()

    def make_lrn(self, layer: L.LRN, shape) -> gluon.Block:
        return LRN(layer)

    def make_batchnorm(self, layer: L.BatchNorm, shape) -> gluon.Block:
        b = nn.BatchNorm(axis=1, momentum=1.0 - layer.momentum, epsilon=layer.eps, in_channels=shape[0])
        self.params[f"{layer.name}.gamma"] = (b.gamma, _same, _same)
        self.params[f"{layer.name}.beta"] = (b.beta, _same, _same)
        self.state[f"{layer.name}.running_mean"] = b.running_mean
        self.state[f"{layer.name}.running_var"] = b.running_var
        return b

    def make_dense(self, layer: L.Dense, shape) -> gluon.Block:
        b = nn.Dense(layer.units, use_bias=layer.bias, flatten=False, in_units=shape[-1])
        self.params[f"{layer.name}.weight"] = (b.weight, _t, _t)
        if layer.bias:
            self.params[f"{layer.name}.bias"] = (b.bias, _same, _same)
        self.dense[layer.name] = b
        if not layer.trainable:
            self.frozen += [b.weight] + ([b.bias] if layer.bias else [])
        return b

    def make_tieddense(self, layer: L.TiedDense, shape) -> gluon.Block:
        b = TiedDense(self.dense[layer.tied_to], layer.units)
        self.params[f"{layer.name}.bias"] = (b.bias, _same, _same)
        if not layer.trainable:
            self.frozen.append(b.bias)
        return b

    def make_activation(self, layer: L.Activation, shape) -> gluon.Block:
        return nn.Activation(layer.fn)

    def make_dropout(self, layer: L.Dropout, shape) -> gluon.Block:
        return nn.Dropout(layer.rate)

    def make_flatten(self, layer, shape) -> gluon.Block:
        return nn.Flatten()

    def make_embedding(self, layer: L.Embedding, shape) -> gluon.Block:
        b = nn.Embedding(layer.vocab, layer.dim)
        self.params[f"{layer.name}.weight"] = (b.weight, _same, _same)
        return b

    def make_lstm(self, layer: L.LSTM, shape) -> gluon.Block:
        b = rnn.LSTM(layer.units, layout="NTC", input_size=shape[-1])
        p = {key: param for name, param in b.collect_params().items()
             for key in ("i2h_weight", "h2h_weight", "i2h_bias", "h2h_bias") if name.endswith(key)}
        self.params[f"{layer.name}.w_x"] = (p["i2h_weight"], _t, _t)
        self.params[f"{layer.name}.w_h"] = (p["h2h_weight"], _t, _t)
        self.params[f"{layer.name}.b"] = (p["i2h_bias"], _same, _same)
        self.extra.append(p["h2h_bias"])
        return b

    def make_maskedmean(self, layer, shape) -> gluon.Block:
        return MaskedMean()

    def make_mark(self, layer, shape) -> gluon.Block:
        return MarkBlock()

    def make_zeropadshortcut(self, layer: L.ZeroPadShortcut, shape) -> gluon.Block:
        return ZeroPadShortcut(shape[0], layer.out_channels, layer.stride)

    def make_residual(self, layer: L.Residual, shape) -> gluon.Block:
        return Residual(self.sequence(layer.body, shape)[0], self.sequence(layer.shortcut, shape)[0],
                        layer.post == "relu")


class MxModel:
    def __init__(self, spec: ModelSpec, net: Seq, loss: LossBlock, builder: Builder, variant: str):
        self.spec, self.net, self.loss, self.variant = spec, net, loss, variant
        self.bindings, self.state = builder.params, builder.state
        frozen = {id(p) for p in builder.frozen + builder.extra}
        unique = {id(p): p for p in net.collect_params().values()}
        self.trainable = [p for p in unique.values() if id(p) not in frozen and p.grad_req != "null"]
        self.all_params = list(unique.values())


class AdamW(mx.optimizer.Optimizer):
    """Adam with bias correction and decoupled weight decay over ``mx.nd.contrib.adamw_update``, which
    computes ``w -= eta * (lr * m / (sqrt(v) + eps) + wd * w)``: with ``eta`` the learning rate and
    ``lr = sqrt(1 - b2^t) / (1 - b1^t)`` that is AdamW (the kernel itself has no bias correction)."""

    def __init__(self, beta1: float = 0.9, beta2: float = 0.999, epsilon: float = 1e-8, **kwargs: Any):
        super().__init__(**kwargs)
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon

    def create_state(self, index, weight):
        return (mx.nd.zeros(weight.shape, weight.context, dtype=weight.dtype),
                mx.nd.zeros(weight.shape, weight.context, dtype=weight.dtype))

    def update(self, index, weight, grad, state):
        self._update_count(index)
        t = self._index_update_count[index]
        correction = (1.0 - self.beta2 ** t) ** 0.5 / (1.0 - self.beta1 ** t)
        mean, var = state
        rescale = mx.nd.full((1,), self.rescale_grad, ctx=weight.context)
        mx.nd.contrib.adamw_update(weight, grad, mean, var, rescale, lr=correction, eta=self._get_lr(index),
                                   wd=self._get_wd(index), beta1=self.beta1, beta2=self.beta2,
                                   epsilon=self.epsilon, out=weight)


class MxnetBackend(Backend):
    declaration = DECLARATION
    packages = ("mxnet", "numpy")
    adamw_eps = "hat"

    def __init__(self) -> None:
        self.threads: int | None = None

    def set_threads(self, n: int) -> dict[str, Any]:
        mx.base._LIB.MXSetNumOMPThreads(ctypes.c_int(n))
        self.threads = n
        return {"omp_threads": n, "omp_env": os.environ.get("OMP_NUM_THREADS"),
                "engine_workers": int(os.environ.get("MXNET_CPU_WORKER_NTHREADS", "1"))}

    def build(self, spec: ModelSpec, weights: Weights, device: str = DEFAULT_DEVICE, variant: str | None = None) -> MxModel:
        variant = variant or "imperative"
        if variant not in self.variants:
            raise UnsupportedError(f"mxnet has no variant {variant!r}")
        if device != "cpu":
            raise UnsupportedError(f"the mxnet environment is the CPU build (mxnet==1.9.1); no device {device!r}")
        mx.random.seed(0)
        builder = Builder()
        blocks, _ = builder.sequence(spec.layers, spec.input.shape)
        net = Seq(blocks)
        net.initialize(mx.init.Zero(), ctx=CTX)
        for p in builder.frozen + builder.extra:
            p.grad_req = "null"
        for name, (param, to_mx, _) in builder.params.items():
            value = np.ascontiguousarray(to_mx(weights.params[name]))
            if tuple(value.shape) != tuple(param.shape):
                raise ValueError(f"{name}: canonical {value.shape} vs mxnet {param.shape}")
            param.set_data(mx.nd.array(value, ctx=CTX, dtype="float32"))
        for name, param in builder.state.items():
            param.set_data(mx.nd.array(weights.state[name], ctx=CTX, dtype="float32"))
        for p in builder.extra:
            p.set_data(mx.nd.zeros(p.shape, ctx=CTX))
        loss = LossBlock(blocks, spec.loss.kind)
        if variant == "hybridize":
            net.hybridize(static_alloc=True, static_shape=True)
            loss.hybridize(static_alloc=True, static_shape=True)
        return MxModel(spec, net, loss, builder, variant)

    def place(self, batch: Batch, model: MxModel) -> dict[str, Any]:
        x = mx.nd.array(batch.x, ctx=CTX, dtype="float32")  # token ids as float32: Embedding takes them so
        y = mx.nd.array(batch.y, ctx=CTX, dtype="float32") if batch.y is not None else mx.nd.zeros((batch.size,))
        mask = () if batch.mask is None else (mx.nd.array(batch.mask, ctx=CTX, dtype="float32"),)
        mx.nd.waitall()
        return {"x": x, "y": y, "mask": mask}

    def forward(self, model: MxModel, batch) -> Callable[[], Any]:
        net, x, mask = model.net, batch["x"], batch["mask"]

        def run():
            return net(x, *mask)  # outside autograd.record: inference mode
        return run

    def gradient(self, model: MxModel, batch) -> Callable[[], Any]:
        loss_block, x, y, mask = model.loss, batch["x"], batch["y"], batch["mask"]
        if differentiates_input(model.spec):  # x's gradient too (models/split.py), written over at each backward
            x.attach_grad()

        def run():
            with autograd.record(train_mode=True):
                loss = loss_block(x, y, *mask)
            loss.backward()
            return loss
        return run

    @staticmethod
    def optimizer_sgd(opt: OptimizerSpec, params: Any) -> gluon.Trainer:
        return gluon.Trainer(params, "sgd", {"learning_rate": opt.lr, "momentum": opt.momentum}, kvstore=None)

    @staticmethod
    def optimizer_adamw(opt: OptimizerSpec, params: Any) -> gluon.Trainer:
        return gluon.Trainer(params, AdamW(beta1=opt.betas[0], beta2=opt.betas[1], epsilon=opt.eps, learning_rate=opt.lr,
                                           wd=opt.weight_decay), kvstore=None)

    def train_step(self, model: MxModel, batch, opt: OptimizerSpec) -> Callable[[], Any]:
        trainer = make_optimizer(type(self), opt, model.trainable)
        grad = self.gradient(model, batch)

        def run():
            loss = grad()
            trainer.step(1)
            return loss
        return run

    def sync(self, out: Any) -> None:
        mx.nd.waitall()

    def profile(self, run: Callable[[], Any], calls: int, outdir: Path) -> ProfileTrace:
        """MXNet's profiler (``mx.profiler``, every operator) over the calls, each waited for, its Chrome
        trace dump; operations are its ``operator`` events (``Convolution``, ``FullyConnected``), which it
        writes as begin/end pairs. MXNet runs a backward as bulk segments by default (what is timed),
        and profiles a segment as one ``ImperativeBulk`` event, not its operators."""
        path = outdir / "trace.json"
        mx.profiler.set_config(profile_all=True, aggregate_stats=False, filename=str(path))
        mx.profiler.set_state("run")
        try:
            for _ in range(calls):
                self.sync(run())
        finally:
            mx.profiler.set_state("stop")
        mx.profiler.dump()
        ops = [e for e in paired_events(read_trace(path)) if e.get("cat") == "operator"]
        return ProfileTrace(path, ops, f"mx.profiler (mxnet {mx.__version__})")

    def to_numpy(self, out: Any) -> np.ndarray:
        return out.asnumpy()

    def param_count(self, model: MxModel) -> int:
        return sum(int(np.prod(p.shape)) for p in model.all_params if p.name not in _state_names(model))

    def param_count_extra(self, spec: ModelSpec) -> tuple[int, str]:
        extra = sum(4 * layer.units for layer in L.walk(spec.layers) if isinstance(layer, L.LSTM))
        return extra, ("gluon.rnn.LSTM has a second bias per gate (h2h_bias, held at zero)" if extra else "")

    def get_params(self, model: MxModel) -> dict[str, np.ndarray]:
        return {n: from_mx(p.data().asnumpy()).copy() for n, (p, _, from_mx) in model.bindings.items()}

    def loss_and_grads(self, model: MxModel, batch) -> tuple[float, dict[str, np.ndarray]]:
        loss = self.gradient(model, batch)()
        grads = {}
        for name in model.spec.trainable_names():
            param, _, from_mx = model.bindings[name]
            grads[name] = from_mx(param.grad().asnumpy())
        return float(loss.asscalar()), grads

    def info(self) -> dict[str, Any]:
        features = mx.runtime.Features()
        return {"mxnet": mx.__version__, "numpy": np.__version__,
                "features": sorted(k for k, f in features.items() if f.enabled),
                "mkldnn_enabled_env": os.environ.get("MXNET_MKLDNN_ENABLED", "1 (default)"),
                "omp_threads": self.threads or os.environ.get("OMP_NUM_THREADS", "OpenMP default"),
                "engine": os.environ.get("MXNET_ENGINE_TYPE", "ThreadedEnginePerDevice (default)")}


def _state_names(model: MxModel) -> set[str]:
    return {p.name for p in model.state.values()}


Backend_ = MxnetBackend
