"""PyTensor backend: Theano's maintained successor (symbolic graphs, compiled functions).

Runs in its own environment (``dlbench envs create pytensor``). The network is a symbolic graph over
shared variables, differentiated with ``pytensor.grad`` and compiled with ``pytensor.function``,
the way Theano programs (and Bahrampour et al.'s Theano runs) are written.

Configuration (set in this module *before* ``import pytensor``, merged in front of any
``PYTENSOR_FLAGS`` the user set, so theirs still win): ``floatX=float32``; with
``DLBENCH_CACHE_DIR`` set, ``base_compiledir=$DLBENCH_CACHE_DIR/pytensor``, where PyTensor keeps
both its compiled C modules and its Numba cache, so the ``compile`` scenario gets a cold and a warm
first call, which is Bahrampour et al.'s Table 8 (Theano's compile time). Without it, PyTensor's own
``~/.pytensor`` cache is used (warm after the first run).

Variants (the linker that runs the compiled graph; both with the ``fast_run`` rewrites):

* ``numba``: PyTensor 3's default linker: the graph is JIT-compiled with Numba; matrix products
  call the BLAS of the SciPy wheel.
* ``c``: the Theano-lineage C backend (``cvm`` linker: each op is generated C++ compiled with g++,
  run by the C virtual machine). A pip install gives it no BLAS to link (``blas__ldflags`` is
  empty: no system BLAS here, and PyTensor does not link the wheels' renamed OpenBLAS), so its dot
  products run through NumPy's ``dot`` in Python-level ops: a handicap PyTensor warns about at import
  and recommends conda or Numba against. ``info()`` records ``blas__ldflags``.

Convolution: PyTensor 3 has no convolution layer op (Theano's ``conv2d``/``CorrMM`` were removed;
``pytensor.tensor.signal.convolve2d`` is a single-channel 2-D signal convolution, not a
multi-channel layer). It is written as im2col with PyTensor's tensor ops -- one gather (advanced
indexing with a precomputed index array) of the padded input into a (N*OH*OW, C*kh*kw) matrix --
times the reshaped kernel, one matrix product per group. That is the algorithm of Theano's own CPU
convolution (CorrMM: im2col + GEMM), written with graph ops instead of C; its gradient is the
gather's scatter-add and two matrix products. ``info()["convolution"]`` says so. Pooling is the same
gather followed by a max or a sum (ceil mode: the overhang is padded, and the average divides by the
in-bounds count); LRN is a sum of channel-shifted slices; the LSTM is a ``pytensor.scan`` over time.

Fast path and fairness settings:

* data: the batch is put in shared variables once and bound with ``givens``, so a call moves no data
  (the Theano idiom for benchmarks); each compiled function takes no inputs.
* forward: the eval graph (running BN statistics, no dropout); gradient: ``pytensor.grad`` of the
  training loss, the gradients returned as outputs; train_step: SGD with momentum as shared
  ``updates`` (``v = m v - lr g; w += v``, torch's update for a constant learning rate), or AdamW
  written out the same way (PyTensor has no optimisers): moments and step count in shared variables,
  epsilon after the bias correction and decay ``w -= lr wd w``, as ``torch.optim.AdamW``.
* functions are compiled lazily on their first call, so the first call holds the compile time (as
  for ``torch.compile`` and ``jax.jit``) and the timer's warm-up absorbs it.
* threads: BLAS threads through ``threadpoolctl`` (in the environment) and the launcher's
  ``OMP_NUM_THREADS``/``OPENBLAS_NUM_THREADS``; ``numba.set_num_threads`` for Numba's own pool.
"""

from __future__ import annotations

import os

_FLAGS = ["floatX=float32"]
if os.environ.get("DLBENCH_CACHE_DIR"):
    _FLAGS.append(f"base_compiledir={os.path.join(os.environ['DLBENCH_CACHE_DIR'], 'pytensor')}")
os.environ["PYTENSOR_FLAGS"] = ",".join(_FLAGS + ([os.environ["PYTENSOR_FLAGS"]] if os.environ.get("PYTENSOR_FLAGS")
                                                   else []))

import warnings  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

