"""Canonical initial weights: the single source of every framework's starting point.

Each parameter is drawn from its own generator seeded by ``(seed, crc32(name))``, so a
parameter gets the same numbers whichever spec contains it (the SAE phases share encoders),
and the same spec + seed gives the same numbers in every framework. Layouts are the canonical
ones documented in :mod:`dlbench.models.layers`.

Two modes:

* ``train``: the usual initialisation (He or Glorot as the layer says, zero biases, BN gamma 1
  and beta 0, running mean 0 and variance 1, LSTM forget-gate bias 1; attention and SwiGLU
  projections Glorot, layer/RMS norm weights 1, embeddings, positions and the class token
  uniform in +-0.1).
* ``verify``: the same weights, but biases, BN and layer-norm parameters and BN running statistics drawn at
  random, so that a backend that drops a bias or ignores a running statistic cannot pass the
  equivalence gate by luck of zeros and ones.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from dlbench.core.cell import DEFAULT_SEED
from dlbench.models import hf_checkpoint
from dlbench.models.layers import (
    LSTM,
    Attention,
    BatchNorm,
    Conv2d,
    Dense,
    Embedding,
    LayerNorm,
    PatchEmbed,
    PositionEmbedding,
    RMSNorm,
    SegmentEmbedding,
    SwiGLU,
    TiedDense,
    walk,
)
from dlbench.models.spec import ModelSpec


@dataclass
class Weights:
    """Parameters (trained) and state (BN running statistics), float32, canonical layout."""

    params: dict[str, np.ndarray]
    state: dict[str, np.ndarray] = field(default_factory=dict)

    def copy(self) -> Weights:
        return Weights({k: v.copy() for k, v in self.params.items()}, {k: v.copy() for k, v in self.state.items()})

    def astype(self, dtype: type) -> Weights:
        return Weights({k: v.astype(dtype) for k, v in self.params.items()},
                       {k: v.astype(dtype) for k, v in self.state.items()})


def _rng(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def _fans(shape: tuple[int, ...]) -> tuple[int, int]:
    if len(shape) == 4:  # OIHW
        receptive = shape[2] * shape[3]
        return shape[1] * receptive, shape[0] * receptive
    return shape[0], shape[1]  # (in, out)


def _draw(rng: np.random.Generator, shape: tuple[int, ...], init: str) -> np.ndarray:
    fan_in, fan_out = _fans(shape)
    if init == "he":
        return rng.normal(0.0, math.sqrt(2.0 / fan_in), shape)
    limit = math.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, shape)


def bn_state_names(spec: ModelSpec) -> list[str]:
    return [f"{layer.name}.{s}" for layer in walk(spec.layers) if isinstance(layer, BatchNorm)
            for s in ("running_mean", "running_var")]


def init_weights(spec: ModelSpec, seed: int = DEFAULT_SEED, mode: Literal["train", "verify"] = "train") -> Weights:
    """Initial weights of ``spec`` in canonical layout, float32. A Hugging Face folder's spec (``hf:DIR``)
    starts from the folder's weights in either mode: they are the model (:mod:`dlbench.models.hf_checkpoint`)."""
    if "checkpoint" in spec.options:
        return Weights(hf_checkpoint.load_params(spec))
    shapes = spec.param_shapes()
    kinds = {}
    for layer in walk(spec.layers):
        if hasattr(layer, "name"):
            kinds[layer.name] = layer
    params: dict[str, np.ndarray] = {}
    for name, shape in shapes.items():
        owner, _, leaf = name.rpartition(".")
        layer = kinds[owner]
        rng = _rng(seed, name)
        random_small = mode == "verify"
        if isinstance(layer, Conv2d | Dense) and leaf == "weight":
            value = _draw(rng, shape, layer.init)
        elif isinstance(layer, Embedding):
            value = rng.uniform(-0.1, 0.1, shape)
        elif isinstance(layer, LSTM) and leaf in ("w_x", "w_h"):
            bound = 1.0 / math.sqrt(layer.units)
            value = rng.uniform(-bound, bound, shape)
        elif isinstance(layer, LSTM):  # bias, gate order i, f, g, o
            value = rng.normal(0.0, 0.1, shape) if random_small else np.zeros(shape)
            value[layer.units: 2 * layer.units] += 1.0
        elif isinstance(layer, BatchNorm) and leaf == "gamma":
            value = rng.uniform(0.5, 1.5, shape) if random_small else np.ones(shape)
        elif isinstance(layer, Attention | SwiGLU) and leaf.startswith("w"):
            value = _draw(rng, shape, "glorot")
        elif isinstance(layer, PatchEmbed) and leaf == "weight":
            value = _draw(rng, shape, "glorot")
        elif isinstance(layer, PositionEmbedding | SegmentEmbedding) or (isinstance(layer, PatchEmbed)
                                                                         and leaf == "cls"):
            value = rng.uniform(-0.1, 0.1, shape)
        elif isinstance(layer, LayerNorm | RMSNorm) and leaf == "weight":
            value = rng.uniform(0.5, 1.5, shape) if random_small else np.ones(shape)
        elif isinstance(layer, Conv2d | Dense | TiedDense | BatchNorm | Attention | LayerNorm | PatchEmbed):
            # biases and beta
            value = rng.normal(0.0, 0.1, shape) if random_small else np.zeros(shape)
        else:  # pragma: no cover - every parameterised layer is listed above
            raise TypeError(f"no initialiser for {name}")
        params[name] = value.astype(np.float32)
    state: dict[str, np.ndarray] = {}
    channels = _bn_channels(spec)
    for name in bn_state_names(spec):
        owner, _, leaf = name.rpartition(".")
        c = channels[owner]
        if mode == "verify":
            rng = _rng(seed, name)
            value = rng.normal(0.0, 0.2, c) if leaf == "running_mean" else rng.uniform(0.5, 2.0, c)
        else:
            value = np.zeros(c) if leaf == "running_mean" else np.ones(c)
        state[name] = value.astype(np.float32)
    return Weights(params, state)


def _bn_channels(spec: ModelSpec) -> dict[str, int]:
    return {name.rpartition(".")[0]: shape[0] for name, shape in spec.param_shapes().items()
            if name.endswith(".gamma")}


def directions(spec: ModelSpec, count: int, seed: int = 1234) -> Iterator[dict[str, np.ndarray]]:
    """Seeded random unit directions over the trainable parameters (for the gradient check), drawn one at a
    time as the caller takes them: the check usually needs fewer than ``count`` (the spares replace
    directions along which the loss has a kink), and for AlexNet one direction is 61 million normals."""
    names = spec.trainable_names()
    shapes = spec.param_shapes()
    for i in range(count):
        rng = np.random.default_rng([seed, i])
        v = {n: rng.standard_normal(shapes[n]) for n in names}
        norm = math.sqrt(sum(float(np.vdot(a, a)) for a in v.values()))
        for a in v.values():
            a /= norm
        yield v

