"""The equivalence gate: a framework's model must compute the spec's function before its time counts.

For one (framework, variant, model), on the model's small input and with the spec's dropout off:

(a) parameters: the framework's own count equals the spec's, up to a documented difference
    (e.g. torch's second LSTM bias), which is reported beside it;
(b) forward: eval-mode output on a fixed seeded batch vs the NumPy float64 reference,
    ``||out - ref|| / ||ref|| <= 1e-4``;
(c) gradients: for 3 seeded random unit directions ``v`` over the trainable parameters, the
    framework's ``<grad, v>`` vs the central finite difference of the float64 reference loss,
    ``|a - b| / max(|b|, 0.01 ||grad||) <= 1e-3`` (the floor keeps a direction that happens to be
    nearly orthogonal to the gradient from turning float32 rounding into a failure); a direction
    whose finite difference itself depends on the step (the step moves a ReLU or max-pool input
    across its kink, so the difference is not a derivative) is replaced by the next seeded one,
    at most 3 times, and the replacements are counted (``kinked_directions``);
(d) loss: finite, and equal to the reference's training loss within 1e-4 (relative). At a reduced
    precision the softmax cross-entropy may also move as far as the forward tolerance lets the
    logits move (:func:`loss_allowed`): the loss check is never stricter than the forward check.

A backend that declares itself forward-only (``closures = ("forward",)``, an inference engine such
as ONNX Runtime, or H2O, which exposes no gradients) gets (a) and (b); it passes on those, with
``gradient_error`` None and a reason that says the gradient and loss checks did not apply. A backend
whose API returns class probabilities only (``output = "probabilities"``, H2O's predict) is compared
with the softmax of the reference's output.

(f) update: two training steps of SGD with momentum and two of AdamW, each step's parameters vs the
    float64 reference step applied to the framework's own (verified) gradient, within the gradient
    check's tolerance (:mod:`dlbench.gate.verify_update`, which says how the learning rates and the
    tolerance are chosen); a framework without AdamW records why and is held to SGD alone.

At a reduced precision (dlbench.core.precision) the same checks run against the same float64 reference,
with the tolerances of :data:`TOLERANCES` (each with why), and one more: (e) the types the framework
reports for the built model (``Backend.precision_info``) are the precision's, so a backend that
silently runs float32 when asked for bf16 fails with what it holds. int8 is inference only: (a), (b)
and (e); bf16 and fp16 hold their parameters in the low type and skip (f).

(f) attention masks (:mod:`dlbench.gate.mask_checks`): in a model with causal attention, changing the
tokens after the middle position moves no output at or before it; in a padded model with
attention, changing the padded tokens moves no output (at a valid position). Both are properties
of the framework's own forward, within the forward tolerance.

The weights are drawn in ``verify`` mode (random biases and BN statistics) so a dropped bias or
ignored running statistic cannot hide behind zeros and ones.

(g) quality (:mod:`dlbench.gate.quality`): for a trained next-token model (an ``hf:DIR`` checkpoint), the
    KL divergence, top-1 agreement and accuracy of the framework's next-token distributions against the
    float64 reference's on the shipped text's held-out split, within the precision's bound
    (``quality.BOUNDS``, each with its source).
"""

from __future__ import annotations

import math
import time
import traceback
from dataclasses import asdict, dataclass, field

import numpy as np

from dlbench.core.cell import DEFAULT_DEVICE, DEFAULT_SEED
from dlbench.core.precision import DEFAULT as DEFAULT_PRECISION
from dlbench.core.precision import expected_dtypes, get_precision
from dlbench.data.synthetic import Batch, make_batch
from dlbench.frameworks.base import OPTIMIZERS, Backend, UnsupportedError
from dlbench.gate import quality, reference
from dlbench.gate.chunked import contiguous, dot, elementwise, norm
from dlbench.gate.mask_checks import check_masks
from dlbench.gate.verify_update import check_update, not_applied, update_tolerance
from dlbench.models import ModelSpec, verify_spec
from dlbench.models.weights import Weights, directions, init_weights

