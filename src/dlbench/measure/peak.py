"""The machine's measured matrix-multiply peak, per precision: what "% of peak" in a result refers to.

Measured per thread count and engine (NumPy's BLAS, :data:`NUMPY`, and each framework folder's ``gemm``
part, gathered by :func:`dlbench.frameworks.peak_engines`), each engine in a fresh process of its own pinned
to that many cores, its thread variables set before anything is imported (one engine's runtime never
shares a process with another's thread pool); the fastest of a precision counts as that precision's
peak, and the engine that set it is stored and named wherever the peak is shown (:func:`describe`).
An engine not installed, or whose process fails, is skipped with its reason. Square 2048 matrices,
best of several calls after a warm-up:

* ``fp32``: NumPy's BLAS (``numpy``), torch's MKL/oneDNN (``torch``), ONNX Runtime's MLAS
  (``onnxruntime``, a one-node MatMul graph) and OpenVINO's CPU plugin (``openvino``: oneDNN's
  kernels, a one-node MatMul model at f32 inference precision): on an AMD EPYC with AVX-512
  (2026-11-26) NumPy's and torch's SGEMM reached 129 GFLOP/s on one core and MLAS 230, so ONNX
  Runtime's fcn-r forward showed 180% of a peak that only NumPy and torch had set;
* ``bf16``: torch's bfloat16 matmul (``torch:bf16``; oneDNN's AMX-BF16 or AVX512-BF16 kernels), where
  the CPU computes bfloat16 natively (:data:`dlbench.core.precision.NATIVE`);
* ``int8``: torch's int8 x int8 -> int32 matmul (``torch:int8``, ``torch._int_mm``; AMX-INT8 or VNNI),
  where the CPU has int8 dot products; a multiply-add counts 2 operations, as for floats.

A bfloat16 or int8 cell is divided by its own precision's peak, never by float32's (a bf16 cell at
322% of the float32 peak was seen): a reduced-precision kernel on AMX runs several times faster than
any float32 one. A precision without a measured peak gets no "% of peak". The engines are stored as
the peaks table's engine names (``engine[:precision]``), so the store's schema is unchanged.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from dlbench.core.precision import DEFAULT as DEFAULT_PRECISION
from dlbench.core.precision import cpu_flags, get_precision

SIZE = 2048
#: the peak a cell's precision is divided by: its compute type's
PEAK_OF = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "int8": "int8", "tf32": "tf32"}


def best_rate(matmul, a, b, repeats: int = 6) -> float:
    matmul(a, b)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        matmul(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2 * SIZE**3 / best / 1e9


def engine_precision(engine: str) -> str:
    """``torch:bf16`` -> ``bf16``; a bare engine name (every run before precisions) is float32."""
    return engine.partition(":")[2] or DEFAULT_PRECISION


def peak_precision(precision: str) -> str:
    """The peak a cell of ``precision`` is measured against: ``amp-bf16`` computes in bfloat16, so ``bf16``."""
    return PEAK_OF[get_precision(precision).compute_dtype]


def peak_for(rates: dict[str, float] | None, precision: str = DEFAULT_PRECISION) -> tuple[str, float] | None:
    """The fastest engine of the precision's peak among ``rates`` (engine -> GFLOP/s), or None."""
    want = peak_precision(precision)
    mine = {e: r for e, r in (rates or {}).items() if engine_precision(e) == want}
    if not mine:
        return None
    best = max(mine, key=mine.__getitem__)
    return best, mine[best]


def by_precision(rates: dict[str, float]) -> dict[str, float]:
    """Each precision's peak among ``rates``."""
    out: dict[str, float] = {}
    for e, r in rates.items():
        p = engine_precision(e)
        out[p] = max(out.get(p, 0.0), r)
    return out


def setters(rates: dict[str, float]) -> dict[str, str]:
    """Each precision's peak among ``rates``: the engine that set it (shown beside the peak)."""
    out: dict[str, str] = {}
    for e, r in rates.items():
        p = engine_precision(e)
        if p not in out or r > rates[out[p]]:
            out[p] = e
    return out


def describe(engine: str, rate: float) -> str:
    """How a result names the peak it was divided by: ``bf16 peak 1,234 GFLOP/s (torch:bf16)``."""
    return f"{engine_precision(engine)} peak {rate:,.0f} GFLOP/s ({engine})"


@dataclass(frozen=True)
class PeakEngine:
    """One engine whose GEMMs may set a peak: the modules it needs and what it measures in this process
    (the caller pins affinity and sets the thread variables before any import: one engine per fresh
    process, :class:`dlbench.core.job.PeakJob`), as ``engine[:precision]`` -> GFLOP/s."""

    name: str
    modules: tuple[str, ...]
    measure: Callable[[int, frozenset[str]], dict[str, float]]

    def missing(self) -> str | None:
        """Why the engine cannot be measured here (a module not installed), or None."""
        absent = [m for m in self.modules if importlib.util.find_spec(m) is None]
        return f"not installed (no module {', '.join(absent)})" if absent else None


def operands() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return (rng.standard_normal((SIZE, SIZE), dtype=np.float32), rng.standard_normal((SIZE, SIZE), dtype=np.float32))


def _numpy(threads: int, flags: frozenset[str]) -> dict[str, float]:
    a, b = operands()
    try:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(threads):
            return {"numpy": best_rate(np.matmul, a, b)}
    except ImportError:
        return {"numpy": best_rate(np.matmul, a, b)}


#: NumPy's BLAS, the one engine that is no framework's: the others are the framework folders' ``gemm`` parts
NUMPY = PeakEngine("numpy", ("numpy",), _numpy)


def measure_engine(engine: PeakEngine, threads: int, flags: frozenset[str] | None = None) -> dict[str, float]:
    """GFLOP/s of ``engine``'s GEMMs in this process (the caller pins affinity and thread variables);
    reduced precisions only where ``flags`` (the CPU's, by default) say the CPU computes them natively."""
    return engine.measure(threads, cpu_flags() if flags is None else flags)


def measure_peak_gflops(engines: Iterable[PeakEngine], threads: int,
                        flags: frozenset[str] | None = None) -> dict[str, float]:
    """Every installed engine's GEMMs, one after another in this process (a run measures each in a fresh
    process of its own: :func:`dlbench.running.runner.measure_peaks`)."""
    rates: dict[str, float] = {}
    for engine in engines:
        if engine.missing() is None:
            rates.update(measure_engine(engine, threads, flags))
    return rates
