"""ONNX Runtime, running the torch model's ONNX export (the parts: backend, its export and fusion
helpers, which OpenVINO shares, decoder, probe)."""

from dlbench.frameworks.declaration import Declaration

DECLARATION = Declaration(
    name="onnxruntime", order=2, distribution=("onnxruntime", "onnxruntime-gpu"), import_name="onnxruntime",
    description="ONNX Runtime (exported from torch)", requires=("torch", "onnx", "onnxscript"),
    variants=("default", "fused"), devices=("cpu", "cuda"), closures=("forward",), precisions=("fp32", "int8"),
    decoder="decoder:OnnxRuntimeDecoder", probe="probe",
    probe_checks=("forward",),
    gemm="gemm", gemm_requires=("onnx",))
