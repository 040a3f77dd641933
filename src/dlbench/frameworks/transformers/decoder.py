"""The transformers decoder: the family's own causal LM class (``GPT2LMHeadModel``, ``LlamaForCausalLM``)
loaded from the Hugging Face folder of dlbench's weights (:mod:`.convert`), decoding with its own cache.

* :meth:`~TransformersDecoder.prefill` / :meth:`~TransformersDecoder.step`: the model's forward with
  transformers' ``DynamicCache`` as ``past_key_values`` (a fresh one per prompt), the last position's
  logits and their argmax; the generation gate's teacher forcing and cache check run through them;
* ``compile``: transformers' recipe for a compiled generation (its docs' torch.compile section of LLM
  inference optimisation): ``model.forward`` compiled by ``torch.compile`` (default mode: the recipe's
  ``reduce-overhead`` is CUDA graphs) over a ``StaticCache`` (``generation_config.cache_implementation =
  "static"``; prefill/step: one StaticCache of ``max_len`` positions, reset per prompt), so a step's
  shapes never change;
* :meth:`~TransformersDecoder.stream`, the timed loop: transformers' own ``generate()`` (greedy:
  ``do_sample=False``; ``max_new_tokens`` = ``min_new_tokens`` = the tokens asked) with a streamer whose
  ``put()`` hands each new token to the consumer, generate running in a thread as transformers'
  ``TextIteratorStreamer`` recipe runs it. ``eos_token_id`` is unset for the call, so generate neither
  stops at nor suppresses the end-of-sequence token (suppressing it, as ``min_new_tokens`` does when one
  is set, would make its greedy tokens differ from the model's argmax); the gate checks generate's tokens
  against the float64 reference's.

``info()`` records the format, the conversion's and the load's seconds (``convert_s`` with its cache
state, ``load_s``: ``from_pretrained``), the attention implementation and transformers' version.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import transformers
from transformers import DynamicCache, StaticCache
from transformers.generation.streamers import BaseStreamer

from dlbench.frameworks.base import UnsupportedError
from dlbench.frameworks.decoding import Decoder
from dlbench.frameworks.decoding import cache_bytes as full_cache_bytes
from dlbench.frameworks.transformers.convert import FORMAT, Writer, convert, load
from dlbench.frameworks.transformers.hf_model import save_folder
from dlbench.models.spec import ModelSpec
from dlbench.models.weights import Weights

#: bytes per cached element, by precision
ITEMSIZE = {"fp32": 4, "bf16": 2}
_DONE = object()


class TokenStreamer(BaseStreamer):
    """generate()'s streamer: ``put()`` is called with the prompt first, then with each step's tokens
    (batch,); every call after the first is queued for :meth:`TransformersDecoder.stream` to yield."""

    def __init__(self) -> None:
        self.tokens: queue.Queue = queue.Queue()
        self.prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        self.tokens.put(value.reshape(-1).numpy().astype(np.int64))

    def end(self) -> None:
        self.tokens.put(_DONE)


class TransformersDecoder(Decoder):
    framework = "transformers"
    variants = ("sdpa", "eager", "compile")
    precisions = ("fp32", "bf16")
    #: writes the Hugging Face folder (tests plant defects with another writer)
    writer: Writer = staticmethod(save_folder)

    def __init__(self, spec: ModelSpec, weights: Weights, batch: int, max_len: int, precision: str = "fp32",
                 variant: str = "", device: str = "cpu"):
        super().__init__(spec, weights, batch, max_len, precision, variant, device)
        if device != "cpu":
            raise UnsupportedError(f"the transformers decoder runs on the CPU in dlbench, not {device}")
        converted = convert(spec, weights, type(self).writer)
        try:
            self.model, load_s = load(converted.folder, spec, precision, self.variant, device)
        finally:
            converted.cleanup()
        self.dev = torch.device(device)
        self.cache: DynamicCache | StaticCache | None = None
        if self.variant == "compile":
            self.model.forward = torch.compile(self.model.forward)
            self.model.generation_config.cache_implementation = "static"
            self.cache = StaticCache(config=self.model.config, max_cache_len=max_len)
        self.built = {"format": FORMAT, "convert_s": round(converted.seconds, 4), "convert_cache": converted.cache,
                      "load_s": round(load_s, 4), "class": type(self.model).__name__,
                      "attn_implementation": self.model.config._attn_implementation,
                      "cache": ("StaticCache, forward compiled" if self.variant == "compile" else "DynamicCache")
                      + " (prefill/step); generate()'s own (stream)",
                      "loop": "generate(do_sample=False, min_new_tokens=max_new_tokens) with a streamer",
                      "transformers": transformers.__version__, "torch": torch.__version__}

    # --- the contract ----------------------------------------------------------------------------
    def _last(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.inference_mode():
            logits = self.model(input_ids=ids, cache=self.cache, use_cache=True, logits_to_keep=1).logits[:, -1]
        return logits, logits.argmax(dim=-1)

    def prefill(self, prompt: np.ndarray) -> tuple[Any, Any]:
        if self.variant == "compile":
            self.cache.reset()
        else:
            self.cache = DynamicCache(config=self.model.config)
        out = self._last(torch.from_numpy(np.ascontiguousarray(prompt)).to(self.dev))
        self.pos = prompt.shape[1]
        return out

    def step(self, tokens: Any) -> tuple[Any, Any]:
        if isinstance(tokens, np.ndarray):
            tokens = torch.from_numpy(np.ascontiguousarray(tokens))
        out = self._last(tokens.reshape(-1, 1).to(self.dev))
        self.pos += 1
        return out

    def host(self, array: Any) -> np.ndarray:
        return array.detach().float().cpu().numpy() if array.is_floating_point() else array.cpu().numpy()

    @property
    def cache_bytes(self) -> int:
        return full_cache_bytes(self.spec, self.batch, self.max_len, ITEMSIZE[self.precision])

    def info(self) -> dict[str, Any]:
        return dict(self.built)

    def stream(self, prompt: np.ndarray, new_tokens: int) -> Iterator[np.ndarray]:
        """transformers' ``generate()``, each new token (batch,) as its streamer receives it."""
        ids = torch.from_numpy(np.ascontiguousarray(prompt)).to(self.dev)
        streamer = TokenStreamer()
        failed: list[BaseException] = []

        def generate() -> None:
            try:
                self.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                    max_new_tokens=new_tokens, min_new_tokens=new_tokens, eos_token_id=None,
                                    pad_token_id=0, streamer=streamer)
            except BaseException as exc:  # said in the consumer's thread, below
                failed.append(exc)
                streamer.end()
        worker = threading.Thread(target=generate, name="transformers-generate", daemon=True)
        worker.start()
        try:
            while (token := streamer.tokens.get()) is not _DONE:
                yield token
        finally:  # a consumer that stops early still waits: no generation runs beside the next one
            worker.join()
        if failed:
            raise failed[0]
