"""Parameter server on Ray: ``python -m dlbench.distributed.ps JOB.json OUT_DIR`` (the driver).

Parameters are sharded by parameter over S shard actors (greedy by size, so the shards hold
about equal bytes); each shard applies SGD with momentum (the optimiser of every other cell) to
its parameters. W worker actors each build the model with the framework's dlbench backend from the same
canonical weights and compute gradients with it (``Backend.loss_and_grads``, canonical layout); the
framework's ``parameter_server`` part loads pulled parameters into its model (torch's today).

* ``ps-async``: each worker loops pull (all shards) -> load -> gradient -> push (all shards, its
  own acknowledgement awaited, nobody else's): no barrier between workers. A shard counts its
  version (updates applied); a push computed from version v arriving at version u has a
  staleness (version lag) of u - v. Each push is applied on arrival.
* ``ps-sync``: rounds; in each, every worker pulls the same version, pushes its gradient, and a
  shard applies the average once all W have arrived (the driver's wait is the barrier): the
  parameter-server form of synchronous data parallel, to set beside all-reduce.

The Ray cluster is local (``ray.init(num_cpus=max(2, W x threads), include_dashboard=False)``),
its session directory a short one in /tmp (a Unix socket's path has at most 107 bytes), and it is
shut down in a ``finally`` and the directory removed; the launcher then kills anything still in the
job's process session or naming its directory.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from dlbench.core.job import JobError, ParameterServerJob
from dlbench.frameworks import data_parallel as common
from dlbench.frameworks import framework_info


def assign_shards(sizes: dict[str, int], shards: int) -> list[list[str]]:
    """Parameters to shards, largest first onto the lightest shard (balanced bytes)."""
    out: list[list[str]] = [[] for _ in range(max(1, shards))]
    load = [0] * len(out)
    for name in sorted(sizes, key=lambda n: (-sizes[n], n)):
        i = load.index(min(load))
        out[i].append(name)
        load[i] += sizes[name]
    return out


class ShardCore:
    """One shard's state and update rule (kept free of Ray so it can be tested directly)."""

    def __init__(self, params: dict[str, np.ndarray], lr: float, momentum: float, workers: int):
        self.params = {k: np.array(v, dtype=np.float32) for k, v in params.items()}
        self.buf = {k: np.zeros_like(v) for k, v in self.params.items()}
        self.lr, self.momentum, self.workers = lr, momentum, workers
        self.version = 0
        self.lags: list[int] = []
        self.pending: list[dict[str, np.ndarray]] = []

    def pull(self) -> tuple[int, dict[str, np.ndarray]]:
        return self.version, self.params

    def _apply(self, grads: dict[str, np.ndarray]) -> None:
        for k, g in grads.items():  # torch.optim.SGD: buf = m * buf + g; p -= lr * buf
            self.buf[k] *= self.momentum
            self.buf[k] += g
            self.params[k] -= self.lr * self.buf[k]
        self.version += 1

    def push(self, grads: dict[str, np.ndarray], version: int) -> int:
        """Asynchronous: apply on arrival; record how many updates this gradient missed."""
        self.lags.append(self.version - version)
        self._apply(grads)
        return self.version

    def push_sync(self, grads: dict[str, np.ndarray], version: int) -> int:
        """Synchronous: the average of the W gradients of one version, applied when all are in."""
        if version != self.version:
            raise RuntimeError(f"synchronous push for version {version} at version {self.version}")
        self.pending.append(grads)
        if len(self.pending) == self.workers:
            avg = {k: np.mean([g[k] for g in self.pending], axis=0) for k in self.pending[0]}
            self.pending = []
            self._apply(avg)
        return self.version

    def take_lags(self) -> list[int]:
        lags, self.lags = self.lags, []
        return lags


