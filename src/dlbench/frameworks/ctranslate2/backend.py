"""The CTranslate2 backend: ``Generator.forward_batch``, the whole sequence's logits, as the forward closure.

CTranslate2 is an inference engine: it offers ``forward`` only (no gradients), so the equivalence gate
checks the parameters, the forward against the float64 reference, the attention mask's causality and,
on a trained checkpoint, the quality figures (:mod:`dlbench.gate.quality`). Fast-path settings:

* the model is converted once per weights and format (:mod:`.convert`) and loaded by
  ``ctranslate2.Generator(path, device, compute_type=<format>, intra_threads=<set_threads>,
  inter_threads=1)``: one batch at a time on every thread dlbench pins, as the other engines run;
* the batch is handed over as an int32 ``StorageView`` with its lengths (the dense form
  ``forward_batch`` documents), made at ``place``, outside the timed call;
* ``forward_batch`` is synchronous on the CPU: its logits are ready when it returns.

Precisions: fp32 (``float32``), int8 (``int8``: int8 weights, activations quantized per call, what the
CPU runs as ``int8_float32``) and bf16 (``bfloat16``, where ``ctranslate2.get_supported_compute_types``
lists it for the device; elsewhere unsupported with that list). What the loaded Generator reports as its
``compute_type`` is what :meth:`Backend_.precision_info` returns, so a silent fallback fails the gate.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ctranslate2
import numpy as np

from dlbench.core.cell import DEFAULT_DEVICE
from dlbench.data.synthetic import Batch
from dlbench.frameworks.base import Backend, InferenceOnly, UnsupportedError
from dlbench.frameworks.ctranslate2 import DECLARATION
from dlbench.frameworks.ctranslate2.convert import FORMATS, Converted, convert
from dlbench.models.hf_layout import family_of
from dlbench.models.spec import ModelSpec
from dlbench.models.weights import Weights

#: the decoder families dlbench writes Hugging Face folders of (gate/hf_transformers.py) and CTranslate2's
#: converter takes (a Qwen2 folder is read by dlbench but not written back)
FAMILIES = ("gpt2", "llama")
#: a Generator's compute type -> (parameter storage, compute) as dlbench.core.precision names them
COMPUTE_TYPES = {"float32": ("float32", "float32"), "int8_float32": ("int8", "int8"), "int8": ("int8", "int8"),
                 "bfloat16": ("bfloat16", "bfloat16"), "int8_bfloat16": ("int8", "int8"),
                 "float16": ("float16", "float16"), "int16": ("int16", "int16")}
FORWARD_ONLY = "forward only: CTranslate2 is an inference engine (no gradients)"


@dataclass
class Loaded:
    """A converted model loaded into a Generator, with what converting and loading it cost."""

    generator: ctranslate2.Generator
    spec: ModelSpec
    converted: Converted
    load_s: float
    threads: int

    def info(self) -> dict[str, Any]:
        return {**self.converted.info(), "load_s": self.load_s, "compute_type": self.generator.compute_type,
                "intra_threads": self.threads, "inter_threads": 1, "ctranslate2": ctranslate2.__version__,
                "cpu_compute_types": sorted(ctranslate2.get_supported_compute_types("cpu"))}


def check_model(spec: ModelSpec) -> None:
    """Raise :class:`UnsupportedError` unless CTranslate2's converter can take ``spec`` as a decoder."""
    try:
        fam = family_of(spec)
    except ValueError as exc:
        raise UnsupportedError(f"ctranslate2's Generator runs decoder-only language models converted from a "
                               f"Hugging Face folder: {exc}") from None
    if fam not in FAMILIES or spec.input.kind != "tokens":
        kind = "" if spec.input.kind == "tokens" else f" ({spec.input.kind} input)"
        raise UnsupportedError(f"ctranslate2: dlbench writes and converts {', '.join(FAMILIES)} language models; "
                               f"{spec.name} is {fam}{kind}")


