"""dlbench's weights in OpenVINO GenAI's format: the folder ``LLMPipeline`` reads (``openvino_model.xml``, a
stateful IR; ``openvino_tokenizer.xml`` / ``openvino_detokenizer.xml``; the Hugging Face config files).

Optimum Intel's exporter (``optimum-cli export openvino``), what OpenVINO GenAI's documentation converts
with, pins a transformers older than the main Python's, so the IR is made here the way it makes it: the
``transformers`` model read from the Hugging Face folder dlbench writes (:mod:`dlbench.frameworks.transformers.converted`),
traced by ``openvino.convert_model`` with its key/value cache as inputs and outputs (``beam_idx`` reordering the
cache, as Optimum's exporter adds), the past/present pairs turned into the model's state by OpenVINO's
make-stateful transformation, each state's initial value an empty cache of the batch's size (Optimum's
``build_state_initializer``). ``LLMPipeline`` runs that stateful IR; the gate reads logits from the same
IR before it was made stateful, saved beside it (:data:`WITH_PAST_XML`): run as a plain request of
OpenVINO's Core here, the stateful IR gave wrong logits (and corrupted the heap), while the pipeline's
tokens from it were right. The tokenizer is openvino_tokenizers' conversion of the word-level one the
folder holds. ``int8`` and ``int4`` are NNCF's ``compress_weights`` of that IR (``INT8_ASYM``, per channel;
``INT4_SYM``, groups of 32 over every layer, ratio 1; a layer whose input channels 32 does not divide, as in
the gate's small forms, gets the largest power of two from 16 that does, NNCF's ``ADJUST`` fallback),
weight-only as OpenVINO GenAI's docs describe.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from dlbench.frameworks.base import UnsupportedError
from dlbench.frameworks.transformers.converted import Converted, Tamper, convert, family
from dlbench.models.spec import ModelSpec
from dlbench.models.weights import Weights

#: dlbench precision -> the IR's weight format
FORMATS = {"fp32": "fp32", "int8": "int8_asym", "int4": "int4_sym_g32_adjust16"}
#: the families whose transformers class traces with a cache here
TRACED = ("llama", "qwen2", "gpt2")
MODEL_XML = "openvino_model.xml"
#: the same IR before it is made stateful: what the gate reads logits from (see the module docstring)
WITH_PAST_XML = "openvino_model_with_past.xml"


def traced(hf: Path):
    """The folder's ``transformers`` model wrapped to take its cache as inputs and give it back as outputs."""
    import torch
    from transformers import AutoModelForCausalLM, DynamicCache

    model = AutoModelForCausalLM.from_pretrained(str(hf), attn_implementation="sdpa", dtype=torch.float32).eval()

    class WithCache(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, position_ids, beam_idx, past):
            cache = DynamicCache(config=model.config)
            for layer, (k, v) in zip(cache.layers, past, strict=True):
                layer.keys, layer.values = k.index_select(0, beam_idx), v.index_select(0, beam_idx)
                layer.dtype, layer.device, layer.is_initialized = k.dtype, k.device, True
            out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                        past_key_values=cache, use_cache=True)
            return (out.logits, *(t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)))
    return WithCache(), model.config


def with_past_ir(hf: Path):
    """The IR of the folder's model with its cache as inputs (``past_key_values.N.key``/``.value``) and outputs
    (``present.N.key``/``.value``), traced by ``openvino.convert_model``."""
    import openvino as ov
    import torch

    module, config = traced(hf)
    text = config.get_text_config()
    fields = text.to_dict()  # GPT-2's config has no key/value heads or head size of its own
    layers, kv = text.num_hidden_layers, fields.get("num_key_value_heads") or text.num_attention_heads
    hd = fields.get("head_dim") or text.hidden_size // text.num_attention_heads
    batch, past_len, new = 2, 3, 4
    example = {"input_ids": torch.zeros(batch, new, dtype=torch.long),
               "attention_mask": torch.ones(batch, past_len + new, dtype=torch.long),
               "position_ids": torch.arange(past_len, past_len + new).repeat(batch, 1),
               "beam_idx": torch.arange(batch, dtype=torch.int32),
               "past": [(torch.zeros(batch, kv, past_len, hd), torch.zeros(batch, kv, past_len, hd))
                        for _ in range(layers)]}
    with torch.no_grad():
        model = ov.convert_model(module, example_input=example)
    for port, name in zip(model.inputs[4:], past_names(layers), strict=True):
        port.get_tensor().set_names({name})
    model.outputs[0].get_tensor().set_names({"logits"})
    for port, name in zip(model.outputs[1:], present_names(layers), strict=True):
        port.get_tensor().set_names({name})
    return model


def past_names(layers: int) -> list[str]:
    return [f"past_key_values.{i}.{p}" for i in range(layers) for p in ("key", "value")]


def present_names(layers: int) -> list[str]:
    return [n.replace("past_key_values", "present") for n in past_names(layers)]


