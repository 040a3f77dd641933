"""The measuring process: ``python -m dlbench.worker JOB.json RESULT.json``.

Runs exactly one job in a fresh interpreter: pins the CPU affinity to the job's thread count
*before* any framework is imported, then imports the one backend the job names. The result
(or the error) is written as JSON; the parent never parses stdout. A cell's job is its scenario's
(:meth:`dlbench.scenarios.base.Scenario.work`); the rest are the run's own: the gate, the machine's
peak and the survey's probes.

Imports happen inside the job functions, after :func:`pin_threads`: a framework imported before
the affinity is set would size its thread pools for every core.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any

from dlbench.core.job import CellJob, JobError, PeakJob, SurveyJob, VerifyJob, decode


def pin_threads(threads: int | None) -> list[int]:
    """Restrict this process to ``threads`` cores (the only limit XLA respects)."""
    allowed = sorted(os.sched_getaffinity(0))
    if threads:
        if threads > len(allowed):
            raise ValueError(f"{threads} threads asked, only {len(allowed)} cores available")
        os.sched_setaffinity(0, allowed[:threads])
    return sorted(os.sched_getaffinity(0))


def run_verify(job: VerifyJob) -> dict[str, Any]:
    from dlbench.frameworks import get_backend
    from dlbench.gate.verify import verify_model

    backend = get_backend(job.framework)
    if job.threads:
        backend.set_threads(job.threads)
    results = []
    for model in job.models:
        for variant in job.variants:
            results.append(verify_model(backend, model, variant, job.device, precision=job.precision,
                                        optimizers=tuple(job.optimizers)).to_dict())
    return {"results": results, "info": backend.info()}


def run_peak(job: PeakJob) -> dict[str, Any]:
    from dlbench.frameworks import peak_engines
    from dlbench.measure.peak import measure_engine

    return {"gflops": measure_engine(peak_engines()[job.engine], job.threads)}


def run_survey(job: SurveyJob) -> dict[str, Any]:
    """``dlbench survey``: live checks and introspection (see :mod:`dlbench.survey.jobs`)."""
    from dlbench.survey.jobs import run

    return run(job.payload)


def run_scenario(job: CellJob) -> dict[str, Any]:
    """One job of a cell: what its scenario does in a measuring process."""
    from dlbench.frameworks.base import UnsupportedError
    from dlbench.scenarios import registry

    scenario = registry.get(job.cell.scenario)
    try:
        return scenario.work(job, scenario.settings_from(job))
    except UnsupportedError as exc:  # e.g. a precision the backend cannot build at (set in prepare)
        return {"unsupported": str(exc)}


JOBS = {"scenario": run_scenario, "verify": run_verify, "peak": run_peak, "survey": run_survey}


def main(argv: list[str]) -> int:
    from dlbench.launch.subprocess import exit_with_driver

    exit_with_driver()
    job_path, result_path = argv[1], argv[2]
    with open(job_path) as f:
        data = json.load(f)
    try:
        job = decode(data)
        cores = pin_threads(job.threads)
        if job.kind not in JOBS:
            raise JobError(f"a {job.kind} job is run by its own module, not by dlbench.worker")
        result = JOBS[job.kind](job)
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
