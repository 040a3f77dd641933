"""The CTranslate2 decoder: its ``Generator.generate_tokens`` streams the timed tokens; ``forward_batch``
gives the gate its logits.

:meth:`CTranslate2Decoder.stream` is the token streaming CTranslate2 documents for generation ("Token
streaming": ``generate_tokens`` yields each ``GenerationStepResult`` as the decoding loop makes it),
greedy (``sampling_topk=1``), the prompt forwarded at once into its key/value cache, ``max_length`` new
tokens and no end token (``end_token=[]``): the whole loop is CTranslate2's, so the time to the first
token and each later token's time are what its users get. It takes a batch of prompts (one step result
per sequence per step, gathered into one row of tokens a step).

CTranslate2's Python API gives logits for a whole sequence (``forward_batch``) and no incremental logits
from its cache, so :meth:`prefill` and :meth:`step` recompute the sequence so far and return its last
position's logits: the generation gate's cache check then compares a recomputation with a recomputation
and proves nothing of CTranslate2's cache. What proves the loop is the gate's check of the streamed
tokens against the float64 reference's (:func:`dlbench.generation.gate.verify_generation`), with ties at
the reference's margin, as for the teacher-forced tokens.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from dlbench.frameworks.ctranslate2.backend import affinity, load, logits_array
from dlbench.generation.decoder import Decoder, cache_bytes
from dlbench.models.spec import ModelSpec
from dlbench.models.weights import Weights


class CTranslate2Decoder(Decoder):
    framework = "ctranslate2"
    variants = ("default",)
    #: the precisions the generate scenarios may ask this decoder for
    precisions = ("fp32", "int8", "bf16")

    def __init__(self, spec: ModelSpec, weights: Weights, batch: int, max_len: int, precision: str = "fp32",
                 variant: str = "", device: str = "cpu"):
        super().__init__(spec, weights, batch, max_len, precision, variant, device)
        self.loaded = load(spec, weights, precision, device, affinity())
        self.generator = self.loaded.generator
        self.seq = np.zeros((batch, 0), np.int64)

    def _last(self) -> tuple[np.ndarray, np.ndarray]:
        out = self.generator.forward_batch(np.ascontiguousarray(self.seq, np.int32).tolist())
        logits = logits_array(out)[:, -1]
        return logits, logits.argmax(axis=-1)

    def prefill(self, prompt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self.seq = np.asarray(prompt, np.int64)
        self.pos = self.seq.shape[1]
        return self._last()

    def step(self, tokens: Any) -> tuple[np.ndarray, np.ndarray]:
        self.seq = np.concatenate([self.seq, np.asarray(tokens, np.int64).reshape(-1, 1)], axis=1)
        self.pos += 1
        return self._last()

    def host(self, array: Any) -> np.ndarray:
        return np.asarray(array)

    @property
    def cache_bytes(self) -> int:
        """The key/value cache CTranslate2 fills by the last step (float32 keys and values; it grows as it goes)."""
        return cache_bytes(self.spec, self.batch, self.max_len, 4)

    def stream(self, prompt: np.ndarray, new_tokens: int) -> Iterator[np.ndarray]:
        rows = [[str(int(t)) for t in row] for row in prompt]
        step = np.full(len(rows), -1, np.int64)
        filled = 0
        for result in self.generator.generate_tokens(rows, max_length=new_tokens, sampling_topk=1, end_token=[]):
            step[result.batch_id] = result.token_id
            filled += 1
            if filled == len(rows):
                yield step.copy()
                filled = 0

    def info(self) -> dict[str, Any]:
        return {**self.loaded.info(), "engine": "ctranslate2.Generator", "loop": "generate_tokens (greedy, "
                "sampling_topk=1, end_token=[])", "gate_logits": "forward_batch over the whole sequence (no "
                "incremental logits in CTranslate2's API)"}
