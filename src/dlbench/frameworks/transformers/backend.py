"""Hugging Face ``transformers`` backend: the family's own class (``GPT2LMHeadModel``, ``LlamaForCausalLM``,
``BertForSequenceClassification``, ``ViTForImageClassification``) loaded by ``from_pretrained`` from the
Hugging Face folder of dlbench's weights (:mod:`.convert`), as a user of transformers loads a model.

Fast path and fairness settings:

* variants: ``sdpa`` (transformers' default attention, ``F.scaled_dot_product_attention``), ``eager``
  (its matmul-softmax attention), ``compile`` (the sdpa model under ``torch.compile(model)``, the way
  transformers' docs compile a model; default mode);
* precisions: ``fp32``, and ``bf16`` as ``from_pretrained(dtype=torch.bfloat16)`` (image inputs cast
  when placed);
* the loss is dlbench's (softmax cross-entropy of the logits against the batch's labels, mean over every
  position), not the model's ``labels=`` loss, which shifts a causal LM's labels itself;
* optimisers, threads, sync and the profiler are the torch backend's (transformers runs on torch):
  fused ``torch.optim.SGD``/``AdamW``;
* parameters and gradients go to canonical layout through the one table of
  :mod:`dlbench.models.hf_layout` (ViT's module names as transformers 5 builds them mapped to its files').

A model without a Hugging Face class here (a CNN, an LSTM, an MLP) is ``unsupported``, with the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
import transformers

from dlbench.core.cell import DEFAULT_DEVICE
from dlbench.data.synthetic import Batch
from dlbench.frameworks.base import OptimizerSpec, UnsupportedError
from dlbench.frameworks.torch.backend import TorchBackend
from dlbench.frameworks.transformers import DECLARATION
from dlbench.frameworks.transformers.convert import FORMAT, Writer, convert, load
from dlbench.frameworks.transformers.hf_model import hf_inputs, save_folder
from dlbench.models.hf_layout import from_hf, layout
from dlbench.models.spec import ModelSpec
from dlbench.models.weights import Weights


@dataclass
class HFModel:
    spec: ModelSpec
    net: torch.nn.Module
    device: torch.device
    variant: str
    precision: str
    #: the callable the forward and the loss run through (the compiled model for ``compile``)
    run: Callable[..., Any]
    #: in-memory parameter name -> the name in the folder's files (hf_layout's); identity but for ViT
    file_names: dict[str, str]
    info: dict[str, Any] = field(default_factory=dict)


def file_names(spec: ModelSpec) -> dict[str, str]:
    """transformers 5's in-memory names of ``spec``'s tensors -> their names in a checkpoint's files."""
    return {mem[0]: disk[0] for mem, disk in zip(layout(spec, vit_v5=True), layout(spec), strict=True) if mem[0]}


