"""PaddlePaddle backend: the spec built from standard ``paddle.nn`` layers (Paddle 3.x).

Runs in its own environment (``dlbench envs create paddle``: the ``paddlepaddle`` CPU wheel).

Fast path and fairness settings:

* float32, NCHW, CPU kernels as the wheel ships them (compiled with oneDNN; ``info()`` records the
  oneDNN flag and ``is_compiled_with_onednn``).
* variants: ``dynamic`` (dygraph, eager) and ``to_static`` (``paddle.jit.to_static`` of the forward
  and of forward + loss, ``full_graph=True``: the AST transcription to a static PIR program, run by
  the executor; the CPU wheel has no CINN, so no kernel fusion). Gradients still come from
  ``loss.backward()``, which differentiates the static program (its ``run_program`` op has a backward
  program); ``tests/frameworks/test_paddle.py`` checks that a to_static step changes every parameter
  and that the loss falls over a few steps.
* threads: Paddle defaults to ONE CPU math thread (``FLAGS_paddle_num_threads=1``), whatever
  ``OMP_NUM_THREADS`` says, so ``set_threads`` calls ``paddle.base.core.set_num_threads(n)`` and sets
  the flag; it reads the flag back.
* optimiser: ``paddle.optimizer.Momentum(lr, momentum=0.9)`` over the trainable parameters
  (``v = m v + g; w -= lr v``, torch's update), or ``paddle.optimizer.AdamW`` (its fused ``adamw``
  kernel: decay ``w -= lr wd w``, epsilon after the bias correction as torch's). ``clear_grad`` before
  each backward.
* LSTM: ``paddle.nn.LSTM`` (batch first, gate order i, f, g, o) has two biases per gate; the canonical
  bias goes into ``bias_ih_l0`` and ``bias_hh_l0`` is held at zero: it is left out of the optimiser
  but keeps ``stop_gradient=False``, because the dygraph backward of Paddle's fused ``rnn`` kernel
  fails ("Required tensor shall not be nullptr") when one of its weights stops the gradient. So its
  (small) gradient is computed and discarded; 4 x units extra parameters in Paddle's own count,
  reported by the gate.
* Batch norm: Paddle's ``momentum`` weights the old running value, so it is 1 - the spec's; its
  running statistics (``_mean``, ``_variance``) are parameters with ``trainable=False`` in Paddle and
  are not counted as the spec's parameters.
* transformers: ``frameworks/paddle/layers.py`` (Paddle 3's ``scaled_dot_product_attention`` in its
  (N, T, heads, head_dim) layout, ``nn.LayerNorm``, ``nn.GELU``; RMSNorm composed, as PaddleNLP's
  Llama does on the CPU). Paddle's ``nn.Linear`` weight is (in, out), the spec's layout, so no
  projection is transposed.
* average pooling: ``exclusive=True`` (divide by the in-bounds elements) is Caffe's rule when there is
  no padding, which is every average pooling of the zoo (AlexNet-R's ceil-mode windows included).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import paddle
import paddle.nn.functional as F
from paddle import nn

from dlbench.core.cell import DEFAULT_DEVICE
from dlbench.data.synthetic import Batch
from dlbench.frameworks.base import Backend, OptimizerSpec, UnsupportedError
from dlbench.frameworks.builder import LayerBuilder, make_optimizer
from dlbench.frameworks.paddle import DECLARATION
from dlbench.frameworks.paddle import layers as PL
from dlbench.measure.profile import ProfileTrace, complete_events, read_trace
from dlbench.models import layers as L
from dlbench.models.spec import ModelSpec
from dlbench.models.split import differentiates_input
from dlbench.models.weights import Weights


class Seq(nn.Layer):
    """Runs layers in order, passing the mask to those that need it and keeping the Mark'd activation."""

    def __init__(self, layers: list[nn.Layer]):
        super().__init__()
        self.layers = nn.LayerList(layers)

    def forward(self, x, mask=None):
        target = None
        for m in self.layers:
            if isinstance(m, Mark):
                target = x
            elif isinstance(m, MaskedMean | PL.TakesMask):
                x = m(x, mask)
            else:
                x = m(x)
        return x, target


class Mark(nn.Layer):
    def forward(self, x):  # pragma: no cover - Seq handles it
        return x


class MaskedMean(nn.Layer):
    def forward(self, x, mask=None):
        if mask is None:
            return x.mean(axis=1)
        return (x * mask.unsqueeze(-1)).sum(axis=1) / mask.sum(axis=1, keepdim=True)


class GlobalAvgPool(nn.Layer):
    def forward(self, x):
        return x.mean(axis=[2, 3])