class WorkerCore:
    """One worker: the framework's model, its data shard, and the pull / gradient / push step."""

    def __init__(self, job: ParameterServerJob, rank: int):
        common.pin_cores(rank, job.threads)
        from dlbench import frameworks

        self.backend = frameworks.get_backend(job.cell.framework)
        self.part = frameworks.load_part(job.cell.framework, "parameter_server")
        if job.threads:
            self.backend.set_threads(job.threads)
        spec, self.model = common.build_model(self.backend, job, "cpu")
        self.batch = self.backend.place(common.shard(spec, job.cell.global_batch, rank, job.cell.workers, job.seed),
                                        self.model)
        self.trainable = spec.trainable_names()
        self.rank = rank

    def load(self, params: dict[str, np.ndarray]) -> None:
        self.part.load_params(self.model, params)

    def step(self, shards, shard_names: list[list[str]], sync: bool) -> dict[str, float]:
        import ray

        t0 = time.perf_counter_ns()
        pulled = ray.get([s.pull.remote() for s in shards])
        versions = [v for v, _ in pulled]
        for _, params in pulled:
            self.load(params)
        t1 = time.perf_counter_ns()
        _, grads = self.backend.loss_and_grads(self.model, self.batch)
        t2 = time.perf_counter_ns()
        method = "push_sync" if sync else "push"
        ray.get([getattr(s, method).remote({k: grads[k] for k in names if k in grads}, v)
                 for s, names, v in zip(shards, shard_names, versions, strict=True)])
        t3 = time.perf_counter_ns()
        return {"step_ns": t3 - t0, "pull_ns": t1 - t0, "compute_ns": t2 - t1, "push_ns": t3 - t2}

    def loop(self, shards, shard_names, steps: int) -> list[dict[str, float]]:
        out = []
        for _ in range(steps):
            out.append(self.step(shards, shard_names, sync=False))
        return out


