"""One JAX data-parallel worker process: ``python -m dlbench.frameworks.jax.dp_worker JOB.json OUT_DIR``,
with ``DLBENCH_RANK``, ``DLBENCH_WORLD`` and ``DLBENCH_ADDRS`` (the first address is the
coordinator) in its environment.

JAX's own multi-process engine: ``jax.distributed.initialize`` joins the processes (on the CPU
their collectives run over gloo); one mesh axis spans one device per process.

The model is the JAX backend's (:class:`dlbench.frameworks.jax.backend.JaxBackend`, the one the
equivalence gate checks): every process builds it with ``build`` from the canonical weights, and
the step is the backend's own training function (:func:`dlbench.frameworks.jax.backend.train_update`:
its loss, ``value_and_grad`` and optax SGD with momentum), jitted under ``jax.shard_map``, with
one addition: its loss hook set to :func:`exchange`, ``jax.lax.pmean`` over the mesh axis, the
data-parallel loss of JAX's shard_map guide. Parameters, optimiser state and step counter are
replicated (``P()``), the batch is split along the axis; differentiating the averaged loss with
respect to the replicated parameters, JAX's autodiff sums the processes' gradients (the transpose
of each parameter's implicit broadcast into the per-process computation is a ``psum``, an
all-reduce in the backward pass), so every process applies the mean gradient. (Averaging the
gradients with ``pmean`` after ``value_and_grad`` instead would average gradients that are already
summed: W times the mean gradient; the equivalence test caught exactly that.) The batch-norm
running statistics are split too: each process keeps its own (as torch's DDP worker with
``broadcast_buffers=False``); they are not part of the exchange or the parameter digest.

What is timed: ``measure`` = the synchronous step; ``compute`` = the backend's own ``train_step``
on this process's copy of the model, without the exchange; ``comm`` = the gradient all-reduce
alone (``pmean`` of a gradient-shaped tree across processes), timed on its own: an exchange
measured in isolation, not overlapped with compute as in the full step (XLA may overlap them there).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from dlbench.core.job import DataParallelJob
from dlbench.frameworks import data_parallel as common

#: the mesh axis the processes span
AXIS = "d"


def exchange(tree: Any) -> Any:
    """The mean over the processes (inside ``shard_map``): of the loss in the step, which makes its
    gradient the processes' mean gradient; of a gradient-shaped tree when the exchange is timed alone."""
    import jax

    return jax.lax.pmean(tree, AXIS)


def connect(job: DataParallelJob, rank: int, world: int, coordinator: str) -> None:
    """Join this process to the others (before anything else touches a JAX device)."""
    import jax

    jax.distributed.initialize(coordinator_address=coordinator, num_processes=world, process_id=rank,
                               initialization_timeout=int(job.collective_timeout_s))


def mesh_for(model) -> Any:
    """A one-axis mesh of one device per process: in each, the device its model lives on."""
    import jax
    from jax.sharding import Mesh

    index = jax.local_devices(backend=model.device.platform).index(model.device)
    by_process: dict[int, list] = {}
    for d in sorted(jax.devices(model.device.platform), key=lambda d: d.id):
        by_process.setdefault(d.process_index, []).append(d)
    return Mesh(np.array([devs[index] for _, devs in sorted(by_process.items())]), (AXIS,))


def _copy(a: Any) -> Any:
    """A fresh copy of an array, where it is (typed PRNG keys included)."""
    import jax.numpy as jnp

    return jnp.array(a, copy=True)


class Trainer:
    """This process's part of data-parallel training of a JAX backend model: the model's state as
    global arrays over ``mesh`` and the backend's step with :func:`exchange` as its loss hook, one
    jitted ``shard_map``. ``placed`` is this process's shard of the batch, placed by the backend."""

    def __init__(self, model, opt, mesh, placed: dict[str, Any]):
        import jax
        from jax.sharding import PartitionSpec as P

        from dlbench.frameworks.jax import backend as jax_backend

        self.model, self.mesh = model, mesh
        tx = jax_backend.optimizer(opt)
        update = jax_backend.train_update(model.spec, model.graphdef, tx, reduce_loss=exchange)
        rep, split = P(), P(AXIS)
        self.fn = jax.jit(jax.shard_map(update, mesh=mesh,
                                        in_specs=(rep, rep, split, rep, rep, rep, split, split, split, rep),
                                        out_specs=(rep, rep, split, rep, rep)), donate_argnums=(0, 1, 2, 3))
        self.params, self.frozen, self.rest = (self.replicated(t) for t in (model.params, model.frozen, model.rest))
        self.opt_state = self.replicated(tx.init(model.params))
        self.step_count, self.key = self.replicated(model.step), self.replicated(model.key)
        self.stats = self.split(model.stats)
        self.x, self.y, self.mask = (self.split(placed[k]) for k in ("x", "y", "mask"))

    def replicated(self, tree: Any) -> Any:
        """The same value on every process, as global arrays (fresh buffers: the model keeps its own)."""
        import jax
        from jax.experimental import multihost_utils
        from jax.sharding import PartitionSpec as P

        return multihost_utils.host_local_array_to_global_array(jax.tree.map(_copy, tree), self.mesh, P())

    def split(self, tree: Any) -> Any:
        """Each process's own value, as the process's slice along the axis of global arrays."""
        import jax
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P

        sharding = NamedSharding(self.mesh, P(AXIS))
        return jax.tree.map(lambda a: jax.make_array_from_process_local_data(sharding, np.asarray(a)), tree)

    def step(self) -> Any:
        """One synchronous step; returns the loss averaged over the processes."""
        self.params, self.opt_state, self.stats, self.step_count, loss = self.fn(
            self.params, self.opt_state, self.stats, self.step_count, self.frozen, self.rest, self.x, self.y,
            self.mask, self.key)
        return loss

    def into_model(self) -> None:
        """Hand the trained state back to the model (this process's copies), so the backend reads it."""
        import jax

        def mine(tree):
            return jax.device_put(jax.tree.map(lambda a: a.addressable_shards[0].data, tree), self.model.device)
        m = self.model
        m.params, m.opt_state, m.stats, m.step = (mine(t) for t in (self.params, self.opt_state, self.stats,
                                                                     self.step_count))