with warnings.catch_warnings():  # the "no BLAS for the C backend" warning; recorded in info()
    warnings.simplefilter("ignore")
    import pytensor  # noqa: E402
    import pytensor.tensor as pt  # noqa: E402
from pytensor.compile.mode import Mode  # noqa: E402
from pytensor.tensor.random.utils import RandomStream  # noqa: E402

from dlbench.core.cell import DEFAULT_DEVICE  # noqa: E402
from dlbench.data.synthetic import Batch  # noqa: E402
from dlbench.frameworks.base import Backend, OptimizerSpec, UnsupportedError  # noqa: E402
from dlbench.frameworks.builder import make_optimizer  # noqa: E402
from dlbench.frameworks.pytensor import DECLARATION  # noqa: E402
from dlbench.models import layers as L  # noqa: E402
from dlbench.models.layers import _pool_out  # noqa: E402
from dlbench.models.spec import ModelSpec  # noqa: E402
from dlbench.models.split import differentiates_input  # noqa: E402
from dlbench.models.weights import Weights  # noqa: E402

try:
    import threadpoolctl
except ImportError:  # pragma: no cover
    threadpoolctl = None

if pytensor.config.floatX != "float32":  # pragma: no cover - a user flag overrode ours
    raise RuntimeError(f"PyTensor floatX is {pytensor.config.floatX}; dlbench measures float32")

LINKERS = {"numba": "numba", "c": "cvm"}
CONVOLUTION = ("im2col as one gather with PyTensor tensor ops + one matrix product per group (PyTensor 3 has no "
               "convolution layer op; this is the algorithm of Theano's CPU CorrMM)")
F32 = np.float32


def _patch_index(channels: int, hp: int, wp: int, k: int, s: int, oh: int, ow: int) -> np.ndarray:
    """im2col as one gather: for output position r = oh*OW + ow and column c*k*k + i*k + j, the flat
    index of input element (c, oh*s + i, ow*s + j) of a padded (C, Hp, Wp) sample."""
    c, i, j = np.meshgrid(np.arange(channels), np.arange(k), np.arange(k), indexing="ij")
    col = (c * hp * wp + i * wp + j).reshape(-1)  # (C*k*k,)
    oy, ox = np.meshgrid(np.arange(oh), np.arange(ow), indexing="ij")
    row = (oy * s * wp + ox * s).reshape(-1)  # (OH*OW,)
    return (row[:, None] + col[None, :]).astype(np.int64)


def _pad(x, top: int, bottom: int, left: int, right: int, value: float = 0.0):
    if not (top or bottom or left or right):
        return x
    n, c, h, w = x.shape
    out = pt.full((n, c, h + top + bottom, w + left + right), np.asarray(value, F32))
    return pt.set_subtensor(out[:, :, top:top + h, left:left + w], x)


