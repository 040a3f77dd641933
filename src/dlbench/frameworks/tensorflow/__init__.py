"""TensorFlow 2: Keras 3 layers under tf.function or XLA (the parts: backend, decoder, dp_worker, probe)."""

from dlbench.frameworks.declaration import Declaration, ReleaseLine

DECLARATION = Declaration(
    name="tensorflow", order=4, distribution=("tensorflow-cpu", "tensorflow"), import_name="tensorflow",
    description="TensorFlow 2 (Keras 3 layers, tf.function, XLA)", requires=("keras",),
    variants=("function", "xla"), devices=("cpu", "cuda"), precisions=("fp32", "bf16", "fp16", "amp-bf16", "amp-fp16"),
    decoder="decoder:TFDecoder", dp_worker="dp_worker", probe="probe",
    probe_checks=("forward", "onnx_export", "train", "allreduce"),
    # a pinned release's environment (dlbench.envs.companions): its line's companion pins, ``{v}`` the version
    release_lines=(
        ReleaseLine("2.16.1", ("keras==3.3.3", "numpy==1.26.4"), "the first release on Keras 3; built against NumPy 1"),
        ReleaseLine("2.17.0", ("keras==3.4.1", "numpy==1.26.4")),
        ReleaseLine("2.18.0", ("keras==3.6.0", "numpy==2.0.2"), "the first release built against NumPy 2"),
        ReleaseLine("2.19.0", ("keras==3.8.0", "numpy==2.1.3")),
        ReleaseLine("2.20.0", ("keras==3.11.3", "numpy==2.2.6")),
        ReleaseLine("2.21.0", ("keras==3.15.1", "numpy==2.4.6")),
    ),
    releases_before=("TensorFlow before 2.16 ships Keras 2 (tf.keras), and the backend builds its models with Keras 3 "
                     "layers; 2.16 is the first release on Keras 3"))