FORWARD_TOL = 1e-4
GRADIENT_TOL = 1e-3
LOSS_TOL = 1e-4


@dataclass(frozen=True)
class Tolerance:
    forward: float
    gradient: float
    loss: float
    why: str
    #: the loss may move as far as a forward error of ``forward`` moves a softmax cross-entropy
    loss_follows_forward: bool = False


#: per precision: relative forward error, gradient error (as in (c)) and loss error allowed against the
#: float64 reference. A type's unit roundoff u (float32 6e-8, float16 4.9e-4, bfloat16 3.9e-3) bounds
#: one rounding; a network rounds at every layer and accumulates dot products of hundreds of terms, so
#: the bound is a small multiple of u times the depth, and what the zoo measures (docs/precision.md)
#: sits inside it. A framework that accumulates in the low type (not float32) exceeds it: a finding.
TOLERANCES: dict[str, Tolerance] = {
    "fp32": Tolerance(FORWARD_TOL, GRADIENT_TOL, LOSS_TOL, "float32 rounding only"),
    "tf32": Tolerance(1e-2, 3e-2, 1e-2, "TensorFloat-32 multiplies with 10 mantissa bits, float32 accumulation", True),
    "bf16": Tolerance(2e-2, 1e-1, 1e-2, "bfloat16 keeps 8 mantissa bits (u = 3.9e-3), parameters rounded too; "
                      "a gradient passes back through every rounded layer (ResNet-56: 56)", True),
    "amp-bf16": Tolerance(2e-2, 1e-1, 1e-2, "bfloat16 compute (u = 3.9e-3) from float32 master parameters; "
                          "a gradient passes back through every rounded layer", True),
    "fp16": Tolerance(3e-3, 5e-2, 2e-3, "float16 keeps 11 mantissa bits (u = 4.9e-4), parameters rounded too; "
                      "a gradient passes back through every rounded layer", True),
    "amp-fp16": Tolerance(3e-3, 5e-2, 2e-3, "float16 compute (u = 4.9e-4) from float32 master parameters; "
                          "a gradient passes back through every rounded layer", True),
    "int8": Tolerance(5e-2, math.inf, math.inf,
                      "int8 weights, one scale per tensor (256 levels) and activations quantized per call: "
                      "inference only, no gradient or loss"),
    # llama.cpp's block formats: a block's step is its largest |weight| / 127 (Q8_0) or / 8 (Q4_0); the
    # rounding alone, computed in float64 on the gate's random models, moves their logits by 0.010-0.011
    # (Q8_0) and 0.15-0.19 (Q4_0) (genesis-llama's and gpt2's small forms), and the 8-bit activations the
    # CPU kernels quantize to add about as much as Q8_0's weights
    "q8_0": Tolerance(5e-2, math.inf, math.inf,
                      "Q8_0: blocks of 32 int8 weights with a float16 scale (step max/127), activations quantized "
                      "to 8-bit blocks per call: inference only"),
    "q4_0": Tolerance(3e-1, math.inf, math.inf,
                      "Q4_0: blocks of 32 4-bit weights with a float16 scale (step max/8; its rounding alone moves "
                      "the gate's random logits by up to 0.19), activations quantized to 8-bit blocks: inference only"),
    "int4": Tolerance(3e-1, math.inf, math.inf,
                      "4-bit weights (16 levels per block of 32, one scale each: a weight moves by up to half a step, "
                      "1/14 of its block's largest) and int8 activations in the products: inference only, no "
                      "gradient or loss; measured 0.21 (onnxruntime-genai) and 0.27 (openvino-genai) on the gate's small "
                      "Llama, 0.15 on the shipped checkpoint; its real measure is quality on text (gate/quality.py)"),
}
DIRECTIONS = 3
FORWARD_ONLY = "forward only (inference engine): gradient and loss checks do not apply"
FD_STEP = 1e-6
#: directions drawn beyond DIRECTIONS to replace ones whose finite difference crosses a kink
KINK_REDRAWS = 3
VERIFY_BATCH = 8


