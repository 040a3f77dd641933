"""One TensorFlow data-parallel worker process: ``python -m dlbench.distributed.tf_dp JOB.json OUT_DIR``,
with ``DLBENCH_RANK``, ``DLBENCH_WORLD`` and ``DLBENCH_ADDRS`` (every worker's host:port) in its
environment, from which it writes ``TF_CONFIG``.

TensorFlow's own engine: ``tf.distribute.MultiWorkerMirroredStrategy`` (ring collectives, a
collective timeout) with a custom training step (Keras ``fit`` is not used: it fails under this
strategy with these hand-built variables): ``strategy.run`` computes the local gradients, averages
them with the replica context's ``all_reduce(MEAN)``, and ``strategy.extended.update`` applies
SGD with momentum to each mirrored variable.

Standalone on purpose (the TensorFlow backend lives on another branch): the network is the spec
run by a small interpreter in ``tf.nn`` over the canonical weights, converted once to TF's CPU
layouts (NHWC activations, HWIO kernels; flatten goes back to NCHW order so dense weights keep
their canonical meaning). Layers it does not cover raise UnsupportedError; its step-0 loss equals
the NumPy reference's (a test checks it where TensorFlow is installed).

Timed like the JAX worker: ``measure`` = the synchronous step; ``compute`` = the same step on
local (non-mirrored) copies without the exchange; ``comm`` = the gradient all-reduce alone.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from dlbench.distributed import common
from dlbench.distributed.jax_dp import UnsupportedLayer, _check


def to_tf(name: str, value: np.ndarray) -> np.ndarray:
    """Canonical layout -> this worker's: conv kernels OIHW -> HWIO, the rest unchanged."""
    return np.transpose(value, (2, 3, 1, 0)) if value.ndim == 4 else value


def from_tf(name: str, value: np.ndarray) -> np.ndarray:
    return np.transpose(value, (3, 2, 0, 1)) if value.ndim == 4 else value


def forward_fn(spec):
    """``f(params, x_nhwc) -> (output, marks)``, training-mode batch norm."""
    import tensorflow as tf

    from dlbench.models import layers as L
    from dlbench.models.layers import _pool_out

    _check(spec, UnsupportedLayer)
    for layer in L.walk(spec.layers):
        if isinstance(layer, L.Conv2d) and layer.groups != 1:
            raise UnsupportedLayer("the standalone TensorFlow worker has no grouped convolution on the CPU")

    def pool(x, layer):
        _, h, w, _ = x.shape
        k, s, p = layer.kernel, layer.stride, layer.padding
        oh, ow = (_pool_out(d, k, s, p, layer.ceil_mode) for d in (h, w))
        eh, ew = max(0, (oh - 1) * s + k - (h + 2 * p)), max(0, (ow - 1) * s + k - (w + 2 * p))
        pads = [[0, 0], [p, p + eh], [p, p + ew], [0, 0]]
        if layer.op == "max":
            out = tf.nn.max_pool2d(tf.pad(x, pads, constant_values=-np.inf), k, s, "VALID")
        else:
            total = tf.nn.avg_pool2d(tf.pad(x, pads), k, s, "VALID")
            inside = tf.pad(tf.ones((1, h + 2 * p, w + 2 * p, 1), x.dtype), [[0, 0], [0, eh], [0, ew], [0, 0]])
            out = total / tf.nn.avg_pool2d(inside, k, s, "VALID")
        return out[:, :oh, :ow, :]

    acts = {"relu": tf.nn.relu, "tanh": tf.tanh, "sigmoid": lambda v: 0.5 * (1 + tf.tanh(0.5 * v))}

    def run(layers, x, p, marks):
        for layer in layers:
            if isinstance(layer, L.Conv2d):
                pad = layer.padding
                x = tf.nn.conv2d(x, p[f"{layer.name}.weight"], layer.stride, [[0, 0], [pad, pad], [pad, pad], [0, 0]])
                if layer.bias:
                    x = x + p[f"{layer.name}.bias"]
            elif isinstance(layer, L.Pool2d):
                x = pool(x, layer)
            elif isinstance(layer, L.GlobalAvgPool):
                x = tf.reduce_mean(x, axis=[1, 2])
            elif isinstance(layer, L.BatchNorm):
                axes = [0, 1, 2] if len(x.shape) == 4 else [0]
                mean, var = tf.nn.moments(x, axes)
                x = tf.nn.batch_normalization(x, mean, var, p[f"{layer.name}.beta"], p[f"{layer.name}.gamma"], layer.eps)
            elif isinstance(layer, L.Dense):
                x = tf.matmul(x, p[f"{layer.name}.weight"]) + (p[f"{layer.name}.bias"] if layer.bias else 0.0)
            elif isinstance(layer, L.TiedDense):
                x = tf.matmul(x, p[f"{layer.tied_to}.weight"], transpose_b=True) + p[f"{layer.name}.bias"]
            elif isinstance(layer, L.Activation):
                x = acts[layer.fn](x)
            elif isinstance(layer, L.Mark):
                marks[layer.name] = x
            elif isinstance(layer, L.Flatten):
                if len(x.shape) == 4:
                    x = tf.transpose(x, [0, 3, 1, 2])  # canonical (C, H, W) order
                x = tf.reshape(x, [tf.shape(x)[0], -1])
            elif isinstance(layer, L.ZeroPadShortcut):
                x = x[:, ::layer.stride, ::layer.stride, :]
                x = tf.pad(x, [[0, 0], [0, 0], [0, 0], [0, layer.out_channels - x.shape[-1]]])
            elif isinstance(layer, L.Residual):
                x = run(layer.body, x, p, marks) + run(layer.shortcut, x, p, marks)
                if layer.post == "relu":
                    x = tf.nn.relu(x)
        return x

    def f(params, x):
        marks: dict = {}
        return run(spec.layers, x, params, marks), marks
    return f


