"""``--launcher ray``: every job of a run (peak, verification, timed cells, scaling cells) runs as a
Ray task on a node of the cluster at ``--address``, asking for the CPUs (and GPUs) it needs; the
driver (this process) stores what comes back.

Inside the task the job is run exactly as locally (a fresh subprocess with a timeout, or the
scaling scenario's launchers), so a measurement on a Ray node is the same measurement. The tasks
run one at a time, so cells never share a node's cores. The dlbench package is shipped to the
cluster with the tasks (``runtime_env.py_modules``); each node needs the frameworks installed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dlbench.distributed.scaling import Network, measure_cell
from dlbench.errors import UsageError
from dlbench.launch.subprocess import JobOutcome, run_job
from dlbench.scenarios.base import CellOutcome


def _run_job_task(job: dict[str, Any], timeout_s: float, threads: int | None, extra_env: dict[str, str] | None):
    return run_job(job, timeout_s, threads, extra_env=extra_env)


def _scaling_task(cell, suite):
    return measure_cell(cell, suite, Network())


class RayLauncher:
    """A connection to a Ray cluster (a local one when ``address`` is empty)."""

    def __init__(self, address: str = ""):
        try:
            import ray
        except ImportError:
            raise UsageError("--launcher ray needs Ray: pip install 'dlbench[distributed]'") from None
        import dlbench

        self.ray = ray
        runtime_env = {"py_modules": [str(Path(dlbench.__file__).resolve().parent)]}
        try:
            if address:
                ray.init(address=address, runtime_env=runtime_env, log_to_driver=False)
            else:
                ray.init(address="local", num_cpus=2, include_dashboard=False, runtime_env=runtime_env,
                         log_to_driver=False)
        except (ConnectionError, RuntimeError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise UsageError(f"cannot connect to Ray at {address or 'a new local cluster'}: {first} (a cluster with "
                             "token authentication needs RAY_AUTH_MODE=token and its token)") from None
        self.nodes = [n["NodeManagerAddress"] for n in ray.nodes() if n.get("Alive")]

    def _gpus(self, device: str, count: int = 1) -> int:
        return count if str(device).startswith("cuda") else 0

    def run_job(self, job: dict[str, Any], timeout_s: float, threads: int | None = None, python: str | None = None,
                extra_env: dict[str, str] | None = None) -> JobOutcome:
        """Same contract as :func:`dlbench.launch.subprocess.run_job`, on a Ray node."""
        task = self.ray.remote(_run_job_task).options(num_cpus=threads or 1,
                                                      num_gpus=self._gpus(job.get("device", "cpu")), max_retries=0)
        ref = task.remote(job, timeout_s, threads, extra_env)
        try:
            return self.ray.get(ref, timeout=timeout_s + 120)
        except self.ray.exceptions.GetTimeoutError:
            self.ray.cancel(ref, force=True)
            return JobOutcome("timeout", None, f"Ray task did not return within {timeout_s + 120:g} s", timeout_s, None)
        except self.ray.exceptions.RayError as exc:
            return JobOutcome("failed", None, f"Ray task failed: {str(exc).strip().splitlines()[0][:300]}", 0.0, None)

    def measure_scaling(self, cell, suite):
        """A scaling cell as one task holding W x threads CPUs (its workers run on that node)."""
        cpus = cell.workers * (cell.threads or 1)
        task = self.ray.remote(_scaling_task).options(num_cpus=cpus, num_gpus=self._gpus(cell.device, cell.workers),
                                                      max_retries=0)
        ref = task.remote(cell, suite)
        budget = suite.protocol.timeout_s * suite.protocol.repeats + 180
        try:
            out = self.ray.get(ref, timeout=budget)
        except self.ray.exceptions.GetTimeoutError:
            self.ray.cancel(ref, force=True)
            return CellOutcome("timeout", f"Ray task did not return within {budget:g} s")
        except self.ray.exceptions.RayError as exc:
            return CellOutcome("failed", f"Ray task failed: {str(exc).strip().splitlines()[0][:300]}")
        out.metrics["ray_nodes"] = len(self.nodes)
        return out

    def close(self) -> None:
        self.ray.shutdown()

    def __enter__(self) -> RayLauncher:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
