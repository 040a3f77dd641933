"""``digits``: a small real data set that needs no download, for the out-of-the-box demo.

scikit-learn's ``load_digits`` (the UCI "Optical Recognition of Handwritten Digits" test set:
1,797 real 8x8 handwritten digits, values 0..16, stored inside the scikit-learn package;
``pip install 'dlbench[data]'``). To run MNIST models (lenet 1x28x28, fcn-r and sae on 784
vectors) unchanged, each image is

1. scaled to [0, 1] (value / 16), like MNIST's byte / 255, ink high on a 0 background as in MNIST;
2. resized to 28x28 bilinearly with ``scipy.ndimage.zoom(image, 3.5, order=1)``: output pixel
   (i, j) interpolates the input at (i * 7/27, j * 7/27), so the corner pixels line up and
   nothing outside the 8x8 grid is sampled; values stay in [0, 1].

Split (fixed, stratified): for each digit d, its images (in scikit-learn's order) are permuted by
``np.random.default_rng(SPLIT_SEED + d).permutation``; the first 36 go to the test set. So
test = 360 images, 36 of each digit; train = the other 1,437. Both keep scikit-learn's order.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dlbench.data.dataset import Dataset
from dlbench.data.errors import DataError

SIZE = 28
TEST_PER_CLASS = 36
SPLIT_SEED = 0


def _raw() -> tuple[np.ndarray, np.ndarray]:
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise DataError("digits needs scikit-learn, which ships the data: pip install 'dlbench[data]'") from None
    bunch = load_digits()
    return np.asarray(bunch.images, dtype=np.float64), np.asarray(bunch.target, dtype=np.int64)


def held_out_indices(labels: np.ndarray) -> np.ndarray:
    """Sorted indices of the test images: 36 per digit, chosen as the module docstring says."""
    picked = []
    for d in range(10):
        members = np.flatnonzero(labels == d)
        if len(members) <= TEST_PER_CLASS:
            raise DataError(f"digits: only {len(members)} images of {d}, expected more than {TEST_PER_CLASS}")
        picked.append(members[np.random.default_rng(SPLIT_SEED + d).permutation(len(members))[:TEST_PER_CLASS]])
    return np.sort(np.concatenate(picked))


def resize(images: np.ndarray, size: int = SIZE) -> np.ndarray:
    """(N, 8, 8) images in [0, 1] -> (N, size, size) float32, bilinear, corners aligned."""
    from scipy import ndimage

    factor = size / images.shape[-1]
    out = ndimage.zoom(images, (1, factor, factor), order=1, grid_mode=False)
    if out.shape[1:] != (size, size):  # zoom rounds the output size; 8 * 3.5 = 28 exactly
        raise DataError(f"digits: resize gave {out.shape[1:]}, expected {size}x{size}")
    return np.clip(out, 0.0, 1.0).astype(np.float32)


def load_digits(data_dir: str | Path | None = None, split: str = "train") -> Dataset:
    """digits ``split`` (train 1,437 / test 360) as float32 (N, 1, 28, 28) in [0, 1] and int64
    labels 0..9. ``data_dir`` is ignored: the data ships with scikit-learn."""
    if split not in ("train", "test"):
        raise DataError(f"digits has splits train, test; got {split!r}")
    images, labels = _raw()
    test = np.zeros(len(labels), dtype=bool)
    test[held_out_indices(labels)] = True
    keep = test if split == "test" else ~test
    x = resize(images[keep] / 16.0)[:, None, :, :]
    return Dataset("digits", split, "image", x, labels[keep], 10,
                   info={"source": "sklearn.datasets.load_digits", "resize": "scipy.ndimage.zoom order=1 (8x8 -> 28x28)",
                         "split": f"{TEST_PER_CLASS} test images per digit, seeds {SPLIT_SEED}..{SPLIT_SEED + 9}"})
