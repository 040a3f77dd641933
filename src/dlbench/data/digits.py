"""``digits``: a small real data set that needs no download, for the out-of-the-box demo.

The UCI "Optical Recognition of Handwritten Digits" test set as scikit-learn ships it
(``sklearn.datasets.load_digits``): 1,797 real 8x8 handwritten digits, values 0..16. dlbench
ships a copy, ``digits.npz`` next to this module (made by ``scripts/make_digits.py``; BSD-3-Clause
like scikit-learn, see ``digits.LICENSE.txt``), so that every measuring process can read it: a
framework's own environment (``dlbench envs``) has neither scikit-learn nor, mostly, SciPy, and
must not need them. The archive's sha256 is checked at every load. To run MNIST models (lenet
1x28x28, fcn-r and sae on 784 vectors) unchanged, each image is

1. scaled to [0, 1] (value / 16), like MNIST's byte / 255, ink high on a 0 background as in MNIST;
2. resized to 28x28 bilinearly, corners aligned (what ``scipy.ndimage.zoom(image, 3.5, order=1,
   grid_mode=False)`` computes, done here in NumPy): output pixel (i, j) interpolates the input at
   (i * 7/27, j * 7/27), so the corner pixels line up and nothing outside the 8x8 grid is
   sampled; values stay in [0, 1].

Split (fixed, stratified): for each digit d, its images (in scikit-learn's order) are permuted by
``np.random.default_rng(SPLIT_SEED + d).permutation``; the first 36 go to the test set. So
test = 360 images, 36 of each digit; train = the other 1,437. Both keep scikit-learn's order.
"""

from __future__ import annotations

import hashlib
import io
from importlib import resources
from pathlib import Path

import numpy as np

from dlbench.data.dataset import Dataset
from dlbench.data.errors import DataError

SIZE = 28
TEST_PER_CLASS = 36
SPLIT_SEED = 0
ARCHIVE = "digits.npz"
#: sha256 of ``digits.npz`` as ``scripts/make_digits.py`` writes it
SHA256 = "aa64e930663d6e9271e1566601d65e70236553f73ec6cb041a4ab37167cf1d04"


def _raw() -> tuple[np.ndarray, np.ndarray]:
    """The 1,797 images (float64, 0..16) and labels (int64), in scikit-learn's order."""
    try:
        data = resources.files("dlbench.data").joinpath(ARCHIVE).read_bytes()
    except OSError as exc:
        raise DataError(f"digits: cannot read the bundled {ARCHIVE} ({exc}); reinstall dlbench") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != SHA256:
        raise DataError(f"digits: the bundled {ARCHIVE} has sha256 {digest}, expected {SHA256} "
                        "(damaged; reinstall dlbench, or remake it with scripts/make_digits.py)")
    with np.load(io.BytesIO(data), allow_pickle=False) as arrays:
        return arrays["images"].astype(np.float64), arrays["labels"].astype(np.int64)


def held_out_indices(labels: np.ndarray) -> np.ndarray:
    """Sorted indices of the test images: 36 per digit, chosen as the module docstring says."""
    picked = []
    for d in range(10):
        members = np.flatnonzero(labels == d)
        if len(members) <= TEST_PER_CLASS:
            raise DataError(f"digits: only {len(members)} images of {d}, expected more than {TEST_PER_CLASS}")
        picked.append(members[np.random.default_rng(SPLIT_SEED + d).permutation(len(members))[:TEST_PER_CLASS]])
    return np.sort(np.concatenate(picked))


def _linear(images: np.ndarray, axis: int, size: int) -> np.ndarray:
    """Linear interpolation along ``axis`` to ``size`` points, the first and last on the input's."""
    n = images.shape[axis]
    at = np.arange(size) * ((n - 1) / (size - 1))
    lo = np.clip(np.floor(at).astype(np.int64), 0, n - 2)
    frac = (at - lo).reshape([-1 if a == axis else 1 for a in range(images.ndim)])
    return (1.0 - frac) * np.take(images, lo, axis=axis) + frac * np.take(images, lo + 1, axis=axis)


def resize(images: np.ndarray, size: int = SIZE) -> np.ndarray:
    """(N, 8, 8) images in [0, 1] -> (N, size, size) float32, bilinear, corners aligned."""
    out = _linear(_linear(images, 1, size), 2, size)
    return np.clip(out, 0.0, 1.0).astype(np.float32)


def load_digits(data_dir: str | Path | None = None, split: str = "train") -> Dataset:
    """digits ``split`` (train 1,437 / test 360) as float32 (N, 1, 28, 28) in [0, 1] and int64
    labels 0..9. ``data_dir`` is ignored: the data ships with dlbench."""
    if split not in ("train", "test"):
        raise DataError(f"digits has splits train, test; got {split!r}")
    images, labels = _raw()
    test = np.zeros(len(labels), dtype=bool)
    test[held_out_indices(labels)] = True
    keep = test if split == "test" else ~test
    x = resize(images[keep] / 16.0)[:, None, :, :]
    return Dataset("digits", split, "image", x, labels[keep], 10,
                   info={"source": f"dlbench/data/{ARCHIVE} (sklearn.datasets.load_digits), sha256 {SHA256}",
                         "resize": "bilinear, corners aligned (8x8 -> 28x28)",
                         "split": f"{TEST_PER_CLASS} test images per digit, seeds {SPLIT_SEED}..{SPLIT_SEED + 9}"})
