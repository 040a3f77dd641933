"""The ONNX Runtime and OpenVINO decoders: one ONNX graph of the decoder with past key/value inputs and
present key/value outputs (Hugging Face Optimum's decoder-with-past form), run by ONNX Runtime's
``InferenceSession`` or OpenVINO's compiled model.

The graph takes ``tokens`` (batch, T) and, per attention layer, ``past_key_i``/``past_value_i`` (batch,
kv_heads, P, head_dim), and returns the last position's ``logits``, the argmax ``token`` and
``present_key_i``/``present_value_i`` (P + T positions: the past with the new keys and values
appended). One graph serves the prefill (P = 0, T = the prompt) and every step (T = 1): T and P are
dynamic axes, the queries at positions P..P+T-1 attend to every key at or before their own. It is
exported once per decoder by torch's TorchScript exporter from the torch decoder's layers (the same
canonical weights), with attention written as matmul and softmax (grouped-query heads repeated), which
every opset has. The cache grows by one position per step, copied into the next call: the engines'
idiom for a decoder with past, not a preallocated buffer.

The export is float32. ONNX Runtime runs it at float32 only (its CPU kernels have no bfloat16 matmul);
OpenVINO runs it at bf16 too, by its inference precision hint (the CPU plug-in converts the weights
once, at compile, and computes in bfloat16 where the CPU has it natively; a compiled model that is not
bf16 is refused, as the OpenVINO backend refuses one).
"""

from __future__ import annotations

import io
import math
import os
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from dlbench.frameworks.base import UnsupportedError
from dlbench.frameworks.decoding import Decoder, attention_layers, cache_bytes
from dlbench.frameworks.torch.decoder import TorchDecoder, _rotate
from dlbench.models import layers as L
from dlbench.models.spec import ModelSpec
from dlbench.models.weights import Weights

OPSET = 17


