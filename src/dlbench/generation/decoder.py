"""The loop that times a framework's greedy decoder, and the choice of that decoder.

What a decoder is (:class:`~dlbench.frameworks.decoding.Decoder`, the models it decodes) is the
framework folders' contract, :mod:`dlbench.frameworks.decoding`; which framework has one is its
folder's declaration (``decoder``). :func:`greedy` is the one loop every framework is timed with: each
token is brought to the host as it is produced, the time to the first token and each later token's time
taken with ``perf_counter_ns``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from dlbench import frameworks
from dlbench.frameworks.decoding import Decoder
from dlbench.models.spec import ModelSpec
from dlbench.models.weights import Weights


@dataclass
class Generation:
    """One greedy generation: the tokens, the time to the first token and each later token's time."""

    tokens: np.ndarray  # (batch, new_tokens)
    ttft_ns: float
    tpot_ns: list[float] = field(default_factory=list)

    @property
    def total_ns(self) -> float:
        return self.ttft_ns + sum(self.tpot_ns)


def greedy(decoder: Decoder, prompt: np.ndarray, new_tokens: int) -> Generation:
    """Greedy decoding of ``new_tokens`` tokens after ``prompt``, each brought to the host as it is made."""
    out, times = [], []
    t0 = time.perf_counter_ns()
    for token in decoder.stream(prompt, new_tokens):
        t1 = time.perf_counter_ns()
        out.append(np.asarray(token))
        times.append(float(t1 - t0))
        t0 = t1
    if len(out) != new_tokens:
        raise RuntimeError(f"{decoder.framework}'s generation loop gave {len(out)} tokens, not {new_tokens}")
    return Generation(np.stack(out, axis=1).astype(np.int64), times[0], times[1:])


def make_decoder(framework: str, spec: ModelSpec, weights: Weights, batch: int, max_len: int,
                 precision: str = "fp32", variant: str = "", device: str = "cpu") -> Decoder:
    """The framework's decoder (its module imported only here)."""
    from dlbench.frameworks.base import UnsupportedError

    cls = decoder_class(framework)
    if cls is None:
        raise UnsupportedError(unsupported_reason(framework))
    if precision not in cls.precisions:
        raise UnsupportedError(f"{framework}'s decoder builds at {', '.join(cls.precisions)} only, not {precision}")
    if variant and variant not in cls.variants:
        raise UnsupportedError(f"{framework}'s decoder runs the {', '.join(cls.variants)} variant(s), not {variant}")
    return cls(spec, weights, batch, max_len, precision, variant, device)


def decoder_class(framework: str) -> type[Decoder] | None:
    """The framework's decoder class, imported (None: its folder declares none)."""
    return frameworks.load_part(framework, "decoder")


def unsupported_reason(framework: str) -> str:
    """Why ``framework`` has no decoder: its declaration's reason, else the frameworks that have one."""
    try:
        reason = frameworks.framework_info(framework).no_decoder
    except frameworks.UnknownFrameworkError:
        reason = None
    return reason or (f"{framework} has no key/value-cache decoder in dlbench (generate scenarios: "
                      f"{', '.join(frameworks.with_part('decoder'))})")