class Graph:
    """Builds the symbolic network from the spec: shared parameters and one graph per mode."""

    def __init__(self, spec: ModelSpec, weights: Weights):
        self.spec = spec
        self.params: dict[str, Any] = {n: pytensor.shared(np.asarray(a, F32), name=n) for n, a in weights.params.items()}
        self.state: dict[str, Any] = {n: pytensor.shared(np.asarray(a, F32), name=n) for n, a in weights.state.items()}
        self.rng = RandomStream(0)
        self.bn_updates: list = []

    def run(self, x, mask, train: bool):
        """(output, Mark'd target) of the network on symbolic ``x``."""
        marks: dict[str, Any] = {}
        out = self.sequence(self.spec.layers, x, self.spec.input.shape, mask, train, marks)
        return out, next(iter(marks.values()), None)

    def sequence(self, layers, x, shape, mask, train: bool, marks: dict):
        for layer in layers:
            method = getattr(self, f"op_{layer.kind.lower()}", None)
            if method is None:
                raise UnsupportedError(f"pytensor backend has no rule for layer {layer.kind}")
            x = method(layer, x, shape, mask, train, marks)
            shape = layer.out_shape(shape)
        return x

    def op_conv2d(self, layer: L.Conv2d, x, shape, mask, train, marks):
        c, h, w = shape
        k, s, p, g = layer.kernel, layer.stride, layer.padding, layer.groups
        _, oh, ow = layer.out_shape(shape)
        weight = self.params[f"{layer.name}.weight"]  # (O, C/g, k, k)
        hp, wp = h + 2 * p, w + 2 * p
        n = x.shape[0]
        flat = _pad(x, p, p, p, p).reshape((n, c * hp * wp))
        cols = flat[:, pt.constant(_patch_index(c, hp, wp, k, s, oh, ow))]  # (N, OH*OW, C*k*k)
        cols = cols.reshape((n * oh * ow, c * k * k))
        cg, og = c // g, layer.out_channels // g
        outs = []
        for gi in range(g):  # a group's columns are contiguous: channel-major order
            cols_g = cols[:, gi * cg * k * k:(gi + 1) * cg * k * k] if g > 1 else cols
            wg = (weight[gi * og:(gi + 1) * og] if g > 1 else weight).reshape((og, cg * k * k))
            outs.append(pt.dot(cols_g, wg.T))  # (N*OH*OW, O/g)
        out = outs[0] if g == 1 else pt.concatenate(outs, axis=1)
        out = out.reshape((n, oh, ow, layer.out_channels)).transpose(0, 3, 1, 2)
        if layer.bias:
            out = out + self.params[f"{layer.name}.bias"].dimshuffle("x", 0, "x", "x")
        return out

    def op_pool2d(self, layer: L.Pool2d, x, shape, mask, train, marks):
        c, h, w = shape
        k, s, p = layer.kernel, layer.stride, layer.padding
        oh, ow = (_pool_out(d, k, s, p, layer.ceil_mode) for d in (h, w))
        eh, ew = max(0, (oh - 1) * s + k - (h + 2 * p)), max(0, (ow - 1) * s + k - (w + 2 * p))
        hp, wp = h + 2 * p + eh, w + 2 * p + ew
        n = x.shape[0]
        fill = -np.inf if layer.op == "max" else 0.0
        flat = _pad(x, p, p + eh, p, p + ew, fill).reshape((n * c, hp * wp))
        windows = flat[:, pt.constant(_patch_index(1, hp, wp, k, s, oh, ow))]  # (N*C, OH*OW, k*k)
        if layer.op == "max":
            return windows.max(axis=-1).reshape((n, c, oh, ow))
        inside = np.pad(np.ones((h + 2 * p, w + 2 * p)), ((0, eh), (0, ew)))
        count = np.lib.stride_tricks.sliding_window_view(inside, (k, k))[::s, ::s][:oh, :ow].sum(axis=(2, 3))
        return windows.sum(axis=-1).reshape((n, c, oh, ow)) * pt.constant((1.0 / count).astype(F32))

    def op_globalavgpool(self, layer, x, shape, mask, train, marks):
        return x.mean(axis=(2, 3))

    def op_lrn(self, layer: L.LRN, x, shape, mask, train, marks):
        c = shape[0]
        half = layer.size // 2
        sq = pt.sqr(x)
        n, _, h, w = x.shape
        padded = pt.set_subtensor(pt.zeros((n, c + layer.size - 1, h, w), dtype=F32)[:, half:half + c], sq)
        window = pt.add(*[padded[:, i:i + c] for i in range(layer.size)])
        return x / (layer.k + (layer.alpha / layer.size) * window) ** layer.beta

    def op_batchnorm(self, layer: L.BatchNorm, x, shape, mask, train, marks):
        gamma, beta = self.params[f"{layer.name}.gamma"], self.params[f"{layer.name}.beta"]
        rm, rv = self.state[f"{layer.name}.running_mean"], self.state[f"{layer.name}.running_var"]
        axes = (0, 2, 3) if len(shape) == 3 else (0,)
        bc = ("x", 0, "x", "x") if len(shape) == 3 else ("x", 0)
        if train:
            mean, var = x.mean(axis=axes), x.var(axis=axes)
            count = x.size // x.shape[1]
            m = F32(layer.momentum)
            # the unbiased correction count / (count - 1) of two int64 scalars is float64: cast it, or the
            # update is float64 and pytensor.function refuses it for a float32 shared variable
            unbiased = (count / pt.maximum(count - 1, 1)).astype(F32)
            self.bn_updates += [(rm, (1 - m) * rm + m * mean),
                                (rv, (1 - m) * rv + m * var * unbiased)]
        else:
            mean, var = rm, rv
        return (x - mean.dimshuffle(*bc)) / pt.sqrt(var.dimshuffle(*bc) + F32(layer.eps)) * gamma.dimshuffle(*bc) \
            + beta.dimshuffle(*bc)

    def op_dense(self, layer: L.Dense, x, shape, mask, train, marks):
        out = pt.dot(x, self.params[f"{layer.name}.weight"])
        return out + self.params[f"{layer.name}.bias"] if layer.bias else out

    def op_tieddense(self, layer: L.TiedDense, x, shape, mask, train, marks):
        return pt.dot(x, self.params[f"{layer.tied_to}.weight"].T) + self.params[f"{layer.name}.bias"]

    def op_activation(self, layer: L.Activation, x, shape, mask, train, marks):
        return {"relu": lambda v: pt.maximum(v, 0), "tanh": pt.tanh, "sigmoid": pt.sigmoid}[layer.fn](x)

    def op_dropout(self, layer: L.Dropout, x, shape, mask, train, marks):
        if not train or layer.rate == 0:
            return x
        keep = self.rng.binomial(1, 1.0 - layer.rate, size=x.shape).astype(F32)
        return x * keep / F32(1.0 - layer.rate)

    def op_flatten(self, layer, x, shape, mask, train, marks):
        return x.reshape((x.shape[0], -1))

    def op_embedding(self, layer: L.Embedding, x, shape, mask, train, marks):
        return self.params[f"{layer.name}.weight"][x]

    def op_lstm(self, layer: L.LSTM, x, shape, mask, train, marks):
        hsz = layer.units
        w_x, w_h, b = (self.params[f"{layer.name}.{k}"] for k in ("w_x", "w_h", "b"))
        xw = (pt.dot(x, w_x) + b).dimshuffle(1, 0, 2)  # (T, N, 4H)
        n = x.shape[0]

        def step(z, h, c):
            z = z + pt.dot(h, w_h)
            i, f = pt.sigmoid(z[:, :hsz]), pt.sigmoid(z[:, hsz:2 * hsz])
            g, o = pt.tanh(z[:, 2 * hsz:3 * hsz]), pt.sigmoid(z[:, 3 * hsz:])
            c = f * c + i * g
            return o * pt.tanh(c), c

        zeros = pt.zeros((n, hsz), dtype=F32)
        hs, _ = pytensor.scan(step, sequences=[xw], outputs_info=[zeros, zeros], return_updates=False)
        return hs.dimshuffle(1, 0, 2)

    def op_maskedmean(self, layer, x, shape, mask, train, marks):
        if mask is None:
            return x.mean(axis=1)
        return (x * mask.dimshuffle(0, 1, "x")).sum(axis=1) / mask.sum(axis=1, keepdims=True)

    def op_mark(self, layer: L.Mark, x, shape, mask, train, marks):
        marks[layer.name] = x
        return x

    def op_zeropadshortcut(self, layer: L.ZeroPadShortcut, x, shape, mask, train, marks):
        x = x[:, :, ::layer.stride, ::layer.stride]
        extra = layer.out_channels - shape[0]
        if not extra:
            return x
        n, _, h, w = x.shape
        return pt.concatenate([x, pt.zeros((n, extra, h, w), dtype=F32)], axis=1)

    def op_residual(self, layer: L.Residual, x, shape, mask, train, marks):
        out = self.sequence(layer.body, x, shape, mask, train, marks) \
            + self.sequence(layer.shortcut, x, shape, mask, train, marks)
        return pt.maximum(out, 0) if layer.post == "relu" else out


