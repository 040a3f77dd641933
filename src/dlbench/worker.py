"""The measuring process: ``python -m dlbench.worker JOB.json RESULT.json``.

Runs exactly one job in a fresh interpreter: pins the CPU affinity to the job's thread count
*before* any framework is imported, then imports the one backend the job names. The result
(or the error) is written as JSON; the parent never parses stdout.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any


def pin_threads(threads: int | None) -> list[int]:
    """Restrict this process to ``threads`` cores (the only limit XLA respects)."""
    allowed = sorted(os.sched_getaffinity(0))
    if threads:
        if threads > len(allowed):
            raise ValueError(f"{threads} threads asked, only {len(allowed)} cores available")
        os.sched_setaffinity(0, allowed[:threads])
    return sorted(os.sched_getaffinity(0))


def run_verify(job: dict[str, Any]) -> dict[str, Any]:
    from dlbench.frameworks import get_backend
    from dlbench.verify import verify_model

    backend = get_backend(job["framework"])
    if job.get("threads"):
        backend.set_threads(job["threads"])
    results = []
    for model in job["models"]:
        for variant in job.get("variants") or backend.variants:
            results.append(verify_model(backend, model, variant, job.get("device", "cpu")).to_dict())
    return {"results": results, "info": backend.info()}


def _prepare(job: dict[str, Any]):
    """Backend with threads set, spec, canonical weights and a seeded batch (all before timing)."""
    from dlbench.data.synthetic import make_batch
    from dlbench.frameworks import get_backend
    from dlbench.models import get_model
    from dlbench.weights import init_weights

    backend = get_backend(job["framework"])
    readback = backend.set_threads(job["threads"]) if job.get("threads") else {}
    spec = get_model(job["model"])
    weights = init_weights(spec, job.get("seed", 0))
    batch = real_batch(job, spec) if job.get("data", "synthetic") != "synthetic" else \
        make_batch(spec, job["batch"], job.get("seed", 0))
    return backend, readback, spec, weights, batch


def real_batch(job: dict[str, Any], spec):
    """The first batch of the data set's training split in the run's seeded order."""
    from dlbench.data import adapt, load_dataset

    dataset = adapt(load_dataset(job["data"], job.get("data_dir"), "train"), spec)
    return next(dataset.batches(job["batch"], seed=job.get("seed", 0)))


def run_cell(job: dict[str, Any]) -> dict[str, Any]:
    """Time one scenario under the protocol; report memory, thread read-back and first call."""
    import time

    from dlbench.frameworks.base import UnsupportedError
    from dlbench.measure.memory import current_rss_bytes, nvml_used_bytes, peak_rss_bytes
    from dlbench.measure.timer import Protocol, time_callable
    from dlbench.scenarios import make_closure

    backend, readback, spec, weights, batch = _prepare(job)
    scenario = job["scenario"]
    if scenario not in getattr(backend, "scenarios", ("forward", "gradient", "train_step")):
        return {"unsupported": f"{backend.name} does not support {scenario}"}
    rss_before = current_rss_bytes()
    t0 = time.perf_counter_ns()
    try:
        model = backend.build(spec, weights, job.get("device", "cpu"), job["variant"])
        placed = backend.place(batch, model)
        fn = make_closure(scenario, backend, model, placed, spec)
    except UnsupportedError as exc:
        return {"unsupported": str(exc)}
    build_ns = time.perf_counter_ns() - t0
    del weights
    timing = time_callable(fn, backend.sync, Protocol(**job["protocol"]))
    return {
        "timing": timing.to_dict(), "build_ns": build_ns, "threads_readback": readback,
        "rss_before_build_bytes": rss_before, "peak_rss_bytes": peak_rss_bytes(),
        "device_memory": {**backend.peak_device_memory(job.get("device", "cpu")),
                          **(nvml_used_bytes() if job.get("device", "cpu") != "cpu" else {})},
        "python": sys.executable, "versions": _versions(backend),
        "framework_metrics": backend.cell_metrics(model),
        "call_samples": backend.call_samples(placed),
    }


def run_first_calls(job: dict[str, Any]) -> dict[str, Any]:
    """Compile scenario: wall time of the first call of each of ``job["closures"]`` (default all;
    tracing + JIT) in this process, and of compile work done in build when ``job["build_compile"]``."""
    import time

    from dlbench.frameworks.base import UnsupportedError
    from dlbench.scenarios import TIMED, make_closure

    backend, readback, spec, weights, batch = _prepare(job)
    t0 = time.perf_counter_ns()
    model = backend.build(spec, weights, job.get("device", "cpu"), job["variant"])
    placed = backend.place(batch, model)
    build_ns = time.perf_counter_ns() - t0
    first = dict(backend.build_compile_ns(model)) if job.get("build_compile", True) else {}
    supported = getattr(backend, "scenarios", TIMED)
    # what the backend cannot do at all is said for every closure, so the caller starts no process for it
    unsupported = {s: f"{backend.name} does not support {s}" for s in TIMED if s not in supported}
    for scenario in job.get("closures") or TIMED:
        if scenario in unsupported:
            continue
        try:
            fn = make_closure(scenario, backend, model, placed, spec)
        except UnsupportedError as exc:
            unsupported[scenario] = str(exc)
            continue
        t0 = time.perf_counter_ns()
        backend.sync(fn())
        first[scenario] = time.perf_counter_ns() - t0
    return {"first_call_ns": first, "unsupported": unsupported, "build_ns": build_ns, "threads_readback": readback,
            "python": sys.executable, "versions": _versions(backend)}


def run_convergence(job: dict[str, Any]) -> dict[str, Any]:
    """Train on the real data set for the configured epochs; curves measured by dlbench itself."""
    from dlbench.data import adapt, load_dataset
    from dlbench.frameworks import get_backend
    from dlbench.frameworks.base import UnsupportedError
    from dlbench.models import get_model
    from dlbench.scenarios.convergence import ConvergenceConfig, train

    backend = get_backend(job["framework"])
    readback = backend.set_threads(job["threads"]) if job.get("threads") else {}
    spec = get_model(job["model"])
    train_set = adapt(load_dataset(job["data"], job.get("data_dir"), "train"), spec)
    test_set = adapt(load_dataset(job["data"], job.get("data_dir"), "test"), spec)
    try:
        curves = train(backend, spec, train_set, test_set, job["batch"], job.get("seed", 0),
                       ConvergenceConfig(**{k: v for k, v in job["convergence"].items() if k != "target_accuracy"}),
                       job.get("device", "cpu"), job["variant"])
    except UnsupportedError as exc:
        return {"unsupported": str(exc)}
    return {"curves": curves, "threads_readback": readback, "python": sys.executable, "versions": _versions(backend)}


def run_peak(job: dict[str, Any]) -> dict[str, Any]:
    from dlbench.measure.peak import measure_peak_gflops

    return {"gflops": measure_peak_gflops(job["threads"])}


def _versions(backend) -> dict[str, str]:
    import importlib.metadata

    out = {}
    for pkg in getattr(backend, "packages", ()):
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def run_survey(job: dict[str, Any]) -> dict[str, Any]:
    """``dlbench survey``: live checks and introspection (see :mod:`dlbench.survey.jobs`)."""
    from dlbench.survey.jobs import run

    return run(job)


JOBS = {"verify": run_verify, "cell": run_cell, "first_calls": run_first_calls, "convergence": run_convergence,
        "peak": run_peak, "survey": run_survey}


def main(argv: list[str]) -> int:
    from dlbench.launch.subprocess import exit_with_driver

    exit_with_driver()
    job_path, result_path = argv[1], argv[2]
    with open(job_path) as f:
        job = json.load(f)
    try:
        cores = pin_threads(job.get("threads"))
        result = JOBS[job["kind"]](job)
        result["cores"] = cores
        code = 0
    except Exception as exc:
        frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        where = f" ({os.path.basename(frame.filename)}:{frame.lineno})" if frame else ""
        result = {"error": f"{type(exc).__name__}: {exc}{where}", "traceback": traceback.format_exc()}
        code = 1
    with open(result_path, "w") as f:
        json.dump(result, f, default=str)
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
