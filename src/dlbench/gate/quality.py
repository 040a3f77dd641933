"""Quality on real text: what a precision does to a trained decoder's next-token distribution (issue #44).

The forward check (:mod:`dlbench.gate.verify`) bounds the relative error of the logits on random
weights, whose next-token distributions are nearly flat: there a format can move every prediction and
stay inside its tolerance, or fail it where no prediction changes. A trained checkpoint (``hf:DIR``, such
as the one dlbench ships, ``data/checkpoints/genesis-llama``) has peaked distributions, and on it the
figures people judge formats by mean something: on the shipped text's held-out ``test`` split (no byte of
it trained the shipped checkpoint), per token,

- ``kl``: the mean KL divergence ``KL(P_ref || P_fw)`` of the framework's next-token distribution from the
  float64 reference's (nats), what llama.cpp's ``perplexity --kl-divergence`` reports for its formats;
- ``top1``: the share of positions whose most likely next token is the reference's (llama.cpp's "same top p");
- ``accuracy_ratio``: the framework's next-token accuracy over the reference's (MLPerf Inference's
  "99% of the reference's accuracy" rule);
- ``perplexity`` and ``reference_perplexity``.

:data:`BOUNDS` (data, each with its source) says how far each precision may be; a framework beyond it
fails the gate with the figure, so its cells are ``not_equivalent`` and their times are not shown. The
figures are measured for a language model read from a checkpoint whose vocabulary holds the text's
bytes, and held to the bounds where that model has learned the text (:data:`LEARNED_PERPLEXITY`): on
random weights they say nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dlbench.data import DataError, adapt, load_dataset
from dlbench.data.genesis import VOCAB
from dlbench.data.synthetic import Batch
from dlbench.gate import reference
from dlbench.models.spec import ModelSpec
from dlbench.models.weights import Weights

#: the held-out text the figures are measured on
DATA, SPLIT = "genesis", "test"

MLPERF = ("MLPerf Inference rules (mlcommons/inference_policies, inference_rules.adoc, quality targets): a "
          "submission must reach {share} of the FP32 reference's accuracy")
LLAMA_CPP = ("llama.cpp tools/perplexity/README.md, {table}: {fmt} has mean KLD {kl} and same top p {top1} "
             "against the 16-bit model")


@dataclass(frozen=True)
class Bound:
    """The most KL divergence (nats per token), the least top-1 agreement and the least accuracy ratio a
    precision may show against the float64 reference, and where each number comes from."""

    kl: float
    top1: float
    accuracy_ratio: float
    source: str


_FLOAT16 = Bound(0.001355, 0.97674, 0.99,
                 "a 16-bit float format is held to what llama.cpp publishes for an 8-bit one: "
                 + LLAMA_CPP.format(table="LLaMA 2 vs. LLaMA 3 quantization comparison (L3 8b)", fmt="q8_0",
                                    kl="0.001355", top1="97.674%")
                 + "; accuracy: " + MLPERF.format(share="99%"))
#: per precision (dlbench.core.precision); a precision with no row is not held to a quality bound
BOUNDS: dict[str, Bound] = {
    "fp32": Bound(0.00002515, 0.99739, 0.99,
                  "float32 is held to what llama.cpp publishes for two 16-bit formats against each other: "
                  + LLAMA_CPP.format(table="LLaMA 3 BF16 vs. FP16 comparison", fmt="FP16 against BF16",
                                     kl="0.00002515", top1="99.739%")
                  + "; accuracy: " + MLPERF.format(share="99%")),
    "tf32": _FLOAT16, "bf16": _FLOAT16, "amp-bf16": _FLOAT16, "fp16": _FLOAT16, "amp-fp16": _FLOAT16,
    "int8": Bound(0.005452, 0.96031, 0.99,
                  "an 8-bit integer format is held to what llama.cpp publishes for a 6-bit one: "
                  + LLAMA_CPP.format(table="LLaMA 2 vs. LLaMA 3 quantization comparison (L3 8b)", fmt="q6_K",
                                     kl="0.005452", top1="96.031%")
                  + "; accuracy: " + MLPERF.format(share="99%")),
    "q8_0": Bound(0.005452, 0.96031, 0.99,
                  "llama.cpp's Q8_0 is held to what llama.cpp publishes for the next coarser format, Q6_K: "
                  + LLAMA_CPP.format(table="LLaMA 2 vs. LLaMA 3 quantization comparison (L3 8b)", fmt="q6_K",
                                     kl="0.005452", top1="96.031%")
                  + "; accuracy: " + MLPERF.format(share="99%")),
    "q4_0": Bound(0.071940, 0.71138, 0.99,
                  "llama.cpp's Q4_0 is held to what llama.cpp publishes for Q4_0 itself: tools/perplexity/README.md, "
                  "LLaMA 3 8b Scoreboard: q4_0 (no imatrix) has KLD 0.071940 against FP16; it publishes no same top p "
                  "for Q4_0, so top-1 is held to the coarsest format it does: "
                  + LLAMA_CPP.format(table="LLaMA 2 vs. LLaMA 3 quantization comparison (L3 8b)", fmt="q2_K",
                                     kl="0.445132", top1="71.138%")
                  + "; accuracy: " + MLPERF.format(share="99%")),
    "int4": Bound(0.071940, 0.71138, 0.99,
                  "a 4-bit block format (one scale per 32 weights) is held as llama.cpp's own, q4_0: KLD 0.071940 "
                  "(tools/perplexity/README.md, LLaMA 3 8b Scoreboard); it publishes no same top p for q4_0, so "
                  "top-1 is held to the coarsest format it does: "
                  + LLAMA_CPP.format(table="LLaMA 2 vs. LLaMA 3 quantization comparison (L3 8b)", fmt="q2_K",
                                     kl="0.445132", top1="71.138%")
                  + "; accuracy: " + MLPERF.format(share="99%")),
}


def applies(spec: ModelSpec) -> bool:
    """A next-token model read from a checkpoint (trained weights) whose vocabulary holds the text's bytes."""
    return ("checkpoint" in spec.options and spec.input.kind == "tokens" and spec.input.labels == "sequence"
            and spec.loss.kind == "softmax_ce" and spec.input.vocab >= VOCAB)


