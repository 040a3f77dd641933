"""One rank of the data-parallel probe of tests/test_dp_equivalence.py:
``python tests/dp_probe.py FRAMEWORK RANK WORLD ADDRS JOB.json OUT_DIR`` (ADDRS: every rank's
host:port, comma-separated; the first is the coordinator / master).

It runs the worker's own code (``dlbench/frameworks/{torch,jax,tensorflow}/dp_worker.py``):
joining the other processes, building the model with the framework's backend
(``common.build_model``), and the data-parallel step, for one step with learning rate 0 and
momentum 0, so the parameters stay as they are and the momentum buffer holds exactly the gradient
the step applied (torch: the gradients DDP leaves in ``.grad`` after the backward pass). Writes
``OUT_DIR/rank<R>.npz``: that gradient (``grad/<name>``), and the worker's model as built, before
the step: its parameters (``param/<name>``) and eval-mode output on this rank's shard (``forward``),
all in canonical layout.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

from dlbench.core.job import DataParallelJob
from dlbench.frameworks import data_parallel as common
from dlbench.frameworks.base import OptimizerSpec

RECORD = OptimizerSpec(0.0, 0.0)  # accum = 0 * accum + grad; param -= 0 * accum


def _before(backend, model, placed) -> tuple[dict, np.ndarray]:
    return backend.get_params(model), backend.to_numpy(backend.forward(model, placed)())


def probe_torch(job, rank, world, addrs):
    host, port = addrs[0].rsplit(":", 1)
    os.environ.update(MASTER_ADDR=host, MASTER_PORT=port, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK="0")
    import torch.distributed as dist

    from dlbench.frameworks.torch import dp_worker as torch_ddp
    from dlbench.frameworks.torch.backend import TorchBackend

    dist.init_process_group("gloo")
    backend = TorchBackend()
    backend.set_threads(1)
    spec, model = common.build_model(backend, job)
    placed = backend.place(common.shard(spec, job.cell.global_batch, rank, world, job.seed), model)
    params, out = _before(backend, model, placed)
    _, _, loss_fn = torch_ddp.wrap(model, dist, world, 0)
    loss_fn(placed["x"], placed["y"], placed["mask"]).backward()
    grads = backend.grads_to_canonical(model)
    dist.barrier()
    dist.destroy_process_group()
    return params, out, grads


def probe_jax(job, rank, world, addrs):
    from dlbench.frameworks.jax import dp_worker as jax_dp

    jax_dp.connect(job, rank, world, addrs[0])
    import jax
    import optax

    from dlbench.frameworks.jax.backend import JaxBackend

    backend = JaxBackend()
    spec, model = common.build_model(backend, job)
    placed = backend.place(common.shard(spec, job.cell.global_batch, rank, world, job.seed), model)
    params, out = _before(backend, model, placed)
    trainer = jax_dp.Trainer(model, RECORD, jax_dp.mesh_for(model), placed)
    jax.block_until_ready(trainer.step())
    trainer.into_model()
    grads = backend.grads_to_canonical(model, optax.tree_utils.tree_get(model.opt_state, "trace"))
    jax.distributed.shutdown()
    return params, out, grads


def probe_tensorflow(job, rank, world, addrs):
    from dlbench.frameworks.tensorflow import dp_worker as tf_dp

    strategy = tf_dp.strategy_for(job, rank, addrs)
    from dlbench.frameworks.keras import keras_model as km
    from dlbench.frameworks.tensorflow.backend import TensorFlowBackend

    backend = TensorFlowBackend()
    with strategy.scope():
        spec, model = common.build_model(backend, job)
    placed = backend.place(common.shard(spec, job.cell.global_batch, rank, world, job.seed), model)
    params, out = _before(backend, model, placed)
    trainer = tf_dp.Trainer(backend, strategy, model, RECORD, placed)
    trainer.step().numpy()
    return params, out, km.grads_to_canonical(model.build, [a.numpy() for a in trainer.accums])


def main(argv: list[str]) -> None:
    framework, rank, world, addrs, job_path, out_dir = argv[1:]
    rank, world = int(rank), int(world)
    job = common.load_job(job_path, DataParallelJob)
    common.pin_cores(rank, 1)
    params, out, grads = globals()[f"probe_{framework}"](job, rank, world, addrs.split(","))
    np.savez(Path(out_dir) / f"rank{rank}.npz", forward=out, **{f"param/{k}": v for k, v in params.items()},
             **{f"grad/{k}": v for k, v in grads.items()})
    if framework == "torch":  # gloo may abort in static destructors at exit (see common.leave)
        common.leave(0)


if __name__ == "__main__":
    main(sys.argv)
