"""Live checks for Keras 3. The backend is the job's ``keras_backend`` (set as KERAS_BACKEND by the
driver before the import); the ONNX check runs once per backend, the distributed check on JAX
(the only backend ``keras.distribution`` can run across processes)."""

from __future__ import annotations

import os
import tempfile
from typing import Any

import keras
import numpy as np

from dlbench.frameworks import probing as common
from dlbench.frameworks.onnxruntime.export_check import onnx_compare


def lenet() -> keras.Model:
    keras.utils.set_random_seed(0)
    layers = keras.layers
    return keras.Sequential([
        keras.Input((28, 28, 1)),
        layers.Conv2D(20, 5), layers.MaxPooling2D(2), layers.Activation("tanh"),
        layers.Conv2D(50, 5), layers.MaxPooling2D(2), layers.Activation("tanh"),
        layers.Flatten(), layers.Dense(500, activation="relu"), layers.Dense(10),
    ])


def _np(t) -> np.ndarray:
    return np.asarray(keras.ops.convert_to_numpy(t))


def forward(job: dict[str, Any]) -> dict[str, Any]:
    x, _ = common.batch(0, channels_last=True)
    y = _np(lenet()(x))
    return {"framework_version": keras.__version__, "gpu_visible": _gpu_visible(),
            "cpu": {"what": f"keras.Sequential LeNet forward on the {keras.backend.backend()} backend, batch 8",
                    "output_shape": list(y.shape), "finite": bool(np.isfinite(y).all())}}


def _gpu_visible() -> bool:
    return any(d.lower().startswith(("gpu", "cuda")) for d in keras.distribution.list_devices())


def onnx_export(job: dict[str, Any]) -> dict[str, Any]:
    model = lenet()
    x, _ = common.batch(0, channels_last=True)
    expected = _np(model(x))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "lenet.onnx")
        try:
            model.export(path, format="onnx", verbose=False)
        except ImportError as exc:  # the exporter needs tf2onnx (TF) or jax2onnx (JAX)
            return {"not_verified": f"keras {keras.backend.backend()} backend: {exc}"}
        result = onnx_compare(path, x, expected)
    return {"exporter": f"keras.Model.export(format='onnx'), keras {keras.__version__}, "
                        f"{keras.backend.backend()} backend", **result}


def train(job: dict[str, Any]) -> dict[str, Any]:
    model = lenet()
    model.compile(optimizer=keras.optimizers.SGD(common.LR, momentum=common.MOMENTUM),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    state = {"model": model}

    def run_steps(first: int, last: int):
        losses = []
        for i in range(first, last):
            x, y = common.batch(i, channels_last=True)
            losses.append(float(state["model"].train_on_batch(x, y)))
        # by position: a reloaded model may name its variables differently (sequential_1/...)
        return losses, {f"{i:02d}_{w.name}": _np(w.value) for i, w in enumerate(state["model"].weights)}

    def save(path: str) -> None:
        model.save(path + ".keras")

    def load(path: str) -> None:
        state["model"] = keras.models.load_model(path + ".keras")

    result = common.train_phase(job, job["steps"], run_steps, save, load)
    return {**result, "api": f"keras.Model.save / keras.models.load_model (.keras, with optimizer state), "
                             f"{keras.backend.backend()} backend"}


def allreduce(job: dict[str, Any]) -> dict[str, Any]:
    """Data-parallel SGD step of w*x with w=1, x = rank+1, y = 0, lr 0.1: the averaged gradient
    is (2*1 + 2*4)/2 = 5, so w becomes 0.5 on both ranks only if the gradients were all-reduced
    (alone, rank 0 would reach 0.8 and rank 1 0.2)."""
    if keras.backend.backend() != "jax":
        return {"not_verified": "keras.distribution runs across processes on the JAX backend only"}
    import jax

    rank, world = job["rank"], job["world"]
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    keras.distribution.initialize(job_addresses=f"127.0.0.1:{job['ports'][0]}", num_processes=world, process_id=rank)
    devices = keras.distribution.list_devices()
    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices, auto_shard_dataset=False))
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1, use_bias=False, kernel_initializer="ones")])
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1), loss="mse")
    model.fit(np.array([[rank + 1.0]], np.float32), np.zeros((1, 1), np.float32), batch_size=1, epochs=1,
              verbose=0, shuffle=False)
    value = float(model.get_weights()[0].ravel()[0])
    return {"pid": os.getpid(), "rank": rank, "world": world, "value": value, "devices": [str(d) for d in devices],
            "api": "keras.distribution.initialize + DataParallel (JAX backend, gloo) ; one SGD step, weight read back"}


#: the live checks this probe runs, by name (its declaration's ``probe_checks``)
CHECKS = {"forward": forward, "onnx_export": onnx_export, "train": train, "allreduce": allreduce}
