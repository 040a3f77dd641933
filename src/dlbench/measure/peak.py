"""The machine's measured float32 matrix-multiply peak: what "% of peak" in a result refers to.

Measured per thread count in a fresh process pinned to that many cores, with every installed
engine that can do an SGEMM here (NumPy's BLAS, and torch's MKL/oneDNN if installed); the
fastest counts as the peak. Square 2048 matrices, best of several calls after a warm-up.
"""

from __future__ import annotations

import importlib.util
import time

import numpy as np

SIZE = 2048


def _best_rate(matmul, a, b, repeats: int = 6) -> float:
    matmul(a, b)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        matmul(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2 * SIZE**3 / best / 1e9


def measure_peak_gflops(threads: int) -> dict[str, float]:
    """GFLOP/s per engine in this process (the caller pins affinity and thread variables)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((SIZE, SIZE), dtype=np.float32)
    b = rng.standard_normal((SIZE, SIZE), dtype=np.float32)
    rates: dict[str, float] = {}
    try:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(threads):
            rates["numpy"] = _best_rate(np.matmul, a, b)
    except Exception:
        rates["numpy"] = _best_rate(np.matmul, a, b)
    if importlib.util.find_spec("torch") is not None:
        import torch

        torch.set_num_threads(threads)
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        rates["torch"] = _best_rate(torch.matmul, ta, tb)
    return rates
