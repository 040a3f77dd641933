"""PyTorch: torch.nn layers, eager or torch.compile (the parts: backend, layers, decoder, dp_worker, probe)."""

from dlbench.frameworks.declaration import CompilationCache, Declaration, ReleaseLine

DECLARATION = Declaration(
    name="torch", order=0, distribution="torch", import_name="torch", description="PyTorch (torch.nn, torch.compile)",
    variants=("eager", "compile"), devices=("cpu", "cuda"),
    precisions=("fp32", "bf16", "fp16", "amp-bf16", "amp-fp16", "int8", "tf32"),
    decoder="decoder:TorchDecoder", dp_worker="dp_worker", dp_launcher="torchrun", parameter_server="ps_worker",
    probe="probe",
    probe_checks=("forward", "onnx_export", "train", "allreduce"),
    compilation_caches={"compile": CompilationCache("inductor", {"TORCHINDUCTOR_CACHE_DIR": "{dir}",
                                                                 "TORCHINDUCTOR_FX_GRAPH_CACHE": "1"})},
    gemm="gemm",
    # a pinned release's environment (dlbench.envs.companions): its line's companion pins, ``{v}`` the version
    release_lines=(
        ReleaseLine("2.1.0", ("numpy==1.26.4",), "built against NumPy 1"),
        ReleaseLine("2.3.0", ("numpy==2.0.2",), "the first release built against NumPy 2"),
        ReleaseLine("2.6.0", ("numpy==2.2.6",)),
        ReleaseLine("2.9.0", ("numpy==2.4.6",)),
    ),
    releases_before="PyTorch before 2.1 has no torch.export, which the backend's compile variant and the ONNX export use")
