"""MNIST from its original IDX files (LeCun et al.), gzipped or not.

An IDX file is a big-endian header, magic ``0x0000 TT NN`` (TT 0x08 = unsigned bytes, NN the
number of dimensions), then one 32-bit size per dimension, then the values. MNIST images are
magic 2051 (N x 28 x 28), labels magic 2049 (N). We check the magic, the dimensions and that
the file holds exactly as many bytes as its header says (a truncated download is an error, not
fewer samples). Fashion-MNIST uses the same files and names, so it loads too.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dlbench.data.dataset import Dataset
from dlbench.data.errors import DataError
from dlbench.data.files import data_root, find_file, read_bytes

IMAGES_MAGIC = 2051
LABELS_MAGIC = 2049
SIZE = 28
PREFIX = {"train": "train", "test": "t10k"}
SUBDIRS = ("mnist", "MNIST/raw", "")


def file_names(split: str, part: str) -> list[str]:
    """Accepted names of one file: the official one (``train-images-idx3-ubyte``), gzipped or not,
    and the dotted form some mirrors use (``train-images.idx3-ubyte``)."""
    dims = "idx3" if part == "images" else "idx1"
    base = f"{PREFIX[split]}-{part}"
    names = [f"{base}-{dims}-ubyte", f"{base}.{dims}-ubyte"]
    return [n + ext for n in names for ext in ("", ".gz")]


def read_idx(path: Path, magic: int, shape_tail: tuple[int, ...]) -> np.ndarray:
    """An IDX file of unsigned bytes with the given magic and trailing dimensions, as uint8."""
    raw = read_bytes(path)
    ndim = 1 + len(shape_tail)
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"{path}: {len(raw)} bytes, too short for an IDX header of {header} bytes")
    found = int.from_bytes(raw[:4], "big")
    if found != magic:
        raise DataError(f"{path}: magic number {found}, expected {magic} "
                        f"(an IDX file of unsigned bytes with {ndim} dimension{'s' if ndim > 1 else ''})")
    dims = tuple(int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    if dims[1:] != shape_tail:
        raise DataError(f"{path}: dimensions {'x'.join(map(str, dims))}, expected N x {'x'.join(map(str, shape_tail))}")
    expected = header + int(np.prod(dims))
    if len(raw) != expected:
        state = "truncated" if len(raw) < expected else "has trailing bytes"
        raise DataError(f"{path}: {state}: {len(raw)} bytes, the header says {expected} "
                        f"({'x'.join(map(str, dims))} values after a {header}-byte header)")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)


def load_mnist(data_dir: str | Path | None, split: str = "train") -> Dataset:
    """MNIST ``split`` (train: 60,000, test: 10,000 in the real files) as float32 images
    (N, 1, 28, 28) scaled to [0, 1] (byte / 255) and int64 labels.

    Files are looked for in ``DATA_DIR/mnist/``, ``DATA_DIR/MNIST/raw/`` (torchvision's layout),
    then ``DATA_DIR/``.
    """
    if split not in PREFIX:
        raise DataError(f"mnist has splits train, test; got {split!r}")
    root = data_root(data_dir, "mnist")
    image_names, label_names = file_names(split, "images"), file_names(split, "labels")
    directory = _find(root, image_names)
    images_path = find_file(directory, image_names, f"mnist {split} images")
    labels_path = find_file(directory, label_names, f"mnist {split} labels")
    images = read_idx(images_path, IMAGES_MAGIC, (SIZE, SIZE))
    labels = read_idx(labels_path, LABELS_MAGIC, ())
    if len(images) != len(labels):
        raise DataError(f"{labels_path}: {len(labels)} labels for {len(images)} images in {images_path.name}")
    if labels.size and labels.max() > 9:
        raise DataError(f"{labels_path}: label {int(labels.max())}, expected digits 0..9")
    x = (images.astype(np.float32) / np.float32(255.0))[:, None, :, :]
    return Dataset("mnist", split, "image", x, labels.astype(np.int64), 10,
                   info={"files": [str(images_path), str(labels_path)]})


def _find(root: Path, names: list[str]) -> Path:
    for sub in SUBDIRS:
        d = root / sub if sub else root
        if any((d / n).is_file() for n in names):
            return d
    where = ", ".join(str((root / sub if sub else root) / names[0]) for sub in SUBDIRS)
    raise DataError(f"mnist: file not found; looked for {where} (or the same name + .gz)")
