"""Keras 3, one model on its JAX, TensorFlow and PyTorch back ends (the parts: backend, the model its
layers and TensorFlow's share, probe)."""

from dlbench.frameworks.declaration import CompilationCache, Declaration

DECLARATION = Declaration(
    name="keras", order=5, distribution="keras", import_name="keras",
    description="Keras 3 (one model on the JAX, TensorFlow and PyTorch backends; compile, train_on_batch)",
    variants=("keras-jax", "keras-tensorflow", "keras-torch"), devices=("cpu", "cuda"),
    precisions=("fp32", "bf16", "fp16", "amp-bf16", "amp-fp16"),
    variant_env={"keras-jax": {"KERAS_BACKEND": "jax"}, "keras-tensorflow": {"KERAS_BACKEND": "tensorflow"},
                 "keras-torch": {"KERAS_BACKEND": "torch"}},
    no_decoder="no Keras 3 decoder is written in dlbench (its TensorFlow, JAX and torch back ends' own frameworks "
               "each have one)",
    probe="probe",
    probe_checks=("forward", "onnx_export", "train", "allreduce"),
    compilation_caches={"keras-jax": CompilationCache("jax", {"JAX_COMPILATION_CACHE_DIR": "{dir}",
                                                              "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"})})