def loss_fn(spec):
    import tensorflow as tf

    fwd = forward_fn(spec)

    def loss(params, x, y):
        out, marks = fwd(params, x)
        if spec.loss.kind == "mse":
            target = marks.get(spec.loss.target, x)
            return tf.reduce_mean(tf.square(out - target))
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=out))
    return loss


def to_input(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.transpose(x, (0, 2, 3, 1))) if x.ndim == 4 else x


def run(job: dict[str, Any], out_dir: Path) -> dict[str, Any] | None:
    rank, world = int(os.environ["DLBENCH_RANK"]), int(os.environ["DLBENCH_WORLD"])
    addrs = os.environ["DLBENCH_ADDRS"].split(",")
    (out_dir / f"pid.{rank}").write_text(str(os.getpid()))
    cores = common.pin_cores(int(os.environ.get("DLBENCH_CORE_OFFSET", rank)), job.get("threads"))
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": addrs}, "task": {"type": "worker", "index": rank}})
    if job.get("threads"):
        os.environ["TF_NUM_INTRAOP_THREADS"] = os.environ["TF_NUM_INTEROP_THREADS"] = str(job["threads"])

    import tensorflow as tf

    from dlbench.models import get_model
    from dlbench.weights import init_weights

    spec = get_model(job["model"], small=bool(job.get("small")))
    try:
        loss = loss_fn(spec)
    except UnsupportedLayer as exc:
        if rank == 0:
            common.write_json(out_dir / "result.json", {"unsupported": str(exc)})
        return None
    if job.get("threads"):
        tf.config.threading.set_intra_op_parallelism_threads(int(job["threads"]))
        tf.config.threading.set_inter_op_parallelism_threads(int(job["threads"]))
    comm = tf.distribute.experimental.CommunicationImplementation.RING
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=comm, timeout_seconds=float(job.get("collective_timeout_s", 120)))
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    seed = int(job.get("seed", 0))
    weights = init_weights(spec, seed)
    trainable = spec.trainable_names()
    data = common.shard(spec, int(job["global_batch"]), rank, world, seed)
    x, y = tf.constant(to_input(data.x)), tf.constant(data.y)
    lr, momentum = spec.learning_rate, 0.9
    frozen = {k: tf.constant(to_tf(k, v)) for k, v in weights.params.items() if k not in trainable}
    with strategy.scope():
        params = {k: tf.Variable(to_tf(k, weights.params[k]), name=k.replace(".", "_")) for k in trainable}
        mom = {k: tf.Variable(tf.zeros_like(v)) for k, v in params.items()}
    local_p = {k: tf.Variable(to_tf(k, weights.params[k])) for k in trainable}
    local_m = {k: tf.Variable(tf.zeros_like(v)) for k, v in local_p.items()}
    names = sorted(trainable)

    def grads_of(p, xs, ys):
        with tf.GradientTape() as tape:
            value = loss({**p, **frozen}, xs, ys)
        return value, tape.gradient(value, [p[k] for k in names])

    def sgd(var, m, g):
        m.assign(momentum * m + g)
        var.assign_sub(lr * m)

    @tf.function
    def step(xs, ys):
        def replica(xr, yr):
            value, grads = grads_of(params, xr, yr)
            return value, tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.MEAN, grads)
        value, grads = strategy.run(replica, args=(xs, ys))
        for k, g in zip(names, grads, strict=True):
            strategy.extended.update(mom[k], lambda m, gg: m.assign(momentum * m + gg), args=(g,), group=False)
            strategy.extended.update(params[k], lambda v, m: v.assign_sub(lr * m), args=(mom[k],), group=False)
        return value

    @tf.function
    def alone(xs, ys):
        value, grads = grads_of(local_p, xs, ys)
        for k, g in zip(names, grads, strict=True):
            sgd(local_p[k], local_m[k], g)
        return value

    gtree = [tf.ones_like(local_p[k]) for k in names]

    @tf.function
    def exchange():
        return strategy.run(lambda: tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.MEAN, gtree))

    @tf.function
    def gather(v):
        return strategy.run(lambda: tf.distribute.get_replica_context().all_gather(v[None], axis=0))

    def local_value(v):
        return strategy.experimental_local_results(v)[0]

    def timed(fn) -> float:
        t0 = time.perf_counter_ns()
        out = fn()
        np.asarray(tf.nest.flatten(out)[0] if not isinstance(out, tf.Tensor) else out)  # wait for the value
        return float(time.perf_counter_ns() - t0)

    protocol = job.get("protocol", {})
    warmup_ns = [timed(lambda: local_value(step(x, y))) for _ in range(max(1, int(protocol.get("warmup", 3))))]
    mine = np.float64(common.steps_to_time(warmup_ns, protocol))
    steps = int(local_value(gather(tf.constant([mine])))[:, 0].numpy().max())
    timed(lambda: alone(x, y))
    compute_ns = [timed(lambda: alone(x, y)) for _ in range(steps)]
    timed(lambda: local_value(exchange()))
    comm_ns = [timed(lambda: local_value(exchange())[0]) for _ in range(steps)]
    def barrier():  # an all-gather of one number (the shape the step count used: no retrace)
        return local_value(gather(tf.constant([np.float64(0)]))).numpy()

    step_ns = []
    with common.WireWindow(os.environ.get("DLBENCH_IFACE"), barrier) as wire:
        for i in range(steps):
            step_ns.append(timed(lambda: local_value(step(x, y))))
            if common.fault_due(job, rank, len(warmup_ns) + i):
                os.kill(os.getpid(), 9)
    dig = common.digest({k: from_tf(k, local_value(params[k]).numpy()) for k in names})
    moved = -1 if wire.moved is None else wire.moved
    row = np.concatenate([warmup_ns, step_ns, comm_ns, compute_ns, np.frombuffer(bytes.fromhex(dig), np.uint8),
                          [moved]]).astype(np.float64)
    rows = local_value(gather(tf.constant(row))).numpy().reshape(world, -1)
    nw = len(warmup_ns)
    per_rank = []
    for r in range(world):
        v = rows[r]
        parts = np.split(v, np.cumsum([nw, steps, steps, steps, 32]))
        per_rank.append({"rank": r, "warmup_ns": parts[0].tolist(), "step_ns": parts[1].tolist(),
                         "comm_ns": parts[2].tolist(), "compute_ns": parts[3].tolist(),
                         "digest": bytes(parts[4].astype(np.uint8)).hex(),
                         "iface_bytes": None if parts[5][0] < 0 else int(parts[5][0]), "steps": steps,
                         "payload_bytes": [sum(weights.params[k].nbytes for k in names)] * steps,
                         "cores": cores if r == rank else None})
    result = {"per_rank": per_rank, "world": world, "local_world": 1, "nnodes": world,
              "grad_bytes": sum(weights.params[k].nbytes for k in names), "param_count": spec.param_count,
              "dist_backend": "MultiWorkerMirroredStrategy (RING collectives)",
              "versions": common.versions(("tensorflow", "tensorflow-cpu")),
              "comm_method": "all_reduce(MEAN) of a gradient-shaped list across workers, timed alone",
              "compute_method": "the same step on local variables without the exchange"}
    if rank == 0:
        common.write_json(out_dir / "result.json", result)
    return result


def main(argv: list[str]) -> int:
    return common.worker_main(argv, run)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
