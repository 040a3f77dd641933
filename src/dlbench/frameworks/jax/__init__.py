"""JAX + Flax NNX + Optax under jax.jit (the parts: backend, layers, decoder, dp_worker, probe)."""

from dlbench.frameworks.declaration import CompilationCache, Declaration, ReleaseLine

DECLARATION = Declaration(
    name="jax", order=1, distribution="jax", import_name="jax", description="JAX + Flax + Optax (jax.jit)",
    variants=("jit",), devices=("cpu", "cuda"), precisions=("fp32", "bf16", "fp16", "amp-bf16", "amp-fp16"),
    decoder="decoder:JaxDecoder", dp_worker="dp_worker", probe="probe",
    probe_checks=("forward", "onnx_export", "train", "allreduce"),
    compilation_caches={"jit": CompilationCache("jax", {"JAX_COMPILATION_CACHE_DIR": "{dir}",
                                                        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"})},
    # a pinned release's environment (dlbench.envs.companions): its line's companion pins, ``{v}`` the version
    release_lines=(
        ReleaseLine("0.4.30", ("jaxlib=={v}", "flax==0.10.2", "optax==0.2.4", "numpy==2.1.3"),
                    "the last 0.4.x releases; Flax 0.10 (nnx.split hands out VariableState copies)"),
        ReleaseLine("0.5.0", ("jaxlib=={v}", "flax==0.10.4", "optax==0.2.4", "numpy==2.2.6")),
        ReleaseLine("0.6.0", ("jaxlib=={v}", "flax==0.11.2", "optax==0.2.5", "numpy==2.2.6"),
                    "Flax 0.11: the State holds the module's own Variables"),
        ReleaseLine("0.7.0", ("jaxlib=={v}", "flax==0.11.2", "optax==0.2.5", "numpy==2.3.5")),
        ReleaseLine("0.8.0", ("jaxlib=={v}", "flax==0.12.0", "optax==0.2.6", "numpy==2.3.5")),
        ReleaseLine("0.9.0", ("jaxlib=={v}", "flax==0.12.6", "optax==0.2.7", "numpy==2.4.6")),
        ReleaseLine("0.10.0", ("jaxlib=={v}", "flax==0.12.8", "optax==0.2.8", "numpy==2.4.6")),
    ),
    releases_before=("JAX before 0.4.30 predates the Flax NNX API (nnx.split/merge, nnx.RNN) the backend is written in"))
