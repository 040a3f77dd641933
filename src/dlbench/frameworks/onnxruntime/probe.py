"""Live checks for ONNX Runtime: it runs ONNX graphs and trains nothing, so only ``forward``.

The LeNet graph is written node by node with ``onnx.helper`` from dlbench's canonical weights
(no exporter involved), and its output is compared with the NumPy float64 reference by the survey."""

from __future__ import annotations

import os
import tempfile
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from dlbench.frameworks import probing as common


def lenet_graph(params: dict[str, np.ndarray]) -> onnx.ModelProto:
    nodes = [
        helper.make_node("Conv", ["x", "conv1.weight", "conv1.bias"], ["c1"]),
        helper.make_node("MaxPool", ["c1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Tanh", ["p1"], ["t1"]),
        helper.make_node("Conv", ["t1", "conv2.weight", "conv2.bias"], ["c2"]),
        helper.make_node("MaxPool", ["c2"], ["p2"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Tanh", ["p2"], ["t2"]),
        helper.make_node("Flatten", ["t2"], ["f"]),
        helper.make_node("Gemm", ["f", "fc1.weight", "fc1.bias"], ["h"]),  # canonical dense weight is (in, out)
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Gemm", ["r", "fc2.weight", "fc2.bias"], ["y"]),
    ]
    inits = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in params.items()]
    graph = helper.make_graph(nodes, "lenet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 28, 28])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], inits)
    # IR version pinned: the onnx package may default to a newer IR than the installed runtime reads
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def forward(job: dict[str, Any]) -> dict[str, Any]:
    _, weights, batch = common.reference_case()
    providers = ort.get_available_providers()
    out: dict[str, Any] = {"framework_version": ort.__version__, "providers": providers,
                           "gpu_visible": "CUDAExecutionProvider" in providers}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "lenet.onnx")
        onnx.save(lenet_graph(weights.params), path)
        for provider, key in [("CPUExecutionProvider", "cpu")] + (
                [("CUDAExecutionProvider", "cuda")] if out["gpu_visible"] else []):
            session = ort.InferenceSession(path, providers=[provider])
            y = session.run(None, {"x": batch.x})[0]
            out[key] = {"what": f"onnx.helper LeNet graph in InferenceSession ({provider}), batch 4",
                        "output_shape": list(y.shape), common.OUTPUT: y.tolist()}
    return out


#: the live checks this probe runs, by name (its declaration's ``probe_checks``)
CHECKS = {"forward": forward}