def run(job: DataParallelJob, out_dir: Path) -> dict[str, Any] | None:
    rank, world = int(os.environ["DLBENCH_RANK"]), int(os.environ["DLBENCH_WORLD"])
    coordinator = os.environ["DLBENCH_ADDRS"].split(",")[0]
    (out_dir / f"pid.{rank}").write_text(str(os.getpid()))
    cores = common.pin_cores(int(os.environ.get("DLBENCH_CORE_OFFSET", rank)), job.threads)

    import jax
    from jax.experimental import multihost_utils

    from dlbench.frameworks.base import OptimizerSpec, UnsupportedError
    from dlbench.frameworks.jax.backend import JaxBackend

    connect(job, rank, world, coordinator)
    try:
        backend = JaxBackend()
        readback = backend.set_threads(job.threads) if job.threads else {}
        try:
            spec, model = common.build_model(backend, job)
        except UnsupportedError as exc:
            if rank == 0:
                common.write_json(out_dir / "result.json", {"unsupported": str(exc)})
            return None
        placed = backend.place(common.shard(spec, job.cell.global_batch, rank, world, job.seed), model)
        opt = OptimizerSpec(spec.learning_rate, 0.9)
        mesh = mesh_for(model)
        trainer = Trainer(model, opt, mesh, placed)
        alone = backend.train_step(model, placed, opt)  # the backend's own step on this process's copy
        exchange_alone = jax.jit(jax.shard_map(exchange, mesh=mesh, in_specs=jax.sharding.PartitionSpec(),
                                               out_specs=jax.sharding.PartitionSpec()))
        gtree = trainer.replicated(jax.tree.map(jax.numpy.ones_like, model.params))

        def timed(fn) -> float:
            t0 = time.perf_counter_ns()
            jax.block_until_ready(fn())
            return float(time.perf_counter_ns() - t0)

        protocol = job.protocol
        warmup_ns = [timed(trainer.step) for _ in range(max(1, int(protocol.get("warmup", 3))))]
        steps = int(multihost_utils.broadcast_one_to_all(np.int64(common.steps_to_time(warmup_ns, protocol))))
        timed(alone)  # compile
        compute_ns = [timed(alone) for _ in range(steps)]
        timed(lambda: exchange_alone(gtree))
        comm_ns = [timed(lambda: exchange_alone(gtree)) for _ in range(steps)]
        step_ns = []
        with common.WireWindow(os.environ.get("DLBENCH_IFACE"),
                               lambda: multihost_utils.sync_global_devices("measure")) as wire:
            for i in range(steps):
                step_ns.append(timed(trainer.step))
                if common.fault_due(job, rank, len(warmup_ns) + i):
                    os.kill(os.getpid(), 9)
        trainer.into_model()
        dig = common.digest(backend.get_params(model))
        digests = multihost_utils.process_allgather(np.frombuffer(bytes.fromhex(dig), np.uint8))
        moved = -1 if wire.moved is None else wire.moved
        ifaces = multihost_utils.process_allgather(np.int64(moved))
        cols = {name: multihost_utils.process_allgather(np.asarray(vals, np.float64))
                for name, vals in (("warmup_ns", warmup_ns), ("step_ns", step_ns), ("comm_ns", comm_ns),
                                   ("compute_ns", compute_ns))}
        grad_bytes = sum(int(leaf.nbytes) for leaf in jax.tree.leaves(model.params))
        per_rank = [{"rank": r, **{k: v[r].tolist() for k, v in cols.items()}, "digest": bytes(digests[r]).hex(),
                     "payload_bytes": [grad_bytes] * steps, "steps": steps,
                     "iface_bytes": None if int(ifaces[r]) < 0 else int(ifaces[r]),
                     "cores": cores if r == rank else None,
                     "threads_readback": readback if r == rank else None} for r in range(world)]
        result = {"per_rank": per_rank, "world": world, "local_world": 1, "nnodes": world, "grad_bytes": grad_bytes,
                  "param_count": spec.param_count, "dist_backend": "jax.distributed (gloo on CPU)",
                  "versions": common.versions(("jax", "jaxlib", "flax", "optax")),
                  "comm_method": "pmean of a gradient-shaped tree across processes, timed alone",
                  "compute_method": "the JAX backend's own train_step on this process's copy, without the exchange"}
        if rank == 0:
            common.write_json(out_dir / "result.json", result)
        multihost_utils.sync_global_devices("done")
        return result
    finally:
        jax.distributed.shutdown()


def main(argv: list[str]) -> int:
    return common.worker_main(argv, run)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
