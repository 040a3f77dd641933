"""The machine's measured matrix-multiply peak, per precision: what "% of peak" in a result refers to.

Measured per thread count in a fresh process pinned to that many cores, with every installed
engine that can do the multiply here; the fastest of a precision counts as that precision's peak.
Square 2048 matrices, best of several calls after a warm-up:

* ``fp32``: NumPy's BLAS (``numpy``), torch's MKL/oneDNN (``torch``) and ONNX Runtime's MLAS
  (``onnxruntime``, a one-node MatMul graph): on an AMD EPYC with AVX-512 (2026-11-26) NumPy's and
  torch's SGEMM reached 129 GFLOP/s on one core and MLAS 230, so ONNX Runtime's fcn-r forward showed
  180% of a peak that only two engines had set;
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
from collections.abc import Callable

import numpy as np

from dlbench.core.precision import DEFAULT as DEFAULT_PRECISION
from dlbench.core.precision import NATIVE, cpu_flags, get_precision

SIZE = 2048
#: the peak a cell's precision is divided by: its compute type's
PEAK_OF = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "int8": "int8", "tf32": "tf32"}


def _best_rate(matmul, a, b, repeats: int = 6) -> float:
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


def describe(engine: str, rate: float) -> str:
    """How a result names the peak it was divided by: ``bf16 peak 1,234 GFLOP/s (torch:bf16)``."""
    return f"{engine_precision(engine)} peak {rate:,.0f} GFLOP/s ({engine})"


def measure_peak_gflops(threads: int, flags: frozenset[str] | None = None) -> dict[str, float]:
    """GFLOP/s per engine in this process (the caller pins affinity and thread variables); reduced
    precisions only where ``flags`` (the CPU's, by default) say the CPU computes them natively."""
    flags = cpu_flags() if flags is None else flags
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
    if importlib.util.find_spec("onnxruntime") is not None and importlib.util.find_spec("onnx") is not None:
        rates["onnxruntime"] = _best_rate(_ort_matmul(threads), a, b)
    if importlib.util.find_spec("torch") is not None:
        import torch

        torch.set_num_threads(threads)
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        rates["torch"] = _best_rate(torch.matmul, ta, tb)
        for precision, (x, y, matmul) in _reduced(torch, ta, tb).items():
            if any(f in flags for f in NATIVE[precision]):
                try:
                    rates[f"torch:{precision}"] = _best_rate(matmul, x, y)
                except RuntimeError:  # this torch build has no such kernel on this CPU
                    pass
    return rates


def _ort_matmul(threads: int) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """ONNX Runtime's float32 MatMul (its MLAS GEMM) as a function of two arrays, on ``threads`` threads."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    shape = [SIZE, SIZE]
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["c"])], "gemm",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("a", "b")],
                              [helper.make_tensor_value_info("c", TensorProto.FLOAT, shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = min(model.ir_version, 9)  # what older ONNX Runtime releases read
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    session = ort.InferenceSession(onnx.ModelProto.SerializeToString(model), options,
                                   providers=["CPUExecutionProvider"])
    return lambda x, y: session.run(None, {"a": x, "b": y})[0]


def _reduced(torch, a, b) -> dict[str, tuple[object, object, Callable]]:
    """The reduced-precision GEMMs: operands and the multiply."""
    ia = torch.clamp(a * 32, -128, 127).to(torch.int8)
    ib = torch.clamp(b * 32, -128, 127).to(torch.int8)
    return {"bf16": (a.to(torch.bfloat16), b.to(torch.bfloat16), torch.matmul),
            "int8": (ia, ib, torch._int_mm)}
