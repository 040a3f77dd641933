"""One TensorFlow data-parallel worker process: ``python -m dlbench.frameworks.tensorflow.dp_worker JOB.json OUT_DIR``,
with ``DLBENCH_RANK``, ``DLBENCH_WORLD`` and ``DLBENCH_ADDRS`` (every worker's host:port) in its
environment, from which it writes ``TF_CONFIG``.

TensorFlow's own engine: ``tf.distribute.MultiWorkerMirroredStrategy`` (ring collectives, a
collective timeout) with a custom training step (Keras ``fit`` is not used).

The model is the TensorFlow backend's (:class:`dlbench.frameworks.tensorflow.backend.TensorFlowBackend`,
the one the equivalence gate checks): every process builds it with ``build`` under the strategy's
scope (so its variables are mirrored) from the canonical weights, and the step is the backend's
own training body (:meth:`~dlbench.frameworks.tensorflow.backend.TensorFlowBackend.step_body`: its loss,
``GradientTape`` gradient and fused SGD-momentum update) with one addition, its gradient hook set
to :func:`exchange` (the replica context's ``all_reduce(MEAN)``), run by ``strategy.run`` inside
one ``tf.function``. Every worker applies the same averaged gradient to its own copy of each
variable. Batch-norm moving statistics are updated from each worker's own batch and stay local.

The ``xla`` variant is unsupported here (:data:`NO_XLA`): a ``jit_compile`` step would have to
compile the all-reduce. Without it the cell would time the ``function`` variant under xla's name.

Timed like the JAX worker: ``measure`` = the synchronous step; ``compute`` = the backend's own
``train_step`` on a second, local (non-mirrored) copy of the model, without the exchange;
``comm`` = the gradient all-reduce alone.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from dlbench.core.job import DataParallelJob
from dlbench.frameworks import data_parallel as common

#: why the ``xla`` variant has no data-parallel cell (TensorFlow 2.21's errors when the step is jit-compiled)
NO_XLA = ("TensorFlow cannot compile the step's all-reduce with XLA: only NCCL collectives compile (this worker's "
          "are RING), and none on the CPU ('Collectives are not yet implemented for CPU devices when compiling "
          "with XLA')")


def exchange(grads: list) -> list:
    """The data-parallel part of the step: each gradient averaged over the workers (inside ``strategy.run``)."""
    import tensorflow as tf

    return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.MEAN, grads)


def strategy_for(job: DataParallelJob, rank: int, addrs: list[str]) -> Any:
    """``TF_CONFIG`` for this worker, thread pools, and the strategy (before any other TensorFlow op)."""
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": addrs}, "task": {"type": "worker", "index": rank}})
    import tensorflow as tf

    if job.threads:
        tf.config.threading.set_intra_op_parallelism_threads(job.threads)
        tf.config.threading.set_inter_op_parallelism_threads(job.threads)
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING,
        timeout_seconds=job.collective_timeout_s)
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)


class Trainer:
    """This worker's part of data-parallel training of a TensorFlow backend model built under
    ``strategy.scope()``: the backend's step body with :func:`exchange`, run by ``strategy.run``
    in one ``tf.function``. ``placed`` is this worker's shard of the batch, placed by the backend."""

    def __init__(self, backend, strategy, model, opt, placed: dict[str, Any]):
        import tensorflow as tf

        with strategy.scope():
            body, self.accums = backend.step_body(model, opt, reduce_grads=exchange)
        self.strategy, self.inputs, self.y = strategy, placed["inputs"], placed["y"]
        self.fn = tf.function(lambda inputs, y: strategy.run(body, args=(inputs, y)), autograph=False)

    def step(self) -> Any:
        """One synchronous step; returns this worker's loss."""
        return self.strategy.experimental_local_results(self.fn(self.inputs, self.y))[0]


