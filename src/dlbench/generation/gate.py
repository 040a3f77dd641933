"""The generation gate: a framework's decoder must decode the model's function before its tokens are timed.

On the model's small form (as the equivalence gate, :mod:`dlbench.gate.verify`), with verify-mode weights,
``batch`` seeded prompts of ``prompt`` tokens and ``new_tokens`` greedy steps:

1. **the reference** decodes greedily in float64 (:mod:`dlbench.gate.reference`, the whole sequence
   recomputed at every step): its tokens and each step's logits;
2. **the decoder** first generates from another prompt (a decoder serves several prompts in a row, the
   warm-up and then the timed generations, so one whose cache carries a prompt into the next fails the
   checks below), then is fed the same prompt and, at every step, the *reference's* token (teacher
   forcing), so one disagreement never derails the steps after it; its logits and tokens per step;
3. **cache against recomputation**: the framework's own model (its backend's ``forward``, the closure
   the equivalence gate checked) recomputes the whole sequence; every step's cached logits must equal
   that position's within twice the precision's forward tolerance (each is within one of the truth).
   A cache written or read one position off fails here by orders of magnitude;
4. **logit error**: the steps' logits against the reference's, ``||z - z_ref|| / ||z_ref||`` over every
   step (the equivalence gate's forward check, on the decoded positions) within the precision's forward
   tolerance (:data:`dlbench.gate.verify.TOLERANCES`); each step's own error is stored beside it;
5. **tokens**: the decoder's token equals the reference's at every step where the reference's top-1
   margin (its best logit minus its second) exceeds what the tolerance lets a logit row move,
   ``2 * tol * ||z_ref row||``; a different token inside that margin is a **tie**, reported with its
   margin and not a failure;
6. **the timed loop's tokens**: :meth:`Decoder.stream` (what :func:`greedy` times; a runtime's own
   generation loop where it has one) generates from the same prompt, fed its own tokens; each row's tokens
   up to its first difference from the reference's are held to the same margins (after a tie the loop
   decodes another sequence, which the reference's logits no longer describe).
"""

from __future__ import annotations

import math
import time
import traceback
from dataclasses import dataclass, field

import numpy as np

from dlbench.data.synthetic import Batch
from dlbench.frameworks import get_backend
from dlbench.frameworks.base import UnsupportedError
from dlbench.frameworks.decoding import Decoder, NotDecodable, check_decodable
from dlbench.gate import reference
from dlbench.gate.verify import TOLERANCES, Verdict, _rel
from dlbench.generation.decoder import greedy, make_decoder
from dlbench.models import get_model
from dlbench.models.spec import ModelSpec
from dlbench.models.weights import Weights, init_weights

#: the gate's shape: small enough for the float64 reference to recompute every step
PROMPT, NEW_TOKENS, BATCH = 5, 8, 2


@dataclass
class GenerationVerdict(Verdict):
    model: str
    framework: str
    variant: str
    precision: str = "fp32"
    verdict: str = "fail"  # pass, fail, unsupported
    reason: str = ""
    #: largest relative difference of a step's cached logits from the framework's own recomputation
    cache_error: float | None = None
    #: the steps' relative logit error against the float64 reference, over every step and per step
    logit_error: float | None = None
    step_errors: list[float] = field(default_factory=list)
    #: steps where the decoder's token differs inside the reference's margin (not failures)
    ties: list[dict] = field(default_factory=list)
    #: steps where it differs outside that margin (failures)
    mismatches: list[dict] = field(default_factory=list)
    tokens_checked: int = 0
    #: check 6, the timed loop's own tokens: differences inside the reference's margin, and outside it
    stream_ties: list[dict] = field(default_factory=list)
    stream_mismatches: list[dict] = field(default_factory=list)
    tolerance: float = 0.0
    shape: dict = field(default_factory=dict)
    seconds: float = 0.0


def reference_greedy(spec: ModelSpec, weights: Weights, prompt: np.ndarray, new_tokens: int
                     ) -> tuple[np.ndarray, np.ndarray]:
    """The float64 reference's greedy tokens (batch, new) and each step's logits (new, batch, vocab)."""
    seq, logits = prompt, []
    for _ in range(new_tokens):
        out, _ = reference.forward(spec, weights, Batch(seq))
        logits.append(out[:, -1])
        seq = np.concatenate([seq, out[:, -1].argmax(axis=-1)[:, None]], axis=1)
    return seq[:, prompt.shape[1]:], np.stack(logits)


def compare_tokens(ref_logits: np.ndarray, ref_tokens: np.ndarray, tokens: np.ndarray, tol: float
                   ) -> tuple[list[dict], list[dict]]:
    """Steps where ``tokens`` (batch, new) differ from the reference's, split into ties (the reference's
    top-1 margin is within ``2 * tol * ||row||``) and mismatches (outside it)."""
    ties, mismatches = [], []
    for i, b in zip(*np.nonzero(tokens.T != ref_tokens.T), strict=True):
        row = np.asarray(ref_logits[i, b], np.float64)
        top2 = np.sort(row)[-2:]
        margin, allowed = float(top2[1] - top2[0]), float(2 * tol * np.linalg.norm(row))
        entry = {"step": int(i), "row": int(b), "token": int(tokens[b, i]), "reference": int(ref_tokens[b, i]),
                 "margin": margin, "allowed": allowed}
        (ties if margin <= allowed else mismatches).append(entry)
    return ties, mismatches


