"""JAX + Flax NNX + Optax under jax.jit (the parts: backend, layers, decoder, dp_worker, probe)."""

from dlbench.frameworks.declaration import CompilationCache, Declaration

DECLARATION = Declaration(
    name="jax", order=1, distribution="jax", import_name="jax", description="JAX + Flax + Optax (jax.jit)",
    variants=("jit",), devices=("cpu", "cuda"), precisions=("fp32", "bf16", "fp16", "amp-bf16", "amp-fp16"),
    decoder="decoder:JaxDecoder", dp_worker="dp_worker", probe="probe",
    probe_checks=("forward", "onnx_export", "train", "allreduce"),
    compilation_caches={"jit": CompilationCache("jax", {"JAX_COMPILATION_CACHE_DIR": "{dir}",
                                                        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"})})
