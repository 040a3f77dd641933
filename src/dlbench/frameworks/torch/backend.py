"""PyTorch backend: the spec built from standard ``torch.nn`` layers.

Fast path and fairness settings:

* float32, NCHW, the framework's default oneDNN/MKL kernels on the CPU; TF32 off on CUDA.
* variants: ``eager`` and ``compile`` (``torch.compile`` of forward + loss; autograd's backward is
  compiled through AOTAutograd; default mode).
* optimiser: ``torch.optim.SGD(momentum=0.9, fused=True)``, or ``torch.optim.AdamW(fused=True)`` (decoupled
  weight decay, bias correction, epsilon after the correction: the form the gate's reference calls
  ``corrected``); the fused kernels are torch's fastest CPU and CUDA paths for both.
* threads: ``torch.set_num_threads`` (intra-op) and ``torch.set_num_interop_threads``, set before
  the first op; the harness also pins the process's CPU affinity.
* LSTM: ``nn.LSTM`` (one fused cell per step, batch first) has two biases per gate; the canonical
  bias is loaded into ``bias_ih`` and ``bias_hh`` is held at zero and frozen, so the network trains
  exactly the spec (4 x units extra parameters in torch's own count, reported by the gate).
* variable-length sequences run over the padded batch and are masked when averaged (outputs of
  valid steps do not depend on later padding), which is faster on CPU than packed sequences.
* CUDA: written the standard way (``torch.cuda.synchronize`` as sync, allocator peak from
  ``torch.cuda.max_memory_allocated``); the gate, timed cells and generation ran on an H100
  (docs/gpu.md); fp16, tf32 and the distributed NCCL path have not run on a GPU.

Precisions (dlbench.core.precision), each torch's own idiom:

* ``bf16`` / ``fp16``: the module cast with ``.to(dtype)`` after the float32 weights are loaded,
  floating inputs cast when placed; the fused SGD updates the low-precision parameters in place.
* ``amp-bf16`` / ``amp-fp16``: float32 parameters, forward and loss under ``torch.autocast`` (the
  backward runs outside it, as the AMP recipe says); fp16 training scales the loss with
  ``torch.amp.GradScaler`` (``scaler.step`` unscales and skips a step with inf/NaN gradients);
  ``gradient`` scales the loss too, and ``loss_and_grads`` divides the scale back out.
* ``int8``: ``torch.ao.quantization.quantize_dynamic`` of the ``nn.Linear`` and ``nn.LSTM`` layers
  (qint8 weights, one scale per tensor; activations quantized per call) and, weight-only, of
  ``nn.Embedding`` (8-bit rows with a float scale each: torch's qconfig for embeddings), inference
  only (a tied LM head is quantized as the ``nn.Linear`` it is in Hugging Face's models: :func:`untied_copy`;
  torch's dynamic Linear quantizes its activations to 7 bits, ``reduce_range``, on every CPU);
  torch's dynamic quantization has no convolution, so a model whose parameters are mostly in
  convolutions is ``unsupported`` (static quantization needs a calibration set dlbench does not define). torch 2.13
  warns that this API moves to torchao. The gate's precision check observes the quantized network
  as it runs (``precision_info``): every dense and LSTM layer must run its int8 kernel.
* ``tf32`` (CUDA only): ``torch.backends.cuda.matmul.allow_tf32`` and ``cudnn.allow_tf32`` on.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from copy import deepcopy
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from dlbench.core.cell import DEFAULT_DEVICE
from dlbench.core.precision import DEFAULT as DEFAULT_PRECISION
from dlbench.data.synthetic import Batch
from dlbench.frameworks.base import Backend, OptimizerSpec, UnsupportedError
from dlbench.frameworks.builder import LayerBuilder, make_optimizer
from dlbench.frameworks.torch import DECLARATION
from dlbench.frameworks.torch import layers as TL
from dlbench.frameworks.torch.profiler import torch_profile
from dlbench.measure.profile import ProfileTrace
from dlbench.models import layers as L
from dlbench.models.spec import ModelSpec
from dlbench.models.split import differentiates_input
from dlbench.models.weights import Weights


class Seq(nn.Module):
    """Runs modules in order, passing the mask to those that need it and keeping the Mark'd
    activation (the reconstruction target of an autoencoder)."""

    def __init__(self, modules: list[nn.Module]):
        super().__init__()
        self.layers = nn.ModuleList(modules)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None):
        target = None
        for m in self.layers:
            if isinstance(m, MarkModule):
                target = x
            elif isinstance(m, MaskedMean | TL.TakesMask):
                x = m(x, mask)
            else:
                x = m(x)
        return x, target


class MarkModule(nn.Module):
    def forward(self, x):  # pragma: no cover - Seq handles it
        return x


class MaskedMean(nn.Module):
    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        if mask is None:
            return x.mean(dim=1)
        return (x * mask.unsqueeze(-1)).sum(dim=1) / mask.sum(dim=1, keepdim=True)


class GlobalAvgPool(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=(2, 3))


class LSTMLayer(nn.Module):
    def __init__(self, inputs: int, units: int):
        super().__init__()
        self.lstm = nn.LSTM(inputs, units, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lstm(x)[0]


class TiedLinear(nn.Module):
    """Decoder sharing its encoder's weight: y = x @ W_enc.T + b, with torch's W_enc = W.T."""

    def __init__(self, encoder: nn.Linear, units: int):
        super().__init__()
        self.encoder = [encoder]  # a list, so the weight is not registered twice
        self.bias = nn.Parameter(torch.zeros(units))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.encoder[0].weight.t(), self.bias)


class ZeroPadShortcut(nn.Module):
    def __init__(self, out_channels: int, stride: int):
        super().__init__()
        self.out_channels, self.stride = out_channels, stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x[:, :, :: self.stride, :: self.stride]
        return F.pad(x, (0, 0, 0, 0, 0, self.out_channels - x.shape[1]))


class ResidualBlock(nn.Module):
    def __init__(self, body: nn.Sequential, shortcut: nn.Sequential, relu: bool):
        super().__init__()
        self.body, self.shortcut, self.relu = body, shortcut, relu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.body(x) + self.shortcut(x)
        return F.relu(out, inplace=True) if self.relu else out


# A binding ties a canonical parameter to a torch tensor: (tensor, to_torch, from_torch).
Binding = tuple[torch.Tensor, Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]]


def _same(a: np.ndarray) -> np.ndarray:
    return a


def _t(a: np.ndarray) -> np.ndarray:
    return a.T


class Builder(LayerBuilder):
    """Turns layers into modules and records where each canonical parameter lives.
    Tests subclass it to plant bugs (a transposed kernel, a dropped bias, ...)."""

    builds_for = "torch backend"

    def __init__(self) -> None:
        self.params: dict[str, Binding] = {}
        self.state: dict[str, torch.Tensor] = {}
        self.linears: dict[str, nn.Linear] = {}
        self.frozen: list[nn.Module] = []

    def make_conv2d(self, layer: L.Conv2d, shape) -> nn.Module:
        m = nn.Conv2d(shape[0], layer.out_channels, layer.kernel, layer.stride, layer.padding,
                      groups=layer.groups, bias=layer.bias)
        self.params[f"{layer.name}.weight"] = (m.weight, _same, _same)
        if layer.bias:
            self.params[f"{layer.name}.bias"] = (m.bias, _same, _same)
        return m

    def make_pool2d(self, layer: L.Pool2d, shape) -> nn.Module:
        if layer.op == "max":
            return nn.MaxPool2d(layer.kernel, layer.stride, layer.padding, ceil_mode=layer.ceil_mode)
        return nn.AvgPool2d(layer.kernel, layer.stride, layer.padding, ceil_mode=layer.ceil_mode,
                            count_include_pad=True)

    def make_globalavgpool(self, layer, shape) -> nn.Module:
        return GlobalAvgPool()

    def make_lrn(self, layer: L.LRN, shape) -> nn.Module:
        return nn.LocalResponseNorm(layer.size, layer.alpha, layer.beta, layer.k)

    def make_batchnorm(self, layer: L.BatchNorm, shape) -> nn.Module:
        m = nn.BatchNorm2d(shape[0], eps=layer.eps, momentum=layer.momentum)
        self.params[f"{layer.name}.gamma"] = (m.weight, _same, _same)
        self.params[f"{layer.name}.beta"] = (m.bias, _same, _same)
        self.state[f"{layer.name}.running_mean"] = m.running_mean
        self.state[f"{layer.name}.running_var"] = m.running_var
        return m

    def make_dense(self, layer: L.Dense, shape) -> nn.Module:
        m = nn.Linear(shape[-1], layer.units, bias=layer.bias)
        self.params[f"{layer.name}.weight"] = (m.weight, _t, _t)
        if layer.bias:
            self.params[f"{layer.name}.bias"] = (m.bias, _same, _same)
        self.linears[layer.name] = m
        if not layer.trainable:
            self.frozen.append(m)
        return m

    def make_tieddense(self, layer: L.TiedDense, shape) -> nn.Module:
        m = TiedLinear(self.linears[layer.tied_to], layer.units)
        self.params[f"{layer.name}.bias"] = (m.bias, _same, _same)
        if not layer.trainable:
            self.frozen.append(m)
        return m

    def make_activation(self, layer: L.Activation, shape) -> nn.Module:
        return {"relu": lambda: nn.ReLU(inplace=True), "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}[layer.fn]()

    def make_dropout(self, layer: L.Dropout, shape) -> nn.Module:
        return nn.Dropout(layer.rate)

    def make_flatten(self, layer, shape) -> nn.Module:
        return nn.Flatten()

    def make_embedding(self, layer: L.Embedding, shape) -> nn.Module:
        m = nn.Embedding(layer.vocab, layer.dim)
        self.params[f"{layer.name}.weight"] = (m.weight, _same, _same)
        return m

    def make_lstm(self, layer: L.LSTM, shape) -> nn.Module:
        m = LSTMLayer(shape[-1], layer.units)
        lstm = m.lstm
        self.params[f"{layer.name}.w_x"] = (lstm.weight_ih_l0, _t, _t)
        self.params[f"{layer.name}.w_h"] = (lstm.weight_hh_l0, _t, _t)
        self.params[f"{layer.name}.b"] = (lstm.bias_ih_l0, _same, _same)
        with torch.no_grad():
            lstm.bias_hh_l0.zero_()
        lstm.bias_hh_l0.requires_grad_(False)
        return m

    def make_maskedmean(self, layer, shape) -> nn.Module:
        return MaskedMean()

    def make_mark(self, layer, shape) -> nn.Module:
        return MarkModule()

    def make_zeropadshortcut(self, layer: L.ZeroPadShortcut, shape) -> nn.Module:
        return ZeroPadShortcut(layer.out_channels, layer.stride)

    def make_residual(self, layer: L.Residual, shape) -> nn.Module:
        body, _ = self.sequence(layer.body, shape)
        short, _ = self.sequence(layer.shortcut, shape)
        return ResidualBlock(nn.Sequential(*body), nn.Sequential(*short), layer.post == "relu")

    # --- transformer layers (frameworks/torch/layers.py) ---
    def make_positionembedding(self, layer: L.PositionEmbedding, shape) -> nn.Module:
        m = TL.PositionEmbedding(layer.max_len, layer.dim)
        self.params[f"{layer.name}.weight"] = (m.weight, _same, _same)
        return m

    def make_segmentembedding(self, layer: L.SegmentEmbedding, shape) -> nn.Module:
        m = TL.SegmentEmbedding(layer.types, layer.dim)
        self.params[f"{layer.name}.weight"] = (m.weight, _same, _same)
        return m

    def make_layernorm(self, layer: L.LayerNorm, shape) -> nn.Module:
        m = nn.LayerNorm(shape[-1], eps=layer.eps)
        self.params[f"{layer.name}.weight"] = (m.weight, _same, _same)
        self.params[f"{layer.name}.bias"] = (m.bias, _same, _same)
        return m

    def make_rmsnorm(self, layer: L.RMSNorm, shape) -> nn.Module:
        m = nn.RMSNorm(shape[-1], eps=layer.eps)
        self.params[f"{layer.name}.weight"] = (m.weight, _same, _same)
        return m

    def make_gelu(self, layer: L.GELU, shape) -> nn.Module:
        return nn.GELU(approximate=layer.approximate)

    def make_attention(self, layer: L.Attention, shape) -> nn.Module:
        heads, kv, hd = layer.dims(shape[-1])
        m = TL.Attention(shape[-1], heads, kv, hd, layer.causal, layer.rope_theta, layer.bias, shape[0])
        for proj in "qkvo":
            linear = getattr(m, proj)
            self.params[f"{layer.name}.w{proj}"] = (linear.weight, _t, _t)
            if layer.bias:
                self.params[f"{layer.name}.b{proj}"] = (linear.bias, _same, _same)
        return m

    def make_swiglu(self, layer: L.SwiGLU, shape) -> nn.Module:
        m = TL.SwiGLU(shape[-1], layer.hidden)
        for leaf, linear in (("w_gate", m.gate), ("w_up", m.up), ("w_down", m.down)):
            self.params[f"{layer.name}.{leaf}"] = (linear.weight, _t, _t)
        return m

    def make_skipblock(self, layer: L.SkipBlock, shape) -> nn.Module:
        body, _ = self.sequence(layer.body, shape)
        post, _ = self.sequence(layer.post, shape)
        return TL.SkipBlock(body, post)

    def make_patchembed(self, layer: L.PatchEmbed, shape) -> nn.Module:
        m = TL.PatchEmbed(shape[0], layer.dim, layer.patch)
        self.params[f"{layer.name}.weight"] = (m.proj.weight, _same, _same)
        self.params[f"{layer.name}.bias"] = (m.proj.bias, _same, _same)
        self.params[f"{layer.name}.cls"] = (m.cls, _same, _same)
        return m

    def make_taketoken(self, layer: L.TakeToken, shape) -> nn.Module:
        return TL.TakeToken(layer.index)

    def make_lmhead(self, layer: L.LMHead, shape) -> nn.Module:
        return TL.TiedLMHead(self.params[f"{layer.tied_to}.weight"][0])


#: storage types of the cast precisions, and compute types of the autocast ones
CAST = {"bf16": torch.bfloat16, "fp16": torch.float16}
AUTOCAST = {"amp-bf16": torch.bfloat16, "amp-fp16": torch.float16}
#: what torch's dynamic quantization covers, each with its qconfig (embeddings: 8-bit weights only)
QCONFIGS = {nn.Linear: torch.ao.quantization.default_dynamic_qconfig,
            nn.LSTM: torch.ao.quantization.default_dynamic_qconfig,
            nn.Embedding: torch.ao.quantization.float_qparams_weight_only_qconfig}
QUANTIZABLE = tuple(QCONFIGS)
#: the layers that compute (what precision_info observes), float and dynamically quantized
COMPUTING = (nn.Conv2d, nn.Linear, nn.LSTM, TiedLinear, TL.TiedLMHead)
QUANTIZED = (torch.ao.nn.quantized.dynamic.Linear, torch.ao.nn.quantized.dynamic.LSTM)


def untied_copy(net: Seq) -> Seq:
    """A copy of ``net`` whose tied LM heads are ``nn.Linear`` layers holding a copy of the embedding's
    weight, for int8: dynamic quantization packs ``nn.Linear`` layers only (Hugging Face's GPT-2 head
    is one, sharing the embedding's Parameter, so it is quantized), and an inference copy shares
    nothing with training."""
    copy = deepcopy(net)
    for parent in list(copy.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, TL.TiedLMHead):
                weight = child.embedding[0].detach()
                linear = nn.Linear(weight.shape[1], weight.shape[0], bias=False, device=weight.device)
                linear.weight = nn.Parameter(weight.clone(), requires_grad=False)
                setattr(parent, name, linear)
    return copy


class TorchModel:
    """The built network with what the closures need: bindings, device, compiled function, and the
    precision's context (autocast), loss scaler and quantized copy."""

    def __init__(self, spec: ModelSpec, net: Seq, builder: Builder, device: torch.device, variant: str,
                 precision: str = DEFAULT_PRECISION):
        self.spec, self.net, self.device, self.variant, self.precision = spec, net, device, variant, precision
        self.bindings, self.state = builder.params, builder.state
        self.trainable = [p for p in net.parameters() if p.requires_grad]
        self.loss_fn = _loss_fn(spec, net)
        #: int8: the dynamically quantized copy the forward runs (the float ``net`` keeps the bindings)
        self.qnet = None
        if precision == "int8":
            with warnings.catch_warnings():  # torch.ao.quantization's notices that it moves to torchao
                warnings.simplefilter("ignore")
                self.qnet = torch.ao.quantization.quantize_dynamic(untied_copy(net.eval()), QCONFIGS, inplace=True)
        infer_net = self.qnet if self.qnet is not None else net
        self.infer_fn = lambda x, mask: infer_net(x, mask)[0]
        if variant == "compile":
            self.loss_fn = torch.compile(self.loss_fn)
            self.infer_fn = torch.compile(self.infer_fn)
        #: amp-fp16 training scales its loss (torch's GradScaler; it refuses float16 parameters, so a cast
        #: fp16 model trains unscaled, as torch has no other idiom for it)
        self.scaler = torch.amp.GradScaler(device.type) if precision == "amp-fp16" else None

    def compute(self) -> Any:
        """The context the forward and the loss run in: autocast for amp-*, nothing otherwise."""
        dtype = AUTOCAST.get(self.precision)
        return torch.autocast(self.device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()


def _loss_fn(spec: ModelSpec, net: Seq) -> Callable:
    if spec.loss.kind == "mse":
        def mse(x, y, mask):
            out, target = net(x, mask)
            return F.mse_loss(out, x if target is None else target)
        return mse

    def cross_entropy(x, y, mask):
        out, _ = net(x, mask)
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
    return cross_entropy


class TorchBackend(Backend):
    declaration = DECLARATION
    packages = ("torch",)
    builder_class = Builder

    def __init__(self) -> None:
        self.precision = DEFAULT_PRECISION

    def set_precision(self, precision: str) -> None:
        if precision not in self.precisions:
            raise UnsupportedError(f"torch has no {precision} path in dlbench")
        self.precision = precision

    def set_threads(self, n: int) -> dict[str, Any]:
        torch.set_num_threads(n)
        try:
            torch.set_num_interop_threads(n)
        except RuntimeError:  # already set, or parallel work already started
            pass
        return {"intra_op": torch.get_num_threads(), "inter_op": torch.get_num_interop_threads()}

    def build(self, spec: ModelSpec, weights: Weights, device: str = DEFAULT_DEVICE,
              variant: str | None = None) -> TorchModel:
        variant = variant or "eager"
        if variant not in self.variants:
            raise UnsupportedError(f"torch has no variant {variant!r}")
        if device.startswith("cuda"):
            if not torch.cuda.is_available():
                raise UnsupportedError("CUDA is not available to this torch build")
            torch.backends.cuda.matmul.allow_tf32 = self.precision == "tf32"
            torch.backends.cudnn.allow_tf32 = self.precision == "tf32"
        elif self.precision == "tf32":
            raise UnsupportedError("tf32 is a CUDA (Ampere or later) matmul mode; this cell is on the CPU")
        torch.manual_seed(0)
        builder = self.builder_class()
        modules, _ = builder.sequence(spec.layers, spec.input.shape)
        net = Seq(modules)
        for m in builder.frozen:
            for p in m.parameters(recurse=False):
                p.requires_grad_(False)
        with torch.no_grad():
            for name, (tensor, to_torch, _) in builder.params.items():
                value = torch.from_numpy(np.ascontiguousarray(to_torch(weights.params[name])))
                if tuple(value.shape) != tuple(tensor.shape):
                    raise ValueError(f"{name}: canonical {tuple(value.shape)} vs torch {tuple(tensor.shape)}")
                tensor.copy_(value)
            for name, tensor in builder.state.items():
                tensor.copy_(torch.from_numpy(weights.state[name]))
        if self.precision in CAST:
            net.to(CAST[self.precision])
        if self.precision == "int8":
            quantized = sum(p.numel() for m in net.modules() if isinstance(m, QUANTIZABLE) for p in m.parameters())
            if 2 * quantized <= sum(p.numel() for p in net.parameters()):
                rest = sorted({type(m).__name__ for m in net.modules() if not isinstance(m, QUANTIZABLE)
                               and any(True for _ in m.parameters(recurse=False))})
                raise UnsupportedError(
                    f"torch's dynamic quantization covers Linear, LSTM and Embedding layers, which hold "
                    f"{quantized:,} of {spec.name}'s {spec.param_count:,} parameters (the rest, in "
                    f"{', '.join(rest)}, need static quantization with calibration, not in dlbench)")
        net.to(torch.device(device))
        return TorchModel(spec, net, builder, torch.device(device), variant, self.precision)

    def place(self, batch: Batch, model: TorchModel) -> dict[str, torch.Tensor | None]:
        dtype = CAST.get(model.precision)

        def put(a: np.ndarray | None):
            if a is None:
                return None
            t = torch.from_numpy(np.ascontiguousarray(a)).to(model.device)
            return t.to(dtype) if dtype is not None and t.is_floating_point() else t
        return {"x": put(batch.x), "y": put(batch.y), "mask": put(batch.mask)}

    def precision_info(self, model: TorchModel) -> dict[str, str]:
        """What the built model holds and computes, observed over all of it: ``param_dtype`` the type of
        every parameter (``"mixed:a,b"`` when they differ); ``compute_dtype`` the type every computing
        layer (convolution, dense, LSTM, tied decoder, tied LM head) computed in, read from forward hooks on each of
        them during one forward of a zero input in eval mode (batch norm's statistics untouched), in the
        precision's context. int8: the network that runs is the quantized copy; a dense or LSTM layer
        counts as int8 when its dynamically quantized kernel ran, and any float one left makes the
        compute mixed (convolutions stay float32: torch's dynamic quantization has none, see ``build``);
        the parameters are int8 when no dense, LSTM or embedding weight is left in floating point."""
        net = model.qnet if model.qnet is not None else model.net
        seen: list[str] = []

        def observe(m, inputs, output):
            if isinstance(m, QUANTIZED):
                seen.append("int8")
            elif not (model.qnet is not None and isinstance(m, nn.Conv2d)):
                seen.append(_np_name((output[0] if isinstance(output, tuple) else output).dtype))
        hooks = [m.register_forward_hook(observe) for m in net.modules() if isinstance(m, COMPUTING + QUANTIZED)]
        training = net.training
        net.eval()
        try:
            spec = model.spec
            shape = (1, *spec.input.shape) if spec.input.kind != "tokens" else (1, spec.input.shape[0])
            x = torch.zeros(shape, dtype=CAST.get(model.precision, torch.float32)
                            if spec.input.kind != "tokens" else torch.long, device=model.device)
            with torch.inference_mode(), model.compute():
                net(x, None)
        finally:
            for h in hooks:
                h.remove()
            net.train(training)
        if model.qnet is not None:
            floats = {_np_name(p.dtype) for m in net.modules() if isinstance(m, nn.Linear | nn.LSTM | nn.Embedding)
                      for p in m.parameters(recurse=False)}
            return {"param_dtype": _one_name({"int8", *floats}), "compute_dtype": _one_name(seen)}
        return {"param_dtype": _one_name(_np_name(p.dtype) for p in model.net.parameters()),
                "compute_dtype": _one_name(seen)}

    def forward(self, model: TorchModel, batch) -> Callable[[], Any]:
        model.net.eval()
        infer, x, mask = model.infer_fn, batch["x"], batch["mask"]

        def run():
            with torch.inference_mode(), model.compute():
                return infer(x, mask)
        return run

    def gradient(self, model: TorchModel, batch) -> Callable[[], Any]:
        self._trains(model)
        model.net.train()
        net, loss_fn, x, y, mask = model.net, model.loss_fn, batch["x"], batch["y"], batch["mask"]
        with_input = differentiates_input(model.spec)  # x.grad too (models/split.py)
        if with_input:
            x.requires_grad_(True)

        def run():
            net.zero_grad(set_to_none=True)
            if with_input:  # only a part's closure pays for clearing its input's gradient
                x.grad = None
            with model.compute():
                loss = loss_fn(x, y, mask)
            model.backward(loss)
            return loss
        return run

    def train_step(self, model: TorchModel, batch, opt: OptimizerSpec) -> Callable[[], Any]:
        step = self.trainer(model, opt)
        return lambda: step(batch)

    def trainer(self, model: TorchModel, opt: OptimizerSpec) -> Callable[[Any], Any]:
        self._trains(model)
        model.net.train()
        optimizer = self.optimizer(model.trainable, opt)
        loss_fn, scaler = model.loss_fn, model.scaler

        def step(batch):
            model.net.train()
            optimizer.zero_grad(set_to_none=True)
            with model.compute():
                loss = loss_fn(batch["x"], batch["y"], batch["mask"])
            if scaler is None:
                loss.backward()
                optimizer.step()
            else:
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            return loss
        return step

    @classmethod
    def optimizer(cls, params: list[nn.Parameter], opt: OptimizerSpec) -> torch.optim.Optimizer:
        """``opt`` as torch's own fused optimiser over ``params`` (:func:`make_optimizer`)."""
        return make_optimizer(cls, opt, params)

    @staticmethod
    def optimizer_sgd(opt: OptimizerSpec, params: list[nn.Parameter]) -> torch.optim.Optimizer:
        return torch.optim.SGD(params, lr=opt.lr, momentum=opt.momentum, fused=True)

    @staticmethod
    def optimizer_adamw(opt: OptimizerSpec, params: list[nn.Parameter]) -> torch.optim.Optimizer:
        return torch.optim.AdamW(params, lr=opt.lr, betas=opt.betas, eps=opt.eps, weight_decay=opt.weight_decay,
                                 fused=True)

    def _trains(self, model: TorchModel) -> None:
        if model.qnet is not None:
            raise UnsupportedError("int8 is post-training dynamic quantization: inference only")

    def predictor(self, model: TorchModel) -> Callable[[Any], Any]:
        infer = model.infer_fn

        def predict(batch):
            model.net.eval()
            with torch.inference_mode(), model.compute():
                return infer(batch["x"], batch["mask"])
        return predict

    def sync(self, out: Any) -> None:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()

    def profile(self, run: Callable[[], Any], calls: int, outdir: Path) -> ProfileTrace:
        return torch_profile(run, calls, outdir)

    def to_numpy(self, out: Any) -> np.ndarray:
        return out.detach().float().cpu().numpy()

    def param_count(self, model: TorchModel) -> int:
        return sum(p.numel() for p in model.net.parameters())

    def param_count_extra(self, spec: ModelSpec) -> tuple[int, str]:
        extra = sum(4 * layer.units for layer in L.walk(spec.layers) if isinstance(layer, L.LSTM))
        return extra, ("nn.LSTM has a second bias per gate (bias_hh, held at zero)" if extra else "")

    def get_params(self, model: TorchModel) -> dict[str, np.ndarray]:
        return {n: from_torch(t.detach().float().cpu().numpy()).copy()
                for n, (t, _, from_torch) in model.bindings.items()}

    def grads_to_canonical(self, model: TorchModel) -> dict[str, np.ndarray]:
        """The trainable parameters' ``.grad`` (after a backward pass: this backend's ``gradient``, or
        the DDP worker's step, whose gradients are then the average over its ranks) in canonical layout."""
        grads = {}
        for name in model.spec.trainable_names():
            tensor, _, from_torch = model.bindings[name]
            g = tensor.grad
            grads[name] = np.zeros(tensor.shape[::-1] if from_torch is _t else tensor.shape, np.float32) \
                if g is None else from_torch(g.detach().float().cpu().numpy())
        return grads

    def loss_and_grads(self, model: TorchModel, batch) -> tuple[float, dict[str, np.ndarray]]:
        run = self.gradient(model, batch)
        loss = run()
        grads = self.grads_to_canonical(model)
        if model.scaler is not None:  # the gradient closure scaled the loss
            # the scale GradScaler settles on in training: halved (a skipped step each time) until the
            # float16 backward no longer overflows
            while not all(np.isfinite(g).all() for g in grads.values()) and model.scaler.get_scale() > 1:
                model.scaler.update(new_scale=model.scaler.get_scale() / 2)
                loss = run()
                grads = self.grads_to_canonical(model)
            scale = float(model.scaler.get_scale())
            grads = {k: g / scale for k, g in grads.items()}
        return float(loss.detach().float().cpu()), grads

    def peak_device_memory(self, device: str) -> dict[str, int]:
        if device.startswith("cuda") and torch.cuda.is_available():
            return {"allocator_peak_bytes": int(torch.cuda.max_memory_allocated())}
        return {}

    def info(self) -> dict[str, Any]:
        return {
            "torch": torch.__version__,
            "mkldnn": torch.backends.mkldnn.is_available(),
            "mkl": torch.backends.mkl.is_available(),
            "openmp": torch.backends.openmp.is_available(),
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version() if torch.cuda.is_available() else None,
            "parallel": torch.__config__.parallel_info().splitlines()[-1].strip(),
            "kernels": kernels(),
        }


def kernels() -> str:
    """The GEMM and convolution libraries torch says it was built with (``torch.__config__.show()``)."""
    config = torch.__config__.show()
    blas = config.split("BLAS_INFO=")[1].split(",")[0] if "BLAS_INFO=" in config else "unknown"
    dnn = next((ln.strip(" -").split(" (")[0] for ln in config.splitlines() if "DNN" in ln), "no oneDNN")
    return f"GEMM: BLAS_INFO={blas}; convolution: {dnn}"


Backend_ = TorchBackend


def _np_name(dtype: torch.dtype) -> str:
    """torch's dtype as numpy names it ("bfloat16" included, which numpy itself lacks)."""
    return str(dtype).removeprefix("torch.")


def _one_name(names) -> str:
    """The one type in ``names``, or ``"mixed:a,b"`` listing them (as the JAX backend reports)."""
    found = sorted(set(names))
    if not found:
        return "none"
    return found[0] if len(found) == 1 else "mixed:" + ",".join(found)