class Verdict:
    """What a gate's result answers, whichever gate: whether it passed, and its stored form."""

    verdict: str

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class VerifyResult(Verdict):
    model: str
    framework: str
    variant: str
    verdict: str = "fail"  # pass, fail, unsupported
    reason: str = ""
    spec_params: int = 0
    framework_params: int | None = None
    params_extra: int = 0
    params_extra_reason: str = ""
    forward_error: float | None = None
    gradient_error: float | None = None
    precision: str = DEFAULT_PRECISION
    #: the types the framework reported for the built model (``Backend.precision_info``)
    dtypes: dict = field(default_factory=dict)
    #: gradient-check directions replaced because the reference's finite difference crossed a kink
    kinked_directions: int = 0
    loss: float | None = None
    reference_loss: float | None = None
    #: the worst step's update error of check (f), and per optimiser its errors and learning rate (or
    #: why the framework has no such optimiser, or why the check did not apply at this precision)
    update_error: float | None = None
    update: dict = field(default_factory=dict)
    seconds: float = 0.0
    checks: dict = field(default_factory=dict)
    #: facts of the framework's build of this model (e.g. the ONNX exporter and opset), if it records any
    build: dict = field(default_factory=dict)
    #: (f) the relative change of the outputs a mask must hold still, by check (dlbench.gate.mask_checks)
    mask_changes: dict = field(default_factory=dict)
    #: (g) a trained next-token model's KL divergence, top-1 agreement and perplexity on the held-out text
    #: against the float64 reference (dlbench.gate.quality; empty where it does not apply)
    quality: dict = field(default_factory=dict)


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a64.shape != b64.shape:
        raise ValueError(f"output shape {a64.shape} differs from the reference's {b64.shape}")
    return float(np.linalg.norm(a64 - b64) / max(np.linalg.norm(b64), 1e-30))


def _shift(weights: Weights, v: dict[str, np.ndarray], eps: float) -> Weights:
    params = {k: elementwise(lambda a, d: (a + eps * d,), a, v.get(k))[0] for k, a in weights.params.items()}
    return Weights(params, weights.state)


def _central_difference(spec: ModelSpec, weights: Weights, v: dict[str, np.ndarray], batch: Batch,
                        step: float) -> float:
    """The float64 reference loss's derivative along ``v`` by a central difference."""
    plus = reference.loss(spec, _shift(weights, v, step), batch)
    minus = reference.loss(spec, _shift(weights, v, -step), batch)
    return (plus - minus) / (2 * step)