def _loss(spec: ModelSpec, out, target, x, y):
    if spec.loss.kind == "mse":
        return pt.mean(pt.sqr(out - (x if target is None else target)))
    logits = out.reshape((-1, out.shape[-1]))
    labels = y.reshape((-1,))
    logp = pt.special.log_softmax(logits, axis=-1)
    return -pt.mean(logp[pt.arange(labels.shape[0]), labels])


def _optimizer_updates(params: list, grads: list, opt: OptimizerSpec) -> tuple[list, list]:
    """The shared-variable updates of one step of ``opt``, and its state (zero-initialised shared
    variables): the backend's rules (:func:`make_optimizer`)."""
    return make_optimizer(PyTensorBackend, opt, params, grads)


def _zeros(p, prefix: str):
    return pytensor.shared(np.zeros(p.get_value(borrow=True).shape, F32), name=f"{prefix}_{p.name}")


def sgd_updates(opt: OptimizerSpec, params: list, grads: list) -> tuple[list, list]:
    updates, slots = [], []
    lr, m = F32(opt.lr), F32(opt.momentum)
    for p, gr in zip(params, grads, strict=True):
        v = _zeros(p, "v")
        v_new = m * v - lr * gr
        updates += [(v, v_new), (p, p + v_new)]
        slots.append(v)
    return updates, slots