def run(job: DataParallelJob, out_dir: Path) -> dict[str, Any] | None:
    rank, world = int(os.environ["DLBENCH_RANK"]), int(os.environ["DLBENCH_WORLD"])
    addrs = os.environ["DLBENCH_ADDRS"].split(",")
    (out_dir / f"pid.{rank}").write_text(str(os.getpid()))
    cores = common.pin_cores(int(os.environ.get("DLBENCH_CORE_OFFSET", rank)), job.threads)
    if job.threads:
        os.environ["TF_NUM_INTRAOP_THREADS"] = os.environ["TF_NUM_INTEROP_THREADS"] = str(job.threads)

    strategy = strategy_for(job, rank, addrs)
    import tensorflow as tf

    from dlbench.frameworks.base import OptimizerSpec, UnsupportedError
    from dlbench.frameworks.tensorflow.backend import TensorFlowBackend

    backend = TensorFlowBackend()
    try:
        if common.variant(job) == "xla":
            raise UnsupportedError(NO_XLA)
        with strategy.scope():
            spec, model = common.build_model(backend, job)
        _, local = common.build_model(backend, job)  # compute alone: a plain copy, no exchange
    except UnsupportedError as exc:
        if rank == 0:
            common.write_json(out_dir / "result.json", {"unsupported": str(exc)})
        return None
    data = common.shard(spec, job.cell.global_batch, rank, world, job.seed)
    opt = OptimizerSpec(spec.learning_rate, 0.9)
    trainer = Trainer(backend, strategy, model, opt, backend.place(data, model))
    alone = backend.train_step(local, backend.place(data, local), opt)
    gtree = [tf.ones(v.shape, v.dtype) for v in local.trainable]

    @tf.function
    def exchange_alone():
        return strategy.run(lambda: exchange(gtree))

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

    protocol = job.protocol
    warmup_ns = [timed(trainer.step) for _ in range(max(1, int(protocol.get("warmup", 3))))]
    mine = np.float64(common.steps_to_time(warmup_ns, protocol))
    steps = int(local_value(gather(tf.constant([mine])))[:, 0].numpy().max())
    timed(alone)
    compute_ns = [timed(alone) for _ in range(steps)]
    timed(lambda: local_value(exchange_alone()))
    comm_ns = [timed(lambda: local_value(exchange_alone())[0]) for _ in range(steps)]

    def barrier():  # an all-gather of one number (the shape the step count used: no retrace)
        return local_value(gather(tf.constant([np.float64(0)]))).numpy()

    step_ns = []
    with common.WireWindow(os.environ.get("DLBENCH_IFACE"), barrier) as wire:
        for i in range(steps):
            step_ns.append(timed(trainer.step))
            if common.fault_due(job, rank, len(warmup_ns) + i):
                os.kill(os.getpid(), 9)
    dig = common.digest(backend.get_params(model))
    moved = -1 if wire.moved is None else wire.moved
    row = np.concatenate([warmup_ns, step_ns, comm_ns, compute_ns, np.frombuffer(bytes.fromhex(dig), np.uint8),
                          [moved]]).astype(np.float64)
    rows = local_value(gather(tf.constant(row))).numpy().reshape(world, -1)
    nw = len(warmup_ns)
    grad_bytes = sum(int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize for v in local.trainable)
    per_rank = []
    for r in range(world):
        v = rows[r]
        parts = np.split(v, np.cumsum([nw, steps, steps, steps, 32]))
        per_rank.append({"rank": r, "warmup_ns": parts[0].tolist(), "step_ns": parts[1].tolist(),
                         "comm_ns": parts[2].tolist(), "compute_ns": parts[3].tolist(),
                         "digest": bytes(parts[4].astype(np.uint8)).hex(),
                         "iface_bytes": None if parts[5][0] < 0 else int(parts[5][0]), "steps": steps,
                         "payload_bytes": [grad_bytes] * steps, "cores": cores if r == rank else None})
    result = {"per_rank": per_rank, "world": world, "local_world": 1, "nnodes": world,
              "grad_bytes": grad_bytes, "param_count": spec.param_count,
              "dist_backend": "MultiWorkerMirroredStrategy (RING collectives)",
              "versions": common.versions(("tensorflow", "tensorflow-cpu", "keras")),
              "comm_method": "all_reduce(MEAN) of a gradient-shaped list across workers, timed alone",
              "compute_method": "the TensorFlow backend's own train_step on a local copy, without the exchange"}
    if rank == 0:
        common.write_json(out_dir / "result.json", result)
    return result


def main(argv: list[str]) -> int:
    return common.worker_main(argv, run)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
