"""dlbench's weights as the folder ``transformers`` loads: the Hugging Face folder ``dlbench export-model``
writes (:func:`.hf_model.save_folder`: the config of the spec, ``model.safetensors``),
read back by the family's own class with ``from_pretrained`` (``dtype``, ``attn_implementation``).

The folder is the runtime's format, so converting is writing it and loading is ``from_pretrained``; both
are timed (``convert_s``, ``load_s``, stored per cell by the generate scenario). Where
``DLBENCH_EXPORT_CACHE`` names a directory (the runner sets one per run, as for ONNX exports), a
folder is written once per (spec, weights, transformers version) and reused ("hit"); otherwise it is
written afresh in a temporary directory ("off"), which is what the gates do.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import transformers

from dlbench.frameworks.base import UnsupportedError
from dlbench.frameworks.transformers.hf_model import CLASSES, family, save_folder
from dlbench.models.spec import ModelSpec
from dlbench.models.weights import Weights

#: what the converted model is, as a cell records it
FORMAT = "Hugging Face folder (config.json, model.safetensors)"
#: the cast precisions: ``from_pretrained``'s ``dtype``
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
#: the attention implementation of each variant (``compile`` compiles the sdpa model)
ATTENTION = {"sdpa": "sdpa", "eager": "eager", "compile": "sdpa"}

#: config overrides at load: BERT's config makes token 0 its embedding's ``padding_idx``, whose row then gets
#: no gradient; dlbench's spec trains every row (token 0 is a token like any other), so the row is unset
#: (the forward is the same; GPT-2's and Llama's configs here set no padding row)
UNPADDED = {"bert": {"pad_token_id": None}}

#: writes ``spec`` with ``weights`` as a Hugging Face folder (tests plant defects with another)
Writer = Callable[[ModelSpec, Weights, Path], object]

transformers.utils.logging.disable_progress_bar()
transformers.utils.logging.set_verbosity_error()


@dataclass
class Converted:
    folder: Path
    seconds: float
    #: "hit" (an earlier run's folder), "miss" (written into the cache) or "off" (no cache: a temporary folder)
    cache: str
    #: the temporary directory to remove when done (None: the cache's, kept)
    temporary: Path | None = None

    def cleanup(self) -> None:
        if self.temporary is not None:
            shutil.rmtree(self.temporary, ignore_errors=True)
            self.temporary = None


def _key(spec: ModelSpec, weights: Weights) -> str:
    key = hashlib.sha256(repr((spec, "hf-safetensors", transformers.__version__)).encode())
    for group in (weights.params, weights.state):
        for name in sorted(group):
            key.update(name.encode())
            key.update(np.ascontiguousarray(group[name]).tobytes())
    return key.hexdigest()[:32]


def check_family(spec: ModelSpec) -> None:
    """Raise :class:`UnsupportedError` unless ``spec`` is of a family with a ``transformers`` class here."""
    try:
        fam = family(spec)
    except ValueError as exc:
        raise UnsupportedError(f"transformers: {exc}") from None
    if fam not in CLASSES:
        raise UnsupportedError(f"transformers: {spec.name} is a {fam} model; dlbench loads {', '.join(CLASSES)} "
                               "models into transformers' classes")


def convert(spec: ModelSpec, weights: Weights, writer: Writer = save_folder) -> Converted:
    """The folder of ``spec`` with ``weights``, from the cache where it has one, timed."""
    check_family(spec)
    started = time.perf_counter()
    cache_dir = os.environ.get("DLBENCH_EXPORT_CACHE")
    if not cache_dir:
        temporary = Path(tempfile.mkdtemp(prefix="dlbench-hf-"))
        writer(spec, weights, temporary)
        return Converted(temporary, time.perf_counter() - started, "off", temporary)
    folder = Path(cache_dir) / "transformers" / _key(spec, weights)
    if (folder / "config.json").exists():
        return Converted(folder, time.perf_counter() - started, "hit")
    partial = folder.with_name(f"{folder.name}.{os.getpid()}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    writer(spec, weights, partial)
    try:
        os.replace(partial, folder)  # atomic: a concurrent process sees a whole folder or none
    except OSError:  # another process wrote it first
        shutil.rmtree(partial, ignore_errors=True)
    return Converted(folder, time.perf_counter() - started, "miss")


def load(folder: Path, spec: ModelSpec, precision: str, variant: str, device: str) -> tuple[torch.nn.Module, float]:
    """The family's ``transformers`` class from ``folder`` at ``precision`` with the variant's attention,
    on ``device``, eval mode; and the seconds it took (:data:`UNPADDED`'s overrides applied)."""
    started = time.perf_counter()
    fam = family(spec)
    model = CLASSES[fam].from_pretrained(str(folder), dtype=DTYPES[precision], attn_implementation=ATTENTION[variant],
                                         **UNPADDED.get(fam, {}))
    model = model.to(torch.device(device)).eval()
    return model, time.perf_counter() - started
