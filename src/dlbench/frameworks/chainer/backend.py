"""Chainer backend: the spec built from ``chainer.links`` and ``chainer.functions``, define-by-run.

Runs in its own environment (``dlbench envs create chainer``: Chainer 7.8.1, the last release,
maintenance-only since 2019, with NumPy < 2). Only an sdist exists; its ``setup.py`` imports
``pkg_resources``, so it is built with ``setuptools<81`` and ``--no-build-isolation``.

Fast path and fairness settings:

* float32, NCHW, CPU arrays are NumPy: convolutions are im2col + NumPy ``matmul`` (OpenBLAS of the
  NumPy wheel). Chainer's CPU accelerator, iDeep (``ideep4py``, MKL-DNN), has no wheel for this
  Python (``pip download ideep4py``: "No matching distribution found", checked on Python 3.11), so
  ``chainer.config.use_ideep`` stays ``"never"``, the default; ``info()`` records it.
* define-by-run only (Chainer's static-graph decorator is experimental and never left beta), so
  there is one variant, ``default``.
* forward: ``chainer.using_config("train", False)`` and ``("enable_backprop", False)``: no graph is
  recorded, dropout is off and batch norm uses its running averages.
* gradient: ``cleargrads()`` then ``loss.backward()``. Frozen layers (SAE pre-training) are applied
  with their arrays, not their Parameters, so no gradient is computed for them.
* optimiser: ``chainer.optimizers.MomentumSGD(lr, momentum=0.9)`` (``v = m v - lr g; w += v``,
  the same update as torch's for a constant learning rate), or ``chainer.optimizers.AdamW(alpha=lr,
  weight_decay_rate=lr * wd)`` (Kingma & Ba's efficient form, the gate's ``hat`` epsilon; Chainer's
  decay ``w -= eta * weight_decay_rate * w`` is not scaled by the learning rate, so the rate passed
  is ``lr * wd``, torch's decay).
* threads: NumPy's BLAS threads, set by the launcher's ``OMP_NUM_THREADS``/``OPENBLAS_NUM_THREADS``
  before the import and again by ``threadpoolctl`` (in the environment) in ``set_threads``, which
  reads the count back.
* LSTM: ``L.NStepLSTM`` (Chainer's standard sequence LSTM: a list of variable-length sequences,
  sorted and batched per step internally). Its weights w0..w3 are the gates i, f, a, o (a = the
  cell input, the spec's g; ``F.n_step_lstm``'s docstring says i, f, o, a, its code computes
  i, f, a, o), with separate input and hidden biases: the canonical bias goes into b0..b3 and b4..b7
  are held at zero with updates disabled (4 x units extra parameters, reported by the gate).
  Variable-length reviews are embedded as the padded batch, then given to the LSTM as sequences cut
  to their true length (the mask), the idiomatic Chainer input, which computes the padded batch's
  valid steps exactly; the masked mean is then each sequence's mean.
* LRN: Chainer's ``alpha`` is not divided by the window size, so it gets ``alpha / size``.
* average pooling in ceil mode (AlexNet-R): ``average_pooling_2d`` has no ``cover_all`` mode and
  always divides by the window area, so the input is zero-padded on the bottom/right by the overhang
  and the pooled map rescaled by ``area / in-bounds count`` (a constant): the Caffe result, exactly.
* labels are int32 (what ``softmax_cross_entropy`` and ``EmbedID`` expect).
* profile: Chainer has no trace profiler (its ``TimerHook`` sums each function's time with no start
  times), so a function hook of dlbench's (:class:`TraceHook`, Chainer's ``FunctionHook`` API, as
  ``TimerHook`` is) records every function node's forward and backward as a Chrome trace event.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import chainer
import chainer.functions as F
import chainer.links as CL
import numpy as np

from dlbench.core.cell import DEFAULT_DEVICE
from dlbench.data.synthetic import Batch
from dlbench.frameworks.base import Backend, OptimizerSpec, UnsupportedError
from dlbench.frameworks.builder import LayerBuilder, make_optimizer
from dlbench.frameworks.chainer import DECLARATION
from dlbench.measure.profile import ProfileTrace, write_trace
from dlbench.models import layers as L
from dlbench.models.layers import _pool_out
from dlbench.models.spec import ModelSpec
from dlbench.models.split import differentiates_input
from dlbench.models.weights import Weights

try:  # in the environment's requirements; optional elsewhere
    import threadpoolctl
except ImportError:  # pragma: no cover
    threadpoolctl = None

#: a canonical parameter spread over Chainer parameters: (params, canonical -> arrays, arrays -> canonical)
Binding = tuple[list[chainer.Parameter], Callable[[np.ndarray], list[np.ndarray]], Callable[[list[np.ndarray]], np.ndarray]]


def _one(p: chainer.Parameter, transpose: bool = False) -> Binding:
    if transpose:
        return [p], lambda a: [a.T], lambda arrs: arrs[0].T
    return [p], lambda a: [a], lambda arrs: arrs[0]


class Net(chainer.Chain):
    """The links of the spec, applied by a list of step functions (closures over the links)."""

    def __init__(self, links: list[chainer.Link]):
        super().__init__()
        with self.init_scope():
            self.layers = chainer.ChainList(*links)
        self.steps: list[Callable] = []
        self.marked = False

    def forward(self, x, ctx: dict):
        target = None
        for step in self.steps:
            if step is MARK:
                target = x
            else:
                x = step(x, ctx)
        return x, target


def MARK(x, ctx):  # pragma: no cover - a sentinel; Net keeps the activation
    return x


class Builder(LayerBuilder):
    """Turns layers into links (registered on the Net) and step functions over them."""

    builds_for = "chainer backend"

    def __init__(self) -> None:
        self.links: list[chainer.Link] = []
        self.params: dict[str, Binding] = {}
        self.state: dict[str, tuple[chainer.Link, str]] = {}
        self.linears: dict[str, CL.Linear] = {}
        self.frozen_links: list[chainer.Link] = []
        self.extra: list[chainer.Parameter] = []

    def add(self, link: chainer.Link) -> chainer.Link:
        self.links.append(link)
        return link

    def make_conv2d(self, layer: L.Conv2d, shape) -> Callable:
        link = self.add(CL.Convolution2D(shape[0], layer.out_channels, layer.kernel, layer.stride, layer.padding,
                                         nobias=not layer.bias, groups=layer.groups))
        self.params[f"{layer.name}.weight"] = _one(link.W)
        if layer.bias:
            self.params[f"{layer.name}.bias"] = _one(link.b)
        return lambda x, ctx: link(x)

    def make_pool2d(self, layer: L.Pool2d, shape) -> Callable:
        k, s, p = layer.kernel, layer.stride, layer.padding
        if layer.op == "max":
            # cover_all=True is Chainer's ceil mode; the spec's shape rule adds Caffe's clip, which only
            # differs when the last window would start in the padding (checked here, never silently)
            h, w = shape[1:]
            oh, ow = (_pool_out(d, k, s, p, layer.ceil_mode) for d in (h, w))
            cover = layer.ceil_mode
            got = [(d + 2 * p - k + (s - 1 if cover else 0)) // s + 1 for d in (h, w)]
            if got != [oh, ow]:
                raise UnsupportedError(f"chainer max pooling gives {got}, the spec {[oh, ow]} (Caffe's ceil clip)")
            return lambda x, ctx: F.max_pooling_2d(x, k, s, p, cover_all=cover)
        if not layer.ceil_mode:
            return lambda x, ctx: F.average_pooling_2d(x, k, s, p)
        if p:
            raise UnsupportedError("chainer average pooling has no ceil mode; the padded form is not needed by any model")
        h, w = shape[1:]
        oh, ow = (_pool_out(d, k, s, p, True) for d in (h, w))
        eh, ew = max(0, (oh - 1) * s + k - h), max(0, (ow - 1) * s + k - w)
        inside = np.pad(np.ones((h, w)), ((0, eh), (0, ew)))
        count = np.lib.stride_tricks.sliding_window_view(inside, (k, k))[::s, ::s][:oh, :ow].sum(axis=(2, 3))
        scale = (k * k / count).astype(np.float32)[None, None]

        def pool(x, ctx):
            x = F.pad(x, ((0, 0), (0, 0), (0, eh), (0, ew)), "constant")
            y = F.average_pooling_2d(x, k, s, 0)
            return y * np.broadcast_to(scale, y.shape)
        return pool

    def make_globalavgpool(self, layer, shape) -> Callable:
        return lambda x, ctx: F.mean(x, axis=(2, 3))

    def make_lrn(self, layer: L.LRN, shape) -> Callable:
        return lambda x, ctx: F.local_response_normalization(x, layer.size, layer.k, layer.alpha / layer.size,
                                                            layer.beta)

    def make_batchnorm(self, layer: L.BatchNorm, shape) -> Callable:
        link = self.add(CL.BatchNormalization(shape[0], decay=1.0 - layer.momentum, eps=layer.eps))
        self.params[f"{layer.name}.gamma"] = _one(link.gamma)
        self.params[f"{layer.name}.beta"] = _one(link.beta)
        self.state[f"{layer.name}.running_mean"] = (link, "avg_mean")
        self.state[f"{layer.name}.running_var"] = (link, "avg_var")
        return lambda x, ctx: link(x)

    def make_dense(self, layer: L.Dense, shape) -> Callable:
        link = self.add(CL.Linear(shape[-1], layer.units, nobias=not layer.bias))
        self.params[f"{layer.name}.weight"] = _one(link.W, transpose=True)
        if layer.bias:
            self.params[f"{layer.name}.bias"] = _one(link.b)
        self.linears[layer.name] = link
        axes = len(shape)  # batch axes: 1 for vectors, 2 for (N, T, D) sequences
        if not layer.trainable:
            self.frozen_links.append(link)
            return lambda x, ctx: F.linear(x, link.W.array, None if link.b is None else link.b.array, n_batch_axes=axes)
        return lambda x, ctx: link(x, n_batch_axes=axes)

    def make_tieddense(self, layer: L.TiedDense, shape) -> Callable:
        enc = self.linears[layer.tied_to]
        with enc.init_scope():  # the decoder's bias lives beside the weight it shares
            enc.dec_b = chainer.Parameter(np.zeros(layer.units, np.float32))
        bias = enc.dec_b
        self.params[f"{layer.name}.bias"] = _one(bias)
        if not layer.trainable:
            self.frozen_links.append(enc)
            return lambda x, ctx: F.linear(x, enc.W.array.T, bias.array)
        return lambda x, ctx: F.linear(x, F.transpose(enc.W), bias)

    def make_activation(self, layer: L.Activation, shape) -> Callable:
        fn = {"relu": F.relu, "tanh": F.tanh, "sigmoid": F.sigmoid}[layer.fn]
        return lambda x, ctx: fn(x)

    def make_dropout(self, layer: L.Dropout, shape) -> Callable:
        return lambda x, ctx: F.dropout(x, layer.rate) if layer.rate > 0 else x

    def make_flatten(self, layer, shape) -> Callable:
        return lambda x, ctx: F.reshape(x, (x.shape[0], -1))

    def make_embedding(self, layer: L.Embedding, shape) -> Callable:
        link = self.add(CL.EmbedID(layer.vocab, layer.dim))
        self.params[f"{layer.name}.weight"] = _one(link.W)
        return lambda x, ctx: link(x)

    def make_lstm(self, layer: L.LSTM, shape) -> Callable:
        h = layer.units
        link = self.add(CL.NStepLSTM(1, shape[-1], h, 0.0))
        cell = link[0]
        # chainer slot k holds canonical gate order[k]. The docstring of F.n_step_lstm writes o_t with
        # W2 and a_t with W3, but its _lstm stacks [w2, w0, w1, w3] as (a, i, f, o): slots are i, f, a, o,
        # the spec's order (the gate finds any other order)
        order = (0, 1, 2, 3)

        def split(a: np.ndarray) -> list[np.ndarray]:  # (in, 4H) -> four (H, in)
            return [np.ascontiguousarray(a[:, g * h:(g + 1) * h].T) for g in order]

        def join(arrs: list[np.ndarray]) -> np.ndarray:
            out = [None] * 4
            for k, g in enumerate(order):
                out[g] = arrs[k].T
            return np.concatenate(out, axis=1)

        def split_b(a: np.ndarray) -> list[np.ndarray]:
            return [a[g * h:(g + 1) * h].copy() for g in order]

        def join_b(arrs: list[np.ndarray]) -> np.ndarray:
            out = [None] * 4
            for k, g in enumerate(order):
                out[g] = arrs[k]
            return np.concatenate(out)

        self.params[f"{layer.name}.w_x"] = ([getattr(cell, f"w{k}") for k in range(4)], split, join)
        self.params[f"{layer.name}.w_h"] = ([getattr(cell, f"w{k}") for k in range(4, 8)], split, join)
        self.params[f"{layer.name}.b"] = ([getattr(cell, f"b{k}") for k in range(4)], split_b, join_b)
        self.extra += [getattr(cell, f"b{k}") for k in range(4, 8)]

        def run(x, ctx):
            lengths = ctx.get("lengths")
            if isinstance(x, list):
                xs = x
            elif lengths is None:
                xs = list(F.separate(x, axis=0))
            else:  # padded (N, T, D) -> each sequence cut to its length
                xs = [xi[:n] for xi, n in zip(F.separate(x, axis=0), lengths, strict=True)]
            _, _, ys = link(None, None, xs)
            return ys if lengths is not None else F.stack(ys, axis=0)
        return run

    def make_maskedmean(self, layer, shape) -> Callable:
        def mean(ys, ctx):
            if isinstance(ys, list):
                return F.stack([F.mean(y, axis=0) for y in ys], axis=0)
            return F.mean(ys, axis=1)
        return mean

    def make_mark(self, layer, shape) -> Callable:
        return MARK

    def make_zeropadshortcut(self, layer: L.ZeroPadShortcut, shape) -> Callable:
        s, extra = layer.stride, layer.out_channels - shape[0]
        return lambda x, ctx: F.pad(x[:, :, ::s, ::s], ((0, 0), (0, extra), (0, 0), (0, 0)), "constant")

    def make_residual(self, layer: L.Residual, shape) -> Callable:
        body, short = self.sequence(layer.body, shape)[0], self.sequence(layer.shortcut, shape)[0]
        relu = layer.post == "relu"

        def run(x, ctx):
            out = x
            for step in body:
                out = step(out, ctx)
            sc = x
            for step in short:
                sc = step(sc, ctx)
            out = out + sc
            return F.relu(out) if relu else out
        return run


class ChainerModel:
    def __init__(self, spec: ModelSpec, net: Net, builder: Builder):
        self.spec, self.net = spec, net
        self.bindings, self.state, self.extra = builder.params, builder.state, builder.extra


def _loss(spec: ModelSpec, net: Net, batch: dict) -> chainer.Variable:
    out, target = net(batch["x"], batch)
    if spec.loss.kind == "mse":
        return F.mean_squared_error(out, batch["x"] if target is None else target)
    return F.softmax_cross_entropy(F.reshape(out, (-1, out.shape[-1])), batch["y"].reshape(-1))


class TraceHook(chainer.FunctionHook):
    """Each function node's forward and backward as a complete Chrome trace event (its label, and
    ``(backward)`` for a backward); a backward that applies other functions holds their events."""

    name = "dlbench_trace"

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._started: list[float] = []

    def _begin(self) -> None:
        self._started.append(time.perf_counter())

    def _end(self, function: Any, phase: str) -> None:
        start = self._started.pop()
        self.events.append({"ph": "X", "pid": 0, "tid": 0, "cat": phase, "ts": start * 1e6,
                            "dur": (time.perf_counter() - start) * 1e6,
                            "name": function.label + (" (backward)" if phase == "backward" else "")})

    def forward_preprocess(self, function: Any, in_data: Any) -> None:
        self._begin()

    def forward_postprocess(self, function: Any, in_data: Any) -> None:
        self._end(function, "forward")

    def backward_preprocess(self, function: Any, in_data: Any, out_grad: Any) -> None:
        self._begin()

    def backward_postprocess(self, function: Any, in_data: Any, out_grad: Any) -> None:
        self._end(function, "backward")


class ChainerBackend(Backend):
    declaration = DECLARATION
    packages = ("chainer", "numpy")
    adamw_eps = "hat"

    def __init__(self) -> None:
        self.threads: int | None = None

    def set_threads(self, n: int) -> dict[str, Any]:
        self.threads = n
        if threadpoolctl is None:
            return {"blas_threads_env": os.environ.get("OPENBLAS_NUM_THREADS")}
        threadpoolctl.threadpool_limits(n)
        return {"blas": [{"api": d["internal_api"], "threads": d["num_threads"]} for d in threadpoolctl.threadpool_info()]}

    def build(self, spec: ModelSpec, weights: Weights, device: str = DEFAULT_DEVICE,
              variant: str | None = None) -> ChainerModel:
        variant = variant or "default"
        if variant not in self.variants:
            raise UnsupportedError(f"chainer has no variant {variant!r}")
        if device != "cpu":
            raise UnsupportedError(f"the chainer backend runs on NumPy (CPU); no device {device!r} (CuPy is not installed)")
        builder = Builder()
        steps, _ = builder.sequence(spec.layers, spec.input.shape)
        net = Net(builder.links)
        net.steps = steps
        for name, (params, split, _) in builder.params.items():
            for p, value in zip(params, split(weights.params[name]), strict=True):
                if tuple(value.shape) != tuple(p.shape):
                    raise ValueError(f"{name}: canonical part {value.shape} vs chainer {p.shape}")
                p.array[...] = value
        for name, (link, attr) in builder.state.items():
            getattr(link, attr)[...] = weights.state[name]
        for p in builder.extra:
            p.array[...] = 0.0
        return ChainerModel(spec, net, builder)

    def place(self, batch: Batch, model: ChainerModel) -> dict[str, Any]:
        x = batch.x.astype(np.int32) if batch.x.dtype.kind == "i" else np.ascontiguousarray(batch.x, np.float32)
        out: dict[str, Any] = {"x": x, "y": None if batch.y is None else batch.y.astype(np.int32), "lengths": None}
        if batch.mask is not None:
            out["lengths"] = [int(n) for n in batch.mask.sum(axis=1)]
        return out

    def forward(self, model: ChainerModel, batch) -> Callable[[], Any]:
        net = model.net

        def run():
            with chainer.using_config("train", False), chainer.using_config("enable_backprop", False):
                return net(batch["x"], batch)[0]
        return run

    def gradient(self, model: ChainerModel, batch) -> Callable[[], Any]:
        net, spec = model.net, model.spec
        x = chainer.Variable(batch["x"]) if differentiates_input(spec) else None  # x's gradient too (models/split.py)
        if x is not None:
            batch = {**batch, "x": x}

        def run():
            net.cleargrads()
            if x is not None:
                x.cleargrad()
            with chainer.using_config("train", True):
                loss = _loss(spec, net, batch)
            loss.backward()
            return loss
        return run

    def profile(self, run: Callable[[], Any], calls: int, outdir: Path) -> ProfileTrace:
        """:class:`TraceHook` over the calls: every function node's forward and backward."""
        hook = TraceHook()
        with hook:
            for _ in range(calls):
                self.sync(run())
        path = write_trace(hook.events, outdir / "trace.json")
        return ProfileTrace(path, hook.events,  # every event is a function's, complete
                            f"dlbench's FunctionHook trace (chainer {chainer.__version__})")

    @staticmethod
    def optimizer_sgd(opt: OptimizerSpec) -> Any:
        return chainer.optimizers.MomentumSGD(lr=opt.lr, momentum=opt.momentum)

    @staticmethod
    def optimizer_adamw(opt: OptimizerSpec) -> Any:
        return chainer.optimizers.AdamW(alpha=opt.lr, beta1=opt.betas[0], beta2=opt.betas[1], eps=opt.eps,
                                        weight_decay_rate=opt.lr * opt.weight_decay)

    def train_step(self, model: ChainerModel, batch, opt: OptimizerSpec) -> Callable[[], Any]:
        optimizer = make_optimizer(type(self), opt)
        optimizer.setup(model.net)
        # frozen layers (SAE pre-training) get no gradient, but Chainer's update gives every parameter a
        # zero one first (``reallocate_cleared_grads``), and AdamW's decay would then move them
        trainable = set(model.spec.trainable_names())
        frozen = [p for name, (params, _, _) in model.bindings.items() if name not in trainable for p in params]
        for p in [*model.extra, *frozen]:
            p.update_rule.enabled = False
        grad = self.gradient(model, batch)

        def run():
            loss = grad()
            optimizer.update()
            return loss
        return run

    def sync(self, out: Any) -> None:
        """NumPy computes synchronously: nothing to wait for."""

    def to_numpy(self, out: Any) -> np.ndarray:
        return np.asarray(out.array)

    def param_count(self, model: ChainerModel) -> int:
        return sum(p.size for p in model.net.params())

    def param_count_extra(self, spec: ModelSpec) -> tuple[int, str]:
        extra = sum(4 * layer.units for layer in L.walk(spec.layers) if isinstance(layer, L.LSTM))
        return extra, ("L.NStepLSTM has a second bias per gate (b4..b7, held at zero)" if extra else "")

    def get_params(self, model: ChainerModel) -> dict[str, np.ndarray]:
        return {n: np.array(join([p.array for p in params])) for n, (params, _, join) in model.bindings.items()}

    def loss_and_grads(self, model: ChainerModel, batch) -> tuple[float, dict[str, np.ndarray]]:
        loss = self.gradient(model, batch)()
        grads = {}
        for name in model.spec.trainable_names():
            params, _, join = model.bindings[name]
            grads[name] = np.array(join([np.zeros(p.shape, np.float32) if p.grad is None else p.grad for p in params]))
        return float(loss.array), grads

    def info(self) -> dict[str, Any]:
        from chainer.backends import intel64

        blas = None
        if threadpoolctl is not None:
            blas = [{k: d.get(k) for k in ("internal_api", "version", "num_threads")}
                    for d in threadpoolctl.threadpool_info()]
        return {"chainer": chainer.__version__, "numpy": np.__version__, "use_ideep": chainer.config.use_ideep,
                "ideep_available": intel64.is_ideep_available(), "blas": blas}


Backend_ = ChainerBackend
