"""What the ONNX Runtime GenAI backend and decoder share: a converted model loaded into ``og.Model`` with the
process's thread count, and a ``Generator`` over it with greedy search of a fixed length."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnxruntime_genai as og

from dlbench.frameworks.onnxruntime_genai.convert import Converted, graph_facts


@dataclass
class Loaded:
    """A converted model in the runtime: the ``og.Model``, the conversion, the seconds the load took, and
    what the graph holds (:func:`dlbench.frameworks.onnxruntime_genai.convert.graph_facts`)."""

    model: Any
    converted: Converted
    load_s: float
    facts: dict = field(default_factory=dict)

    def info(self) -> dict[str, Any]:
        import onnxruntime

        return {**self.converted.info(), "load_s": self.load_s, "format": "ONNX (onnxruntime-genai model builder)",
                "graph": self.facts, "onnxruntime_genai": og.__version__, "onnxruntime": onnxruntime.__version__,
                "build": onnxruntime.get_build_info()}


def load(converted: Converted, threads: int | None) -> Loaded:
    """``og.Model`` of the converted folder, its session limited to ``threads`` intra-op threads (one inter-op)."""
    started = time.perf_counter()
    config = og.Config(str(converted.path))
    if threads:
        config.overlay(json.dumps({"model": {"decoder": {"session_options": {
            "intra_op_num_threads": threads, "inter_op_num_threads": 1}}}}))
    model = og.Model(config)
    return Loaded(model, converted, time.perf_counter() - started, graph_facts(converted.path))


def generator(model: Any, batch: int, length: int) -> Any:
    """A greedy ``Generator`` for ``batch`` sequences of exactly ``length`` tokens, prompt included
    (``min_length`` = ``max_length``: an end-of-sequence token never stops it early)."""
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, num_beams=1, batch_size=batch, max_length=length, min_length=length)
    return og.Generator(model, params)


def tokens_in(tokens: np.ndarray) -> np.ndarray:
    """Token ids as ``append_tokens`` takes them (int32, batch x tokens)."""
    return np.ascontiguousarray(np.asarray(tokens).reshape(len(tokens), -1), np.int32)
