"""dlbench's weights as a GGUF file, the format llama.cpp loads, written with the ``gguf`` package's
``GGUFWriter`` (NumPy and ``gguf`` only: the tests run it in the main Python).

The tensors are the Hugging Face ones :func:`dlbench.models.hf_layout.to_hf` makes of the canonical
arrays (the table ``dlbench export-model`` writes folders by), renamed and laid out as llama.cpp's own
converter, ``convert_hf_to_gguf.py``, writes them:

* **Llama** (``general.architecture = llama``): ``token_embd``, ``blk.N.attn_norm``, ``attn_q/k/v``,
  ``attn_output``, ``ffn_norm``, ``ffn_gate/up/down``, ``output_norm`` and ``output`` for an untied head
  (a tied one is read from ``token_embd``). The query and key rows are **permuted** from Hugging Face's
  rotate-half RoPE layout to the interleaved pairs llama.cpp's ``llama`` architecture rotates
  (``LLAMA_ROPE_TYPE_NORM``), as the converter's ``LlamaModel.permute`` does;
* **GPT-2** (``gpt2``): ``token_embd``, ``position_embd``, ``blk.N.attn_norm``, ``attn_qkv`` (q, k, v
  stacked), ``attn_output``, ``ffn_norm``, ``ffn_up/down``, ``output_norm``; GPT-2's ``Conv1D`` (in,
  out) matrices transposed to (out, in), as the converter's ``GPT2Model`` does.

A GGUF array's NumPy shape is (rows, columns) = (out, in): ggml's ``ne[0]`` is the input width, the one
a quantization block runs along. Formats (dlbench precisions): ``fp32`` (F32), ``fp16`` (F16), ``bf16``
(BF16), ``q8_0`` and ``q4_0`` (llama.cpp's blocks of 32 weights, 8 or 4 bits, with one float16 scale,
quantized by ``gguf.quants``, the converter's own ``--outtype q8_0`` path). As the converter does, 1-D
tensors (norms, biases) stay F32; unlike ``llama-quantize``'s default, which keeps a Q4_0 model's
output matrix at Q6_K, every matrix is the format named (``--pure``), so a format is one thing.

The vocabulary is minimal, ``tokenizer.ggml.model = none`` with the model's vocabulary size (llama.cpp's
"no vocab" models: that many placeholder tokens, no BOS/EOS): dlbench feeds token ids and reads logits,
and a model without an end-of-sequence token never stops a greedy generation early.

Converted files are cached (:func:`converted`) keyed by the weights' hash, the format, the metadata,
this writer's version and the ``gguf`` package's version (the runtime's version is in the key its caller
passes), in ``$DLBENCH_CACHE_DIR/gguf`` when that is set.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from gguf.quants import QuantError

from dlbench.frameworks.base import UnsupportedError
from dlbench.frameworks.cache import cache_dir
from dlbench.models import layers as L
from dlbench.models.hf_layout import blocks, family_of, to_hf
from dlbench.models.spec import ModelSpec
from dlbench.models.weights import Weights

#: bumped when what this module writes changes (a cached file of an older writer is not reused)
WRITER_VERSION = 1
Q = gguf.GGMLQuantizationType
#: precision -> the ggml type of every matrix (1-D tensors stay F32)
FORMATS: dict[str, Q] = {"fp32": Q.F32, "fp16": Q.F16, "bf16": Q.BF16, "q8_0": Q.Q8_0, "q4_0": Q.Q4_0}
#: precision -> ``general.file_type`` (llama.cpp's LLAMA_FTYPE_*)
FILE_TYPES: dict[str, gguf.LlamaFileType] = {
    "fp32": gguf.LlamaFileType.ALL_F32, "fp16": gguf.LlamaFileType.MOSTLY_F16,
    "bf16": gguf.LlamaFileType.MOSTLY_BF16, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
    "q4_0": gguf.LlamaFileType.MOSTLY_Q4_0}
#: the Hugging Face families written, and llama.cpp's architecture for each
ARCHITECTURES = {"llama": "llama", "gpt2": "gpt2"}


def architecture(spec: ModelSpec) -> str:
    """The llama.cpp architecture ``spec`` is written as; :class:`UnsupportedError` for any other model."""
    try:
        family = family_of(spec)
    except ValueError as exc:
        raise UnsupportedError(f"llama.cpp: {exc}") from None
    if family not in ARCHITECTURES:
        raise UnsupportedError(f"llama.cpp: dlbench writes GGUF for the {', '.join(ARCHITECTURES)} families, "
                               f"not {family} ({spec.name})")
    return ARCHITECTURES[family]


def _layers(spec: ModelSpec, kind: type) -> list:
    return [layer for layer in L.walk(spec.layers) if isinstance(layer, kind)]


def hparams(spec: ModelSpec) -> dict[str, Any]:
    """The model's GGUF metadata, as llama.cpp's converter writes it for its architecture (keys without
    the ``ARCH.`` prefix): ints are written as uint32, floats as float32."""
    arch = architecture(spec)
    shapes = spec.param_shapes()
    attention = _layers(spec, L.Attention)
    if not attention or any(not a.causal for a in attention):
        raise UnsupportedError(f"llama.cpp: {spec.name} is not a causal decoder")
    dim = shapes["embed.weight" if arch == "llama" else "wte.weight"][1]
    heads, kv, head_dim = attention[0].dims(dim)
    out: dict[str, Any] = {"vocab_size": spec.input.vocab, "embedding_length": dim, "block_count": blocks(spec),
                           "attention.head_count": heads}
    if arch == "llama":
        norms = _layers(spec, L.RMSNorm)
        out |= {"context_length": int(spec.options.get("context") or spec.input.shape[0]),
                "feed_forward_length": shapes["l0.mlp.w_gate"][1], "attention.head_count_kv": kv,
                "attention.layer_norm_rms_epsilon": norms[0].eps, "rope.dimension_count": head_dim,
                "rope.freq_base": attention[0].rope_theta}
        if head_dim != dim // heads:  # the converter writes them where head_dim is not n_embd / n_head
            out |= {"attention.key_length": head_dim, "attention.value_length": head_dim}
    else:
        out |= {"context_length": _layers(spec, L.PositionEmbedding)[0].max_len,
                "feed_forward_length": shapes["h0.mlp.fc.weight"][1],
                "attention.layer_norm_epsilon": _layers(spec, L.LayerNorm)[0].eps}
    return out


def _permute(rows: np.ndarray, heads: int) -> np.ndarray:
    """Hugging Face's rotate-half rows of each head (first halves, then second halves) as llama.cpp's
    interleaved pairs (``convert_hf_to_gguf.py``'s ``LlamaModel.permute``); works on a bias too."""
    return rows.reshape(heads, 2, rows.shape[0] // heads // 2, *rows.shape[1:]).swapaxes(1, 2).reshape(rows.shape)


_LLAMA_BLOCK = {"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
                "self_attn.o_proj.weight": "attn_output.weight", "self_attn.o_proj.bias": "attn_output.bias",
                "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
                "mlp.down_proj.weight": "ffn_down.weight"}
_GPT2_BLOCK = {"ln_1.weight": "attn_norm.weight", "ln_1.bias": "attn_norm.bias", "attn.c_attn.bias": "attn_qkv.bias",
               "attn.c_proj.bias": "attn_output.bias", "ln_2.weight": "ffn_norm.weight", "ln_2.bias": "ffn_norm.bias",
               "mlp.c_fc.bias": "ffn_up.bias", "mlp.c_proj.bias": "ffn_down.bias"}
_GPT2_CONV1D = {"attn.c_attn.weight": "attn_qkv.weight", "attn.c_proj.weight": "attn_output.weight",
                "mlp.c_fc.weight": "ffn_up.weight", "mlp.c_proj.weight": "ffn_down.weight"}
_TOP = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight", "transformer.wte.weight": "token_embd.weight",
        "transformer.wpe.weight": "position_embd.weight", "transformer.ln_f.weight": "output_norm.weight",
        "transformer.ln_f.bias": "output_norm.bias"}


def tensors(spec: ModelSpec, params: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The GGUF tensors (float32, (out, in)) of canonical ``params``, named as llama.cpp names them."""
    arch = architecture(spec)
    out: dict[str, np.ndarray] = {}
    for name, array in to_hf(spec, dict(params)).items():
        array = np.asarray(array, np.float32)
        if name in _TOP:
            out[_TOP[name]] = array
            continue
        parts = name.split(".")
        if arch == "llama":  # model.layers.N.<rest>
            block, rest = int(parts[2]), ".".join(parts[3:])
            proj = rest.split(".")[1] if rest.startswith("self_attn.") else ""
            if proj in ("q_proj", "k_proj", "v_proj"):
                heads = meta["attention.head_count"] if proj == "q_proj" else meta["attention.head_count_kv"]
                if proj != "v_proj":
                    array = _permute(array, heads)
                gguf_name = f"attn_{proj[0]}.{parts[-1]}"
            else:
                gguf_name = _LLAMA_BLOCK[rest]
        else:  # transformer.h.N.<rest>
            block, rest = int(parts[2]), ".".join(parts[3:])
            if rest in _GPT2_CONV1D:
                array, gguf_name = np.ascontiguousarray(array.T), _GPT2_CONV1D[rest]
            else:
                gguf_name = _GPT2_BLOCK[rest]
        out[f"blk.{block}.{gguf_name}"] = np.ascontiguousarray(array)
    return out


def encode(array: np.ndarray, precision: str, name: str) -> tuple[np.ndarray, Q]:
    """``array`` in the format's ggml type (1-D tensors stay F32, as the converter keeps them)."""
    qtype = FORMATS[precision] if array.ndim > 1 else Q.F32
    if qtype == Q.F32:
        return array.astype(np.float32), qtype
    if qtype == Q.F16:
        return array.astype(np.float16), qtype
    try:
        return gguf.quants.quantize(array, qtype), qtype
    except QuantError as exc:
        raise UnsupportedError(f"llama.cpp {qtype.name}: {exc} ({name}: a block holds "
                               f"{gguf.GGML_QUANT_SIZES[qtype][0]} values along a row of {array.shape[-1]})") from None


def write(spec: ModelSpec, params: Mapping[str, np.ndarray], precision: str, path: Path,
          meta: Mapping[str, Any]) -> dict[str, str]:
    """Write the GGUF file; returns each tensor's ggml type by name."""
    if precision not in FORMATS:
        raise UnsupportedError(f"llama.cpp: dlbench writes GGUF as {', '.join(FORMATS)}, not {precision}")
    arch = architecture(spec)
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(spec.name)
    for key, value in meta.items():
        full = f"{arch}.{key}"
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(f"GGUF metadata {full}: {value!r} is not a number")
        (writer.add_uint32 if isinstance(value, int) else writer.add_float32)(full, value)
    writer.add_file_type(int(FILE_TYPES[precision]))
    writer.add_tokenizer_model("none")
    types = {}
    for name, array in tensors(spec, params, meta).items():
        data, qtype = encode(array, precision, name)
        # a quantized array's shape is its bytes' (rows, bytes per row): the writer derives ne from it
        writer.add_tensor(name, data, raw_dtype=qtype)
        types[name] = qtype.name
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return types


def read(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray], dict[str, str]]:
    """A GGUF file's metadata (scalars and strings), its tensors as float32 (out, in) (quantized ones
    dequantized) and their ggml types: what a test and :meth:`Backend_.get_params` read back."""
    reader = gguf.GGUFReader(str(path))
    meta: dict[str, Any] = {}
    for field in reader.fields.values():
        if field.types and field.types[0] != gguf.GGUFValueType.ARRAY:
            meta[field.name] = field.contents()
    arrays, types = {}, {}
    for t in reader.tensors:
        shape = tuple(int(n) for n in reversed(t.shape))  # ggml's ne is (in, out)
        arrays[t.name] = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), np.float32).reshape(shape)
        types[t.name] = t.tensor_type.name
    return meta, arrays, types


