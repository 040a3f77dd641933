"""OpenVINO GenAI's decoder: ``LLMPipeline.generate`` with the prompt's token ids (``TokenizedInputs``) and a
streamer (a ``StreamerBase`` whose ``write`` receives each new token id), greedy (``do_sample`` false) with
``min_new_tokens`` = ``max_new_tokens`` and ``ignore_eos``, is :meth:`OpenVINOGenAIDecoder.stream`, the timed
loop: the pipeline runs in a thread and each token the streamer receives is handed to the caller as it
comes (a queue between the two, so the time between tokens is the pipeline's).

The pipeline gives no logits. :meth:`prefill`/:meth:`step`, which the generation gate's teacher forcing and
cache check read, run the same IR before it was made stateful (its cache as inputs and outputs), compiled by
OpenVINO's Core with the pipeline's settings; the gate checks the pipeline's own tokens against the float64
reference's (:func:`dlbench.generation.gate.compare_loop`). The pipeline's streamer serves one sequence: at
batch > 1 the decoder is unsupported in the pipeline's words (``max_batch``), and the gate decodes one.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import openvino as ov
import openvino_genai

from dlbench.frameworks.base import UnsupportedError
from dlbench.frameworks.decoding import Decoder, cache_bytes
from dlbench.frameworks.openvino_genai import convert
from dlbench.frameworks.openvino_genai.runtime import compile_ir, empty_past, properties, run
from dlbench.frameworks.transformers.converted import Tamper
from dlbench.models.spec import ModelSpec
from dlbench.models.weights import Weights

DONE = object()


class _Streamer(openvino_genai.StreamerBase):
    """Each token id the pipeline writes, onto a queue."""

    def __init__(self, out: queue.Queue):
        super().__init__()
        self.out = out

    def write(self, token: Any) -> Any:
        for t in token if isinstance(token, list) else [token]:
            self.out.put(int(t))
        return openvino_genai.StreamingStatus.RUNNING

    def end(self) -> None:
        pass


class OpenVINOGenAIDecoder(Decoder):
    framework = "openvino-genai"
    variants = ("default",)
    precisions = ("fp32", "int8", "int4")
    max_batch = 1
    max_batch_reason = (": OpenVINO GenAI's LLMPipeline streams one sequence (its check: 'streamer_ptr->has_callback() "
                        "|| input_ids.size() == 1'); without a streamer it gives no per-token times")
    #: a change to the Hugging Face folder before conversion (tests plant defects with one)
    tamper: Tamper | None = None

    def __init__(self, spec: ModelSpec, weights: Weights, batch: int, max_len: int, precision: str = "fp32",
                 variant: str = "", device: str = "cpu"):
        super().__init__(spec, weights, batch, max_len, precision, variant, device)
        if precision not in self.precisions:
            raise UnsupportedError(f"openvino-genai decodes at {', '.join(self.precisions)}, not {precision}")
        if device != "cpu":
            raise UnsupportedError("openvino-genai runs on the CPU only in dlbench")
        self.threads = len(os.sched_getaffinity(0))
        self.ir = compile_ir(convert.converted(spec, weights, precision, self.tamper), self.threads)
        import time

        started = time.perf_counter()
        self.pipeline = openvino_genai.LLMPipeline(str(self.ir.converted.path), "CPU", properties(self.threads))
        self.load_s = time.perf_counter() - started
        self.request = self.ir.compiled.create_infer_request()
        self.past: dict[str, np.ndarray] = {}

    def _call(self, tokens: Any) -> tuple[np.ndarray, np.ndarray]:
        logits, self.past = run(self.request, np.asarray(tokens).reshape(self.batch, -1), self.past)
        return logits[:, -1], logits[:, -1].argmax(axis=-1)

    def prefill(self, prompt: np.ndarray) -> tuple[Any, Any]:
        self.past = empty_past(self.ir, self.batch)
        out = self._call(prompt)
        self.pos = prompt.shape[1]
        return out

    def step(self, tokens: Any) -> tuple[Any, Any]:
        out = self._call(tokens)
        self.pos += 1
        return out

    def stream(self, prompt: np.ndarray, new_tokens: int) -> Iterator[np.ndarray]:
        config = self.pipeline.get_generation_config()
        config.max_new_tokens = config.min_new_tokens = new_tokens
        config.do_sample, config.ignore_eos = False, True
        inputs = openvino_genai.TokenizedInputs(ov.Tensor(np.ascontiguousarray(prompt, np.int64)),
                                                ov.Tensor(np.ones(prompt.shape, np.int64)))
        tokens: queue.Queue = queue.Queue()
        failure: list[BaseException] = []

        def run() -> None:
            try:
                self.pipeline.generate(inputs, config, _Streamer(tokens))
            except BaseException as exc:  # handed to the caller's thread
                failure.append(exc)
            tokens.put(DONE)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        while (token := tokens.get()) is not DONE:
            yield np.array([token], np.int64)
        thread.join()
        if failure:
            raise failure[0]
        self.pos = prompt.shape[1] + new_tokens

    def host(self, array: Any) -> np.ndarray:
        return np.asarray(array)

    @property
    def cache_bytes(self) -> int:
        return cache_bytes(self.spec, self.batch, self.max_len, 4)

    def info(self) -> dict[str, Any]:
        return {**self.ir.info(), "load_s": self.load_s, "engine": "openvino_genai.LLMPipeline (greedy, streamer)",
                "logits": "the same IR before make-stateful, compiled by OpenVINO Core (the pipeline gives none)",
                "openvino_genai": openvino_genai.__version__, "threads": self.threads}
