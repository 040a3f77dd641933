"""The contract a framework's greedy decoder fulfils (a framework folder's ``decoder.py`` implements
:class:`Decoder`), and which models it decodes. The loop that times it, :func:`dlbench.generation.decoder.greedy`,
and the choice of a framework's decoder live in :mod:`dlbench.generation`.

A :class:`Decoder` holds one model's weights at one precision and a key/value cache of a fixed size
(``batch`` x ``max_len`` positions, allocated once): :meth:`Decoder.prefill` runs the prompt through
the model, fills the cache's first positions and returns the last position's logits with the next
token (the argmax, computed by the framework); :meth:`Decoder.step` feeds one token per sequence at
the next position and returns the same. A decoder is built from the spec's layers (the same layer
kinds the backends build, so the same canonical weights), never from a framework's model hub.

:func:`dlbench.generation.decoder.greedy` is the one loop every framework is timed with: each token is brought to the host as
it is produced (a served token is delivered, so the step is synchronised), the time to the first
token (prefill and its argmax) and each later token's time are taken with ``perf_counter_ns``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any

import numpy as np

from dlbench.models import layers as L
from dlbench.models.spec import ModelSpec
from dlbench.models.weights import Weights

#: the layer kinds a decoder interprets (a decoder-only language model: embeddings, pre- or post-norm
#: blocks of causal attention and an MLP, a final norm, the tied LM head)
DECODABLE = (L.Embedding, L.PositionEmbedding, L.LayerNorm, L.RMSNorm, L.GELU, L.Dense, L.Dropout,
             L.Attention, L.SwiGLU, L.SkipBlock, L.LMHead)
#: precisions a decoder builds at unless its class declares its own (:attr:`Decoder.precisions`)
PRECISIONS = ("fp32", "bf16")


class NotDecodable(ValueError):
    """A model the generate scenarios cannot decode (not a causal decoder-only language model)."""


def check_decodable(spec: ModelSpec) -> None:
    """Raise :class:`NotDecodable` with the reason unless ``spec`` is a decoder-only language model:
    token input, only the layer kinds of :data:`DECODABLE`, every attention causal, ending in an LM head."""
    if spec.input.kind != "tokens" or not spec.layers or not is_lm_head(spec, spec.layers[-1]):
        raise NotDecodable(f"{spec.name} is not a language model (token input, ending in an LM head)")
    for layer in L.walk(spec.layers):
        if not isinstance(layer, DECODABLE):
            raise NotDecodable(f"{spec.name} has a {layer.kind} layer, which a decoder does not run")
        if isinstance(layer, L.Attention) and not layer.causal:
            raise NotDecodable(f"{spec.name}'s attention {layer.name} is not causal: it is not a decoder")


def is_lm_head(spec: ModelSpec, layer: L.Layer) -> bool:
    """``layer`` is ``spec``'s LM head: its last layer, tied to the token embedding or (an untied Hugging
    Face checkpoint's, :mod:`dlbench.models.hf_checkpoint`) a bias-free dense layer to the vocabulary.
    A decoder computes it on the last position only."""
    return layer is spec.layers[-1] and (isinstance(layer, L.LMHead) or (
        isinstance(layer, L.Dense) and not layer.bias and layer.units == spec.input.vocab))


def context_length(spec: ModelSpec) -> int | None:
    """The most positions the model takes: its learned position table's rows, else the context it was
    published with (``spec.options["context"]``); None where neither says."""
    for layer in L.walk(spec.layers):
        if isinstance(layer, L.PositionEmbedding):
            return layer.max_len
    return spec.options.get("context")


def attention_layers(spec: ModelSpec) -> list[tuple[L.Attention, int]]:
    """Every attention layer with its model width, in order (one cache slot each)."""
    out = []
    shape = spec.input.shape
    _collect(spec.layers, shape, out)
    return out


def _collect(layers: tuple[L.Layer, ...], shape: tuple[int, ...], out: list) -> None:
    for layer in layers:
        if isinstance(layer, L.Attention):
            out.append((layer, shape[-1]))
        elif isinstance(layer, L.SkipBlock):
            _collect(layer.body, shape, out)
            _collect(layer.post, shape, out)
        shape = layer.out_shape(shape)


def cache_bytes(spec: ModelSpec, batch: int, max_len: int, itemsize: int) -> int:
    """Bytes of a full key/value cache: keys and values of every attention layer, ``kv_heads x
    head_dim`` per position."""
    total = 0
    for layer, dim in attention_layers(spec):
        _, kv, hd = layer.dims(dim)
        total += 2 * batch * max_len * kv * hd * itemsize
    return total


class Decoder(ABC):
    """One framework's greedy decoder over a fixed-size key/value cache (see the module docstring).

    ``spec`` is the model at its full length (``seq_len`` = prompt + new tokens: rotary and position
    tables cover it); ``max_len`` is the cache's positions. A subclass builds its cache and compiled
    functions in ``__init__``; tests subclass one to plant bugs."""

    #: the framework's name (dlbench.frameworks) and variants this decoder runs
    framework: str = ""
    variants: tuple[str, ...] = ()
    #: the precisions (dlbench.core.precision) it decodes at; make_decoder refuses the others
    precisions: tuple[str, ...] = PRECISIONS
    #: the most sequences its timed loop takes at once (None: any); the gate decodes at most that many
    max_batch: int | None = None
    #: why (the runtime's words), appended to make_decoder's refusal
    max_batch_reason: str = ""

    def __init__(self, spec: ModelSpec, weights: Weights, batch: int, max_len: int, precision: str = "fp32",
                 variant: str = "", device: str = "cpu"):
        check_decodable(spec)
        self.spec, self.batch, self.max_len, self.precision = spec, batch, max_len, precision
        self.variant = variant or self.variants[0]
        self.device = device
        #: the position the next step writes (the tokens seen so far)
        self.pos = 0

    @abstractmethod
    def prefill(self, prompt: np.ndarray) -> tuple[Any, Any]:
        """The prompt (batch, P) int64 through the model, the cache's positions 0..P-1 filled: the last
        position's logits (batch, vocab) and the argmax tokens (batch,), as the framework's arrays."""

    @abstractmethod
    def step(self, tokens: Any) -> tuple[Any, Any]:
        """One token per sequence (the framework's array, or NumPy) at position :attr:`pos`: its logits
        and the next tokens."""

    @abstractmethod
    def host(self, array: Any) -> np.ndarray:
        """A framework array on the host (waits for it)."""

    @property
    @abstractmethod
    def cache_bytes(self) -> int:
        """Bytes the key/value cache holds (allocated once, whatever the position)."""

    def info(self) -> dict[str, Any]:
        """How the decoder was built (recorded with the cell). A runtime that converts the weights to its
        format and loads them says how long each took, ``convert_s`` (with ``convert_cache``: ``hit``,
        ``miss`` or ``off``) and ``load_s``: the generate scenario stores them as the cell's cold start."""
        return {}

    def stream(self, prompt: np.ndarray, new_tokens: int) -> Iterator[np.ndarray]:
        """The generation loop :func:`greedy` times: each new token (batch,) on the host as it is made.
        Here, :meth:`prefill` then :meth:`step`; a runtime with a generation loop of its own (its
        ``generate()`` with a streamer, its token iterator) yields from that instead, its fast path."""
        _, token = self.prefill(prompt)
        yield self.host(token)
        for _ in range(new_tokens - 1):
            _, token = self.step(token)
            yield self.host(token)