class LSTMLayer(nn.Layer):
    def __init__(self, inputs: int, units: int):
        super().__init__()
        self.lstm = nn.LSTM(inputs, units)

    def forward(self, x):
        return self.lstm(x)[0]


class TiedLinear(nn.Layer):
    """Decoder sharing its encoder's weight: y = x @ W_enc.T + b (Paddle's Linear weight is (in, out))."""

    def __init__(self, encoder: nn.Linear, units: int):
        super().__init__()
        self._encoder = [encoder]  # a list, so the weight is not registered twice
        self.bias = self.create_parameter([units], is_bias=True)

    def forward(self, x):
        return paddle.matmul(x, self._encoder[0].weight, transpose_y=True) + self.bias


class ZeroPadShortcut(nn.Layer):
    def __init__(self, in_channels: int, out_channels: int, stride: int):
        super().__init__()
        self.extra, self.stride = out_channels - in_channels, stride

    def forward(self, x):
        x = x[:, :, :: self.stride, :: self.stride]
        if not self.extra:
            return x
        zeros = paddle.zeros([x.shape[0], self.extra, x.shape[2], x.shape[3]], dtype=x.dtype)
        return paddle.concat([x, zeros], axis=1)


class Residual(nn.Layer):
    def __init__(self, body: list, shortcut: list, relu: bool):
        super().__init__()
        self.body, self.shortcut, self.relu = nn.Sequential(*body), nn.Sequential(*shortcut), relu

    def forward(self, x):
        out = self.body(x) + (self.shortcut(x) if len(self.shortcut) else x)
        return F.relu(out) if self.relu else out


class LossNet(nn.Layer):
    """Network + loss in one layer, so ``to_static`` transcribes the loss into the program too."""

    def __init__(self, net: Seq, kind: str):
        super().__init__()
        self.net, self.kind = net, kind

    def forward(self, x, y, mask=None):
        out, target = self.net(x, mask)
        if self.kind == "mse":
            return F.mse_loss(out, x if target is None else target)
        return F.cross_entropy(out.reshape([-1, out.shape[-1]]), y.reshape([-1]))


class Infer(nn.Layer):
    def __init__(self, net: Seq):
        super().__init__()
        self.net = net

    def forward(self, x, mask=None):
        return self.net(x, mask)[0]


def _same(a: np.ndarray) -> np.ndarray:
    return a


def _t(a: np.ndarray) -> np.ndarray:
    return a.T


Binding = tuple[Any, Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]]


