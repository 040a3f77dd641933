"""Plain NumPy float64 optimiser steps: the oracle of the gate's update check.

Written to be read, not to be fast, as :mod:`dlbench.gate.reference` is for the forward pass. A step
takes the parameters before it, their gradients (only trainable parameters have one: the others are
returned unchanged) and the optimiser's state, and returns the parameters after it and the new state.

* ``sgd``: SGD with momentum in PyTorch's form, ``buf = momentum * buf + g`` (the first step's buffer
  is ``g``), ``p -= lr * buf``. MXNet's and Chainer's ``v = m v - lr g; p += v`` is the same update
  for a constant learning rate.
* ``adamw``: Adam (Kingma & Ba, Algorithm 1) with decoupled weight decay (Loshchilov & Hutter):
  ``m = b1 m + (1 - b1) g``, ``v = b2 v + (1 - b2) g^2``, bias corrections ``c1 = 1 - b1^t`` and
  ``c2 = 1 - b2^t`` at step ``t`` (from 1), and ``p -= lr * wd * p + lr * step`` with ``p`` the
  parameter before the step (``torch.optim.AdamW``'s ``p *= 1 - lr wd`` before the Adam step is the
  same). Where epsilon goes differs between frameworks, and the gate holds each to its own form:

  - ``corrected``: ``step = (m / c1) / (sqrt(v / c2) + eps)`` (PyTorch, Optax, Paddle);
  - ``hat``: ``step = (sqrt(c2) / c1) * m / (sqrt(v) + eps)``, Kingma & Ba's "efficient" form in their
    section 2, whose epsilon is ``eps * sqrt(c2)`` of the first form's (Keras, TensorFlow's
    ``ApplyAdam``, MXNet, Chainer). With eps = 1e-8 the two differ only for gradients near 1e-7.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from dlbench.frameworks.base import OptimizerSpec
from dlbench.gate.chunked import elementwise

EPS_FORMS = ("corrected", "hat")


@dataclass
class State:
    """The optimiser's state after ``t`` steps: SGD's momentum buffers, or Adam's moments."""

    t: int = 0
    buf: dict[str, np.ndarray] = field(default_factory=dict)
    m: dict[str, np.ndarray] = field(default_factory=dict)
    v: dict[str, np.ndarray] = field(default_factory=dict)


def sgd_momentum(params: dict[str, np.ndarray], grads: dict[str, np.ndarray], state: State,
                 opt: OptimizerSpec) -> tuple[dict[str, np.ndarray], State]:
    out = {k: np.asarray(p, np.float64) for k, p in params.items() if k not in grads}
    new = State(state.t + 1)

    def entry(p, g, buf):
        buf = g if state.t == 0 else opt.momentum * buf + g
        return p - opt.lr * buf, buf

    for k, g in grads.items():
        out[k], new.buf[k] = elementwise(entry, params[k], g, state.buf.get(k))
    return out, new


def adamw(params: dict[str, np.ndarray], grads: dict[str, np.ndarray], state: State, opt: OptimizerSpec,
          eps_form: str = "corrected") -> tuple[dict[str, np.ndarray], State]:
    if eps_form not in EPS_FORMS:
        raise ValueError(f"unknown epsilon form {eps_form!r}; known: {', '.join(EPS_FORMS)}")
    b1, b2 = opt.betas
    out = {k: np.asarray(p, np.float64) for k, p in params.items() if k not in grads}
    new = State(state.t + 1)
    c1, c2 = 1.0 - b1 ** new.t, 1.0 - b2 ** new.t

    def entry(p, g, m0, v0):  # m0, v0: 0.0 before the first step
        m = b1 * m0 + (1.0 - b1) * g
        v = b2 * v0 + (1.0 - b2) * g * g
        if eps_form == "corrected":
            step = (m / c1) / (np.sqrt(v / c2) + opt.eps)
        else:
            step = math.sqrt(c2) / c1 * m / (np.sqrt(v) + opt.eps)
        return p - opt.lr * opt.weight_decay * p - opt.lr * step, m, v

    for k, g in grads.items():
        out[k], new.m[k], new.v[k] = elementwise(entry, params[k], g, state.m.get(k), state.v.get(k))
    return out, new


def step(params: dict[str, np.ndarray], grads: dict[str, np.ndarray], state: State, opt: OptimizerSpec,
         eps_form: str = "corrected") -> tuple[dict[str, np.ndarray], State]:
    """One step of ``opt`` (``eps_form``: where AdamW's epsilon goes, ignored by SGD)."""
    if opt.name == "sgd":
        return sgd_momentum(params, grads, state, opt)
    if opt.name == "adamw":
        return adamw(params, grads, state, opt, eps_form)
    raise ValueError(f"reference: no optimiser {opt.name!r}")
