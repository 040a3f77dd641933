"""The gate's update check (f): a framework's training step applies the optimiser it claims.

Checks (c) and (d) prove the gradient; they say nothing of what ``train_step`` does with it. Here,
for each optimiser (:data:`GATE_OPTIMIZERS`: SGD with momentum and AdamW), on the gate's model and
batch, a fresh training closure takes :data:`STEPS` steps, and after each the framework's parameters
``a`` are compared with the float64 reference step (:mod:`dlbench.gate.reference_optim`) applied to the
parameters ``p`` before it and the gradient the framework computes there (``loss_and_grads``, which
check (c) verified against the float64 loss), carrying the reference's optimiser state from step to
step:

    ``||a - e|| / ||e - p||`` over all parameters (frozen ones must not move), ``e`` the reference's.

Two steps, because the first step of SGD is ``lr * g`` whatever its momentum, and Adam's first step
is ``lr * sign(g)`` whatever its betas: only the second shows a wrong momentum or moment.

The hyper-parameters make every term of the update visible: momentum 0.9; AdamW betas (0.9, 0.999),
eps 1e-6 (so where epsilon goes, :attr:`Backend.adamw_eps`, shows) and weight decay 0.5 (decoupled
decay moves a parameter of 0.05 by 2.5% of its Adam step). The learning rates are set from the model so the
first step moves the parameters by 1% of their norm (SGD ``lr = 0.01 ||p|| / ||g||``; AdamW ``lr = 0.01
||p|| / sqrt(n)``, its first step moving each of n entries by about ``lr``): float32 keeps a parameter
to 6e-8 of itself, which is then 6e-6 of a step, far below the tolerance, for any model's scale.

Tolerance: a step is a function of the gradient (linear for SGD, normalised entry by entry for
AdamW), so the relative error of a step is at most about that of the gradient it is given; the
framework's step computes its gradient again (a fused or jitted step may add in another order), so
the check allows what check (c) allows the gradient at the precision (:data:`UPDATE_TOLERANCE`). A
precision whose parameters are held in a low type (bf16, fp16: a step of 1% is a few of bfloat16's
256 levels) or that does not train (int8) gets no update check, and the result says so.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from dlbench.core.precision import get_precision
from dlbench.frameworks.base import OPTIMIZERS, Backend, OptimizerSpec, UnsupportedError
from dlbench.gate import reference_optim
from dlbench.gate.chunked import contiguous, norm, squared_distance

STEPS = 2
#: the share of the parameters' norm the first step moves them by
STEP_SHARE = 0.01
GATE_OPTIMIZERS = (OptimizerSpec(name="sgd", momentum=0.9),
                   OptimizerSpec(name="adamw", betas=(0.9, 0.999), eps=1e-6, weight_decay=0.5))


def update_tolerance(precision: str, gradient_tol: float) -> float | None:
    """The update check's tolerance at ``precision``: the gradient check's where the parameters are
    float32 (fp32, tf32, the amp-* master parameters); None where it does not apply."""
    p = get_precision(precision)
    return None if p.inference_only or p.param_dtype != "float32" else gradient_tol


def not_applied(precision: str) -> str:
    p = get_precision(precision)
    return (f"{precision} holds parameters in {p.param_dtype}: no update check (a 1% step is a few of its "
            "rounding levels)")


def gate_optimizer(opt: OptimizerSpec, params: dict[str, np.ndarray], grads: dict[str, np.ndarray]) -> OptimizerSpec:
    """``opt`` with the learning rate that moves the trainable parameters by STEP_SHARE of their norm."""
    pnorm = norm(params[k] for k in grads)
    if opt.name == "sgd":
        lr = STEP_SHARE * pnorm / max(norm(grads.values()), 1e-30)
    else:
        lr = STEP_SHARE * pnorm / math.sqrt(sum(g.size for g in grads.values()))
    return replace(opt, lr=float(lr))


def step_error(after: dict[str, np.ndarray], expected: dict[str, np.ndarray],
               before: dict[str, np.ndarray]) -> tuple[float, str]:
    """``||after - expected|| / ||expected - before||`` over all parameters, and the parameter holding
    most of the difference."""
    missing = set(expected) - set(after)
    if missing:
        raise ValueError(f"the framework's parameters lack {sorted(missing)[:3]}")
    diff = {k: squared_distance(after[k], expected[k]) for k in expected}
    moved = sum(squared_distance(expected[k], before[k]) for k in expected)
    total = sum(diff.values())
    if not math.isfinite(total):
        return math.inf, next(k for k, d in diff.items() if not math.isfinite(d))
    return math.sqrt(total) / max(math.sqrt(moved), 1e-30), max(diff, key=diff.__getitem__)


def check_update(backend: Backend, model, placed, tol: float,
                 optimizers: tuple[str, ...] = OPTIMIZERS) -> tuple[float | None, dict, list[str]]:
    """Run the check on a built model (its parameters move: run it last). Returns the worst error (None:
    the framework has none of the optimisers), the per-optimiser record (``errors`` per step and the
    learning rate, or ``unsupported`` with the framework's reason) and the failures, each a sentence."""
    record: dict = {}
    failures: list[str] = []
    worst: float | None = None
    params = backend.get_params(model)
    grads = contiguous(backend.loss_and_grads(model, placed)[1])
    for base in (o for o in GATE_OPTIMIZERS if o.name in optimizers):
        opt = gate_optimizer(base, params, grads)
        try:
            run = backend.train_step(model, placed, opt)
        except UnsupportedError as exc:
            record[opt.name] = {"unsupported": str(exc)}
            continue
        state = reference_optim.State()
        errors: list[float] = []
        for t in range(1, STEPS + 1):
            backend.sync(run())
            after = backend.get_params(model)
            expected, state = reference_optim.step(params, grads, state, opt, backend.adamw_eps)
            err, where = step_error(after, expected, params)
            errors.append(err)
            if not err <= tol:
                failures.append(f"{opt.name} step {t}: update error {err:.2e} > {tol:g} (most in {where})")
            params = after
            grads = contiguous(backend.loss_and_grads(model, placed)[1])
        record[opt.name] = {"errors": errors, "lr": opt.lr}
        worst = max(worst or 0.0, *errors)
    return worst, record, failures
