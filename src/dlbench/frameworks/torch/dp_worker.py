"""One PyTorch DistributedDataParallel worker, started by torchrun:
``python -m torch.distributed.run ... -m dlbench.frameworks.torch.dp_worker JOB.json OUT_DIR``.

Every rank builds the model with the dlbench torch backend from the same canonical weights, takes
its slice of one seeded global batch, and wraps the network in DDP (gloo on the CPU, NCCL on
CUDA; the NCCL path is written the standard way but has not been run here). What is timed:

* ``warmup`` and ``measure``: the synchronous train step (forward, backward with DDP's bucketed
  all-reduce overlapping it, SGD momentum update), each step timed on every rank;
* ``comm``: per step, the wall time during which at least one gradient all-reduce was in flight,
  taken from a DDP communication hook that wraps each bucket's all-reduce future (launch to
  completion, the union over buckets);
* ``compute``: the same step under ``DDP.no_sync()`` (no gradient exchange), parameters and
  optimiser state restored afterwards so every rank stays identical.

The step count is decided by rank 0 after the warm-up and broadcast, so every rank runs the same
number of collectives. After the measured steps every rank hashes its parameters; the launcher
checks the hashes agree. ``broadcast_buffers=False``: batch-norm running statistics stay local
(DDP's default re-broadcasts them every forward, traffic the scaling model does not count);
parameters, the trained state, are exchanged and checked.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from dlbench.core.job import DataParallelJob
from dlbench.frameworks import data_parallel as common


class CommTimer:
    """A DDP communication hook that all-reduces each bucket as DDP does (average over ranks) and
    records when the exchange was launched and when its future completed."""

    def __init__(self, dist, world: int):
        self.dist, self.world = dist, world
        self.lock = threading.Lock()
        self.intervals: list[tuple[int, int]] = []
        self.bytes = 0

    def hook(self, state, bucket):
        t0 = time.perf_counter_ns()
        buf = bucket.buffer()
        nbytes = buf.numel() * buf.element_size()
        fut = self.dist.all_reduce(buf.div_(self.world), async_op=True).get_future()

        def done(f):
            t1 = time.perf_counter_ns()
            with self.lock:
                self.intervals.append((t0, t1))
                self.bytes += nbytes
            return f.value()[0]
        return fut.then(done)

    def take(self) -> tuple[float, int, int]:
        """(in-flight ns, payload bytes, buckets) since the last call."""
        with self.lock:
            iv, nbytes = self.intervals, self.bytes
            self.intervals, self.bytes = [], 0
        return common.union_ns(iv), nbytes, len(iv)


def wrap(model, dist, world: int, local_rank: int) -> tuple[Any, CommTimer, Any]:
    """The torch backend's model in DDP, with the timing hook: ``(ddp, timer, loss_fn)``, the loss
    function the backend's own (``_loss_fn``) over the DDP module; a backward through it leaves the
    gradients averaged over the ranks in the model's parameters."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    from dlbench.frameworks.torch.backend import _loss_fn

    model.net.train()
    ddp = DDP(model.net, device_ids=[local_rank] if model.device.type == "cuda" else None, broadcast_buffers=False)
    timer = CommTimer(dist, world)
    ddp.register_comm_hook(None, timer.hook)
    loss_fn = _loss_fn(model.spec, ddp)
    if model.variant == "compile":
        loss_fn = torch.compile(loss_fn)
    return ddp, timer, loss_fn


