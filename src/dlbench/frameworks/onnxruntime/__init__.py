"""ONNX Runtime, running the torch model's ONNX export (the parts: backend, its export and fusion
helpers, which OpenVINO shares, decoder, probe)."""

from dlbench.frameworks.declaration import Declaration, ReleaseLine

DECLARATION = Declaration(
    name="onnxruntime", order=2, distribution=("onnxruntime", "onnxruntime-gpu"), import_name="onnxruntime",
    description="ONNX Runtime (exported from torch)", requires=("torch", "onnx", "onnxscript"),
    variants=("default", "fused"), devices=("cpu", "cuda"), closures=("forward",), precisions=("fp32", "int8"),
    decoder="decoder:OnnxRuntimeDecoder", probe="probe",
    probe_checks=("forward",),
    gemm="gemm", gemm_requires=("onnx",),
    # a pinned release's environment (dlbench.envs.companions): its line's companion pins, ``{v}`` the version
    # an ONNX Runtime environment exports with the same torch, onnx and onnxscript as the main install, so every
    # release runs the very same graph (torch 2.13.0 is the CPU wheel this machine has; the registry's other
    # torch releases are CUDA builds that pull several GB: docs/versions.md)
    release_lines=(
        ReleaseLine("1.17.0", ("torch==2.13.0", "onnx==1.23.2", "onnxscript==0.7.2", "numpy==1.26.4"),
                    "built against NumPy 1"),
        ReleaseLine("1.19.0", ("torch==2.13.0", "onnx==1.23.2", "onnxscript==0.7.2", "numpy==2.1.3"),
                    "the first release built against NumPy 2"),
        ReleaseLine("1.21.0", ("torch==2.13.0", "onnx==1.23.2", "onnxscript==0.7.2", "numpy==2.2.6")),
        ReleaseLine("1.23.0", ("torch==2.13.0", "onnx==1.23.2", "onnxscript==0.7.2", "numpy==2.3.5")),
        ReleaseLine("1.26.0", ("torch==2.13.0", "onnx==1.23.2", "onnxscript==0.7.2", "numpy==2.4.6")),
    ),
    releases_before="ONNX Runtime before 1.17 cannot run the opset-18 graphs torch's exporter writes")
