"""OpenVINO's float32 GEMM for the machine's peak (dlbench.measure.peak): its CPU plugin's oneDNN kernels, a
one-node MatMul model at f32 inference precision."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from dlbench.measure import peak


def measure(threads: int, flags: frozenset[str]) -> dict[str, float]:
    return {"openvino": peak.best_rate(matmul(threads), *peak.operands())}


def matmul(threads: int) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """OpenVINO's float32 MatMul of two parameters (its CPU plugin's oneDNN kernels; f32 inference precision
    asked for, since on a bfloat16 CPU the plugin would otherwise compute in bfloat16) on ``threads`` threads."""
    import openvino as ov
    import openvino.opset13 as ops

    a, b = (ops.parameter([peak.SIZE, peak.SIZE], np.float32, name=n) for n in ("a", "b"))
    model = ov.Model([ops.matmul(a, b, False, False)], [a, b], "gemm")
    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_NUM_THREADS": threads,
                                                      "INFERENCE_PRECISION_HINT": "f32"})
    request = compiled.create_infer_request()
    return lambda x, y: request.infer([x, y])[0]
