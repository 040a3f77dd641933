"""What every data-parallel worker shares, whatever its framework: reading its typed job
(:class:`~dlbench.core.job.DataParallelJob`, refused in one line when malformed), pinning cores,
its shard of the data, how many steps to time, interval arithmetic, interface byte counters, and
writing its result or its error where the launcher looks for them.

No framework is imported here (a worker imports its own after pinning its cores).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from dlbench.core.job import DataParallelJob, JobError, ScalingJob, decode
from dlbench.core.outputs import replace_file

J = TypeVar("J", bound=ScalingJob)


def load_job(path: str, kind: type[J]) -> J:
    """The job in ``path``, read once as ``kind``; :class:`~dlbench.core.job.JobError` saying what is
    wrong with a file that is not one."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        raise JobError(f"cannot read the job {path}: {exc}") from None
    job = decode(data)
    if not isinstance(job, kind):
        raise JobError(f"{path} is a {job.kind} job, not the {kind.kind} job this worker runs")
    return job


def pin_cores(local_index: int, threads: int | None) -> list[int]:
    """Give the ``local_index``-th process on this machine its own ``threads`` cores (wrapping round
    when workers x threads exceeds the cores: they then share, and the cell says so)."""
    allowed = sorted(os.sched_getaffinity(0))
    if threads:
        start = (local_index * threads) % len(allowed)
        mine = [allowed[(start + i) % len(allowed)] for i in range(min(threads, len(allowed)))]
        os.sched_setaffinity(0, mine)
    return sorted(os.sched_getaffinity(0))


def oversubscribed(workers_here: int, threads: int | None, cores: int | None = None) -> str:
    """A warning when this machine's workers need more cores than it has ("" otherwise)."""
    cores = cores or len(os.sched_getaffinity(0))
    need = workers_here * (threads or 1)
    if need > cores:
        return f"{workers_here} workers x {threads or 1} threads = {need} > {cores} cores here: workers share cores"
    return ""


def shard(spec, global_batch: int, rank: int, world: int, seed: int):
    """This rank's slice of one seeded global batch, so that W workers together see exactly the
    batch one worker sees at W=1 in strong scaling (and W disjoint batches in weak scaling)."""
    from dlbench.data.synthetic import Batch, make_batch

    full = make_batch(spec, global_batch, seed)
    per = global_batch // world
    cut = slice(rank * per, (rank + 1) * per)
    return Batch(full.x[cut], None if full.y is None else full.y[cut], None if full.mask is None else full.mask[cut])


def variant(job: ScalingJob) -> str | None:
    """The job's framework variant for the backend's ``build`` (None, the backend's first, for "default")."""
    v = job.cell.variant
    return None if v in ("", "default") else v


def build_model(backend, job: ScalingJob, device: str | None = None) -> tuple[Any, Any]:
    """``(spec, model)``: the job's model built by the framework's dlbench backend (the one the
    equivalence gate verifies) from the canonical weights of the run's seed. Every worker's model."""
    from dlbench.models import get_model
    from dlbench.models.weights import init_weights

    spec = get_model(job.cell.model, small=job.small)
    weights = init_weights(spec, job.seed)
    return spec, backend.build(spec, weights, device or job.cell.device, variant(job))


def steps_to_time(warmup_ns: list[float], protocol: dict[str, Any]) -> int:
    """Steps for the measured phase, decided once (by rank 0) so every rank runs the same count:
    at least ``min_iters`` and ``min_time_s``, at most what fits in ``max_time_s``."""
    steady = min(warmup_ns[1:]) if len(warmup_ns) > 1 else warmup_ns[-1]
    steady_s = max(steady, 1.0) / 1e9
    n = max(int(protocol.get("min_iters", 20)), math.ceil(float(protocol.get("min_time_s", 0.0)) / steady_s))
    cap = max(1, int(float(protocol.get("max_time_s", 120.0)) / steady_s))
    return max(1, min(n, cap))


def union_ns(intervals: Iterable[tuple[int, int]]) -> float:
    """Total length of the union of [start, end) intervals: the wall time during which at least
    one gradient exchange was in flight (buckets overlap one another and the backward pass)."""
    total, end = 0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return float(total)


def iface_bytes(iface: str | None) -> int | None:
    """tx + rx bytes of a network interface (this namespace's view), None when unknown."""
    if not iface:
        return None
    try:
        base = Path("/sys/class/net") / iface / "statistics"
        return int((base / "tx_bytes").read_text()) + int((base / "rx_bytes").read_text())
    except (OSError, ValueError):
        return None