def verify_model(backend: Backend, model_ref: str, variant: str | None = None, device: str = DEFAULT_DEVICE,
                 seed: int = DEFAULT_SEED, precision: str = DEFAULT_PRECISION,
                 optimizers: tuple[str, ...] = OPTIMIZERS) -> VerifyResult:
    """Run checks (a)-(f), (f) for ``optimizers`` (a run checks its own; ``dlbench verify`` those asked,
    by default every one); never raises: a crash is a failed verdict with its reason."""
    variant = variant or backend.variants[0]
    started = time.perf_counter()
    spec = verify_spec(model_ref, backend.gate_form).without_dropout()
    res = VerifyResult(model=model_ref, framework=backend.name, variant=variant, spec_params=spec.param_count,
                       precision=precision)
    tol = TOLERANCES[precision]
    failures: list[str] = []
    try:
        backend.set_precision(precision)
        weights = init_weights(spec, seed, mode="verify")
        batch = make_batch(spec, VERIFY_BATCH, seed)
        model = backend.build(spec, weights, device, variant)
        res.build = backend.build_info(model)
        placed = backend.place(batch, model)

        # (e) the precision the framework holds is the one asked for
        res.dtypes = backend.precision_info(model)
        expected = expected_dtypes(precision)
        if spec.flops_per_sample == 0:  # a part of embeddings only (models.split): no computing layer to observe
            expected["compute_dtype"] = "none"
        res.checks["precision"] = res.dtypes == expected
        if not res.checks["precision"]:
            failures.append(f"asked {precision}: " + ", ".join(
                f"{k} {res.dtypes.get(k)} (expected {v})" for k, v in expected.items() if res.dtypes.get(k) != v))

        # (a) parameter count
        res.framework_params = backend.param_count(model)
        res.params_extra, res.params_extra_reason = backend.param_count_extra(spec)
        ok_params = res.framework_params == spec.param_count + res.params_extra
        res.checks["params"] = ok_params
        if not ok_params:
            failures.append(f"parameter count {res.framework_params} != spec {spec.param_count}"
                            + (f" + {res.params_extra} documented" if res.params_extra else ""))

        # (b) forward
        ref_out, _ = reference.forward(spec, weights, batch, train=False)
        if backend.output == "probabilities":  # an API that returns only softmax(logits)
            shifted = np.exp(ref_out - ref_out.max(axis=-1, keepdims=True))
            ref_out = shifted / shifted.sum(axis=-1, keepdims=True)
        fwd = backend.forward(model, placed)
        out = fwd()
        backend.sync(out)
        res.forward_error = _rel(backend.to_numpy(out), ref_out)
        res.checks["forward"] = res.forward_error <= tol.forward
        if not res.checks["forward"]:
            failures.append(f"forward error {res.forward_error:.2e} > {tol.forward:g}")

        # (f) attention masks: a later token and padded tokens change nothing they must not
        def forward_on(other: Batch) -> np.ndarray:
            result = backend.forward(model, backend.place(other, model))()
            backend.sync(result)
            return backend.to_numpy(result)
        passed, res.mask_changes, mask_failures = check_masks(spec, batch, backend.to_numpy(out), forward_on,
                                                              tol.forward)
        res.checks.update(passed)
        failures += mask_failures

        # (g) quality on the held-out text: a trained next-token model's distribution against the reference's
        if quality.applies(spec) and backend.output == "logits":
            res.quality = quality.measure(spec, weights, forward_on, VERIFY_BATCH)
            quality_failures = quality.failures(precision, res.quality)
            res.checks["quality"] = not quality_failures
            failures += quality_failures

        # (c) gradients and (d) loss, unless the backend is an inference engine or the precision is
        inference_only = get_precision(precision).inference_only
        forward_only = "gradient" not in backend.closures or inference_only
        if not forward_only:
            _check_gradients(backend, model, placed, spec, weights, batch, seed, res, failures, tol)
            update_tol = update_tolerance(precision, tol.gradient)
            if update_tol is None:
                res.update = {"not_applied": not_applied(precision)}
            else:  # last: the steps move the model's parameters
                res.update_error, res.update, update_failures = check_update(backend, model, placed, update_tol,
                                                                             optimizers)
                res.checks["update"] = not update_failures
                failures += update_failures
        res.verdict = "fail" if failures else "pass"
        only = (f"{precision} is inference only: gradient and loss checks do not apply" if inference_only
                else backend.forward_only_reason or FORWARD_ONLY)
        res.reason = "; ".join([*failures, only] if forward_only else failures)
    except UnsupportedError as exc:
        res.verdict, res.reason = "unsupported", str(exc)
    except Exception as exc:  # a crash is a failed check, with where it happened
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        res.verdict = "fail"
        res.reason = "; ".join([*failures, f"{type(exc).__name__}: {exc} ({frame.filename.split('/')[-1]}:{frame.lineno})"])
    res.seconds = time.perf_counter() - started
    return res


