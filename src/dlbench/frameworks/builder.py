"""What every backend's ``Builder`` shares: the walk over a spec's layers and the dispatch of each
layer to the backend's ``make_<kind>`` method, with the error that names a layer the backend lacks.

A backend's builder subclasses :class:`LayerBuilder` and writes only its layers: one
``make_<kind>(layer, shape)`` per layer kind of :mod:`dlbench.models.layers` (``kind`` lower-cased;
``shape`` is the layer's input shape), returning the framework object (or a list of them) that
computes it, and recording where each canonical parameter lives. Its rules are collected once, when
the class is made (:attr:`LayerBuilder.rules`), so what a backend can build is known without a spec
(:meth:`LayerBuilder.kinds`). Tests subclass a backend's builder to plant bugs (a transposed
kernel, a dropped bias): an overriding ``make_<kind>`` replaces the rule.

The standard library and :mod:`dlbench.frameworks.base` only: the environment frameworks (mxnet,
chainer, paddle) build through it in their own interpreters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from dlbench.frameworks.base import UnsupportedError

#: the prefix of a builder's rules: ``make_conv2d`` builds ``Conv2d`` layers
RULE = "make_"


class LayerBuilder:
    """Walks layers in order, each made by the builder's rule for its kind."""

    #: who lacks a rule, in the error: "torch backend", "the Keras model builder"
    builds_for: ClassVar[str] = "this backend"
    #: layer kind (lower case) -> the rule that makes it, collected from the class's ``make_<kind>``
    rules: ClassVar[dict[str, Callable[..., Any]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.rules = {name.removeprefix(RULE): getattr(cls, name) for name in dir(cls) if name.startswith(RULE)}

    @classmethod
    def kinds(cls) -> frozenset[str]:
        """The layer kinds (lower case) this builder makes."""
        return frozenset(cls.rules)

    def sequence(self, layers: tuple[Any, ...], shape: tuple[int, ...]) -> tuple[list[Any], tuple[int, ...]]:
        """Each layer made in turn from the output shape of the one before: the made objects (a rule
        that returns a list adds each) and the shape the last one outputs."""
        made: list[Any] = []
        for layer in layers:
            out = self.layer(layer, shape)
            made += out if isinstance(out, list) else [out]
            self.after(layer)
            shape = layer.out_shape(shape)
        return made, shape

    def layer(self, layer: Any, shape: tuple[int, ...]) -> Any:
        """One layer, by the builder's rule for its kind; :class:`UnsupportedError` when it has none."""
        rule = self.rules.get(layer.kind.lower())
        if rule is None:
            raise UnsupportedError(f"{self.builds_for} has no rule for layer {layer.kind}")
        return rule(self, layer, shape)

    def after(self, layer: Any) -> None:
        """What the builder notes once a layer is made (default: nothing; Keras and Flax forget a
        pending Flatten at a layer that does not carry it forward)."""
        return None