def stateful(model):
    """A copy of the IR with its past/present pairs made its state (OpenVINO's make-stateful transformation),
    each state's initial value an empty cache of the batch's rows (Optimum Intel's ``build_state_initializer``)."""
    import numpy as np
    import openvino.opset13 as ops
    from openvino._offline_transformations import apply_make_stateful_transformation

    model = model.clone()
    layers = (len(model.inputs) - 4) // 2
    apply_make_stateful_transformation(model, dict(zip(past_names(layers), present_names(layers), strict=True)))
    rows = ops.gather(ops.shape_of(model.input("input_ids"), output_type="i64"), ops.constant([0]), ops.constant(0))
    for op in model.get_ops():
        if op.get_type_name() == "ReadValue":
            dims = [ops.constant(np.array([d.get_min_length()], np.int64)) for d in op.get_output_partial_shape(0)]
            op.set_arguments([ops.broadcast(ops.constant(0.0, dtype=np.float32), ops.concat([rows, *dims[1:]], 0))])
    model.validate_nodes_and_infer_types()
    return model


def compress(model, fmt: str):
    """NNCF's weight-only compression of the IR at ``fmt`` (the IR itself at fp32)."""
    if fmt == "fp32":
        return model
    import nncf

    if fmt == "int8_asym":
        return nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT8_ASYM)
    from nncf.quantization.advanced_parameters import AdvancedCompressionParameters, GroupSizeFallbackMode

    adjust = AdvancedCompressionParameters(group_size_fallback_mode=GroupSizeFallbackMode.ADJUST,
                                           min_adjusted_group_size=16)
    return nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT4_SYM, group_size=32, ratio=1.0,
                                 all_layers=True, advanced_parameters=adjust)


def export(hf: Path, out: Path, fmt: str) -> None:
    """The folder ``LLMPipeline`` reads, written to ``out``."""
    import openvino as ov
    import openvino_tokenizers
    from transformers import AutoTokenizer

    out.mkdir(parents=True)
    model = compress(with_past_ir(hf), fmt)
    ov.save_model(model, str(out / WITH_PAST_XML), compress_to_fp16=False)
    ov.save_model(stateful(model), str(out / MODEL_XML), compress_to_fp16=False)
    tokenizer, detokenizer = openvino_tokenizers.convert_tokenizer(AutoTokenizer.from_pretrained(str(hf)),
                                                                   with_detokenizer=True)
    ov.save_model(tokenizer, str(out / "openvino_tokenizer.xml"))
    ov.save_model(detokenizer, str(out / "openvino_detokenizer.xml"))
    for name in ("config.json", "generation_config.json"):
        shutil.copy(hf / name, out / name)


def converted(spec: ModelSpec, weights: Weights, precision: str, tamper: Tamper | None = None) -> Converted:
    """The LLMPipeline folder of ``spec`` at ``precision``, from the cache or exported now."""
    import openvino_genai

    if precision not in FORMATS:
        raise UnsupportedError(f"openvino-genai runs {', '.join(FORMATS)} here, not {precision}")
    fam = family(spec, "openvino-genai")
    if fam not in TRACED:
        raise UnsupportedError(f"openvino-genai: no causal language model of the {fam} family is "
                               f"converted here ({', '.join(TRACED)})")
    return convert(spec, weights, "openvino-genai", FORMATS[precision], openvino_genai.__version__,
                   lambda hf, out: export(hf, out, FORMATS[precision]), tamper)


def weight_types(path: Path) -> dict[str, int]:
    """Elements of the IR's weight constants (more than one element; not a compressed weight's scales or zero
    points) by element type (``f32``, ``u8``, ``i4`` ...)."""
    import openvino as ov

    counts: dict[str, int] = {}
    for op in ov.Core().read_model(str(path / WITH_PAST_XML)).get_ops():
        kind = op.get_output_element_type(0).get_type_name() if op.get_type_name() == "Constant" else ""
        if kind in WEIGHTS and _size(op) > 1 and not _scale(op):
            counts[kind] = counts.get(kind, 0) + _size(op)
    return counts


def _size(op) -> int:
    size = 1
    for d in op.get_output_shape(0):
        size *= d
    return size


#: element types a weight is stored in
WEIGHTS = ("f32", "f16", "u8", "i8", "u4", "i4")
INTEGER = ("u8", "i8", "u4", "i4")


def _scale(op) -> bool:
    """A compressed weight's scale or zero point: a constant beside a larger integer constant (the weight) at the
    Subtract or Multiply that decompresses it (NNCF's pattern: (Convert(weight) - zero point) * scale)."""
    targets = [t.get_node() for t in op.output(0).get_target_inputs()]
    for node in targets:
        if node.get_type_name() == "Convert":  # an integer zero point is converted before its Subtract
            targets += [t.get_node() for t in node.output(0).get_target_inputs()]
        if node.get_type_name() not in ("Multiply", "Subtract"):
            continue
        for value in node.input_values():
            src = value.get_node()
            while src.get_type_name() in ("Convert", "Subtract"):
                src = src.input_value(0).get_node()
            if src is not op and src.get_type_name() == "Constant" and _size(src) > _size(op) and \
                    src.get_output_element_type(0).get_type_name() in INTEGER:
                return True
    return False
