"""Float64 arithmetic over a model's parameters a slice at a time, for the gate's reference steps.

The gate's oracle works in float64 on every parameter, and a whole-array expression makes a whole-array
temporary per operation: a step of AlexNet's 61 million parameters made a dozen, each a fresh 488 MB
the kernel maps and zeroes on first touch (slow, and slower still in a virtual machine), and that was
most of the gate's time on the zoo's large models. Here the same expressions run on slices of
:data:`CHUNK` elements, whose temporaries stay in the cache; element by element the arithmetic is the
same, so results are bit-identical (sums add in another order).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

#: elements per slice: float64 temporaries of 512 KiB
CHUNK = 1 << 16


def contiguous(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each array C-contiguous, copied once here where it is not: a backend's gradients are often
    transposed views of its own layout, and every slice-wise pass over a view would copy it again."""
    return {k: np.ascontiguousarray(a) for k, a in arrays.items()}


def elementwise(fn: Callable[..., tuple[np.ndarray, ...]], *arrays: np.ndarray | None) -> tuple[np.ndarray, ...]:
    """``fn(*arrays)`` in float64, one slice at a time: ``fn`` takes one float64 slice per array (0.0 for a
    None) and returns a tuple of results, each the slice's shape; the results come back whole, in the
    first array's shape."""
    first = np.asarray(next(a for a in arrays if a is not None))
    flat = [None if a is None else np.asarray(a).reshape(-1) for a in arrays]
    outputs: list[np.ndarray] = []
    for start in range(0, max(first.size, 1), CHUNK):
        parts = [0.0 if a is None else a[start:start + CHUNK].astype(np.float64) for a in flat]
        results = fn(*parts)
        if not outputs:
            outputs = [np.empty(first.size, np.float64) for _ in results]
        for out, part in zip(outputs, results, strict=True):
            out[start:start + CHUNK] = part
    return tuple(out.reshape(first.shape) for out in outputs)


def squared_distance(a: np.ndarray, b: np.ndarray | None = None) -> float:
    """``||a - b||^2`` (``||a||^2`` without ``b``) in float64, a slice at a time."""
    a = np.asarray(a).reshape(-1)
    b = None if b is None else np.asarray(b).reshape(-1)
    total = 0.0
    for start in range(0, a.size, CHUNK):
        d = a[start:start + CHUNK].astype(np.float64)
        if b is not None:
            d -= b[start:start + CHUNK]
        total += float(d @ d)
    return total


def norm(arrays) -> float:
    """The L2 norm of several arrays taken as one vector (a model's parameters or gradients), in float64."""
    return math.sqrt(sum(squared_distance(a) for a in arrays))


def dot(a: np.ndarray, b: np.ndarray) -> float:
    """``<a, b>`` in float64, a slice at a time."""
    a, b = np.asarray(a).reshape(-1), np.asarray(b).reshape(-1)
    return sum(float(a[s:s + CHUNK].astype(np.float64) @ b[s:s + CHUNK].astype(np.float64))
               for s in range(0, a.size, CHUNK))