def load(spec: ModelSpec, weights: Weights, precision: str, device: str, threads: int) -> Loaded:
    """The model converted (or found in the cache) and loaded at ``precision``."""
    if precision not in FORMATS:
        raise UnsupportedError(f"ctranslate2 runs {', '.join(FORMATS)} in dlbench, not {precision}")
    check_model(spec)
    if device != "cpu":
        raise UnsupportedError(f"ctranslate2 runs on the CPU in dlbench, not {device}")
    fmt = FORMATS[precision]
    supported = ctranslate2.get_supported_compute_types(device)
    if fmt not in supported:
        raise UnsupportedError(f"ctranslate2 {ctranslate2.__version__}: ctranslate2.get_supported_compute_types"
                               f"({device!r}) is {', '.join(sorted(supported))}: no {fmt} on this machine")
    converted = convert(spec, weights, precision)
    try:
        t0 = time.perf_counter()
        generator = ctranslate2.Generator(str(converted.path), device=device, compute_type=fmt,
                                          intra_threads=threads, inter_threads=1)
    except RuntimeError:  # a damaged cached conversion ("model.bin is incomplete"): converted again, once
        if not converted.cache_hit:
            raise
        converted = convert(spec, weights, precision, again=True)
        t0 = time.perf_counter()
        generator = ctranslate2.Generator(str(converted.path), device=device, compute_type=fmt,
                                          intra_threads=threads, inter_threads=1)
    return Loaded(generator, spec, converted, time.perf_counter() - t0, threads)


def dtypes(generator: ctranslate2.Generator) -> dict[str, str]:
    """What the loaded Generator holds, as dlbench's precisions name it."""
    param, compute = COMPUTE_TYPES.get(generator.compute_type, (generator.compute_type, generator.compute_type))
    return {"param_dtype": param, "compute_dtype": compute}


def logits_array(out: ctranslate2.StorageView) -> np.ndarray:
    """A CPU StorageView of logits as float32 NumPy (a bfloat16 one converted by CTranslate2 first)."""
    if out.dtype != ctranslate2.DataType.float32:
        out = out.to(ctranslate2.DataType.float32)
    return np.array(out, dtype=np.float32)


def affinity() -> int:
    return len(os.sched_getaffinity(0))


class Backend_(InferenceOnly, Backend):
    not_trainable = FORWARD_ONLY
    declaration = DECLARATION
    packages = ("ctranslate2",)
    forward_only_reason = FORWARD_ONLY

    def __init__(self) -> None:
        self.threads: int | None = None
        self.precision = "fp32"
        self.last: Loaded | None = None

    def set_threads(self, n: int) -> dict[str, Any]:
        self.threads = n
        return {"intra_threads": n, "inter_threads": 1}

    def set_precision(self, precision: str) -> None:
        if precision not in self.precisions:
            raise UnsupportedError(f"ctranslate2 runs {', '.join(self.precisions)} in dlbench, not {precision}")
        self.precision = precision

    def precision_info(self, model: Loaded) -> dict[str, str]:
        return dtypes(model.generator)

    def build(self, spec: ModelSpec, weights: Weights, device: str = DEFAULT_DEVICE, variant: str | None = None
              ) -> Loaded:
        self.last = load(spec, weights, self.precision, device, self.threads or affinity())
        return self.last

    def build_info(self, model: Loaded) -> dict[str, Any]:
        return model.info()

    def place(self, batch: Batch, model: Loaded) -> tuple[ctranslate2.StorageView, ctranslate2.StorageView]:
        ids = np.ascontiguousarray(batch.x, np.int32)
        lengths = (np.ascontiguousarray(batch.mask.sum(axis=1), np.int32) if batch.mask is not None
                   else np.full(ids.shape[0], ids.shape[1], np.int32))
        return ctranslate2.StorageView.from_array(ids), ctranslate2.StorageView.from_array(lengths)

    def forward(self, model: Loaded, batch: Any) -> Callable[[], Any]:
        generator, (ids, lengths) = model.generator, batch
        return lambda: generator.forward_batch(ids, lengths)

    def sync(self, out: Any) -> None:
        pass  # forward_batch returns when its logits are computed (the CPU StorageView is filled)

    def to_numpy(self, out: Any) -> np.ndarray:
        return logits_array(out)

    def param_count(self, model: Loaded) -> int:
        return model.converted.parameters

    def get_params(self, model: Any) -> dict[str, np.ndarray]:
        raise UnsupportedError("ctranslate2 does not hand a loaded model's parameters back")

    def info(self) -> dict[str, Any]:
        return {"ctranslate2": ctranslate2.__version__, **(self.last.info() if self.last else {}),
                "cpu_compute_types": sorted(ctranslate2.get_supported_compute_types("cpu"))}
