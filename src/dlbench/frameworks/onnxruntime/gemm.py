"""ONNX Runtime's float32 GEMM for the machine's peak (dlbench.measure.peak): its MLAS kernel, a one-node
MatMul graph (on an AVX-512 EPYC core MLAS ran 1.8x NumPy's and torch's SGEMM)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from dlbench.measure import peak


def measure(threads: int, flags: frozenset[str]) -> dict[str, float]:
    return {"onnxruntime": peak.best_rate(matmul(threads), *peak.operands())}


def matmul(threads: int) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """ONNX Runtime's float32 MatMul (its MLAS GEMM) as a function of two arrays, on ``threads`` threads."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    shape = [peak.SIZE, peak.SIZE]
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
