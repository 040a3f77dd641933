"""TensorFlow 2: Keras 3 layers under tf.function or XLA (the parts: backend, decoder, dp_worker, probe)."""

from dlbench.frameworks.declaration import Declaration

DECLARATION = Declaration(
    name="tensorflow", order=4, distribution=("tensorflow-cpu", "tensorflow"), import_name="tensorflow",
    description="TensorFlow 2 (Keras 3 layers, tf.function, XLA)", requires=("keras",),
    variants=("function", "xla"), devices=("cpu", "cuda"), precisions=("fp32", "bf16", "fp16", "amp-bf16", "amp-fp16"),
    decoder="decoder:TFDecoder", dp_worker="dp_worker", probe="probe",
    probe_checks=("forward", "onnx_export", "train", "allreduce"))
