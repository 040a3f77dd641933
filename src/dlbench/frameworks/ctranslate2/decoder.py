"""The CTranslate2 decoder: its ``Generator.generate_tokens`` streams the timed tokens; ``generate_batch``
with the vocabulary's logits gives the gate its cached steps.

:meth:`CTranslate2Decoder.stream` is the token streaming CTranslate2 documents for generation ("Token
streaming": ``generate_tokens`` yields each ``GenerationStepResult`` as the decoding loop makes it),
greedy (``sampling_topk=1``), the prompt forwarded at once into its key/value cache, ``max_length`` new
tokens and no end token (``end_token=[]``): the whole loop is CTranslate2's, so the time to the first
token and each later token's time are what its users get. It takes a batch of prompts (one step result
per sequence per step, gathered into one row of tokens a step).

CTranslate2's Python API has no call that feeds one more token into a kept cache and returns its
logits, so :meth:`prefill` and :meth:`step` (the gate's teacher forcing) run the sequence so far through
``generate_batch`` with ``include_prompt_in_result=True``, which its documentation says constrains the
decoding loop to the start tokens (fed one at a time through its key/value cache), with
``return_logits_vocab=True`` and ``max_length`` the sequence's length: the last of the returned rows is
the next token's logits, computed by CTranslate2's incremental decoding. The gate's cache check then
compares those with ``forward_batch``'s recomputation of the whole sequence (the backend's forward). The
timed loop forwards the prompt at once instead (``include_prompt_in_result=False``, what
``generate_tokens`` passes), so the gate also checks the streamed tokens against the float64 reference's
(check 6 of :func:`dlbench.generation.gate.verify_generation`), and a test checks that they equal the
teacher-forced ones at batch 1 and 4.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from dlbench.frameworks.ctranslate2 import DECLARATION
from dlbench.frameworks.ctranslate2.backend import affinity, load, logits_array
from dlbench.frameworks.decoding import Decoder, cache_bytes
from dlbench.models.spec import ModelSpec
from dlbench.models.weights import Weights


class CTranslate2Decoder(Decoder):
    framework = DECLARATION.name
    variants = DECLARATION.variants
    precisions = DECLARATION.precisions

    def __init__(self, spec: ModelSpec, weights: Weights, batch: int, max_len: int, precision: str = "fp32",
                 variant: str = "", device: str = "cpu"):
        super().__init__(spec, weights, batch, max_len, precision, variant, device)
        self.loaded = load(spec, weights, precision, device, affinity())
        self.generator = self.loaded.generator
        self.seq = np.zeros((batch, 0), np.int64)

    def _last(self) -> tuple[np.ndarray, np.ndarray]:
        """The next token's logits after :attr:`seq`, fed token by token through CTranslate2's cache."""
        rows = [[str(int(t)) for t in row] for row in self.seq]
        results = self.generator.generate_batch(rows, max_length=self.seq.shape[1], sampling_topk=1, end_token=[],
                                                include_prompt_in_result=True, return_logits_vocab=True)
        logits = np.stack([logits_array(r.logits[0][-1]) for r in results])
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
                "sampling_topk=1, end_token=[])", "gate_logits": "generate_batch(include_prompt_in_result=True, "
                "return_logits_vocab=True): the sequence fed token by token through its cache"}
