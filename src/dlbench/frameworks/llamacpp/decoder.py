"""llama.cpp's greedy decoder: the GGUF file of :mod:`.convert`, one ``llama_cpp.Llama`` context per
sequence.

The timed loop (:meth:`LlamaCppDecoder.stream`) is the bindings' own, ``Llama.generate`` with the greedy
sampler (``temp=0``: llama.cpp's ``llama_sampler_init_greedy``; no repeat, frequency or presence
penalty), what ``Llama.create_completion`` runs under a user's call: it decodes the prompt, samples,
then decodes each sampled token (``llama_decode``) and samples again, all inside llama.cpp. Each
generation starts from an empty cache (``reset``): ``generate`` would otherwise find the timed prompt,
repeated, already in its cache and skip its prefill.

The bindings' ``Llama`` serves one sequence (its batch carries one sequence id), so a batch of B
sequences is **B contexts on the one memory-mapped file, stepped in turn**: each step advances every
sequence's generator by one token, so a step's time is B single-sequence steps, not a batched decode.

:meth:`prefill` and :meth:`step` (the generation gate's teacher forcing and cache check) run the same
contexts by ``Llama.eval`` and read the last position's logits (``llama_get_logits_ith``); their token
is the argmax of those logits. The gate also checks the tokens of the timed loop itself.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import llama_cpp
import numpy as np

from dlbench.frameworks.base import UnsupportedError
from dlbench.frameworks.decoding import Decoder, cache_bytes
from dlbench.frameworks.llamacpp import convert
from dlbench.frameworks.llamacpp.backend import DEFAULT_KV, KV_TYPES, build_facts, extra_info, load, model_facts
from dlbench.models.spec import ModelSpec
from dlbench.models.weights import Weights

#: the sampler settings of a greedy generation (``temp=0`` is the greedy sampler; the others switch
#: off what ``generate``'s defaults would add)
GREEDY = {"temp": 0.0, "top_k": 1, "top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.0, "frequency_penalty": 0.0,
          "presence_penalty": 0.0}


class LlamaCppDecoder(Decoder):
    framework = "llamacpp"
    variants = ("default",)
    precisions = tuple(convert.FORMATS)

    def __init__(self, spec: ModelSpec, weights: Weights, batch: int, max_len: int, precision: str = "fp32",
                 variant: str = "", device: str = "cpu"):
        super().__init__(spec, weights, batch, max_len, precision, variant, device)
        if device != "cpu":
            raise UnsupportedError("llama.cpp runs on the CPU only in dlbench (its wheel is built for this CPU)")
        if precision not in self.precisions:
            raise UnsupportedError(f"llama.cpp decodes GGUF files as {', '.join(self.precisions)}, not {precision}")
        self.threads = len(os.sched_getaffinity(0))
        self.gguf = convert.converted(spec, weights, precision, self.hparams(spec), llama_cpp.__version__)
        started = time.perf_counter()
        self.llms = [load(str(self.gguf.path), max_len, self.threads, precision, logits_all=False)
                     for _ in range(batch)]
        self.load_s = time.perf_counter() - started
        self.facts = model_facts(self.llms[0])
        self.vocab = self.llms[0].n_vocab()

    def hparams(self, spec: ModelSpec) -> dict[str, Any]:
        """The GGUF metadata written for ``spec`` (a test plants a wrong one here)."""
        return convert.hparams(spec)

    def _last_logits(self, llm: Any) -> np.ndarray:
        ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(self.vocab,)).astype(np.float32)

    def prefill(self, prompt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rows = []
        for llm, seq in zip(self.llms, np.asarray(prompt), strict=True):
            llm.reset()
            llm.eval([int(t) for t in seq])
            rows.append(self._last_logits(llm))
        self.pos = prompt.shape[1]
        logits = np.stack(rows)
        return logits, logits.argmax(axis=-1)

    def step(self, tokens: Any) -> tuple[np.ndarray, np.ndarray]:
        rows = []
        for llm, token in zip(self.llms, np.asarray(tokens).reshape(-1), strict=True):
            llm.eval([int(token)])
            rows.append(self._last_logits(llm))
        self.pos += 1
        logits = np.stack(rows)
        return logits, logits.argmax(axis=-1)

    def host(self, array: Any) -> np.ndarray:
        return np.asarray(array)

    @property
    def cache_bytes(self) -> int:
        itemsize = {"f32": 4, "f16": 2, "bf16": 2}[KV_TYPES.get(self.precision, DEFAULT_KV)[1]]
        return cache_bytes(self.spec, self.batch, self.max_len, itemsize)

    def stream(self, prompt: np.ndarray, new_tokens: int) -> Iterator[np.ndarray]:
        """``Llama.generate`` per sequence, each advanced one token in turn (see the module docstring)."""
        loops = []
        for llm, seq in zip(self.llms, np.asarray(prompt), strict=True):
            llm.reset()  # an empty cache: the timed prompt repeats, and generate would reuse its prefix
            loops.append(llm.generate([int(t) for t in seq], reset=True, **GREEDY))
        try:
            for _ in range(new_tokens):
                yield np.array([next(loop) for loop in loops], np.int64)
        finally:
            for loop in loops:
                loop.close()
        self.pos = prompt.shape[1] + new_tokens - 1

    def info(self) -> dict[str, Any]:
        return {**self.gguf.info(), "load_s": round(self.load_s, 4), "format": convert.FORMATS[self.precision].name,
                "model": self.facts["desc"], "kv_cache": KV_TYPES.get(self.precision, DEFAULT_KV)[1],
                "loop": "Llama.generate, greedy sampler (temp 0, no penalties), from an empty cache",
                "batch": f"{self.batch} context(s) on one mmapped GGUF, stepped in turn (Llama serves one sequence)",
                **build_facts(), **extra_info(self.precision), "threads": self.threads}