class Builder(LayerBuilder):
    """Turns layers into Paddle layers and records where each canonical parameter lives."""

    builds_for = "paddle backend"

    def __init__(self) -> None:
        self.params: dict[str, Binding] = {}
        self.state: dict[str, Any] = {}
        self.linears: dict[str, nn.Linear] = {}
        self.frozen: list = []
        self.extra: list = []

    def make_conv2d(self, layer: L.Conv2d, shape) -> nn.Layer:
        m = nn.Conv2D(shape[0], layer.out_channels, layer.kernel, layer.stride, layer.padding, groups=layer.groups,
                      bias_attr=None if layer.bias else False)
        self.params[f"{layer.name}.weight"] = (m.weight, _same, _same)
        if layer.bias:
            self.params[f"{layer.name}.bias"] = (m.bias, _same, _same)
        return m

    def make_pool2d(self, layer: L.Pool2d, shape) -> nn.Layer:
        if layer.op == "max":
            return nn.MaxPool2D(layer.kernel, layer.stride, layer.padding, ceil_mode=layer.ceil_mode)
        if layer.padding and layer.ceil_mode:
            raise UnsupportedError("paddle's AvgPool2D cannot divide a padded ceil-mode window by the padded-input count "
                                   "(exclusive=True drops the padding, exclusive=False counts the overhang)")
        return nn.AvgPool2D(layer.kernel, layer.stride, layer.padding, ceil_mode=layer.ceil_mode,
                            exclusive=layer.padding == 0)

    def make_globalavgpool(self, layer, shape) -> nn.Layer:
        return GlobalAvgPool()

    def make_lrn(self, layer: L.LRN, shape) -> nn.Layer:
        return nn.LocalResponseNorm(layer.size, layer.alpha, layer.beta, layer.k)

    def make_batchnorm(self, layer: L.BatchNorm, shape) -> nn.Layer:
        m = nn.BatchNorm2D(shape[0], momentum=1.0 - layer.momentum, epsilon=layer.eps)
        self.params[f"{layer.name}.gamma"] = (m.weight, _same, _same)
        self.params[f"{layer.name}.beta"] = (m.bias, _same, _same)
        self.state[f"{layer.name}.running_mean"] = m._mean
        self.state[f"{layer.name}.running_var"] = m._variance
        return m

    def make_dense(self, layer: L.Dense, shape) -> nn.Layer:
        m = nn.Linear(shape[-1], layer.units, bias_attr=None if layer.bias else False)
        self.params[f"{layer.name}.weight"] = (m.weight, _same, _same)
        if layer.bias:
            self.params[f"{layer.name}.bias"] = (m.bias, _same, _same)
        self.linears[layer.name] = m
        if not layer.trainable:
            self.frozen += [m.weight] + ([m.bias] if layer.bias else [])
        return m

    def make_tieddense(self, layer: L.TiedDense, shape) -> nn.Layer:
        m = TiedLinear(self.linears[layer.tied_to], layer.units)
        self.params[f"{layer.name}.bias"] = (m.bias, _same, _same)
        if not layer.trainable:
            self.frozen.append(m.bias)
        return m

    def make_activation(self, layer: L.Activation, shape) -> nn.Layer:
        return {"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}[layer.fn]()

    def make_dropout(self, layer: L.Dropout, shape) -> nn.Layer:
        return nn.Dropout(layer.rate)

    def make_flatten(self, layer, shape) -> nn.Layer:
        return nn.Flatten()

    def make_embedding(self, layer: L.Embedding, shape) -> nn.Layer:
        m = nn.Embedding(layer.vocab, layer.dim)
        self.params[f"{layer.name}.weight"] = (m.weight, _same, _same)
        return m

    def make_lstm(self, layer: L.LSTM, shape) -> nn.Layer:
        m = LSTMLayer(shape[-1], layer.units)
        lstm = m.lstm
        self.params[f"{layer.name}.w_x"] = (lstm.weight_ih_l0, _t, _t)
        self.params[f"{layer.name}.w_h"] = (lstm.weight_hh_l0, _t, _t)
        self.params[f"{layer.name}.b"] = (lstm.bias_ih_l0, _same, _same)
        self.extra.append(lstm.bias_hh_l0)
        return m

    def make_maskedmean(self, layer, shape) -> nn.Layer:
        return MaskedMean()

    def make_mark(self, layer, shape) -> nn.Layer:
        return Mark()

    def make_zeropadshortcut(self, layer: L.ZeroPadShortcut, shape) -> nn.Layer:
        return ZeroPadShortcut(shape[0], layer.out_channels, layer.stride)

    def make_residual(self, layer: L.Residual, shape) -> nn.Layer:
        return Residual(self.sequence(layer.body, shape)[0], self.sequence(layer.shortcut, shape)[0],
                        layer.post == "relu")

    # --- transformer layers (frameworks/paddle/layers.py) ---
    def make_positionembedding(self, layer: L.PositionEmbedding, shape) -> nn.Layer:
        m = PL.PositionEmbedding(layer.max_len, layer.dim)
        self.params[f"{layer.name}.weight"] = (m.weight, _same, _same)
        return m

    def make_segmentembedding(self, layer: L.SegmentEmbedding, shape) -> nn.Layer:
        m = PL.SegmentEmbedding(layer.types, layer.dim)
        self.params[f"{layer.name}.weight"] = (m.weight, _same, _same)
        return m

    def make_layernorm(self, layer: L.LayerNorm, shape) -> nn.Layer:
        m = nn.LayerNorm(shape[-1], epsilon=layer.eps)
        self.params[f"{layer.name}.weight"] = (m.weight, _same, _same)
        self.params[f"{layer.name}.bias"] = (m.bias, _same, _same)
        return m

    def make_rmsnorm(self, layer: L.RMSNorm, shape) -> nn.Layer:
        m = PL.RMSNorm(shape[-1], layer.eps)
        self.params[f"{layer.name}.weight"] = (m.weight, _same, _same)
        return m

    def make_gelu(self, layer: L.GELU, shape) -> nn.Layer:
        return nn.GELU(approximate=layer.approximate == "tanh")

    def make_attention(self, layer: L.Attention, shape) -> nn.Layer:
        heads, kv, hd = layer.dims(shape[-1])
        m = PL.Attention(shape[-1], heads, kv, hd, layer.causal, layer.rope_theta, layer.bias, shape[0])
        for proj in "qkvo":
            linear = getattr(m, proj)
            self.params[f"{layer.name}.w{proj}"] = (linear.weight, _same, _same)
            if layer.bias:
                self.params[f"{layer.name}.b{proj}"] = (linear.bias, _same, _same)
        return m

    def make_swiglu(self, layer: L.SwiGLU, shape) -> nn.Layer:
        m = PL.SwiGLU(shape[-1], layer.hidden)
        for leaf, linear in (("w_gate", m.gate), ("w_up", m.up), ("w_down", m.down)):
            self.params[f"{layer.name}.{leaf}"] = (linear.weight, _same, _same)
        return m

    def make_skipblock(self, layer: L.SkipBlock, shape) -> nn.Layer:
        return PL.SkipBlock(self.sequence(layer.body, shape)[0], self.sequence(layer.post, shape)[0])

    def make_patchembed(self, layer: L.PatchEmbed, shape) -> nn.Layer:
        m = PL.PatchEmbed(shape[0], layer.dim, layer.patch)
        self.params[f"{layer.name}.weight"] = (m.proj.weight, _same, _same)
        self.params[f"{layer.name}.bias"] = (m.proj.bias, _same, _same)
        self.params[f"{layer.name}.cls"] = (m.cls, _same, _same)
        return m

    def make_taketoken(self, layer: L.TakeToken, shape) -> nn.Layer:
        return PL.TakeToken(layer.index)

    def make_lmhead(self, layer: L.LMHead, shape) -> nn.Layer:
        return PL.TiedLMHead(self.params[f"{layer.tied_to}.weight"][0])


class PaddleModel:
    def __init__(self, spec: ModelSpec, net: Seq, builder: Builder, variant: str):
        self.spec, self.net, self.variant = spec, net, variant
        self.bindings, self.state = builder.params, builder.state
        state_ids = {id(t) for t in builder.state.values()}
        extra_ids = {id(t) for t in builder.extra}
        self.counted = [p for p in net.parameters() if id(p) not in state_ids]
        self.trainable = [p for p in self.counted if not p.stop_gradient and id(p) not in extra_ids]
        self.infer = Infer(net)
        self.loss = LossNet(net, spec.loss.kind)
        if variant == "to_static":
            self.infer = paddle.jit.to_static(self.infer, full_graph=True)
            self.loss = paddle.jit.to_static(self.loss, full_graph=True)


#: the duration Paddle's Chrome export appends to an event's name
_DURATION = re.compile(r"\[[\d.]+ \w+\]$")


class PaddleBackend(Backend):
    declaration = DECLARATION
    packages = ("paddlepaddle", "numpy")

    def __init__(self) -> None:
        self.threads: int | None = None

    def set_threads(self, n: int) -> dict[str, Any]:
        paddle.base.core.set_num_threads(n)
        paddle.set_flags({"FLAGS_paddle_num_threads": n})
        self.threads = n
        return {"paddle_num_threads": paddle.get_flags(["FLAGS_paddle_num_threads"])["FLAGS_paddle_num_threads"],
                "omp_env": os.environ.get("OMP_NUM_THREADS")}

    def build(self, spec: ModelSpec, weights: Weights, device: str = DEFAULT_DEVICE,
              variant: str | None = None) -> PaddleModel:
        variant = variant or "dynamic"
        if variant not in self.variants:
            raise UnsupportedError(f"paddle has no variant {variant!r}")
        if device != "cpu":
            raise UnsupportedError(f"the paddle environment has the CPU wheel (paddlepaddle); no device {device!r}")
        paddle.set_device("cpu")
        paddle.seed(0)
        builder = Builder()
        net = Seq(builder.sequence(spec.layers, spec.input.shape)[0])
        for p in builder.frozen:
            p.stop_gradient = True
        with paddle.no_grad():
            for name, (tensor, to_pd, _) in builder.params.items():
                value = np.ascontiguousarray(to_pd(weights.params[name])).astype(np.float32)
                if tuple(value.shape) != tuple(tensor.shape):
                    raise ValueError(f"{name}: canonical {value.shape} vs paddle {tuple(tensor.shape)}")
                tensor.set_value(value)
            for name, tensor in builder.state.items():
                tensor.set_value(weights.state[name].astype(np.float32))
            for p in builder.extra:
                p.set_value(np.zeros(p.shape, np.float32))
        return PaddleModel(spec, net, builder, variant)

    def place(self, batch: Batch, model: PaddleModel) -> dict[str, Any]:
        def put(a, dtype=None):
            return None if a is None else paddle.to_tensor(np.ascontiguousarray(a if dtype is None else a.astype(dtype)))
        return {"x": put(batch.x), "y": put(batch.y, np.int64), "mask": put(batch.mask, np.float32)}

    def forward(self, model: PaddleModel, batch) -> Callable[[], Any]:
        model.infer.eval()  # the wrapper too: to_static keys its program cache on the layer's mode
        infer, x, mask = model.infer, batch["x"], batch["mask"]

        def run():
            with paddle.no_grad():
                return infer(x, mask)
        return run

    def gradient(self, model: PaddleModel, batch) -> Callable[[], Any]:
        model.loss.train()
        net, loss_fn, x, y, mask = model.net, model.loss, batch["x"], batch["y"], batch["mask"]
        with_input = differentiates_input(model.spec)  # x's gradient too (models/split.py)
        if with_input:
            x.stop_gradient = False

        def run():
            net.clear_gradients()
            if with_input:
                x.clear_gradient(set_to_zero=False)
            loss = loss_fn(x, y, mask)
            loss.backward()
            return loss
        return run

    @staticmethod
    def optimizer_sgd(opt: OptimizerSpec, params: list) -> Any:
        return paddle.optimizer.Momentum(learning_rate=opt.lr, momentum=opt.momentum, parameters=params)

    @staticmethod
    def optimizer_adamw(opt: OptimizerSpec, params: list) -> Any:
        return paddle.optimizer.AdamW(learning_rate=opt.lr, beta1=opt.betas[0], beta2=opt.betas[1], epsilon=opt.eps,
                                      weight_decay=opt.weight_decay, parameters=params)

    def train_step(self, model: PaddleModel, batch, opt: OptimizerSpec) -> Callable[[], Any]:
        model.loss.train()
        optimizer = make_optimizer(type(self), opt, model.trainable)
        loss_fn, x, y, mask = model.loss, batch["x"], batch["y"], batch["mask"]

        def run():
            optimizer.clear_grad()
            loss = loss_fn(x, y, mask)
            loss.backward()
            optimizer.step()
            return loss
        return run

    def sync(self, out: Any) -> None:
        """CPU kernels run synchronously in Paddle's dygraph and executor: nothing to wait for."""

    def profile(self, run: Callable[[], Any], calls: int, outdir: Path) -> ProfileTrace:
        """``paddle.profiler`` over the calls (dlbench runs Paddle on the CPU), its Chrome trace export;
        operations are its ``Operator`` events (``conv2d dygraph``, and the backward's grad nodes,
        ``Global_Conv2dGradNodeFinal``), each name without the duration Paddle appends to it."""
        from paddle import profiler

        with profiler.Profiler(targets=[profiler.ProfilerTarget.CPU],
                               on_trace_ready=profiler.export_chrome_tracing(str(outdir), "paddle")):
            for _ in range(calls):
                self.sync(run())
        path = max(outdir.glob("paddle*.json"))
        ops = [{**e, "name": _DURATION.sub("", e["name"])}  # "conv2d dygraph[483.688 us]": one name per op
               for e in complete_events(read_trace(path), lambda e: e.get("cat") == "Operator")]
        return ProfileTrace(path, ops, f"paddle.profiler (paddle {paddle.__version__})")

    def to_numpy(self, out: Any) -> np.ndarray:
        return np.asarray(out.numpy())

    def param_count(self, model: PaddleModel) -> int:
        return sum(int(np.prod(p.shape)) for p in model.counted)

    def param_count_extra(self, spec: ModelSpec) -> tuple[int, str]:
        extra = sum(4 * layer.units for layer in L.walk(spec.layers) if isinstance(layer, L.LSTM))
        return extra, ("paddle.nn.LSTM has a second bias per gate (bias_hh, held at zero)" if extra else "")

    def get_params(self, model: PaddleModel) -> dict[str, np.ndarray]:
        return {n: from_pd(t.numpy()).copy() for n, (t, _, from_pd) in model.bindings.items()}

    def loss_and_grads(self, model: PaddleModel, batch) -> tuple[float, dict[str, np.ndarray]]:
        loss = self.gradient(model, batch)()
        grads = {}
        for name in model.spec.trainable_names():
            tensor, _, from_pd = model.bindings[name]
            g = tensor.grad
            grads[name] = np.zeros(tensor.shape[::-1] if from_pd is _t else tensor.shape, np.float32) \
                if g is None else from_pd(g.numpy())
        return float(loss.numpy()), grads

    def info(self) -> dict[str, Any]:
        core = paddle.base.core
        flags = paddle.get_flags(["FLAGS_paddle_num_threads", "FLAGS_use_mkldnn", "FLAGS_enable_pir_api"])
        return {"paddle": paddle.__version__, "numpy": np.__version__, "flags": flags,
                "compiled_with_onednn": bool(getattr(core, "is_compiled_with_onednn", core.is_compiled_with_mkldnn)()),
                "compiled_with_cinn": bool(core.is_compiled_with_cinn()), "cuda": paddle.is_compiled_with_cuda()}


Backend_ = PaddleBackend