class WireWindow:
    """Bytes through this worker's interface while every worker is inside the measured steps.

    Reading the counters right after a barrier undercounts: a peer leaves the barrier first, starts its
    step and sends into this interface before this worker reads "before"; and at the end this worker's
    own last chunk may still sit in the rate limiter's queue when it reads "after". So each worker reads
    "before" and only then enters a barrier (no peer can send step traffic before every worker has
    read), and at the end enters a barrier (everything sent before it on the same connection has gone
    through), reads "after", and enters one more (no peer's next traffic reaches the count). The
    barriers' own few bytes are counted: an overcount of a few hundred bytes against megabytes.
    """

    def __init__(self, iface: str | None, barrier: Callable[[], Any]) -> None:
        self.iface, self.barrier = iface, barrier
        self.before: int | None = None
        self.after: int | None = None

    def __enter__(self) -> WireWindow:
        self.before = iface_bytes(self.iface)
        self.barrier()
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if exc_type is not None:  # a peer may be gone: waiting at a barrier would hang
            return
        self.barrier()
        self.after = iface_bytes(self.iface)
        self.barrier()

    @property
    def moved(self) -> int | None:
        """tx + rx bytes in the window, None when the interface or its counters are unknown."""
        return None if self.before is None or self.after is None else self.after - self.before


def digest(params: dict[str, np.ndarray]) -> str:
    """SHA-256 of every parameter's bytes in canonical order: equal digests = identical weights."""
    h = hashlib.sha256()
    for name in sorted(params):
        h.update(name.encode())
        h.update(np.ascontiguousarray(params[name], dtype=np.float32).tobytes())
    return h.hexdigest()


def fault_due(job: DataParallelJob, rank: int, step: int) -> bool:
    """Fault injection for tests: ``job.fault`` (rank r, step k) kills rank r at step k."""
    return job.fault is not None and (job.fault.rank, job.fault.step) == (rank, step)


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Atomically (several nodes sharing one directory may write the same result)."""
    replace_file(path, json.dumps(data, default=str))


def write_error(out_dir: Path, rank: int, exc: BaseException) -> None:
    frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    where = f" ({os.path.basename(frame.filename)}:{frame.lineno})" if frame else ""
    write_json(out_dir / f"error.{rank}.json", {"rank": rank, "error": f"{type(exc).__name__}: {exc}{where}",
                                                "traceback": traceback.format_exc()})


def versions(packages: Iterable[str]) -> dict[str, str]:
    import importlib.metadata

    out = {}
    for pkg in packages:
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            pass
    out["python"] = sys.version.split()[0]
    return out


def combine_ranks(per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-step figures over ranks: a synchronous step ends when its slowest rank does, so step and
    compute take the max over ranks; time inside the exchange is averaged (a rank that finishes
    its compute early waits inside the exchange for the others)."""
    n = min(len(r["step_ns"]) for r in per_rank)
    step = [max(r["step_ns"][i] for r in per_rank) for i in range(n)]
    comm = [float(np.mean([r["comm_ns"][i] for r in per_rank])) for i in range(n)] if all(
        "comm_ns" in r for r in per_rank) else []
    nc = min(len(r.get("compute_ns", [])) for r in per_rank)
    compute = [max(r["compute_ns"][i] for r in per_rank) for i in range(nc)]
    warm = min(len(r["warmup_ns"]) for r in per_rank)
    warmup = [max(r["warmup_ns"][i] for r in per_rank) for i in range(warm)]
    return {"step_ns": step, "comm_ns": comm, "compute_ns": compute, "warmup_ns": warmup}


def leave(code: int) -> None:
    """End a worker process once its result or error is on disk, without interpreter teardown.

    torch 2.13's gloo process group sometimes aborts in C++ static destructors after Python has
    finished ("terminate called without an active exception", SIGABRT; about 1 run in 6 of the 2-worker
    namespace test here), and torchrun then reports a rank that did all its work as failed. Nothing
    is left to do at that point, so skip the teardown: flush, and ``os._exit``. Only for torch,
    whose process group is destroyed before: TensorFlow's coordination service waits for every task
    in a shutdown barrier at exit; with ``os._exit`` a TensorFlow run failed once in CI
    (``UnavailableError`` in rank 0's last collective), most likely for that reason.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def refuse(out_dir: Path, rank: int, exc: JobError) -> int:
    """A job the process cannot read: one line on stderr, the same in ``error.<rank>.json`` (the
    launcher reads it), exit status 2; nothing is run."""
    print(f"dlbench: {exc}", file=sys.stderr)
    write_json(out_dir / f"error.{rank}.json", {"rank": rank, "error": f"{type(exc).__name__}: {exc}"})
    return 2


def worker_main(argv: list[str], run: Callable[[DataParallelJob, Path], Any], rank_env: str = "DLBENCH_RANK") -> int:
    """The entry point every data-parallel worker module shares: ``argv`` is ``[prog, job.json,
    out_dir]``; the job is read once, as a :class:`~dlbench.core.job.DataParallelJob` (a malformed one is
    refused: :func:`refuse`); an exception of the run becomes ``error.<rank>.json`` and exit status 1."""
    out_dir, rank = Path(argv[2]), int(os.environ.get(rank_env, "-1"))
    try:
        job = load_job(argv[1], DataParallelJob)
    except JobError as exc:
        return refuse(out_dir, rank, exc)
    try:
        run(job, out_dir)
        return 0
    except BaseException as exc:
        write_error(out_dir, rank, exc)
        return 1
