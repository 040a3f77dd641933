"""llama.cpp through llama-cpp-python: GGUF files written from dlbench's weights (see the folder's modules)."""

from dlbench.frameworks.declaration import Declaration

DECLARATION = Declaration(
    name="llamacpp", order=15,
    distribution="llama-cpp-python",
    import_name="llama_cpp",
    description="llama.cpp (llama-cpp-python; GGUF written from dlbench's weights: f32, f16, bf16, Q8_0, Q4_0)",
    closures=("forward",),
    precisions=("fp32", "fp16", "bf16", "q8_0", "q4_0"),
    runs_in="env",
    requires=("gguf",),
    decoder="decoder:LlamaCppDecoder",
    recipes=("requirements.txt", "requirements.build.txt", "requirements.lock", "requirements.build.lock"),
)