def weights_sha256(weights: Weights) -> str:
    """The weights' identity: every parameter's name and bytes."""
    h = hashlib.sha256()
    for name in sorted(weights.params):
        h.update(name.encode() + b"\0" + np.ascontiguousarray(weights.params[name], np.float32).tobytes())
    return h.hexdigest()


@dataclass
class Converted:
    """A GGUF file for one model, format and metadata, and how it came to be."""

    path: Path
    types: dict[str, str]
    convert_s: float
    #: ``hit`` (read from the cache), ``miss`` (written to it), ``off`` (no cache: a temporary file)
    cache: str
    #: the temporary folder of an uncached file (kept alive with the model that maps it)
    tmp: Any = None

    def info(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for t in self.types.values():
            counts[t] = counts.get(t, 0) + 1
        return {"convert_s": round(self.convert_s, 4), "convert_cache": self.cache, "gguf": str(self.path),
                "gguf_bytes": self.path.stat().st_size, "tensor_types": counts}


def converted(spec: ModelSpec, weights: Weights, precision: str, meta: Mapping[str, Any], runtime: str) -> Converted:
    """The model's GGUF file at ``precision``: from the cache (``$DLBENCH_CACHE_DIR/gguf``) when an equal
    conversion is there, else written (into the cache, or a temporary folder when none is set).
    ``runtime``: the runtime's version, part of the key."""
    started = time.perf_counter()
    key = hashlib.sha256(json.dumps({"weights": weights_sha256(weights), "precision": precision, "spec": spec.name,
                                     "meta": dict(meta), "writer": WRITER_VERSION, "gguf": _gguf_version(),
                                     "runtime": runtime}, sort_keys=True).encode()).hexdigest()[:32]
    root = cache_dir("gguf")
    tmp = None
    if root is None:
        tmp = tempfile.TemporaryDirectory(prefix="dlbench-gguf-")
        root = tmp.name
    path = Path(root) / f"{key}.gguf"
    types_path = path.with_suffix(".json")
    if tmp is None and path.is_file() and types_path.is_file():
        return Converted(path, json.loads(types_path.read_text()), time.perf_counter() - started, "hit")
    partial = path.with_name(f"{key}.{os.getpid()}.partial")
    partial_types = path.with_name(f"{key}.{os.getpid()}.partial.json")
    try:
        types = write(spec, weights.params, precision, partial, meta)
        partial_types.write_text(json.dumps(types))
        os.replace(partial_types, types_path)  # atomic: a concurrent process reads whole files or none;
        os.replace(partial, path)  # the file last, so a hit always finds its types
    finally:
        partial.unlink(missing_ok=True)
        partial_types.unlink(missing_ok=True)
    return Converted(path, types, time.perf_counter() - started, "off" if tmp else "miss", tmp)


def _gguf_version() -> str:
    from importlib.metadata import version

    return version("gguf")