def loss_allowed(spec: ModelSpec, tol: Tolerance, reference_out: np.ndarray, reference_loss: float) -> float:
    """The absolute loss error the gate allows: ``tol.loss`` relative to the reference loss, and, where
    ``tol.loss_follows_forward``, at least what a forward error of ``tol.forward`` can do to a softmax
    cross-entropy. Its gradient in the logits, softmax minus one-hot, has an L1 norm of at most 2, so a
    row's loss moves by at most ``2 ||dz||`` and the mean over N rows by ``2 ||dZ|| / sqrt(N)``; with
    ``||dZ|| <= tol.forward ||Z||`` that is ``2 tol.forward ||Z|| / sqrt(N)`` (Z: the reference's
    training-mode logits). A model with large logits (ResNet-50's 1000 classes in verify mode) turns a
    bfloat16 forward error well inside the forward tolerance into a loss error past a fixed relative
    bound, in every framework alike; the mean squared error keeps the relative bound."""
    allowed = tol.loss * max(abs(reference_loss), 1e-12)
    if tol.loss_follows_forward and spec.loss.kind == "softmax_ce":
        logits = reference_out.reshape(-1, reference_out.shape[-1])
        allowed = max(allowed, 2 * tol.forward * float(np.linalg.norm(logits)) / math.sqrt(len(logits)))
    return allowed


def _check_gradients(backend: Backend, model, placed, spec: ModelSpec, weights: Weights, batch: Batch, seed: int,
                     res: VerifyResult, failures: list[str], tol: Tolerance) -> None:
    """Checks (c) gradients and (d) loss, recorded on ``res``; each failed check is added to ``failures``."""
    loss, grads = backend.loss_and_grads(model, placed)
    grads = contiguous(grads)
    res.loss = loss
    inf = sorted(k for k, g in grads.items() if not np.isfinite(g).all())
    if inf:  # the error floor below is relative to the gradient's norm: an infinite one would excuse anything
        raise ValueError(f"non-finite gradient for {', '.join(inf[:3])}{' ...' if len(inf) > 3 else ''}")
    ref_out, marks = reference.forward(spec, weights, batch, train=True)
    res.reference_loss = reference.loss_value(spec, ref_out, batch, marks)
    allowed = loss_allowed(spec, tol, ref_out, res.reference_loss)
    res.checks["loss"] = math.isfinite(loss) and abs(loss - res.reference_loss) <= allowed
    if not res.checks["loss"]:
        failures.append(f"loss {loss:.6g} vs reference {res.reference_loss:.6g} (allowed +-{allowed:.2g})")
    gnorm = norm(grads.values())
    worst, checked, kinks = 0.0, 0, 0
    for v in directions(spec, DIRECTIONS + KINK_REDRAWS, seed=seed + 1234):
        missing = set(v) - set(grads)
        if missing:
            raise ValueError(f"no gradient for {sorted(missing)[:3]}")
        analytic = sum(dot(grads[k], v[k]) for k in v)
        numeric = _central_difference(spec, weights, v, batch, FD_STEP)
        floor = max(0.01 * gnorm, 1e-30)
        err = abs(analytic - numeric) / max(abs(numeric), floor)
        if err > tol.gradient:
            # the same difference at a 10x coarser and a 10x finer step: where the loss is smooth at the
            # step's scale all three agree far below the tolerance; where they do not (a ReLU input
            # crosses zero within the step), this direction measures nothing about the framework's gradient
            spread = [_central_difference(spec, weights, v, batch, FD_STEP * f) for f in (10.0, 0.1)]
            if max(abs(d - numeric) for d in spread) / max(abs(numeric), floor) > tol.gradient / 2:
                kinks += 1
                continue
        worst = max(worst, err)
        checked += 1
        if checked == DIRECTIONS:
            break
    res.kinked_directions = kinks
    if checked < DIRECTIONS:
        raise ValueError(f"the reference loss is not smooth within the finite-difference step along {kinks} "
                         f"of {DIRECTIONS + KINK_REDRAWS} directions: no gradient check possible")
    res.gradient_error = worst
    res.checks["gradient"] = worst <= tol.gradient
    if not res.checks["gradient"]:
        failures.append(f"gradient error {worst:.2e} > {tol.gradient:g}")
