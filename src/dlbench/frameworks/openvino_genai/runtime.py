"""What the OpenVINO GenAI backend and decoder share: the converted folder's IR compiled by OpenVINO's Core
(the IR before it was made stateful, its cache as inputs and outputs) with the settings ``LLMPipeline`` is
given (threads, float32 inference and key/value cache: the CPU plug-in's defaults may be bf16 and u8 on a
CPU with AMX), and its inputs for a sequence."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import openvino as ov

from dlbench.frameworks.openvino_genai.convert import WITH_PAST_XML, past_names, weight_types
from dlbench.frameworks.transformers.converted import Converted

#: inference and cache precision at float32, so the fp32 gate holds what runs
FLOAT32 = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
#: the IR's weight element types as dlbench names them
WEIGHT_NAMES = {"f32": "float32", "u8": "int8", "i8": "int8", "u4": "int4", "i4": "int4"}


def properties(threads: int | None) -> dict[str, Any]:
    return {**FLOAT32, **({"INFERENCE_NUM_THREADS": threads} if threads else {})}


@dataclass
class Compiled:
    """The IR compiled by Core (logits for the gate), the conversion, the load seconds, what the IR holds."""

    compiled: Any
    converted: Converted
    load_s: float
    weights: dict = field(default_factory=dict)

    def param_dtype(self) -> str:
        return WEIGHT_NAMES.get(max(self.weights, key=self.weights.__getitem__), "other")

    def compute_dtype(self) -> str:
        """int8 where the CPU plug-in quantizes activations of compressed-weight products (dynamic quantization)."""
        group = int(self.compiled.get_property("DYNAMIC_QUANTIZATION_GROUP_SIZE"))
        return "int8" if group and self.param_dtype() in ("int8", "int4") else "float32"

    def info(self) -> dict[str, Any]:
        props = {k: str(self.compiled.get_property(k)) for k in (
            "INFERENCE_PRECISION_HINT", "KV_CACHE_PRECISION", "INFERENCE_NUM_THREADS", "DYNAMIC_QUANTIZATION_GROUP_SIZE")}
        core = ov.Core()
        return {**self.converted.info(), "compile_s": self.load_s, "format": "OpenVINO IR (stateful)",
                "weight_elements": self.weights, "compiled": props, "openvino": ov.get_version(),
                "cpu": core.get_property("CPU", "FULL_DEVICE_NAME"),
                "cpu_capabilities": list(core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"))}


def compile_ir(converted: Converted, threads: int | None) -> Compiled:
    started = time.perf_counter()
    compiled = ov.Core().compile_model(str(converted.path / WITH_PAST_XML), "CPU", properties(threads))
    return Compiled(compiled, converted, time.perf_counter() - started, weight_types(converted.path))


def empty_past(compiled: Compiled, rows: int) -> dict[str, np.ndarray]:
    """An empty cache for ``rows`` sequences: each past input with no position (heads and head size from the
    converted folder's config: the traced inputs leave them dynamic)."""
    config = json.loads((compiled.converted.path / "config.json").read_text())
    kv = config.get("num_key_value_heads") or config.get("n_head") or config["num_attention_heads"]
    width = config.get("hidden_size") or config["n_embd"]
    hd = config.get("head_dim") or width // (config.get("num_attention_heads") or config["n_head"])
    return {name: np.zeros((rows, kv, 0, hd), np.float32) for name in past_names((len(compiled.compiled.inputs) - 4) // 2)}


def feeds(tokens: np.ndarray, past: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One call's inputs: ``tokens`` (batch, T) after the ``past`` positions, no padding."""
    n, t = tokens.shape
    start = next(iter(past.values())).shape[2]
    return {"input_ids": np.ascontiguousarray(tokens, np.int64), "attention_mask": np.ones((n, start + t), np.int64),
            "position_ids": np.tile(np.arange(start, start + t, dtype=np.int64), (n, 1)),
            "beam_idx": np.arange(n, dtype=np.int32), **past}


def run(request: Any, tokens: np.ndarray, past: dict[str, np.ndarray]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The logits (batch, T, vocab) of ``tokens`` after ``past``, and the cache with them."""
    request.infer(feeds(tokens, past))
    layers = len(past) // 2
    present = {name: np.array(request.get_tensor(name.replace("past_key_values", "present")).data)
               for name in past_names(layers)}
    return np.array(request.get_tensor("logits").data), present