def run(job: ParameterServerJob, out_dir: Path) -> dict[str, Any]:
    import ray

    from dlbench.models import get_model
    from dlbench.models.weights import init_weights

    workers, threads = job.cell.workers, job.threads or 1
    module = framework_info(job.cell.framework).import_name
    mode = "sync" if job.cell.exchange == "ps-sync" else "async"
    spec = get_model(job.cell.model, small=job.small)
    weights = init_weights(spec, job.seed)
    names = spec.trainable_names()
    shard_names = assign_shards({n: weights.params[n].nbytes for n in names}, job.ps_shards)
    shard_names = [s for s in shard_names if s]
    src = str(Path(__file__).resolve().parents[2])
    # Ray's sockets live in its session directory, and a Unix socket's path has at most 107 bytes: under
    # the run's own temporary directory (dlbench.storage.lease) it was longer, so Ray's goes in /tmp, removed after
    ray_dir = tempfile.mkdtemp(prefix="dlb-ray-", dir="/tmp")
    ray.init(address="local", num_cpus=max(2, workers * threads), include_dashboard=False, _temp_dir=ray_dir,
             log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": src, "OMP_NUM_THREADS": str(threads)}})
    try:
        Shard = ray.remote(num_cpus=0)(ShardCore)
        Worker = ray.remote(num_cpus=threads)(WorkerCore)
        lr = spec.learning_rate
        shards = [Shard.remote({n: weights.params[n] for n in group}, lr, 0.9, workers) for group in shard_names]
        pool = [Worker.remote(job, r) for r in range(workers)]
        protocol = job.protocol
        warm = max(1, int(protocol.get("warmup", 3)))
        if mode == "sync":
            result = _run_sync(ray, pool, shards, shard_names, warm, protocol)
        else:
            result = _run_async(ray, pool, shards, shard_names, warm, protocol, job)
        grad_bytes = sum(weights.params[n].nbytes for n in names)
        result.update({
            "mode": mode, "ps_shards": len(shards), "shard_bytes": [sum(weights.params[n].nbytes for n in g)
                                                                   for g in shard_names],
            "grad_bytes": grad_bytes, "pull_bytes_per_step": grad_bytes, "push_bytes_per_step": grad_bytes,
            "param_count": spec.param_count, "versions": common.versions((module, "ray")),
            "comm_method": "pull + push round trips of each worker (Ray actor calls, object store)" if mode == "async"
            else "round time minus the slowest worker's gradient computation (pull, push, shard update, barrier)",
            "compute_method": "Backend.loss_and_grads inside the worker's step",
        })
        return result
    finally:
        ray.shutdown()
        shutil.rmtree(ray_dir, ignore_errors=True)


def _run_sync(ray, pool, shards, shard_names, warm: int, protocol: dict) -> dict[str, Any]:
    def round_() -> tuple[float, list[dict]]:
        t0 = time.perf_counter_ns()
        stats = ray.get([w.step.remote(shards, shard_names, True) for w in pool])
        return float(time.perf_counter_ns() - t0), stats

    warmup_ns = [round_()[0] for _ in range(warm)]
    steps = common.steps_to_time(warmup_ns, protocol)
    step_ns, compute_ns, comm_ns = [], [], []
    for _ in range(steps):
        t, stats = round_()
        step_ns.append(t)
        compute_ns.append(float(max(s["compute_ns"] for s in stats)))
        comm_ns.append(t - compute_ns[-1])
    return {"warmup_ns": warmup_ns, "step_ns": step_ns, "compute_ns": compute_ns, "comm_ns": comm_ns,
            "updates": steps, "samples_per_s_wall": None}


def _run_async(ray, pool, shards, shard_names, warm: int, protocol: dict, job: ParameterServerJob) -> dict[str, Any]:
    warm_stats = ray.get([w.loop.remote(shards, shard_names, warm) for w in pool])
    warmup_ns = [float(max(ws[i]["step_ns"] for ws in warm_stats)) for i in range(warm)]
    ray.get([s.take_lags.remote() for s in shards])
    steps = common.steps_to_time([s["step_ns"] for s in warm_stats[0]], protocol)
    t0 = time.perf_counter_ns()
    stats = ray.get([w.loop.remote(shards, shard_names, steps) for w in pool])
    wall = (time.perf_counter_ns() - t0) / 1e9
    lags = [lag for per in ray.get([s.take_lags.remote() for s in shards]) for lag in per]
    step_ns = [float(s["step_ns"]) for per in stats for s in per]
    compute_ns = [float(s["compute_ns"]) for per in stats for s in per]
    comm_ns = [float(s["pull_ns"] + s["push_ns"]) for per in stats for s in per]
    per_worker = job.cell.per_worker_batch
    return {"warmup_ns": warmup_ns, "step_ns": step_ns, "compute_ns": compute_ns, "comm_ns": comm_ns,
            "updates": steps * len(pool), "samples_per_s_wall": per_worker * steps * len(pool) / wall,
            "staleness": staleness(lags)}


def staleness(lags: list[int]) -> dict[str, Any]:
    """The distribution of version lags: histogram and summary."""
    if not lags:
        return {"n": 0}
    a = np.asarray(lags)
    values, counts = np.unique(a, return_counts=True)
    return {"n": int(a.size), "mean": float(a.mean()), "p50": float(np.percentile(a, 50)),
            "p95": float(np.percentile(a, 95)), "max": int(a.max()),
            "histogram": {str(int(v)): int(c) for v, c in zip(values, counts, strict=True)}}


def main(argv: list[str]) -> int:
    out_dir = Path(argv[2])
    try:
        job = common.load_job(argv[1], ParameterServerJob)
    except JobError as exc:
        return common.refuse(out_dir, 0, exc)
    try:
        result = run(job, out_dir)
        common.write_json(out_dir / "result.json", result)
        return 0
    except BaseException as exc:
        common.write_error(out_dir, 0, exc)
        return 1


if __name__ == "__main__":
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    sys.exit(main(sys.argv))
