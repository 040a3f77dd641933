"""CIFAR-10 from its "python version" batches (Krizhevsky, ``cifar-10-python.tar.gz``).

Each batch file is a pickled dict with ``b'data'``, a (N, 3072) uint8 array (1024 red, then
1024 green, then 1024 blue values of a 32x32 image, rows first), and ``b'labels'``, N ints
in 0..9. ``data_batch_1`` .. ``data_batch_5`` are the training set, ``test_batch`` the test set.

Pickle safety: unpickling can run code named in the file. These files are read with a
restricted unpickler that only resolves the few NumPy names an array needs (and
``_codecs.encode``, which Python 3 pickles use for bytes); any other global in the file is
refused with a DataError, so a tampered file cannot execute anything. Beyond that we do what
``pickle.load(f, encoding='bytes')`` does.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import numpy as np

from dlbench.data.dataset import Dataset
from dlbench.data.errors import DataError
from dlbench.data.files import data_root, find_dir, find_file, read_bytes

TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILES = ("test_batch",)
SUBDIRS = ("cifar-10-batches-py", "cifar10/cifar-10-batches-py", "cifar10", "")
PIXELS = 3 * 32 * 32
SAFE_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
    ("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer"),
    ("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode"),
}


class _SafeUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> object:
        if (module, name) not in SAFE_GLOBALS:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name} (not a NumPy array part)")
        return super().find_class(module, name)


def read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One batch file: (N, 3072) uint8 data and (N,) int64 labels, checked."""
    raw = read_bytes(path)
    try:
        obj = _SafeUnpickler(io.BytesIO(raw), encoding="bytes").load()
    except Exception as exc:  # noqa: BLE001 - any unpickling failure means "not a CIFAR batch"
        raise DataError(f"{path}: not a readable CIFAR-10 python batch (pickle error: {exc})") from None
    if not isinstance(obj, dict):
        raise DataError(f"{path}: expected a pickled dict with b'data' and b'labels', got {type(obj).__name__}")
    missing = [k.decode() for k in (b"data", b"labels") if k not in obj]
    if missing:
        keys = ", ".join(repr(k) for k in list(obj)[:6])
        raise DataError(f"{path}: missing key(s) {', '.join(missing)} (expected b'data' and b'labels'; found {keys})")
    data = obj[b"data"]
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != PIXELS:
        what = f"{data.dtype} array {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise DataError(f"{path}: b'data' is {what}, expected a uint8 array (N, {PIXELS})")
    try:
        labels = np.asarray(obj[b"labels"], dtype=np.int64)
    except (TypeError, ValueError):
        raise DataError(f"{path}: b'labels' is not a list of integers") from None
    if labels.shape != (data.shape[0],):
        raise DataError(f"{path}: {labels.size} labels for {data.shape[0]} images, expected one label per image")
    if labels.size and (labels.min() < 0 or labels.max() > 9):
        raise DataError(f"{path}: labels in {labels.min()}..{labels.max()}, expected 0..9")
    return data, labels


def channel_stats(batches: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Exact per-channel mean and (population) std of the pixel values scaled to [0, 1], from
    byte histograms (no float copy of the data set)."""
    counts = np.zeros((3, 256), dtype=np.int64)
    for data in batches:
        planes = data.reshape(-1, 3, 1024)
        for c in range(3):
            counts[c] += np.bincount(planes[:, c].ravel(), minlength=256)
    values = np.arange(256, dtype=np.float64) / 255.0
    n = counts.sum(axis=1).astype(np.float64)
    mean = (counts * values).sum(axis=1) / n
    var = (counts * values**2).sum(axis=1) / n - mean**2
    std = np.sqrt(np.maximum(var, 0.0))
    return mean, np.where(std > 0, std, 1.0)  # a constant channel (only in toy files) is left unscaled


def load_cifar10(data_dir: str | Path | None, split: str = "train") -> Dataset:
    """CIFAR-10 ``split`` (train: 50,000, test: 10,000) as float32 (N, 3, 32, 32) and int64 labels.

    Pixels are scaled to [0, 1], then normalised per channel with the TRAINING set's mean and
    standard deviation (population std over every pixel of the channel; for the real data about
    mean 0.4914, 0.4822, 0.4465 and std 0.2470, 0.2435, 0.2616). The test split is normalised
    with the same training statistics, so loading it reads the training batches too. The
    constants are in ``info['mean']`` and ``info['std']``.

    The batches are looked for in ``DATA_DIR/cifar-10-batches-py/`` (as the archive unpacks),
    ``DATA_DIR/cifar10/cifar-10-batches-py/``, ``DATA_DIR/cifar10/``, then ``DATA_DIR/``.
    """
    if split not in ("train", "test"):
        raise DataError(f"cifar10 has splits train, test; got {split!r}")
    root = data_root(data_dir, "cifar10")
    directory = find_dir(root, SUBDIRS, TRAIN_FILES[0] if split == "train" else TEST_FILES[0], "cifar10")
    train_paths = [find_file(directory, [name], "a CIFAR-10 training batch") for name in TRAIN_FILES]
    train = [read_batch(p) for p in train_paths]
    mean, std = channel_stats([data for data, _ in train])
    if split == "train":
        paths, parts = train_paths, train
    else:
        paths = [find_file(directory, [TEST_FILES[0]], "the CIFAR-10 test batch")]
        parts = [read_batch(paths[0])]
    data = np.concatenate([d for d, _ in parts]) if len(parts) > 1 else parts[0][0]
    labels = np.concatenate([lab for _, lab in parts])
    x = data.reshape(-1, 3, 32, 32).astype(np.float32)
    x /= np.float32(255.0)
    x -= mean.astype(np.float32)[None, :, None, None]
    x /= std.astype(np.float32)[None, :, None, None]
    return Dataset("cifar10", split, "image", x, labels, 10,
                   info={"files": [str(p) for p in paths], "mean": mean.tolist(), "std": std.tolist()})
