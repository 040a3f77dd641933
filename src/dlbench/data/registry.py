"""Data sets by name, and fitting a loaded data set to a model's input."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from dlbench.data.cifar import load_cifar10
from dlbench.data.dataset import Dataset
from dlbench.data.digits import load_digits
from dlbench.data.errors import DataError
from dlbench.data.genesis import load_genesis
from dlbench.data.imdb import load_imdb
from dlbench.data.mnist import load_mnist
from dlbench.data.ptb import load_ptb
from dlbench.models.spec import ModelSpec


@dataclass(frozen=True)
class DatasetEntry:
    loader: Callable[..., Dataset]
    splits: tuple[str, ...]
    description: str
    needs_dir: bool = True


DATASETS: dict[str, DatasetEntry] = {
    "mnist": DatasetEntry(load_mnist, ("train", "test"), "MNIST handwritten digits, IDX files (1x28x28, 10 classes)"),
    "cifar10": DatasetEntry(load_cifar10, ("train", "test"), "CIFAR-10 python batches (3x32x32, 10 classes)"),
    "imdb": DatasetEntry(load_imdb, ("train", "test"), "IMDB reviews, aclImdb text tree (tokens <= 100, 2 classes)"),
    "ptb": DatasetEntry(load_ptb, ("train", "valid", "test"), "Penn Treebank LM text (word stream, vocab <= 10,000)"),
    "digits": DatasetEntry(load_digits, ("train", "test"),
                           "scikit-learn's 8x8 digits resized to 1x28x28 (bundled, no --data-dir)", needs_dir=False),
    "genesis": DatasetEntry(load_genesis, ("train", "valid", "test"),
                            "the Book of Genesis (KJV, public domain) as a byte stream, vocab 256 (bundled)",
                            needs_dir=False),
}


def list_datasets() -> list[str]:
    return list(DATASETS)


def load_dataset(name: str, data_dir: str | Path | None = None, split: str = "train", **options: object) -> Dataset:
    """Load ``split`` of data set ``name`` from the user's ``data_dir`` (never downloads).
    ``options`` go to the loader (``vocab_size``/``max_len`` for imdb, ``seq_len`` for ptb)."""
    entry = DATASETS.get(name)
    if entry is None:
        raise DataError(f"unknown data set {name!r}; known: {', '.join(DATASETS)}")
    if split not in entry.splits:
        raise DataError(f"{name} has splits {', '.join(entry.splits)}; got {split!r}")
    known = [p for p in inspect.signature(entry.loader).parameters if p not in ("data_dir", "split")]
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise DataError(f"{name}: unknown option(s) {', '.join(unknown)}; known: {', '.join(known) or 'none'}")
    return entry.loader(data_dir, split, **options)


def input_forms(dataset: Dataset) -> list[str]:
    """The model inputs ``dataset`` fits, in :class:`InputSpec` terms: ``image 1x28x28`` and
    ``vector 784`` (flattened) for MNIST, ``tokens <=100 vocab 10000 classes 2`` for IMDB, ..."""
    if dataset.kind == "image":
        return [f"image {'x'.join(map(str, dataset.sample_shape))}", f"vector {math.prod(dataset.sample_shape)}"]
    if dataset.kind == "vector":
        return [f"vector {dataset.sample_shape[0]}"]
    if dataset.kind == "tokens":
        return [f"tokens <={dataset.sample_shape[0]} vocab {dataset.vocab} classes {dataset.num_classes}"]
    return [f"token stream vocab {dataset.vocab} (next-word targets)"]


def adapt(dataset: Dataset, spec: ModelSpec) -> Dataset:
    """``dataset`` in the form ``spec``'s input takes, or a DataError saying why it cannot be.

    - image model: the image shape must match exactly (no resizing: cifar10 into lenet fails).
    - vector model: images are flattened (C*H*W must equal the vector size).
    - sequence classifier (lstm-imdb): ids must be < the model's vocab and labels < its classes;
      sequences longer than its max length are cut to it.
    - language model (lstm-ptb): a stream whose vocabulary fits; windows get its ``seq_len``.
    - a model without labels (sae pre-training) gets batches with ``y`` None.
    Arrays are reshaped views where possible, not copies.
    """
    inp = spec.input
    want = _describe(spec)
    where = f"{dataset.name} ({', '.join(input_forms(dataset))}) does not fit {spec.name} ({want})"
    if inp.kind in ("image", "vector"):
        if dataset.kind not in ("image", "vector"):
            raise DataError(f"{where}: it is not image data")
        if inp.kind == "image":
            if dataset.kind != "image" or dataset.sample_shape != tuple(inp.shape):
                raise DataError(f"{where}: the image shapes differ")
            out = dataset
        else:
            size = math.prod(dataset.sample_shape)
            if size != inp.shape[0]:
                raise DataError(f"{where}: {size} values per sample, the model takes {inp.shape[0]}")
            out = replace(dataset, kind="vector", x=dataset.x.reshape(len(dataset), size))
        return _labels(out, spec, where)
    if inp.labels == "sequence":
        if dataset.kind != "stream":
            raise DataError(f"{where}: a language model needs a token stream")
        _check_vocab(dataset, spec, where)
        return replace(dataset, seq_len=int(inp.shape[0]))
    if dataset.kind != "tokens":
        raise DataError(f"{where}: it is not a set of token sequences")
    if not inp.variable_length and dataset.lengths is not None and int(dataset.lengths.min()) < dataset.sample_shape[0]:
        raise DataError(f"{where}: the model takes fixed-length sequences")
    _check_vocab(dataset, spec, where)
    out = dataset
    max_len = int(inp.shape[0])
    if dataset.sample_shape[0] > max_len:
        lengths = None if dataset.lengths is None else dataset.lengths.clip(max=max_len)
        out = replace(dataset, x=dataset.x[:, :max_len], lengths=lengths)
    return _labels(out, spec, where)


def models_for(dataset: Dataset) -> list[str]:
    """Names of the registered models (default options) that ``dataset`` fits."""
    from dlbench.models import get_model, list_models

    names = []
    for name in list_models():
        try:
            adapt(dataset, get_model(name))
        except DataError:
            continue
        names.append(name)
    return names


def _labels(dataset: Dataset, spec: ModelSpec, where: str) -> Dataset:
    if spec.input.labels == "none":
        return replace(dataset, y=None)
    if dataset.y is None:
        raise DataError(f"{where}: the data set has no labels")
    if dataset.num_classes > spec.input.classes:
        raise DataError(f"{where}: {dataset.num_classes} classes, the model has {spec.input.classes} outputs")
    return dataset


def _check_vocab(dataset: Dataset, spec: ModelSpec, where: str) -> None:
    if dataset.vocab > spec.input.vocab:
        raise DataError(f"{where}: ids up to {dataset.vocab - 1}, the model's embedding has {spec.input.vocab} rows")


def _describe(spec: ModelSpec) -> str:
    inp = spec.input
    if inp.kind == "image":
        return f"image {'x'.join(map(str, inp.shape))}"
    if inp.kind == "vector":
        return f"vector {inp.shape[0]}"
    if inp.labels == "sequence":
        return f"token stream vocab {inp.vocab}, {inp.shape[0]} steps"
    return f"tokens <={inp.shape[0]} vocab {inp.vocab} classes {inp.classes}"
