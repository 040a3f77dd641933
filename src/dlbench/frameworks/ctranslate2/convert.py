"""dlbench's weights as a CTranslate2 model folder, cached on disk.

The way there is the one CTranslate2 documents for Hugging Face models: a Hugging Face folder
(``save_pretrained``, written by :func:`dlbench.gate.hf_transformers.save_folder` from the canonical
weights: no model hub) converted by ``ctranslate2.converters.TransformersConverter`` with the format as
its ``quantization``. dlbench's models are token ids without a tokenizer, so the converter is given a
vocabulary that names each id by its number (``"17"``); generation takes and returns those names, and
its ``end_token=[]`` keeps a token that happens to be a special one from ending it.

A converted folder is kept under ``$DLBENCH_CACHE_DIR/ctranslate2`` (default
``~/.cache/dlbench/ctranslate2``, ``$XDG_CACHE_HOME`` honoured), named by the digest of the spec and its
weights and of what converts them (this module, the Hugging Face writer and layout, the transformers
version), the format and the CTranslate2 version, so a second process (the gate, then each measuring
process) loads rather than converts, and a changed converter never reads an older conversion.
``dlbench.json`` beside CTranslate2's files records the conversion's time and the parameters the
converted model holds; a folder whose record does not read back, or whose model CTranslate2 cannot
load, is converted again rather than used.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ctranslate2
import numpy as np
import torch

from dlbench.frameworks.cache import cache_dir
from dlbench.measure.reuse import CACHE_ROOT
from dlbench.models.spec import ModelSpec
from dlbench.models.weights import Weights

#: dlbench precision -> the converter's ``quantization`` (the same name is the Generator's ``compute_type``)
FORMATS = {"fp32": "float32", "int8": "int8", "bf16": "bfloat16"}
#: the converted model's files that dlbench writes beside CTranslate2's
RECORD = "dlbench.json"


@dataclass(frozen=True)
class Converted:
    """A converted model folder: where it is, its format, what converting it cost (0 on a cache hit, the
    recorded first conversion's time in ``first_convert_s``) and the parameters it holds."""

    path: Path
    format: str
    convert_s: float
    cache_hit: bool
    first_convert_s: float
    parameters: int

    def info(self) -> dict[str, Any]:
        return {"format": f"CTranslate2 {self.format}", "convert_s": self.convert_s,
                "convert_cache": "hit" if self.cache_hit else "miss",
                "first_convert_s": self.first_convert_s, "converted": self.path.name}


#: the modules whose code decides what a conversion writes (their source is part of its cache key)
CONVERTERS = ("dlbench.frameworks.ctranslate2.convert", "dlbench.gate.hf_transformers", "dlbench.models.hf_layout")


def cache_root() -> Path:
    """Where converted models live: ``$DLBENCH_CACHE_DIR/ctranslate2``, else dlbench's per-host cache's."""
    path = cache_dir("ctranslate2")
    return Path(path) if path else CACHE_ROOT / "ctranslate2"


def weights_digest(spec: ModelSpec, weights: Weights) -> str:
    """The spec (its layers, sizes and options), every parameter's name, type, shape and bytes, and the
    converting code (:data:`CONVERTERS`' source, the transformers version)."""
    h = hashlib.sha256(repr(spec).encode())
    h.update(transformers_version().encode())
    for module in CONVERTERS:
        origin = importlib.util.find_spec(module).origin
        h.update(Path(origin).read_bytes())
    for name in sorted(weights.params):
        a = np.ascontiguousarray(weights.params[name])
        h.update(f"{name}:{a.dtype}:{a.shape}".encode())
        h.update(memoryview(a).cast("B"))
    return h.hexdigest()[:16]


def write_hf_folder(spec: ModelSpec, weights: Weights, folder: Path) -> None:
    """The Hugging Face folder the converter reads (tests replace it to plant a defect in the conversion)."""
    from dlbench.frameworks.transformers.hf_model import save_folder

    save_folder(spec, weights, folder)


def _record(path: Path) -> dict[str, Any] | None:
    """The conversion's record, or None where there is none or it does not read back whole."""
    try:
        meta = json.loads(path.read_text())
        return meta if isinstance(meta.get("convert_s"), float) and isinstance(meta.get("parameters"), int) else None
    except (OSError, ValueError, AttributeError):
        return None


def transformers_version() -> str:
    return importlib.metadata.version("transformers")


class _Vocabulary:
    """What the converter asks of a tokenizer: ids named by their number; special tokens outside them."""

    bos_token, eos_token, unk_token = "<s>", "</s>", "<unk>"

    def __init__(self, size: int):
        self.size = size

    def get_vocab(self) -> dict[str, int]:
        return {str(i): i for i in range(self.size)}


class _Converter(ctranslate2.converters.TransformersConverter):
    """CTranslate2's converter with dlbench's id vocabulary, counting the parameters it converts."""

    def __init__(self, folder: Path, vocab: int):
        super().__init__(str(folder))
        self.vocab = vocab
        self.parameters = 0

    def load_tokenizer(self, tokenizer_class: Any, model_name_or_path: str, **kwargs: Any) -> _Vocabulary:
        return _Vocabulary(self.vocab)

    def _load(self) -> Any:
        spec = super()._load()
        seen, total = set(), 0
        for _, value in spec.variables(ordered=True):  # identical tensors are stored once (CT2 aliases them)
            array = value.detach().float().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
            if array.ndim and np.issubdtype(array.dtype, np.floating):
                key = (array.shape, hashlib.sha256(np.ascontiguousarray(array).tobytes()).digest())
                total += 0 if key in seen else array.size
                seen.add(key)
        self.parameters = total
        return spec


def convert(spec: ModelSpec, weights: Weights, precision: str, again: bool = False) -> Converted:
    """The model converted to the precision's format, from the cache when it is there. ``again``: the
    cached folder failed to load (damaged): it is removed and the model converted anew."""
    fmt = FORMATS[precision]
    root = cache_root()
    target = root / f"{spec.name.replace('/', '_')[:40]}-{weights_digest(spec, weights)}-{fmt}-ct2-{ctranslate2.__version__}"
    record = target / RECORD
    meta = None if again else _record(record)
    if meta is not None:
        return Converted(target, fmt, 0.0, True, meta["convert_s"], meta["parameters"])
    if target.exists():  # damaged (unreadable record, or a model that failed to load): ours to replace
        shutil.rmtree(target)
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".convert-", dir=root))
    try:
        t0 = time.perf_counter()
        write_hf_folder(spec, weights, work / "hf")
        converter = _Converter(work / "hf", spec.input.vocab)
        converter.convert(str(work / "model"), quantization=fmt)
        seconds = time.perf_counter() - t0
        (work / "model" / RECORD).write_text(json.dumps({"convert_s": seconds, "parameters": converter.parameters,
                                                         "ctranslate2": ctranslate2.__version__, "format": fmt}))
        try:
            os.replace(work / "model", target)  # atomic: a process beside this one sees all of it or none
        except OSError:
            if not record.is_file():  # not another process's finished copy: a real failure
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return Converted(target, fmt, seconds, False, seconds, converter.parameters)