def adamw_updates(opt: OptimizerSpec, params: list, grads: list) -> tuple[list, list]:
    updates, slots = [], []
    lr, b1, b2, eps, decay = (F32(a) for a in (opt.lr, *opt.betas, opt.eps, opt.lr * opt.weight_decay))
    t = pytensor.shared(F32(0.0), name="adamw_t")
    t_new = t + F32(1.0)
    c1, c2 = F32(1.0) - b1 ** t_new, F32(1.0) - b2 ** t_new
    updates.append((t, t_new))
    slots.append(t)
    for p, gr in zip(params, grads, strict=True):
        m, v = _zeros(p, "m"), _zeros(p, "v")
        m_new = b1 * m + (F32(1.0) - b1) * gr
        v_new = b2 * v + (F32(1.0) - b2) * gr * gr
        step = (m_new / c1) / (pt.sqrt(v_new / c2) + eps)
        updates += [(m, m_new), (v, v_new), (p, p - decay * p - lr * step)]
        slots += [m, v]
    return updates, slots


class PyTensorModel:
    def __init__(self, spec: ModelSpec, graph: Graph, mode: Mode, variant: str):
        self.spec, self.graph, self.mode, self.variant = spec, graph, mode, variant
        self.trainable = [graph.params[n] for n in spec.trainable_names()]
        self.functions: dict[tuple, Any] = {}  # compiled lazily, per placed batch (and optimiser)
        #: each training function's optimiser state (shared variables), zeroed when a closure is made
        self.slots: dict[tuple, list] = {}


