"""dlbench's weights in ONNX Runtime GenAI's format: its model builder
(``onnxruntime_genai.models.builder``, what ``python -m onnxruntime_genai.models.builder -i HF_DIR -o OUT
-p PRECISION -e cpu`` runs) on the Hugging Face folder dlbench writes (:mod:`dlbench.frameworks.transformers.converted`).

``fp32`` is the builder's float32 CPU graph; ``int4`` its ``-p int4``: weight-only 4-bit MatMulNBits,
block size 32, accuracy level 4 (activations quantized to int8 in the products), the builder's CPU
defaults. An architecture the builder lacks (GPT-2) is refused with the builder's own message.

Two limits of the builder's CPU graph refuse a model (:func:`check_shapes`): GroupQueryAttention's CPU
kernel takes head sizes that are multiples of 16 only (``head_size shall be a multiple of 16``), and the
builder takes any linear layer as wide as the vocabulary for the LM head. The gate's small form of a zoo
Llama (head size 8, MLP 64 = its vocabulary) meets both, so the gate checks this runtime on the same small
form with :data:`GATE_FORM`'s sizes (the runtime's limits, not a change of the model's function); the
published models (SmolLM2-135M: head 64, MLP 1536, vocabulary 49152) and the shipped checkpoint meet neither.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

from dlbench.frameworks.base import UnsupportedError
from dlbench.frameworks.transformers.converted import Converted, Tamper, convert, family
from dlbench.models import layers as L
from dlbench.models.spec import ModelSpec
from dlbench.models.weights import Weights

#: dlbench precision -> the builder's ``-p``
FORMATS = {"fp32": "fp32", "int4": "int4"}
#: the dlbench families (dlbench.models.hf_layout) the builder takes (LlamaForCausalLM, Qwen2ForCausalLM)
BUILT = ("llama", "qwen2")
#: the builder's CPU attention kernel (GroupQueryAttention) takes head sizes that are multiples of this
HEAD_MULTIPLE = 16
#: options of a zoo model's small form (the gate's) the builder needs: a head size its attention kernel takes,
#: an MLP wider than the small vocabulary (64; :func:`check_shapes`)
GATE_FORM = {"head_dim": HEAD_MULTIPLE, "hidden": 96}


def check_shapes(spec: ModelSpec) -> None:
    """Refuse a model the builder's CPU graph cannot hold, in the runtime's words: a head size
    GroupQueryAttention's CPU kernel rejects, or a projection as wide as the vocabulary (the builder takes
    every ``nn.Linear`` with ``out_features == vocab_size`` for the LM head, ``Model.has_lm_head``)."""
    if family(spec, "onnxruntime-genai") not in BUILT:
        return  # the builder refuses another architecture itself, in its words (build)
    shapes, vocab = spec.param_shapes(), spec.input.vocab
    for layer in L.walk(spec.layers):
        if isinstance(layer, L.Attention):
            hd = shapes[f"{layer.name}.wq"][1] // layer.heads
            if hd % HEAD_MULTIPLE:
                raise UnsupportedError(f"ONNX Runtime GenAI's CPU GroupQueryAttention: 'head_size shall be a multiple "
                                       f"of {HEAD_MULTIPLE}. Got head_size % {HEAD_MULTIPLE} == {hd % HEAD_MULTIPLE}' "
                                       f"({spec.name}: head size {hd})")
    skip = tuple(f"{layer.name}." for layer in L.walk(spec.layers)
                 if isinstance(layer, L.Embedding) or (layer is spec.layers[-1] and isinstance(layer, L.Dense)))
    wide = sorted(n for n, shape in shapes.items() if len(shape) == 2 and shape[1] == vocab and not n.startswith(skip))
    if wide:
        raise UnsupportedError(f"ONNX Runtime GenAI's model builder takes every linear layer of out_features == "
                               f"vocab_size ({vocab}) for the LM head (Model.has_lm_head); {spec.name} has "
                               f"{', '.join(wide[:4])}")


def build(hf: Path, out: Path, precision: str) -> None:
    """The builder on ``hf``, writing ``out``; its printed log is kept out of dlbench's output."""
    from onnxruntime_genai.models.builder import create_model, parse_extra_options

    cache = out.parent / "builder-cache"
    log = io.StringIO()
    try:
        with contextlib.redirect_stdout(log):
            options = parse_extra_options(None, str(hf), str(out), precision, "cpu", str(cache), [])
            create_model(None, str(hf), str(out), precision, "cpu", str(cache), **options)
    except NotImplementedError as exc:  # an architecture it lacks: its own words (the converting folder's path not)
        arch = json.loads((hf / "config.json").read_text())["architectures"][0]
        words = str(exc).replace(str(hf), "HF_DIR")
        raise UnsupportedError(f"ONNX Runtime GenAI's model builder: {words} (architecture {arch})") from None


def converted(spec: ModelSpec, weights: Weights, precision: str, tamper: Tamper | None = None) -> Converted:
    """The builder's model of ``spec`` at ``precision``, from the cache or built now."""
    import onnxruntime_genai as og

    if precision not in FORMATS:
        raise UnsupportedError(f"onnxruntime-genai builds {', '.join(FORMATS)}, not {precision}")
    return convert(spec, weights, "onnxruntime-genai", FORMATS[precision], og.__version__,
                   lambda hf, out: build(hf, out, FORMATS[precision]), tamper)


def graph_facts(path: Path) -> dict:
    """What the builder's graph holds: parameters (a MatMulNBits weight counts its N x K), the weights' and
    the products' types, the attention operator."""
    import onnx
    from onnx import helper

    model = onnx.load(str(path / "model.onnx"), load_external_data=False)
    quantized, skip = {}, {"cos_cache", "sin_cache"}
    for node in model.graph.node:
        if node.op_type == "MatMulNBits":
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            quantized[node.input[1]] = attrs
            skip.update(node.input[2:])
    count = 0
    for init in model.graph.initializer:
        if init.name in quantized:
            count += quantized[init.name]["N"] * quantized[init.name]["K"]
        elif init.name not in skip:
            size = 1
            for d in init.dims:
                size *= d
            count += size
    levels = {a["accuracy_level"] for a in quantized.values()}
    bits = {a["bits"] for a in quantized.values()}
    attention = sorted({n.op_type for n in model.graph.node if "Attention" in n.op_type})
    return {"params": count, "param_dtype": f"int{bits.pop()}" if len(bits) == 1 else "float32",
            "compute_dtype": "int8" if levels == {4} else "float32", "attention": attention,
            "matmul_nbits": len(quantized), "accuracy_level": sorted(levels)}