class TransformersBackend(TorchBackend):
    declaration = DECLARATION
    packages = ("transformers", "torch", "safetensors")
    #: writes the Hugging Face folder (tests plant defects with another writer)
    writer: Writer = staticmethod(save_folder)

    def set_precision(self, precision: str) -> None:
        if precision not in self.precisions:
            raise UnsupportedError(f"transformers runs {', '.join(self.precisions)} in dlbench, not {precision}")
        self.precision = precision

    def build(self, spec: ModelSpec, weights: Weights, device: str = DEFAULT_DEVICE,
              variant: str | None = None) -> HFModel:
        variant = variant or self.variants[0]
        if variant not in self.variants:
            raise UnsupportedError(f"transformers has no variant {variant!r} (it has {', '.join(self.variants)})")
        if device not in self.devices:
            raise UnsupportedError(f"the transformers backend runs on {', '.join(self.devices)}, not {device}")
        converted = convert(spec, weights, type(self).writer)
        try:
            net, load_s = load(converted.folder, spec, self.precision, variant, device)
        finally:
            converted.cleanup()
        run = torch.compile(net) if variant == "compile" else net
        info = {"format": FORMAT, "convert_s": round(converted.seconds, 4), "convert_cache": converted.cache,
                "load_s": round(load_s, 4), "class": type(net).__name__,
                "attn_implementation": net.config._attn_implementation}
        return HFModel(spec, net, torch.device(device), variant, self.precision, run, file_names(spec), info)

    def build_info(self, model: HFModel) -> dict[str, Any]:
        return dict(model.info)

    def place(self, batch: Batch, model: HFModel) -> dict[str, Any]:
        inputs = {k: v.to(model.device) for k, v in hf_inputs(model.spec, batch).items()}
        if "pixel_values" in inputs:
            inputs["pixel_values"] = inputs["pixel_values"].to(model.net.dtype)
        labels = None if batch.y is None else torch.from_numpy(np.ascontiguousarray(batch.y)).to(model.device)
        return {"inputs": inputs, "labels": labels}

    def precision_info(self, model: HFModel) -> dict[str, str]:
        """``param_dtype``: every parameter's type; ``compute_dtype``: the output type of every module
        holding a matrix (linear, GPT-2's Conv1D, the patch convolution; embeddings only look up), seen
        by forward hooks over one forward of the placed zero input."""
        seen: list[str] = []

        def observe(m, inputs, output):
            seen.append(str((output[0] if isinstance(output, tuple) else output).dtype).removeprefix("torch."))
        computing = [m for m in model.net.modules() if not isinstance(m, torch.nn.Embedding)
                     and any(p.ndim >= 2 for p in m.parameters(recurse=False))]
        hooks = [m.register_forward_hook(observe) for m in computing]
        try:
            spec = model.spec
            if spec.input.kind == "image":
                x = np.zeros((1, *spec.input.shape), np.float32)
            else:
                x = np.zeros((1, spec.input.shape[0]), np.int64)
            with torch.inference_mode():
                model.net(**self.place(Batch(x), model)["inputs"])
        finally:
            for h in hooks:
                h.remove()
        params = sorted({str(p.dtype).removeprefix("torch.") for p in model.net.parameters()})
        computed = sorted(set(seen))

        def one(names: list[str]) -> str:
            return "none" if not names else names[0] if len(names) == 1 else "mixed:" + ",".join(names)
        return {"param_dtype": one(params), "compute_dtype": one(computed)}

    def _logits(self, model: HFModel, placed: dict[str, Any]) -> torch.Tensor:
        return model.run(**placed["inputs"]).logits

    def forward(self, model: HFModel, batch) -> Callable[[], Any]:
        model.net.eval()

        def run():
            with torch.inference_mode():
                return self._logits(model, batch)
        return run

    def _loss(self, model: HFModel, batch) -> torch.Tensor:
        logits = self._logits(model, batch)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch["labels"].reshape(-1))

    def gradient(self, model: HFModel, batch) -> Callable[[], Any]:
        model.net.train()
        net = model.net

        def run():
            net.zero_grad(set_to_none=True)
            loss = self._loss(model, batch)
            loss.backward()
            return loss
        return run

    def train_step(self, model: HFModel, batch, opt: OptimizerSpec) -> Callable[[], Any]:
        step = self.trainer(model, opt)
        return lambda: step(batch)

    def trainer(self, model: HFModel, opt: OptimizerSpec) -> Callable[[Any], Any]:
        model.net.train()
        optimizer = self.optimizer([p for p in model.net.parameters() if p.requires_grad], opt)

        def step(batch):
            optimizer.zero_grad(set_to_none=True)
            loss = self._loss(model, batch)
            loss.backward()
            optimizer.step()
            return loss
        return step

    def predictor(self, model: HFModel) -> Callable[[Any], Any]:
        def predict(batch):
            model.net.eval()
            with torch.inference_mode():
                return self._logits(model, batch)
        return predict

    def param_count(self, model: HFModel) -> int:
        return sum(p.numel() for p in model.net.parameters())

    def param_count_extra(self, spec: ModelSpec) -> tuple[int, str]:
        return 0, ""

    def _canonical(self, model: HFModel, tensors: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
        state = {model.file_names.get(n, n): t.detach().float().cpu().numpy().copy() for n, t in tensors.items()}
        return from_hf(model.spec, state, "transformers model")

    def get_params(self, model: HFModel) -> dict[str, np.ndarray]:
        return self._canonical(model, dict(model.net.named_parameters()))

    def loss_and_grads(self, model: HFModel, batch) -> tuple[float, dict[str, np.ndarray]]:
        loss = self.gradient(model, batch)()
        grads = {n: p.grad if p.grad is not None else torch.zeros_like(p) for n, p in model.net.named_parameters()}
        canonical = self._canonical(model, grads)
        return float(loss.detach().float().cpu()), {k: canonical[k] for k in model.spec.trainable_names()}

    def info(self) -> dict[str, Any]:
        return {**super().info(), "transformers": transformers.__version__}


Backend_ = TransformersBackend
