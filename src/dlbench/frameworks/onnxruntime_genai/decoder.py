"""ONNX Runtime GenAI's decoder: its ``og.Generator`` over the model builder's graph (:mod:`.convert`).

:meth:`OrtGenAIDecoder.prefill` is ``append_tokens(prompt)`` then ``get_logits``; :meth:`OrtGenAIDecoder.step`
makes the runtime's own search choose the given token (a second ``append_tokens`` is refused at batch > 1),
so the gate's teacher forcing feeds the reference's tokens through the runtime at any batch.
:meth:`OrtGenAIDecoder.stream`, the timed loop, is the runtime's own generation loop as its examples write
it (``append_tokens(prompt)``, then ``generate_next_token()`` and ``get_next_tokens()`` per token), greedy
(``do_sample`` false) and never stopping early (``min_length`` = ``max_length``); the generation gate checks
its tokens against the reference's too (:func:`dlbench.generation.gate.compare_loop`). The key/value cache
is the runtime's: one buffer of ``max_length`` positions per sequence (``past_present_share_buffer``), made
with each ``Generator``, one per prompt.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from dlbench.frameworks.base import UnsupportedError
from dlbench.frameworks.decoding import Decoder, cache_bytes
from dlbench.frameworks.onnxruntime_genai import convert
from dlbench.frameworks.onnxruntime_genai.runtime import generator, load, tokens_in
from dlbench.frameworks.transformers.converted import Tamper
from dlbench.models.spec import ModelSpec
from dlbench.models.weights import Weights


class OrtGenAIDecoder(Decoder):
    framework = "onnxruntime-genai"
    variants = ("default",)
    precisions = ("fp32", "int4")
    #: a change to the Hugging Face folder before the builder runs (tests plant defects with one)
    tamper: Tamper | None = None

    def __init__(self, spec: ModelSpec, weights: Weights, batch: int, max_len: int, precision: str = "fp32",
                 variant: str = "", device: str = "cpu"):
        super().__init__(spec, weights, batch, max_len, precision, variant, device)
        if precision not in self.precisions:
            raise UnsupportedError(f"onnxruntime-genai decodes at {', '.join(self.precisions)}, not {precision}")
        if device != "cpu":
            raise UnsupportedError("onnxruntime-genai runs on the CPU only in dlbench")
        convert.check_shapes(spec)
        self.threads = len(os.sched_getaffinity(0))
        self.loaded = load(convert.converted(spec, weights, precision, self.tamper), self.threads)
        self.generator: Any = None

    def prefill(self, prompt: np.ndarray) -> tuple[Any, Any]:
        self.generator = generator(self.loaded.model, self.batch, self.max_len)
        self.generator.append_tokens(tokens_in(prompt))
        self.pos = prompt.shape[1]
        return self._last()

    def step(self, tokens: Any) -> tuple[Any, Any]:
        """``tokens`` next: the runtime takes a second ``append_tokens`` at batch 1 only, so the token is
        chosen through its own search (``set_logits`` with the token the only finite logit, then
        ``generate_next_token``, which appends it and runs the model on it) at any batch."""
        chosen = np.full((self.batch, self.spec.input.vocab), -np.inf, np.float32)
        chosen[np.arange(self.batch), np.asarray(tokens).reshape(-1)] = 0.0
        self.generator.set_logits(chosen)
        self.generator.generate_next_token()
        self.pos += 1
        return self._last()

    def _last(self) -> tuple[np.ndarray, np.ndarray]:
        logits = np.asarray(self.generator.get_logits())[:, -1]
        return logits, logits.argmax(axis=-1)

    def stream(self, prompt: np.ndarray, new_tokens: int) -> Iterator[np.ndarray]:
        """The runtime's own loop: ``generate_next_token`` (greedy from the last logits, then the model on the
        chosen token) and ``get_next_tokens``, one token per sequence each."""
        gen = generator(self.loaded.model, self.batch, prompt.shape[1] + new_tokens)
        gen.append_tokens(tokens_in(prompt))
        for _ in range(new_tokens):
            gen.generate_next_token()
            yield np.asarray(gen.get_next_tokens()).astype(np.int64)
        self.pos = prompt.shape[1] + new_tokens

    def host(self, array: Any) -> np.ndarray:
        return np.asarray(array)

    @property
    def cache_bytes(self) -> int:
        return cache_bytes(self.spec, self.batch, self.max_len, 4)

    def info(self) -> dict[str, Any]:
        return {**self.loaded.info(), "engine": "onnxruntime_genai.Generator (greedy search)",
                "cache": "the runtime's key/value buffer of max_length positions (past_present_share_buffer)",
                "intra_op_threads": self.threads}
