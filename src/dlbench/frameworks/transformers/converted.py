"""Models converted to a runtime's own format, from a Hugging Face folder dlbench writes, cached on disk.

The runtimes people deploy (ONNX Runtime GenAI, OpenVINO GenAI) read a model in their own format, made by
their own converter from a Hugging Face folder. dlbench writes that folder from its canonical weights
(:func:`dlbench.gate.hf_transformers.save_folder`, what ``dlbench export-model`` writes) with a word-level
tokenizer of the model's vocabulary (token ``<i>`` is id ``i``: dlbench feeds token ids, never text, but the
converters copy a tokenizer and the pipelines load one), hands it to the converter, and keeps the result
under ``$DLBENCH_CACHE_DIR/converted`` (else ``~/.cache/dlbench/converted``), keyed by the weights' and
config's hash, the format, the runtime's version and any planted change, so a second cell converts nothing.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dlbench.frameworks.base import UnsupportedError
from dlbench.frameworks.cache import cache_dir
from dlbench.models.spec import ModelSpec
from dlbench.models.weights import Weights

#: a change made to the written Hugging Face folder before conversion (tests plant defects with one)
Tamper = Callable[[Path], None]


@dataclass(frozen=True)
class Converted:
    """A converted model's folder, the seconds the conversion took (0 on a cache hit) and whether it was one."""

    path: Path
    convert_s: float
    cache_hit: bool

    def info(self) -> dict:
        return {"convert_s": self.convert_s, "convert_cache": "hit" if self.cache_hit else "miss",
                "converted": str(self.path)}


def family(spec: ModelSpec, runtime: str) -> str:
    """``spec``'s Hugging Face family; a model without one is unsupported in ``runtime`` (nothing to convert)."""
    from dlbench.models.hf_layout import family_of

    try:
        return family_of(spec)
    except ValueError as exc:
        raise UnsupportedError(f"{runtime}: {exc}") from None


def root() -> Path:
    """Where converted models are kept."""
    path = cache_dir("converted")
    return Path(path) if path else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "dlbench" / "converted"


def weights_key(spec: ModelSpec, weights: Weights) -> str:
    """A digest of the Hugging Face config the spec writes and every canonical array (name, shape, float32 bytes)."""
    from dlbench.frameworks.transformers.hf_model import config

    h = hashlib.sha256(config(spec).to_json_string(use_diff=False).encode())
    for name in sorted(weights.params):
        array = np.ascontiguousarray(weights.params[name], np.float32)
        h.update(f"{name}{array.shape}".encode())
        h.update(array.tobytes())
    return h.hexdigest()[:16]


def write_tokenizer(folder: Path, vocab: int) -> None:
    """A word-level tokenizer of ``vocab`` tokens ``<0>`` .. ``<vocab-1>`` (``<i>`` is id ``i``) in ``folder``."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({f"<{i}>": i for i in range(vocab)}, unk_token="<0>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<0>").save_pretrained(str(folder))


def hf_folder(spec: ModelSpec, weights: Weights, folder: Path, tamper: Tamper | None = None) -> Path:
    """``spec`` with ``weights`` as a Hugging Face folder with a tokenizer, ``tamper`` applied last."""
    from dlbench.frameworks.transformers.hf_model import save_folder

    save_folder(spec, weights, folder)
    vocab = json.loads((folder / "config.json").read_text()).get("vocab_size")
    if not isinstance(vocab, int):
        raise UnsupportedError(f"{spec.name} is no language model: its Hugging Face config has no vocabulary")
    write_tokenizer(folder, vocab)
    if tamper is not None:
        tamper(folder)
    return folder


def convert(spec: ModelSpec, weights: Weights, runtime: str, fmt: str, version: str,
            run: Callable[[Path, Path], None], tamper: Tamper | None = None) -> Converted:
    """The model in ``runtime``'s format ``fmt``: from the cache, or written by ``run(hf_folder, out_folder)``
    (the runtime's converter) and cached, one process at a time per model (a lock file beside it). A
    conversion that fails leaves nothing in the cache."""
    planted = f"-{tamper.__name__}" if tamper is not None else ""
    try:
        key = weights_key(spec, weights)
    except ValueError as exc:  # no Hugging Face counterpart (models/hf_layout.py): nothing to convert from
        raise UnsupportedError(f"{runtime}: {exc}") from None
    path = root() / runtime / f"{key}-{fmt}-{version}{planted}"
    if (path / "done").exists():
        return Converted(path, 0.0, True)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f".{path.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two processes converting one model: the second waits, then reads it
        if (path / "done").exists():
            return Converted(path, 0.0, True)
        return _convert(spec, weights, runtime, fmt, version, run, tamper, path)


def _convert(spec: ModelSpec, weights: Weights, runtime: str, fmt: str, version: str,
             run: Callable[[Path, Path], None], tamper: Tamper | None, path: Path) -> Converted:
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".converting-") as tmp:
        started = time.perf_counter()
        hf = hf_folder(spec, weights, Path(tmp) / "hf", tamper)
        out = Path(tmp) / "out"
        run(hf, out)
        seconds = time.perf_counter() - started
        (out / "done").write_text(json.dumps({"convert_s": seconds, "runtime": runtime, "format": fmt,
                                              "version": version}))
        shutil.rmtree(path, ignore_errors=True)
        os.replace(out, path)
    return Converted(path, seconds, False)
