"""Live checks for JAX (+ Flax NNX, Optax, Orbax): LeNet written with ``flax.nnx`` layers, NHWC."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import tempfile
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from dlbench.frameworks import probing as common
from dlbench.frameworks.onnxruntime.export_check import onnx_compare


class LeNet(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.conv1 = nnx.Conv(1, 20, (5, 5), padding="VALID", rngs=rngs)
        self.conv2 = nnx.Conv(20, 50, (5, 5), padding="VALID", rngs=rngs)
        self.fc1 = nnx.Linear(800, 500, rngs=rngs)
        self.fc2 = nnx.Linear(500, 10, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = jnp.tanh(nnx.max_pool(self.conv1(x), (2, 2), (2, 2)))
        x = jnp.tanh(nnx.max_pool(self.conv2(x), (2, 2), (2, 2)))
        return self.fc2(jax.nn.relu(self.fc1(x.reshape(x.shape[0], -1))))


def _gpus() -> list:
    try:
        return jax.devices("gpu")
    except RuntimeError:
        return []


def forward(job: dict[str, Any]) -> dict[str, Any]:
    x, _ = common.batch(0, channels_last=True)
    out: dict[str, Any] = {"framework_version": jax.__version__, "gpu_visible": bool(_gpus())}
    for device in [jax.devices("cpu")[0]] + _gpus()[:1]:
        with jax.default_device(device):
            y = np.asarray(jax.jit(LeNet(nnx.Rngs(0)))(jnp.asarray(x)))
        out["cpu" if device.platform == "cpu" else "cuda"] = {
            "what": "flax.nnx LeNet forward under jax.jit, batch 8", "output_shape": list(y.shape),
            "finite": bool(np.isfinite(y).all()), "device_name": str(device)}
    return out


def onnx_export(job: dict[str, Any]) -> dict[str, Any]:
    if importlib.util.find_spec("jax2onnx") is None:
        return {"not_verified": "jax2onnx is not installed (pip install jax2onnx); JAX itself has no ONNX exporter"}
    from jax2onnx import to_onnx

    model = LeNet(nnx.Rngs(0))
    x, _ = common.batch(0, channels_last=True)
    expected = np.asarray(model(jnp.asarray(x)))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "lenet.onnx")
        to_onnx(model, [x.shape], return_mode="file", output_path=path)
        result = onnx_compare(path, x, expected)
    return {"exporter": f"jax2onnx.to_onnx {importlib.metadata.version('jax2onnx')}", **result}


def train(job: dict[str, Any]) -> dict[str, Any]:
    import orbax.checkpoint as ocp

    model = LeNet(nnx.Rngs(0))
    opt = nnx.Optimizer(model, optax.sgd(common.LR, common.MOMENTUM), wrt=nnx.Param)

    @nnx.jit
    def step(model, opt, x, y):
        def loss_fn(model):
            return optax.softmax_cross_entropy_with_integer_labels(model(x), y).mean()
        loss, grads = nnx.value_and_grad(loss_fn)(model)
        opt.update(model, grads)
        return loss

    def run_steps(first: int, last: int):
        losses = []
        for i in range(first, last):
            x, y = common.batch(i, channels_last=True)
            losses.append(float(step(model, opt, jnp.asarray(x), jnp.asarray(y))))
        params = nnx.state(model, nnx.Param)
        flat = {"/".join(map(str, k)): np.asarray(v) for k, v in jax.tree_util.tree_leaves_with_path(params)}
        return losses, flat

    checkpointer = ocp.StandardCheckpointer()

    def save(path: str) -> None:
        checkpointer.save(path, nnx.state((model, opt)))
        checkpointer.wait_until_finished()

    def load(path: str) -> None:
        nnx.update((model, opt), checkpointer.restore(path, nnx.state((model, opt))))

    result = common.train_phase(job, job["steps"], run_steps, save, load)
    return {**result, "api": "orbax.checkpoint.StandardCheckpointer save/restore of nnx.state((model, optimizer))"}


def allreduce(job: dict[str, Any]) -> dict[str, Any]:
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    rank, world = job["rank"], job["world"]
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{job['ports'][0]}", num_processes=world,
                               process_id=rank, initialization_timeout=120)
    try:
        mesh = Mesh(np.array(jax.devices()), ("p",))
        local = np.array([rank + 1.0], np.float32)
        arr = jax.make_array_from_process_local_data(NamedSharding(mesh, P("p")), local)
        summed = jax.jit(jax.shard_map(lambda a: jax.lax.psum(a, "p"), mesh=mesh, in_specs=P("p"), out_specs=P()))(arr)
        value = float(np.asarray(summed.addressable_data(0))[0])
        processes = jax.process_count()
    finally:
        jax.distributed.shutdown()
    return {"pid": os.getpid(), "rank": rank, "world": world, "value": value, "processes_seen": processes,
            "api": "jax.distributed.initialize (CPU, gloo collectives) + shard_map(lax.psum) over a 2-process mesh"}


#: the live checks this probe runs, by name (its declaration's ``probe_checks``)
CHECKS = {"forward": forward, "onnx_export": onnx_export, "train": train, "allreduce": allreduce}
