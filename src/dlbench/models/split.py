"""A model's parts, each a model of its own: what the ``layers`` scenario times in every framework.

The split is defined once, from the spec, so every framework times the same parts:

* a part starts at a layer with parameters (a convolution, a dense layer, a residual block, an
  LSTM) and takes the parameter-free layers after it (activation, pooling, batch norm, dropout):
  ``conv1 + relu + pool``; a flatten starts the part of the dense layer after it;
* a part may only end where the activation is something a model can take as input: an image
  (C, H, W) or a vector (D,), and in a transformer a sequence (T, D) too. In other networks a
  sequence is not, so an embedding, its LSTM and the masked mean over time stay one part ("the LSTM
  as one recurrent layer"), and a network whose every activation is a sequence (lstm-ptb) is one part;
* a transformer (a network with attention) is split per residual block, so its attention and its MLP
  are parts of their own: the embeddings (token, position, segment, and a norm after them) are one
  part, each block one, the final norm goes with the last block, the head after it (a pooler, a
  classifier) is one. Norms and position embeddings never start a part. A tied LM head in a part
  without its embedding becomes a dense layer of the same shape (a part has its own weights; the
  FLOPs are the same);
* a network with a marked target or tied weights (the autoencoder pre-training phases) is one part.

Each part is a :class:`~dlbench.models.spec.ModelSpec` named ``MODEL#k`` (k from 0), fed a tensor of
the shape it sees in the model, so it is built by each backend's own builders and passes the
equivalence gate like any model. Its loss, for the gradient closure: the model's own for the last
part; for the others softmax cross-entropy over the output, an image output first averaged over
its positions (a global average pool: the same vector in every framework's layout, which a flatten
of an NHWC activation is not), a sequence output averaged over its steps (a mean over every output,
so no framework's compiler can drop the positions a loss would not read). The pool and the loss are
O(output) steps beside the part's own work; the pool is in the part's forward time too. Parts get their own seeded weights
(a part's time does not depend on its weights' values).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dlbench.models.layers import (
    Attention,
    BatchNorm,
    Dense,
    Embedding,
    Flatten,
    GlobalAvgPool,
    Layer,
    LayerNorm,
    LMHead,
    Mark,
    MaskedMean,
    PositionEmbedding,
    Residual,
    RMSNorm,
    SegmentEmbedding,
    SkipBlock,
    TiedDense,
    sequence_shape,
    walk,
)
from dlbench.models.spec import InputSpec, LossSpec, ModelSpec

SEPARATOR = "#"
CE = LossSpec("softmax_ce")


@dataclass(frozen=True)
class Part:
    index: int
    label: str  # the names of its layers with parameters, e.g. "conv1" or "block 3 (res2_1a, res2_1b)"
    spec: ModelSpec


#: layers with parameters that belong to the part before them
JOINS_BEFORE = (BatchNorm, LayerNorm, RMSNorm, PositionEmbedding, SegmentEmbedding)


def _starts_part(layer: Layer, shape: tuple[int, ...]) -> bool:
    """A layer with parameters starts a part; a norm or an added embedding belongs to the layer before it."""
    return bool(layer.params(shape)) and not isinstance(layer, JOINS_BEFORE)


def _label(layers: tuple[Layer, ...]) -> str:
    """The part's layers with parameters by name; a residual block by its name's prefix (``s1b0``)."""
    names = []
    for layer in layers:
        if isinstance(layer, Residual | SkipBlock):
            inner = [x.name for x in walk(layer.body) if isinstance(getattr(x, "name", None), str)]
            name = inner[0].split(".")[0] if inner else "residual"
            if isinstance(layer, SkipBlock):  # a transformer layer's two blocks: its attention, its MLP
                name += " attention" if any(isinstance(x, Attention) for x in walk(layer.body)) else " mlp"
            if not names or names[-1] != name:
                names.append(name)
        elif isinstance(getattr(layer, "name", None), str) and not isinstance(layer, Mark | BatchNorm):
            names.append(layer.name)
    return "+".join(names) or type(layers[0]).__name__


def _input(shape: tuple[int, ...], first: InputSpec, is_first: bool, sequences: bool = False) -> InputSpec | None:
    """The input spec of a part that starts at an activation of ``shape`` (None: not an input);
    ``sequences``: a (T, D) activation is one (a transformer's)."""
    if is_first:
        return first
    if len(shape) == 3:
        return InputSpec("image", shape)
    if len(shape) == 1:
        return InputSpec("vector", shape)
    if len(shape) == 2 and sequences:
        return InputSpec("sequence", shape)
    return None


def split(spec: ModelSpec) -> list[Part]:
    """The model's parts, in order; one part (the whole network) when it cannot be split."""
    if any(isinstance(layer, Mark | TiedDense) for layer in walk(spec.layers)):
        return [_part(spec, 0, spec.layers, spec.input, last=True)]
    sequences = any(isinstance(layer, Attention) for layer in walk(spec.layers))
    groups: list[list[Layer]] = []
    shape = spec.input.shape
    shapes_before: list[tuple[int, ...]] = []
    has_params = False  # the open part has its layer with parameters
    for layer in spec.layers:
        # a flatten opens the next part (NHWC frameworks flatten in their own order and fold the
        # permutation into the dense layer after it, so the two must stay together)
        main = _starts_part(layer, shape)
        opens = not groups or ((isinstance(layer, Flatten) or (main and has_params))
                               and _input(shape, spec.input, False, sequences) is not None)
        if opens:
            groups.append([])
            shapes_before.append(shape)
            has_params = False
        groups[-1].append(layer)
        has_params = has_params or main
        shape = layer.out_shape(shape)
    parts = []
    for k, (layers, before) in enumerate(zip(groups, shapes_before, strict=True)):
        inp = _input(before, spec.input, k == 0, sequences)
        parts.append(_part(spec, k, _untied(tuple(layers)), inp, last=k == len(groups) - 1))
    return parts


def _untied(layers: tuple[Layer, ...]) -> tuple[Layer, ...]:
    """A tied LM head whose embedding is in another part, as a dense layer of its own of the same shape."""
    embeddings = {x.name for x in walk(layers) if isinstance(x, Embedding)}
    return tuple(Dense(f"{x.tied_to}.head", x.vocab, bias=False)
                 if isinstance(x, LMHead) and x.tied_to not in embeddings else x for x in layers)


def _part(spec: ModelSpec, k: int, layers: tuple[Layer, ...], inp: InputSpec, last: bool) -> Part:
    if last:  # the model's own loss and labels, on the part's input
        part = replace(spec, layers=layers,
                       input=inp if k == 0 else replace(inp, labels=spec.input.labels, classes=spec.input.classes))
    else:
        out = sequence_shape(layers, inp.shape)
        if len(out) == 2:  # a sequence: averaged over its steps
            layers = (*layers, MaskedMean())
            out = out[1:]
        elif len(out) != 1:  # an image: pooled to its channels, a vector in every framework's layout
            layers = (*layers, GlobalAvgPool())
            out = out[:1]
        part = replace(spec, layers=layers, input=replace(inp, labels="class", classes=out[0]), loss=CE)
    label = _label(layers)
    return Part(k, label, replace(part, name=part_ref(spec.name, k), description=f"part {k} of {spec.name}: {label}",
                                  # seeded weights of its own, not a checkpoint's (models.hf_checkpoint)
                                  options={**{o: v for o, v in spec.options.items() if o != "checkpoint"}, "part": k}))


def _kind(part: Part) -> tuple:
    """What a part is made of, whatever its sizes: its input kind and its layers' types in order."""
    return (part.spec.input.kind, part.spec.loss, tuple(type(x).__name__ for x in walk(part.spec.layers)))


def counterpart(full: list[Part], small: list[Part], k: int) -> int:
    """The part of a model's small form that is of the same kind as part ``k`` of the full model: a
    transformer's small form has 2 blocks where the model has 12 or 30, so its block parts stand for
    every block of the model (the last block, which takes the final norm and head, for the last)."""
    want = _kind(full[k])
    for part in small:
        if _kind(part) == want:
            return part.index
    raise ValueError(f"{full[k].spec.name}: its small form has no part like it ({full[k].label})")


def differentiates_input(spec: ModelSpec) -> bool:
    """Whether ``spec``'s gradient also differentiates its input: a part after the first, whose input
    is an activation in the whole model. The whole model's backward computes that gradient for every
    layer but the first, so a part's gradient computes it too, and the parts' gradients add up to the
    whole model's (a part computing only its parameters' gradients skipped a third of a dense layer's
    backward)."""
    return spec.options.get("part", 0) > 0 and spec.input.kind != "tokens"


def part_ref(model: str, k: int) -> str:
    return f"{model}{SEPARATOR}{k}"


def parse_part(ref: str) -> tuple[str, int | None]:
    """``resnet-56#3`` -> ("resnet-56", 3); a plain model reference -> (ref, None)."""
    base, sep, index = ref.rpartition(SEPARATOR)
    if not sep:
        return ref, None
    if not index.isdigit():
        raise ValueError(f"model {ref}: a part is MODEL{SEPARATOR}N with N a number")
    return base, int(index)
