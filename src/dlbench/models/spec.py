"""A model as data: layers, input, loss, and the numbers that follow from them analytically."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal

from dlbench.models.layers import (
    Dense,
    Dropout,
    Layer,
    Shape,
    TiedDense,
    sequence_flops,
    sequence_params,
    sequence_shape,
    walk,
)


@dataclass(frozen=True)
class InputSpec:
    """What one sample looks like and what its label is.

    ``kind``: ``image`` (float32 C,H,W), ``vector`` (float32 D), ``tokens`` (int64 T), ``sequence``
    (float32 T,D: a transformer's activation, the input of one of its parts, :mod:`dlbench.models.split`).
    ``labels``: ``class`` (one int in [0, classes)), ``sequence`` (one int per step), ``none``.
    ``variable_length``: token sequences padded to the longest in the batch, with a mask.
    """

    kind: Literal["image", "vector", "tokens", "sequence"]
    shape: Shape
    labels: Literal["class", "sequence", "none"] = "class"
    classes: int = 0
    vocab: int = 0
    variable_length: bool = False
    min_length: int = 1

    @property
    def dtype(self) -> str:
        return "int64" if self.kind == "tokens" else "float32"


@dataclass(frozen=True)
class LossSpec:
    """``softmax_ce`` against the labels (mean over samples, and steps for sequence labels) or
    ``mse`` (mean over all elements) against the activation named by a :class:`Mark` layer."""

    kind: Literal["softmax_ce", "mse"]
    target: str = "labels"


@dataclass(frozen=True)
class ModelSpec:
    name: str
    layers: tuple[Layer, ...]
    input: InputSpec
    loss: LossSpec
    source: str = ""
    description: str = ""
    default_batch: int = 64
    learning_rate: float = 0.01
    options: dict = field(default_factory=dict, compare=False)

    # --- analytic facts -------------------------------------------------------
    @property
    def output_shape(self) -> Shape:
        return sequence_shape(self.layers, self.input.shape)

    def param_shapes(self) -> dict[str, Shape]:
        """Every parameter (frozen ones too) in canonical layout, in layer order."""
        return sequence_params(self.layers, self.input.shape)

    @property
    def param_count(self) -> int:
        return sum(math.prod(s) for s in self.param_shapes().values())

    def trainable_names(self) -> list[str]:
        """Parameters that receive gradients: all but those of frozen layers (SAE pre-training)."""
        frozen = {layer.name for layer in walk(self.layers)
                  if isinstance(layer, Dense | TiedDense) and not layer.trainable}
        return [n for n in self.param_shapes() if n.rsplit(".", 1)[0] not in frozen]

    @property
    def flops_per_sample(self) -> int:
        """Forward FLOPs of one sample: convolutions, dense, LSTM matmuls, attention's projections and
        its score and value products (a multiply-add is 2). Element-wise ops, softmax, pooling and
        normalisation are not counted."""
        return sequence_flops(self.layers, self.input.shape)

    @property
    def has_dropout(self) -> bool:
        return any(isinstance(layer, Dropout) and layer.rate > 0 for layer in walk(self.layers))

    def without_dropout(self) -> ModelSpec:
        """The same network with every dropout rate 0: what the equivalence gate compares."""
        return replace(self, layers=_strip_dropout(self.layers))


def _strip_dropout(layers: tuple[Layer, ...]) -> tuple[Layer, ...]:
    from dlbench.models.layers import Residual, SkipBlock

    out = []
    for layer in layers:
        if isinstance(layer, Dropout):
            out.append(Dropout(0.0))
        elif isinstance(layer, Residual):
            out.append(replace(layer, body=_strip_dropout(layer.body), shortcut=_strip_dropout(layer.shortcut)))
        elif isinstance(layer, SkipBlock):
            out.append(replace(layer, body=_strip_dropout(layer.body), post=_strip_dropout(layer.post)))
        else:
            out.append(layer)
    return tuple(out)