def until_first_difference(ref_tokens: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """``tokens`` (batch, new) up to each row's first difference from ``ref_tokens``, the reference's after
    it: a loop fed its own tokens decodes another sequence after a difference."""
    out = ref_tokens.copy()
    for b in range(tokens.shape[0]):
        differ = np.nonzero(tokens[b] != ref_tokens[b])[0]
        upto = int(differ[0]) + 1 if differ.size else tokens.shape[1]
        out[b, :upto] = tokens[b, :upto]
    return out


def verify_generation(framework: str, model_ref: str, variant: str = "", precision: str = "fp32", seed: int = 0,
                      device: str = "cpu", decoder_cls: type[Decoder] | None = None) -> GenerationVerdict:
    """Run the gate; never raises: a crash is a failed verdict with its reason. ``decoder_cls`` replaces
    the framework's decoder (tests plant bugs with it)."""
    started = time.perf_counter()
    res = GenerationVerdict(model_ref, framework, variant, precision,
                            shape={"prompt": PROMPT, "new_tokens": NEW_TOKENS, "batch": BATCH})
    tol = TOLERANCES[precision].forward
    res.tolerance = tol
    try:
        spec = get_model(model_ref, small=True, seq_len=PROMPT + NEW_TOKENS).without_dropout()
        check_decodable(spec)
        weights = init_weights(spec, seed, mode="verify")
        prompt = np.random.default_rng([seed, 33]).integers(0, spec.input.vocab, (BATCH, PROMPT)).astype(np.int64)
        ref_tokens, ref_logits = reference_greedy(spec, weights, prompt, NEW_TOKENS)

        backend = get_backend(framework)
        backend.set_precision(precision)
        if decoder_cls is None:
            decoder = make_decoder(framework, spec, weights, BATCH, PROMPT + NEW_TOKENS, precision, variant, device)
        else:
            decoder = decoder_cls(spec, weights, BATCH, PROMPT + NEW_TOKENS, precision, variant, device)
        res.variant = decoder.variant
        # a decoder serves several prompts in a row (the warm-up, then the timed generations): one goes
        # first here, so a cache that carries a prompt's keys into the next fails the checks below
        other = np.random.default_rng([seed, 34]).integers(0, spec.input.vocab, (BATCH, PROMPT)).astype(np.int64)
        greedy(decoder, other, NEW_TOKENS)
        logits, token = decoder.prefill(prompt)
        steps, tokens = [decoder.host(logits)], [decoder.host(token)]
        for i in range(1, NEW_TOKENS):  # teacher forcing: the reference's token, whatever the decoder chose
            logits, token = decoder.step(ref_tokens[:, i - 1].copy())
            steps.append(decoder.host(logits))
            tokens.append(decoder.host(token))
        got, got_tokens = np.stack(steps), np.stack(tokens, axis=1)
        streamed = until_first_difference(ref_tokens, greedy(decoder, prompt, NEW_TOKENS).tokens)
        res.stream_ties, res.stream_mismatches = compare_tokens(ref_logits, ref_tokens, streamed, tol)

        # the framework's own model recomputes the whole sequence
        model = backend.build(spec, weights, device, backend.variants[0])
        full_seq = np.concatenate([prompt, ref_tokens], axis=1)
        out = backend.forward(model, backend.place(Batch(full_seq), model))()
        backend.sync(out)
        full = np.asarray(backend.to_numpy(out), np.float64)[:, PROMPT - 1:PROMPT + NEW_TOKENS - 1]  # (B, new, V)
        res.cache_error = max(_rel(got[i], full[:, i]) for i in range(NEW_TOKENS))
        res.logit_error = _rel(got, ref_logits)
        res.step_errors = [_rel(got[i], ref_logits[i]) for i in range(NEW_TOKENS)]
        res.ties, res.mismatches = compare_tokens(ref_logits, ref_tokens, got_tokens, tol)
        res.tokens_checked = int(got_tokens.size)

        failures = []
        if not res.cache_error <= 2 * tol:
            failures.append(f"cached logits differ from the recomputed sequence's by {res.cache_error:.2e} "
                            f"(allowed {2 * tol:g})")
        if not res.logit_error <= tol:
            worst = max(res.step_errors)
            failures.append(f"the steps' logits differ from the float64 reference's by {res.logit_error:.2e} (allowed "
                            f"{tol:g}; worst step {res.step_errors.index(worst)}: {worst:.2e})")
        if res.mismatches:
            m = res.mismatches[0]
            failures.append(f"{len(res.mismatches)} token(s) differ from the reference's outside its margin (first: "
                            f"step {m['step']} row {m['row']}: {m['token']} vs {m['reference']}, margin "
                            f"{m['margin']:.3g} > {m['allowed']:.3g})")
        if res.stream_mismatches:
            m = res.stream_mismatches[0]
            failures.append(f"the timed generation loop's tokens differ from the reference's outside its margin "
                            f"(first: step {m['step']} row {m['row']}: {m['token']} vs {m['reference']})")
        res.verdict = "fail" if failures else "pass"
        notes = [f"{len(res.ties)} tie(s) inside the reference's margin"] if res.ties else []
        res.reason = "; ".join(failures + notes)
    except (UnsupportedError, NotDecodable) as exc:
        res.verdict, res.reason = "unsupported", str(exc)
    except Exception as exc:  # a crash is a failed gate, with where it happened
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        res.reason = f"{type(exc).__name__}: {exc} ({frame.filename.split('/')[-1]}:{frame.lineno})"
    res.seconds = time.perf_counter() - started
    if res.cache_error is not None and not math.isfinite(res.cache_error):
        res.verdict = "fail"
    return res