#: the held-out tokens measured are at most this many parameter-tokens of float64 reference work (the shipped
#: checkpoint reads the whole split; SmolLM2-135M, its first :data:`MIN_TOKENS`)
WORK = 5e10
MIN_TOKENS = 512
#: the bounds hold a model that has learned the text: its reference perplexity at most the vocabulary's 256 / 4
#: (two bits a byte better than a uniform guess); random weights (perplexity near 256) are measured, not held
LEARNED_PERPLEXITY = VOCAB / 4


def held_out(spec: ModelSpec, batch_size: int) -> list[Batch]:
    """The held-out split in the spec's windows, in batches of ``batch_size`` (the last, partial one dropped:
    a framework built for one batch shape keeps it), as many as :data:`WORK` allows."""
    try:
        data = adapt(load_dataset(DATA, None, SPLIT), spec)
    except DataError as exc:
        raise ValueError(f"quality check: {exc}") from None
    tokens = max(MIN_TOKENS, int(WORK / max(spec.param_count, 1)))
    per_batch = batch_size * spec.input.shape[0]
    return list(data.batches(batch_size, shuffle=False, drop_last=True))[:max(1, -(-tokens // per_batch))]


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    z = logits.astype(np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def _sums(framework_logits: np.ndarray, reference_logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Per-token sums over rows of logits (N, vocab): KL, same top-1, correct, reference correct, NLL, reference NLL."""
    lp, lq = _log_softmax(reference_logits), _log_softmax(framework_logits)
    rows = np.arange(labels.size)
    top_p, top_q = reference_logits.argmax(-1), framework_logits.argmax(-1)
    return np.array([np.sum(np.exp(lp) * (lp - lq)), np.sum(top_q == top_p), np.sum(top_q == labels),
                     np.sum(top_p == labels), -lq[rows, labels].sum(), -lp[rows, labels].sum(), labels.size],
                    np.float64)


def _figures(sums: np.ndarray) -> dict[str, float]:
    kl, same, correct, ref_correct, nll, ref_nll, n = sums
    return {"kl": max(float(kl / n), 0.0), "top1": float(same / n), "accuracy": float(correct / n),
            "reference_accuracy": float(ref_correct / n),
            "accuracy_ratio": float(correct / ref_correct) if ref_correct else 1.0,
            "perplexity": float(np.exp(nll / n)), "reference_perplexity": float(np.exp(ref_nll / n)), "tokens": int(n)}


def figures(framework_logits: np.ndarray, reference_logits: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """KL divergence (nats per token), top-1 agreement, accuracies and perplexities of rows of logits (N, vocab)."""
    return _figures(_sums(framework_logits, reference_logits, labels))


def measure(spec: ModelSpec, weights: Weights, forward: Callable[[Batch], np.ndarray],
            batch_size: int) -> dict[str, float]:
    """The figures of ``forward`` (a batch to the framework's logits) against the float64 reference over the
    held-out text, batch by batch (a large vocabulary's logits are never all held at once)."""
    sums = np.zeros(7)
    for batch in held_out(spec, batch_size):
        out = np.asarray(forward(batch), np.float64)
        ref, _ = reference.forward(spec, weights, batch, train=False)
        sums += _sums(out.reshape(-1, out.shape[-1]), ref.reshape(-1, ref.shape[-1]), batch.y.reshape(-1))
    if not sums[-1]:
        raise ValueError(f"quality check: the {DATA} {SPLIT} split has no window of {spec.input.shape[0]} tokens")
    fig = _figures(sums)
    return {**fig, "data": f"{DATA}/{SPLIT}", "seq_len": int(spec.input.shape[0]),
            "held": fig["reference_perplexity"] <= LEARNED_PERPLEXITY}


def failures(precision: str, fig: dict[str, float]) -> list[str]:
    """Each figure beyond ``precision``'s bound, with the figure and the bound (none for a model that has not
    learned the text: ``fig["held"]`` false)."""
    bound = BOUNDS.get(precision)
    if bound is None or not fig["held"]:
        return []
    out = []
    if fig["kl"] > bound.kl:
        out.append(f"KL divergence {fig['kl']:.2e} > {bound.kl:g} on {fig['data']}")
    if fig["top1"] < bound.top1:
        out.append(f"top-1 agreement {fig['top1']:.3%} < {bound.top1:.3%} on {fig['data']}")
    if fig["accuracy_ratio"] < bound.accuracy_ratio:
        out.append(f"accuracy {fig['accuracy_ratio']:.3%} of the reference's < {bound.accuracy_ratio:.0%} "
                   f"on {fig['data']}")
    return out
