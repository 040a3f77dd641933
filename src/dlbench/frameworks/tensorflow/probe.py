"""Live checks for TensorFlow written with TensorFlow's own APIs (``tf.nn``, ``tf.Variable``,
``tf.function``, ``tf.train.Checkpoint``, ``tf.distribute``), not through Keras, so this row
shows TensorFlow itself; the Keras row is the keras probe."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import tempfile
from typing import Any

import numpy as np

from dlbench.frameworks import probing as common
from dlbench.frameworks.onnxruntime.export_check import onnx_compare

_SHAPES = {"conv1": (5, 5, 1, 20), "conv2": (5, 5, 20, 50), "fc1": (800, 500), "fc2": (500, 10)}


def _tf():
    import tensorflow as tf

    return tf


class LeNet:
    """Variables and a forward built from ``tf.nn`` ops (NHWC)."""

    def __init__(self, seed: int = 0):
        tf = _tf()
        rng = tf.random.Generator.from_seed(seed)
        self.vars = {}
        for name, shape in _SHAPES.items():
            fan_in = int(np.prod(shape[:-1]))
            self.vars[name + "/w"] = tf.Variable(rng.normal(shape) * (1.0 / fan_in) ** 0.5, name=name + "_w")
            self.vars[name + "/b"] = tf.Variable(tf.zeros(shape[-1:]), name=name + "_b")

    def __call__(self, x):
        tf, v = _tf(), self.vars
        x = tf.nn.conv2d(x, v["conv1/w"], 1, "VALID") + v["conv1/b"]
        x = tf.tanh(tf.nn.max_pool2d(x, 2, 2, "VALID"))
        x = tf.nn.conv2d(x, v["conv2/w"], 1, "VALID") + v["conv2/b"]
        x = tf.tanh(tf.nn.max_pool2d(x, 2, 2, "VALID"))
        x = tf.reshape(x, (tf.shape(x)[0], -1))
        x = tf.nn.relu(tf.matmul(x, v["fc1/w"]) + v["fc1/b"])
        return tf.matmul(x, v["fc2/w"]) + v["fc2/b"]


def forward(job: dict[str, Any]) -> dict[str, Any]:
    tf = _tf()
    gpus = tf.config.list_physical_devices("GPU")
    x, _ = common.batch(0, channels_last=True)
    model = LeNet()
    out: dict[str, Any] = {"framework_version": tf.__version__, "gpu_visible": bool(gpus)}
    for device, key in [("/CPU:0", "cpu")] + ([("/GPU:0", "cuda")] if gpus else []):
        with tf.device(device):
            y = tf.function(model)(tf.constant(x)).numpy()
        out[key] = {"what": "tf.nn LeNet forward under tf.function, batch 8", "output_shape": list(y.shape),
                    "finite": bool(np.isfinite(y).all()), "device_name": device}
    return out


def onnx_export(job: dict[str, Any]) -> dict[str, Any]:
    if importlib.util.find_spec("tf2onnx") is None:
        return {"not_verified": "tf2onnx is not installed (pip install tf2onnx); TensorFlow has no built-in ONNX exporter"}
    import tf2onnx

    tf = _tf()
    model = LeNet()
    x, _ = common.batch(0, channels_last=True)
    fn = tf.function(model, input_signature=[tf.TensorSpec((None, 28, 28, 1), tf.float32)])
    expected = fn(tf.constant(x)).numpy()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "lenet.onnx")
        tf2onnx.convert.from_function(fn, input_signature=fn.input_signature, output_path=path)
        result = onnx_compare(path, x, expected)
    return {"exporter": f"tf2onnx.convert.from_function {importlib.metadata.version('tf2onnx')}", **result}


def train(job: dict[str, Any]) -> dict[str, Any]:
    tf = _tf()
    model = LeNet()
    velocity = {k: tf.Variable(tf.zeros_like(v)) for k, v in model.vars.items()}
    step_var = tf.Variable(0, dtype=tf.int64)
    ckpt = tf.train.Checkpoint(step=step_var, **{"p_" + k.replace("/", "_"): v for k, v in model.vars.items()},
                               **{"m_" + k.replace("/", "_"): v for k, v in velocity.items()})

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, model(x)))
        grads = tape.gradient(loss, list(model.vars.values()))
        for (name, var), g in zip(model.vars.items(), grads, strict=True):  # SGD with momentum, as torch.optim.SGD
            velocity[name].assign(common.MOMENTUM * velocity[name] + g)
            var.assign_sub(common.LR * velocity[name])
        step_var.assign_add(1)
        return loss

    def run_steps(first: int, last: int):
        losses = []
        for i in range(first, last):
            x, y = common.batch(i, channels_last=True)
            losses.append(float(step(tf.constant(x), tf.constant(y))))
        return losses, {k: v.numpy() for k, v in model.vars.items()}

    def save(path: str) -> None:
        ckpt.write(path)

    def load(path: str) -> None:
        ckpt.read(path).assert_consumed()

    result = common.train_phase(job, job["steps"], run_steps, save, load)
    return {**result, "api": "tf.train.Checkpoint write/read (assert_consumed) of the variables and momentum slots"}


def allreduce(job: dict[str, Any]) -> dict[str, Any]:
    rank, world, ports = job["rank"], job["world"], job["ports"]
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports[:world]]},
                                          "task": {"type": "worker", "index": rank}})
    tf = _tf()
    strategy = tf.distribute.MultiWorkerMirroredStrategy()

    @tf.function
    def reduce():
        ctx = tf.distribute.get_replica_context()
        value = tf.cast(ctx.replica_id_in_sync_group, tf.float32) + 1.0
        return ctx.all_reduce(tf.distribute.ReduceOp.SUM, tf.reshape(value, [1]))

    out = strategy.experimental_local_results(strategy.run(reduce))[0].numpy()
    return {"pid": os.getpid(), "rank": rank, "world": world, "value": float(out[0]),
            "replicas_in_sync": int(strategy.num_replicas_in_sync),
            "api": "tf.distribute.MultiWorkerMirroredStrategy with TF_CONFIG on 127.0.0.1, ReplicaContext.all_reduce"}


#: the live checks this probe runs, by name (its declaration's ``probe_checks``)
CHECKS = {"forward": forward, "onnx_export": onnx_export, "train": train, "allreduce": allreduce}
