"""The gate's attention-mask checks: properties of the framework's own forward, not of its distance
from the reference, so a leak too small for the forward tolerance, or one the reference batch happens
not to exercise, still fails.

* causal (a model with causal attention and a per-position output): the tokens after the middle
  position are changed; the outputs at and before it must not move (a position that sees a later
  token moves);
* padding (a variable-length token model with attention): every padded token is changed; no
  output may move (per-position outputs: those at valid positions).

"Not move" is a relative change of at most the forward tolerance: the framework computes the same
values on the same kernels twice, so only a leak moves them by more.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from dlbench.data.synthetic import Batch
from dlbench.models import layers as L
from dlbench.models.spec import ModelSpec


def _attention(spec: ModelSpec) -> list[L.Attention]:
    return [layer for layer in L.walk(spec.layers) if isinstance(layer, L.Attention)]


def applies(spec: ModelSpec) -> dict[str, bool]:
    """Which of the checks apply to ``spec``."""
    attention = _attention(spec)
    per_position = spec.input.kind == "tokens" and len(spec.output_shape) == 2
    return {"causal_mask": per_position and any(a.causal for a in attention),
            "padding_mask": bool(attention) and spec.input.variable_length}


def _other_tokens(x: np.ndarray, where: np.ndarray, vocab: int) -> np.ndarray:
    """``x`` with every id where ``where`` is true replaced by a different id."""
    shift = 1 + np.random.default_rng(99).integers(0, vocab - 1, x.shape)
    return np.where(where, (x + shift) % vocab, x)


def _moved(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a64 - b64) / max(np.linalg.norm(a64), 1e-30))


def check_masks(spec: ModelSpec, batch: Batch, out: np.ndarray, run: Callable[[Batch], np.ndarray],
                tolerance: float) -> tuple[dict[str, bool], dict[str, float], list[str]]:
    """The checks that apply: ``(passed by check, relative change by check, failure texts)``.
    ``out`` is the framework's output on ``batch``, ``run`` its forward on another batch."""
    passed: dict[str, bool] = {}
    moved: dict[str, float] = {}
    failures: list[str] = []
    todo = applies(spec)
    vocab = spec.input.vocab
    if todo["causal_mask"]:
        steps = batch.x.shape[1]
        cut = steps // 2
        later = np.arange(steps)[None, :] > cut
        changed = run(replace(batch, x=_other_tokens(batch.x, np.broadcast_to(later, batch.x.shape), vocab)))
        moved["causal_mask"] = _moved(out[:, : cut + 1], changed[:, : cut + 1])
        passed["causal_mask"] = moved["causal_mask"] <= tolerance
        if not passed["causal_mask"]:
            failures.append(f"causal mask leaks: changing tokens after position {cut} moved the outputs up to it "
                            f"by {moved['causal_mask']:.2e}")
    if todo["padding_mask"]:
        if batch.mask is None or batch.mask.all():
            raise ValueError("the padding-mask check needs a batch with padding, and this one has none")
        padded = batch.mask == 0
        changed = run(replace(batch, x=_other_tokens(batch.x, padded, vocab)))
        keep = (batch.mask > 0)[..., None] if out.ndim == 3 else np.ones(out.shape, bool)
        moved["padding_mask"] = _moved(np.where(keep, out, 0.0), np.where(keep, changed, 0.0))
        passed["padding_mask"] = moved["padding_mask"] <= tolerance
        if not passed["padding_mask"]:
            failures.append(f"padding mask leaks: changing padded tokens moved the outputs by "
                            f"{moved['padding_mask']:.2e}")
    return passed, moved, failures
