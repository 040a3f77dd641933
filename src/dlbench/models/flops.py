"""FLOPs of what a timed closure computes, from the spec: the forward, and for a gradient the weight
gradients and the input gradients it really needs.

The usual rule of thumb (a training step is 3x the forward) assumes every layer computes all three.
The first layer with parameters does not: its input is the data, which needs no gradient, so its
backward is the weight gradient alone. For a small model or one part of it that matters: fcn-r's
first dense layer, timed alone (the ``layers`` scenario), computes 2x its forward, not 3x, and a rate
counted at 3x read 1.5x too high (175 GFLOP/s: the machine's measured float32 peak).

Per layer with FLOPs (a convolution, a dense layer, an LSTM; element-wise work, pooling and
normalisation are not counted, as in :attr:`~dlbench.models.spec.ModelSpec.flops_per_sample`):

* forward: :meth:`~dlbench.models.layers.Layer.flops`;
* weight gradient (dW = X^T dY): the same count, where the layer's weights are trained (a frozen
  layer of the autoencoders' pre-training has none);
* input gradient (dX = dY W^T): the same count, where anything before the layer needs a gradient
  (a trained parameter, or the part's input when the part differentiates it,
  :func:`dlbench.models.split.differentiates_input`). An LSTM's recurrent gradient (through its
  hidden state) is part of its weight gradient; only its input projection's gradient is optional.

A residual block is counted layer by layer: its body and shortcut each see the block's input.
"""

from __future__ import annotations

from dlbench.models.layers import LSTM, Dense, Layer, Residual, Shape, TiedDense
from dlbench.models.spec import ModelSpec


def _trained(layer: Layer, shape: Shape) -> bool:
    if isinstance(layer, Dense | TiedDense) and not layer.trainable:
        return False
    return bool(layer.params(shape)) or isinstance(layer, TiedDense)


def _input_part(layer: Layer, shape: Shape) -> int:
    """FLOPs of the layer's input gradient: all of its forward's, but an LSTM's input projection only."""
    if isinstance(layer, LSTM):
        t, d = shape
        return 2 * t * d * 4 * layer.units
    return layer.flops(shape)


def _backward(layers: tuple[Layer, ...], shape: Shape, upstream: bool) -> tuple[int, bool]:
    """(FLOPs of the sequence's backward, whether anything up to its end needs a gradient)."""
    total = 0
    for layer in layers:
        if isinstance(layer, Residual):
            body, b_up = _backward(layer.body, shape, upstream)
            short, s_up = _backward(layer.shortcut, shape, upstream)
            total += body + short
            upstream = upstream or b_up or s_up
        else:
            trained = _trained(layer, shape)
            if trained:
                total += layer.flops(shape)
            if upstream:
                total += _input_part(layer, shape)
            upstream = upstream or trained
        shape = layer.out_shape(shape)
    return total, upstream


def backward_flops_per_sample(spec: ModelSpec) -> int:
    """The backward's FLOPs of one sample: weight gradients plus the input gradients needed."""
    from dlbench.models.split import differentiates_input

    return _backward(spec.layers, spec.input.shape, differentiates_input(spec))[0]


def closure_flops_per_sample(spec: ModelSpec, backward: bool) -> int:
    """FLOPs of one sample through a closure: the forward, plus the backward where it runs one (a
    gradient, a training step; an optimiser's element-wise update is not counted)."""
    forward = spec.flops_per_sample
    return forward + backward_flops_per_sample(spec) if backward else forward
