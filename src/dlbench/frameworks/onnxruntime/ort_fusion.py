"""ONNX Runtime's transformer optimizer on dlbench's export: the ``fused`` variant of the onnxruntime backend.

``onnxruntime.transformers.optimizer.optimize_model`` rewrites an exported transformer into ONNX
Runtime's fused operators where it recognises the pattern (``SkipLayerNormalization`` for a residual
add and its LayerNorm, ``BiasGelu``/``FastGelu``, ``SimplifiedLayerNormalization`` for RMSNorm,
``Attention``/``MultiHeadAttention`` for the attention subgraph), which the CPU provider runs as single
kernels. It is the step ONNX Runtime's documentation gives for BERT- and GPT-2-like models before
inference. What it fused is recorded with the build (``build_info["fusions"]``), so a cell says which
fusions it timed (with torch's dynamo export the attention pattern is not recognised: none fused).

Where a fusion would change the function it is turned off and the reason recorded (``skipped``): the
GELU fusions turn the export's ``Gelu(approximate="tanh")`` (GPT-2) with its bias into ``BiasGelu``,
which is the erf GELU; with them on, GPT-2's fused graph failed the gate (forward error 1.4e-4
against the float64 reference, 3e-7 with them off).
Its Python fusions only (``opt_level=0``): the session's own ``ORT_ENABLE_ALL`` graph optimisations
follow as in the default variant.
"""

from __future__ import annotations

import logging

import onnx

from dlbench.frameworks.base import UnsupportedError
from dlbench.models import layers as L
from dlbench.models.spec import ModelSpec


def model_type(spec: ModelSpec) -> str:
    """The optimizer's model type for the spec's architecture: ``vit`` (patch embedding), ``gpt2``
    (causal attention with LayerNorm), ``bert`` otherwise (the generic encoder fusions, RMSNorm too)."""
    kinds = {type(layer) for layer in L.walk(spec.layers)}
    if L.Attention not in kinds:
        raise UnsupportedError(f"{spec.name} has no attention: ONNX Runtime's transformer optimizer (the fused "
                               "variant) applies to transformers only")
    if L.PatchEmbed in kinds:
        return "vit"
    causal = any(isinstance(layer, L.Attention) and layer.causal for layer in L.walk(spec.layers))
    return "gpt2" if causal and L.LayerNorm in kinds else "bert"


def _shape(spec: ModelSpec) -> tuple[int, int]:
    """(heads, width) of the spec's first attention layer."""
    shape = spec.input.shape
    for layer in spec.layers:
        if isinstance(layer, L.SkipBlock):
            attention = next(x for x in L.walk((layer,)) if isinstance(x, L.Attention))
            return attention.dims(shape[-1])[0], shape[-1]
        shape = layer.out_shape(shape)
    raise UnsupportedError(f"{spec.name}: no attention block found")


def fuse(onnx_bytes: bytes, spec: ModelSpec) -> tuple[bytes, dict]:
    """The export rewritten by the transformer optimizer, and what it fused (operator -> count, the
    optimizer's own statistics, zeros left out) and which fusions it was kept from, with why."""
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    heads, width = _shape(spec)
    kind = model_type(spec)
    options = FusionOptions(kind)
    skipped = {}
    if any(isinstance(layer, L.GELU) and layer.approximate == "tanh" for layer in L.walk(spec.layers)):
        options.enable_gelu = options.enable_bias_gelu = False
        skipped["Gelu, BiasGelu"] = ("the fusion makes Gelu(approximate='tanh') the erf GELU (BiasGelu has no "
                                     "approximation attribute): another function")
    logger = logging.getLogger("onnxruntime.transformers")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        optimized = optimize_model(onnx.load_from_string(onnx_bytes), model_type=kind, num_heads=heads,
                                   hidden_size=width, opt_level=0, optimization_options=options)
    finally:
        logger.setLevel(level)
    stats = {op: int(n) for op, n in optimized.get_fused_operator_statistics().items() if n}
    return optimized.model.SerializeToString(), {"model_type": kind, "fused": stats, "skipped": skipped}