class PyTensorBackend(Backend):
    declaration = DECLARATION
    #: the optimisers, written out as shared-variable updates (PyTensor has none of its own)
    optimizer_sgd = staticmethod(sgd_updates)
    optimizer_adamw = staticmethod(adamw_updates)
    packages = ("pytensor", "numpy", "numba", "scipy")

    def __init__(self) -> None:
        self.threads: int | None = None

    def set_threads(self, n: int) -> dict[str, Any]:
        self.threads = n
        out: dict[str, Any] = {}
        if threadpoolctl is not None:
            threadpoolctl.threadpool_limits(n)
            out["blas"] = [{"api": d["internal_api"], "threads": d["num_threads"]}
                           for d in threadpoolctl.threadpool_info()]
        try:
            import numba

            numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
            out["numba_threads"] = numba.get_num_threads()
        except ImportError:  # pragma: no cover
            pass
        return out

    def build(self, spec: ModelSpec, weights: Weights, device: str = DEFAULT_DEVICE,
              variant: str | None = None) -> PyTensorModel:
        variant = variant or self.variants[0]
        if variant not in self.variants:
            raise UnsupportedError(f"pytensor has no variant {variant!r}")
        if device != "cpu":
            raise UnsupportedError(f"the pytensor backend runs its C or Numba linker on the CPU; no device {device!r}")
        return PyTensorModel(spec, Graph(spec, weights), Mode(linker=LINKERS[variant], optimizer="fast_run"), variant)

    def place(self, batch: Batch, model: PyTensorModel) -> dict[str, Any]:
        """The batch in shared variables, bound to the graph's inputs with ``givens``."""
        x = batch.x.astype(np.int64) if batch.x.dtype.kind == "i" else np.asarray(batch.x, F32)
        placed = {"x": pytensor.shared(x, name="x"), "batch": batch}
        placed["y"] = None if batch.y is None else pytensor.shared(batch.y.astype(np.int64), name="y")
        placed["mask"] = None if batch.mask is None else pytensor.shared(np.asarray(batch.mask, F32), name="mask")
        return placed

    def _function(self, model: PyTensorModel, batch: dict, kind: str, opt: OptimizerSpec | None = None):
        key = (kind, id(batch["x"]), opt)
        if key in model.functions:
            return model.functions[key]
        g = model.graph
        g.bn_updates = []
        x, y, mask = batch["x"], batch["y"], batch["mask"]
        if kind == "forward":
            out, _ = g.run(x, mask, train=False)
            fn = pytensor.function([], out, mode=model.mode)
        else:
            out, target = g.run(x, mask, train=True)
            loss = _loss(model.spec, out, target, x, y)
            if kind == "gradient":  # a part's input gradient too, last (models/split.py)
                wrt = [*model.trainable, *([x] if differentiates_input(model.spec) else [])]
                fn = pytensor.function([], [loss, *pytensor.grad(loss, wrt)], mode=model.mode, updates=g.bn_updates)
            else:
                updates, model.slots[key] = _optimizer_updates(model.trainable, pytensor.grad(loss, model.trainable),
                                                               opt)
                fn = pytensor.function([], loss, mode=model.mode, updates=list(g.bn_updates) + updates)
        model.functions[key] = fn
        return fn

    def forward(self, model: PyTensorModel, batch) -> Callable[[], Any]:
        return self._lazy(model, batch, "forward")

    def gradient(self, model: PyTensorModel, batch) -> Callable[[], Any]:
        return self._lazy(model, batch, "gradient")

    def train_step(self, model: PyTensorModel, batch, opt: OptimizerSpec) -> Callable[[], Any]:
        for slot in model.slots.get(("train_step", id(batch["x"]), opt), []):  # a fresh optimiser state
            slot.set_value(np.zeros_like(slot.get_value(borrow=True)))
        return self._lazy(model, batch, "train_step", opt)

    def _lazy(self, model: PyTensorModel, batch: dict, kind: str, opt: OptimizerSpec | None = None) -> Callable[[], Any]:
        """A closure that compiles its function on the first call (the compile time is the first call's)."""
        fn = None

        def run():
            nonlocal fn
            if fn is None:
                fn = self._function(model, batch, kind, opt)
            return fn()
        return run

    def sync(self, out: Any) -> None:
        """A compiled function returns computed NumPy arrays: nothing to wait for."""

    def to_numpy(self, out: Any) -> np.ndarray:
        return np.asarray(out[0] if isinstance(out, list) else out)

    def param_count(self, model: PyTensorModel) -> int:
        return sum(int(p.get_value(borrow=True).size) for p in model.graph.params.values())

    def get_params(self, model: PyTensorModel) -> dict[str, np.ndarray]:
        return {n: np.array(p.get_value()) for n, p in model.graph.params.items()}

    def loss_and_grads(self, model: PyTensorModel, batch) -> tuple[float, dict[str, np.ndarray]]:
        saved = {n: s.get_value() for n, s in model.graph.state.items()}
        loss, *grads = self._function(model, batch, "gradient")()
        grads = grads[:len(model.trainable)]  # a part's input gradient, last, is not a parameter's
        for n, v in saved.items():  # the gate's loss check must not move the BN statistics it later reads
            model.graph.state[n].set_value(v)
        return float(loss), {n: np.asarray(g) for n, g in zip(model.spec.trainable_names(), grads, strict=True)}

    def info(self) -> dict[str, Any]:
        c = pytensor.config
        out: dict[str, Any] = {"pytensor": pytensor.__version__, "numpy": np.__version__, "floatX": c.floatX,
                               "linkers": LINKERS, "optimizer": "fast_run", "base_compiledir": str(c.base_compiledir),
                               "cxx": c.cxx, "blas__ldflags": c.blas__ldflags or "(empty: no BLAS linked into C ops)",
                               "convolution": CONVOLUTION}
        try:
            import numba

            out["numba"] = numba.__version__
        except ImportError:  # pragma: no cover
            pass
        if threadpoolctl is not None:
            out["blas"] = [{k: d.get(k) for k in ("internal_api", "version", "num_threads")}
                           for d in threadpoolctl.threadpool_info()]
        return out


Backend_ = PyTensorBackend