class _WithPast(TorchDecoder):
    """The torch decoder's layers with attention over a past given as input (exported, never timed)."""

    def __init__(self, spec: ModelSpec, weights: Weights, batch: int, max_len: int):
        super().__init__(spec, weights, batch, max_len, "fp32", "eager")
        self.cache = []  # the exported graph keeps no cache of its own
        self.past: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.present: list[torch.Tensor] = []

    def graph(self, tokens: torch.Tensor, *past: torch.Tensor) -> tuple[torch.Tensor, ...]:
        self.past = list(zip(past[::2], past[1::2], strict=True))
        self.present = []
        positions = torch.arange(tokens.shape[1]) + past[0].shape[2]
        logits = self.run(self.spec.layers, tokens, positions, prefill=False)
        return (logits, logits.argmax(dim=-1), *self.present)

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, width: tuple[int], eps: float) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight  # opset 17 has no RMSNorm

    def attention(self, layer: L.Attention, x: torch.Tensor, positions: torch.Tensor, prefill: bool) -> torch.Tensor:
        n, t, d = x.shape
        heads, kv, hd = layer.dims(d)
        w, name = self.w, layer.name

        def project(p: str, count: int) -> torch.Tensor:
            return F.linear(x, w[f"{name}.w{p}"], w.get(f"{name}.b{p}")).view(n, t, count, hd).transpose(1, 2)

        q, k, v = project("q", heads), project("k", kv), project("v", kv)
        if layer.rope_theta:
            cos, sin = self.rope[layer.rope_theta]
            q, k = _rotate(q, cos[positions], sin[positions]), _rotate(k, cos[positions], sin[positions])
        past_k, past_v = self.past[self.slots[name]]
        keys, values = torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)
        self.present += [keys, values]
        if kv != heads:
            keys, values = keys.repeat_interleave(heads // kv, dim=1), values.repeat_interleave(heads // kv, dim=1)
        scores = q @ keys.transpose(2, 3) / math.sqrt(hd)
        allowed = torch.arange(keys.shape[2])[None, :] <= positions[:, None]  # (T, P + T)
        scores = scores.masked_fill(~allowed, float("-inf"))
        out = (scores.softmax(dim=-1) @ values).transpose(1, 2).reshape(n, t, heads * hd)
        return F.linear(out, w[f"{name}.wo"], w.get(f"{name}.bo"))


class _Graph(torch.nn.Module):
    """The module the exporter traces (the decoder's weights are constants of the graph)."""

    def __init__(self, decoder: _WithPast):
        super().__init__()
        self.decoder = decoder

    def forward(self, tokens: torch.Tensor, *past: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.decoder.graph(tokens, *past)


def export(spec: ModelSpec, weights: Weights, batch: int, max_len: int) -> tuple[bytes, list[str]]:
    """The decoder-with-past graph as ONNX bytes, and its past input names in order."""
    module = _Graph(_WithPast(spec, weights, batch, max_len))
    past, names = [], []
    for i, (layer, dim) in enumerate(attention_layers(spec)):
        _, kv, hd = layer.dims(dim)
        past += [torch.zeros(batch, kv, 1, hd), torch.zeros(batch, kv, 1, hd)]
        names += [f"past_key_{i}", f"past_value_{i}"]
    presents = [n.replace("past", "present") for n in names]
    axes = {"tokens": {1: "new"}, **{n: {2: "past"} for n in names}, **{n: {2: "total"} for n in presents}}
    buf = io.BytesIO()
    with torch.no_grad():
        torch.onnx.export(module, (torch.zeros(batch, 2, dtype=torch.long), *past), buf, dynamo=False,
                          input_names=["tokens", *names], output_names=["logits", "token", *presents],
                          dynamic_axes=axes, opset_version=OPSET)
    return buf.getvalue(), names


HINT_NAMES = {"fp32": "f32", "bf16": "bf16 by INFERENCE_PRECISION_HINT"}


class _WithPastDecoder(Decoder):
    """What the two engines share: the export, the empty past, the growing cache."""

    variants = ("default",)
    #: the precisions the engine runs the float32 export at
    precisions: tuple[str, ...] = ("fp32",)

    def __init__(self, spec: ModelSpec, weights: Weights, batch: int, max_len: int, precision: str = "fp32",
                 variant: str = "", device: str = "cpu"):
        super().__init__(spec, weights, batch, max_len, precision, variant, device)
        if precision not in self.precisions:
            raise UnsupportedError(f"the {self.framework} decoder with past runs the float32 export at "
                                   f"{', '.join(self.precisions)} only, not {precision}")
        if device != "cpu":
            raise UnsupportedError(f"the {self.framework} decoder runs on the CPU only in dlbench")
        self.graph, self.names = export(spec, weights, batch, max_len)
        self.empty = {}
        for i, (layer, dim) in enumerate(attention_layers(spec)):
            _, kv, hd = layer.dims(dim)
            self.empty[f"past_key_{i}"] = self.empty[f"past_value_{i}"] = np.zeros((batch, kv, 0, hd), np.float32)
        self.past: dict[str, np.ndarray] = {}
        self.threads = len(os.sched_getaffinity(0))

    def call(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        raise NotImplementedError

    def _run(self, tokens: np.ndarray, past: dict[str, np.ndarray]) -> tuple[Any, Any]:
        out = self.call({"tokens": np.ascontiguousarray(tokens, np.int64), **past})
        self.past = dict(zip(self.names, out[2:], strict=True))
        return out[0], out[1]

    def prefill(self, prompt: np.ndarray) -> tuple[Any, Any]:
        logits, token = self._run(prompt, self.empty)
        self.pos = prompt.shape[1]
        return logits, token

    def step(self, tokens: Any) -> tuple[Any, Any]:
        logits, token = self._run(np.asarray(tokens).reshape(-1, 1), self.past)
        self.pos += 1
        return logits, token

    def host(self, array: Any) -> np.ndarray:
        return np.asarray(array)

    @property
    def cache_bytes(self) -> int:
        return cache_bytes(self.spec, self.batch, self.max_len, 4)  # what the past reaches at the last step


class OnnxRuntimeDecoder(_WithPastDecoder):
    framework = "onnxruntime"

    def __init__(self, *args, **kwargs):
        import onnxruntime as ort

        super().__init__(*args, **kwargs)
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = self.threads, 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = ort.InferenceSession(self.graph, so, providers=["CPUExecutionProvider"])

    def call(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self.session.run(None, feeds)

    def info(self) -> dict[str, Any]:
        return {"cache": "past/present key-value inputs and outputs (grows one position a step)",
                "exporter": f"torch.onnx TorchScript, opset {OPSET}", "engine": "onnxruntime InferenceSession",
                "intra_op_threads": self.threads}


class OpenVINODecoder(_WithPastDecoder):
    """OpenVINO runs the graph with past in two ways: ``default``, the past as inputs and outputs (as
    ONNX Runtime does); ``stateful``, OpenVINO's own form for LLMs (what OpenVINO GenAI and Optimum
    Intel run), the past/present pairs turned into the model's internal state by OpenVINO's
    make-stateful transformation, so the cache stays inside the engine between calls and only the
    tokens go in (``reset_state`` before each prompt)."""

    framework = "openvino"
    precisions = ("fp32", "bf16")
    variants = ("default", "stateful")

    def __init__(self, *args, **kwargs):
        import openvino as ov

        from dlbench.frameworks.openvino.backend import HINTS, runtime_precisions

        super().__init__(*args, **kwargs)
        core = ov.Core()
        model = core.read_model(io.BytesIO(self.graph).getvalue(), b"")
        self.stateful = self.variant == "stateful"
        if self.stateful:
            from openvino._offline_transformations import apply_make_stateful_transformation

            apply_make_stateful_transformation(model, {n: n.replace("past", "present") for n in self.names})
        hint = HINTS[self.precision]
        self.compiled = core.compile_model(model, "CPU", {"INFERENCE_NUM_THREADS": self.threads,
                                                          "INFERENCE_PRECISION_HINT": hint})
        got = self.compiled.get_property("INFERENCE_PRECISION_HINT")
        if got != getattr(ov.Type, hint):
            raise UnsupportedError(f"OpenVINO compiled the decoder for {got} although {hint} was asked (a CPU "
                                   f"without native {hint} runs f32)")
        self.runtime = runtime_precisions(self.compiled)
        self.request = self.compiled.create_infer_request()
        self.outputs = self.compiled.outputs

    def call(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        result = self.request.infer(feeds)
        return [np.array(result[o]) for o in self.outputs]

    def prefill(self, prompt: np.ndarray) -> tuple[Any, Any]:
        if not self.stateful:
            return super().prefill(prompt)
        self.request.reset_state()  # an empty cache: the prompt's keys and values are its first
        logits, token = self.call({"tokens": np.ascontiguousarray(prompt, np.int64)})
        self.pos = prompt.shape[1]
        return logits, token

    def step(self, tokens: Any) -> tuple[Any, Any]:
        if not self.stateful:
            return super().step(tokens)
        logits, token = self.call({"tokens": np.ascontiguousarray(np.asarray(tokens).reshape(-1, 1), np.int64)})
        self.pos += 1
        return logits, token

    def info(self) -> dict[str, Any]:
        if self.stateful:
            return {"cache": "OpenVINO state (make-stateful transformation of the past/present pairs; reset per prompt)",
                    "exporter": f"torch.onnx TorchScript, opset {OPSET}",
                    "engine": f"OpenVINO compiled model (CPU, {HINT_NAMES[self.precision]})", "threads": self.threads,
                    "runtime": self.runtime}
        return {"cache": "past/present key-value inputs and outputs (grows one position a step)",
                "exporter": f"torch.onnx TorchScript, opset {OPSET}",
                "engine": f"OpenVINO compiled model (CPU, {HINT_NAMES[self.precision]})", "threads": self.threads,
                "runtime": self.runtime}
