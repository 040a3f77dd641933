"""PyTorch: torch.nn layers, eager or torch.compile (the parts: backend, layers, decoder, dp_worker, probe)."""

from dlbench.frameworks.declaration import CompilationCache, Declaration

DECLARATION = Declaration(
    name="torch", order=0, distribution="torch", import_name="torch", description="PyTorch (torch.nn, torch.compile)",
    variants=("eager", "compile"), devices=("cpu", "cuda"),
    precisions=("fp32", "bf16", "fp16", "amp-bf16", "amp-fp16", "int8", "tf32"),
    decoder="decoder:TorchDecoder", dp_worker="dp_worker", probe="probe",
    probe_checks=("forward", "onnx_export", "train", "allreduce"),
    compilation_caches={"compile": CompilationCache("inductor", {"TORCHINDUCTOR_CACHE_DIR": "{dir}",
                                                                 "TORCHINDUCTOR_FX_GRAPH_CACHE": "1"})},
    gemm="gemm")
