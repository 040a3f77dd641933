"""OpenVINO, running the torch model's ONNX export (the parts: backend, decoder)."""

from dlbench.frameworks.declaration import Declaration

DECLARATION = Declaration(
    name="openvino", order=3, distribution="openvino", import_name="openvino",
    description="OpenVINO (Intel's inference engine, from the ONNX export)", requires=("torch", "onnx", "onnxscript"),
    variants=("default",), devices=("cpu",), closures=("forward",), precisions=("fp32", "bf16"),
    decoder="decoder:OpenVINODecoder",
    gemm="gemm")