def run(job: DataParallelJob, out_dir: Path) -> dict[str, Any] | None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank, local_world = int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"])
    (out_dir / f"pid.{rank}").write_text(str(os.getpid()))
    offset = int(os.environ.get("DLBENCH_CORE_OFFSET", "0"))
    cores = common.pin_cores(offset + local_rank, job.threads)

    import torch
    import torch.distributed as dist

    from dlbench.frameworks.torch.backend import TorchBackend

    device = job.cell.device
    if device.startswith("cuda"):
        device = f"cuda:{local_rank}"
        torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl" if device.startswith("cuda") else "gloo",
                            timeout=timedelta(seconds=job.collective_timeout_s))
    try:
        backend = TorchBackend()
        readback = backend.set_threads(job.threads) if job.threads else {}
        spec, model = common.build_model(backend, job, device)
        data = common.shard(spec, job.cell.global_batch, rank, world, job.seed)
        placed = backend.place(data, model)
        x, y, mask = placed["x"], placed["y"], placed["mask"]

        ddp, timer, loss_fn = wrap(model, dist, world, local_rank)
        opt = torch.optim.SGD(model.trainable, lr=spec.learning_rate, momentum=0.9, fused=True)

        def sync() -> None:
            if device.startswith("cuda"):
                torch.cuda.synchronize()

        def step() -> torch.Tensor:
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(x, y, mask)
            loss.backward()
            opt.step()
            return loss

        def timed(fn) -> float:
            t0 = time.perf_counter_ns()
            fn()
            sync()
            return float(time.perf_counter_ns() - t0)

        protocol = job.protocol
        warmup_ns = []
        for i in range(max(1, int(protocol.get("warmup", 3)))):
            warmup_ns.append(timed(step))
            timer.take()
            if common.fault_due(job, rank, i):
                os.kill(os.getpid(), 9)
        n = torch.tensor([common.steps_to_time(warmup_ns, protocol)], dtype=torch.int64,
                         device=device if device.startswith("cuda") else "cpu")
        dist.broadcast(n, src=0)
        steps = int(n.item())

        # compute alone: the same step without the exchange, then back to the synchronised state
        saved_params = [p.detach().clone() for p in model.trainable]
        saved_opt = {k: (v.clone() if torch.is_tensor(v) else v) for k, v in _flat_opt_state(opt).items()}
        compute_ns = []
        with ddp.no_sync():
            for _ in range(steps):
                compute_ns.append(timed(step))
        with torch.no_grad():
            for p, s in zip(model.trainable, saved_params, strict=True):
                p.copy_(s)
        _restore_opt_state(opt, saved_opt)
        timer.take()

        step_ns, comm_ns, payload, buckets = [], [], [], []
        with common.WireWindow(os.environ.get("DLBENCH_IFACE"), dist.barrier) as wire:
            t_start = time.perf_counter_ns()
            for i in range(steps):
                step_ns.append(timed(step))
                c, b, k = timer.take()
                comm_ns.append(c)
                payload.append(b)
                buckets.append(k)
                if common.fault_due(job, rank, len(warmup_ns) + i):
                    os.kill(os.getpid(), 9)
            wall_ns = time.perf_counter_ns() - t_start
        final_loss = float(step().detach().cpu())  # one more synchronised step so the loss is of a trained model
        timer.take()

        mine = {
            "rank": rank, "local_rank": local_rank, "host_addr": os.environ.get("DLBENCH_NODE_ADDR", ""),
            "cores": cores, "threads_readback": readback, "warmup_ns": warmup_ns, "step_ns": step_ns,
            "comm_ns": comm_ns, "compute_ns": compute_ns, "payload_bytes": payload, "buckets": buckets,
            "wall_ns": wall_ns, "iface_bytes": wire.moved, "digest": common.digest(backend.get_params(model)),
            "final_loss": final_loss, "steps": steps,
        }
        everyone: list[Any] = [None] * world
        dist.all_gather_object(everyone, mine)
        grad_bytes = sum(p.numel() * p.element_size() for p in model.trainable)
        result = {
            "per_rank": everyone, "world": world, "local_world": local_world,
            "nnodes": world // max(local_world, 1), "grad_bytes": grad_bytes, "param_count": spec.param_count,
            "dist_backend": dist.get_backend(), "versions": common.versions(("torch",)),
            "comm_method": "DDP comm hook: union of in-flight all-reduce futures per step",
            "compute_method": "the same step under DDP.no_sync() (no gradient exchange)",
        }
        if local_rank == 0:
            common.write_json(out_dir / "result.json", result)
        dist.barrier()
        return result
    finally:
        dist.destroy_process_group()


def _flat_opt_state(opt) -> dict:
    out = {}
    for i, group in enumerate(opt.param_groups):
        for j, p in enumerate(group["params"]):
            for k, v in opt.state.get(p, {}).items():
                out[(i, j, k)] = v
    return out


def _restore_opt_state(opt, saved: dict) -> None:
    import torch

    with torch.no_grad():
        for (i, j, k), v in saved.items():
            p = opt.param_groups[i]["params"][j]
            if torch.is_tensor(v):
                opt.state[p][k].copy_(v)
            else:
                opt.state[p][k] = v
    for i, group in enumerate(opt.param_groups):  # state created during no_sync steps only
        for j, p in enumerate(group["params"]):
            for k in list(opt.state.get(p, {})):
                if (i, j, k) not in saved:
                    del opt.state[p][k]


def main(argv: list[str]) -> int:
    return common.worker_main(argv, run, rank_env="RANK")


if __name__ == "__main__":
    common.leave(main(sys.argv))
