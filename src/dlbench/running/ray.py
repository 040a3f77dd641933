"""``--launcher ray``: a run's jobs and cells as Ray tasks on the cluster at ``--address``; the
driver (this process) stores what comes back, so ``--resume`` and an interrupted run behave as
locally.

Inside a task the work runs exactly as locally (fresh subprocesses with their timeouts, or the
scaling scenario's launchers), so a measurement on a Ray node is the same measurement. The dlbench
package is shipped with the tasks (``runtime_env.py_modules``); each node needs the frameworks.

How the cells are spread depends on the nodes offering the ``dlbench_node`` resource (each started
with ``ray start ... --resources '{"dlbench_node": 1}'``):

* **two or more** (:attr:`RayLauncher.fans_out`): the cells run in parallel, at most one per node.
  A whole cell (its scenario's ``measure``, every repeat process) is one task holding the node's
  ``dlbench_node`` and all its CPUs and GPUs, so cells never share a node. Each cell records the
  node's hardware and the task's start and end in its metrics (``ray``). The nodes must be
  identical (CPU model, SIMD flags, GPUs): a run on mixed nodes is refused before measuring, or,
  with ``--mixed-nodes``, every cell carries a warning. The peak and the equivalence gate still
  run job by job on some node; cells record which node measured their peak.
* **one or none**: every job (peak, gate, each repeat process of a cell, a whole scaling cell) is
  a task asking for the CPUs (and GPUs) it needs, one at a time, so cells never share cores.
"""

from __future__ import annotations

import hashlib
import os
import platform
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from dlbench.core.cell import Cell
from dlbench.core.errors import UsageError
from dlbench.core.job import Job, PeakJob
from dlbench.distributed.scaling import Network, measure_cell
from dlbench.launch.subprocess import JobOutcome, run_job
from dlbench.scenarios.base import CellOutcome, Context

#: the custom resource a node offers (1 of) to take cells of a fanned-out run
NODE_RESOURCE = "dlbench_node"


def node_hardware() -> dict[str, Any]:
    """This node's hardware, as a fanned-out cell records it and the check of the nodes compares it."""
    from dlbench.measure import environment

    cpu = environment.cpu_info()
    return {"hostname": platform.node(), "cpu_model": cpu.get("model"), "cores": len(os.sched_getaffinity(0)),
            "cpu_flags_digest": hashlib.sha256(" ".join(cpu.get("flags", [])).encode()).hexdigest()[:16],
            "gpus": [g["name"] for g in environment.gpu_info()]}


def check_nodes(hardware: dict[str, dict[str, Any]], mixed_ok: bool) -> str | None:
    """None when every node (node id -> :func:`node_hardware`) has the same CPU model, SIMD flags and
    GPUs; otherwise what differs, which refuses the run (UsageError) unless ``mixed_ok``: cells
    measured on different hardware do not compare."""
    kinds: dict[tuple, list[str]] = {}
    for hw in hardware.values():
        kinds.setdefault((hw["cpu_model"], hw["cpu_flags_digest"], tuple(hw["gpus"])), []).append(hw["hostname"])
    if len(kinds) < 2:
        return None
    diff = "; ".join(f"{', '.join(sorted(hosts))}: {model} (SIMD flags {flags}{', ' + ', '.join(gpus) if gpus else ''})"
                     for (model, flags, gpus), hosts in kinds.items())
    if not mixed_ok:
        raise UsageError(f"the Ray nodes differ ({diff}); cells measured on them would not compare "
                         "(--mixed-nodes measures anyway, with a warning on every cell)")
    return f"measured on Ray nodes that differ ({diff})"


def _ran_on() -> dict[str, Any]:
    import ray

    return {"node_id": ray.get_runtime_context().get_node_id(), "hostname": platform.node()}


def _run_job_task(job: Job, timeout_s: float, threads: int | None, extra_env: dict[str, str] | None):
    return run_job(job, timeout_s, threads, extra_env=extra_env), _ran_on()


def _scaling_task(cell, suite):
    return measure_cell(cell, suite, Network())


def _hardware_task() -> dict[str, Any]:
    return {**node_hardware(), **_ran_on()}


def _cell_task(cell: Cell, suite, stored: dict[str, dict[str, Any]]) -> tuple[CellOutcome, dict[str, Any]]:
    """A whole cell on this node: its scenario's measure with node-local processes (and a node-local
    session for the scenario's run-scoped resources), seeing the run's cells stored when it was sent
    (``Context.stored``: the planner's run floor, LoadGen's harness floor), as a cell measured in turn does."""
    from dlbench.scenarios import registry

    started = time.time()
    scenario = registry.get(cell.scenario)
    with scenario.session(suite, [cell], None, lambda event, **_: None) as session:
        out = scenario.measure(cell, Context(suite, run_job, sessions={cell.scenario: session}, stored=stored))
    return out, {**_ran_on(), "task_started": started, "task_ended": time.time()}


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__


class RayLauncher:
    """A connection to a Ray cluster (a local one when ``address`` is empty)."""

    def __init__(self, address: str = "", mixed_nodes: bool = False):
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
            raise UsageError(f"cannot connect to Ray at {address or 'a new local cluster'}: {_first_line(exc)} (a "
                             "cluster with token authentication needs RAY_AUTH_MODE=token and its token)") from None
        alive = [n for n in ray.nodes() if n.get("Alive")]
        self.nodes = [n["NodeManagerAddress"] for n in alive]
        #: the peak job's node by thread count (what a fanned-out cell's share of peak compares with)
        self.peak_nodes: dict[int, dict[str, Any]] = {}
        #: node id -> hardware of the nodes offering NODE_RESOURCE
        self.hardware: dict[str, dict[str, Any]] = {}
        self.mixed: str | None = None
        try:
            self._inspect([n for n in alive if n["Resources"].get(NODE_RESOURCE)], mixed_nodes)
        except BaseException:
            ray.shutdown()
            raise

    def _inspect(self, cell_nodes: list[dict[str, Any]], mixed_nodes: bool) -> None:
        """Probe the hardware of the nodes that take cells, and refuse mixed ones (fan-out only)."""
        odd = [f"{n['NodeManagerHostname']} ({n['Resources'][NODE_RESOURCE]:g})" for n in cell_nodes
               if n["Resources"][NODE_RESOURCE] != 1]
        if odd:
            raise UsageError(f"each Ray node must offer exactly 1 {NODE_RESOURCE}, so that cells never share one: "
                             f"{', '.join(odd)}")
        if len(cell_nodes) < 2:
            return
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        probe = self.ray.remote(_hardware_task)
        refs = [probe.options(num_cpus=0, max_retries=0,
                              scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
                for n in cell_nodes]
        try:
            found = self.ray.get(refs, timeout=300)
        except (self.ray.exceptions.RayError, self.ray.exceptions.GetTimeoutError) as exc:
            raise UsageError(f"cannot read the hardware of the Ray nodes: {_first_line(exc)}") from None
        self.hardware = {hw["node_id"]: hw for hw in found}
        self.mixed = check_nodes(self.hardware, mixed_nodes)
        # a cell's task reserves a whole node: the CPUs and GPUs of the smallest, so it fits every one
        self.node_cpus = min(n["Resources"].get("CPU", 0.0) for n in cell_nodes)
        self.node_gpus = min(n["Resources"].get("GPU", 0.0) for n in cell_nodes)

    @property
    def fans_out(self) -> bool:
        """Cells run in parallel, one per node (two or more nodes offer NODE_RESOURCE)."""
        return len(self.hardware) > 1

    def _gpus(self, device: str, count: int = 1) -> int:
        return count if str(device).startswith("cuda") else 0

    def run_job(self, job: Job, timeout_s: float, threads: int | None = None, python: str | None = None,
                extra_env: dict[str, str] | None = None) -> JobOutcome:
        """Same contract as :func:`dlbench.launch.subprocess.run_job`, on a Ray node."""
        task = self.ray.remote(_run_job_task).options(num_cpus=threads or 1,
                                                      num_gpus=self._gpus(job.on_device()), max_retries=0)
        ref = task.remote(job, timeout_s, threads, extra_env)
        try:
            outcome, node = self.ray.get(ref, timeout=timeout_s + 120)
        except self.ray.exceptions.GetTimeoutError:
            self.ray.cancel(ref, force=True)
            return JobOutcome("timeout", None, f"Ray task did not return within {timeout_s + 120:g} s", timeout_s, None)
        except self.ray.exceptions.RayError as exc:
            return JobOutcome("failed", None, f"Ray task failed: {_first_line(exc)}", 0.0, None)
        if isinstance(job, PeakJob):
            self.peak_nodes[job.threads] = node
        return outcome

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
            return CellOutcome("failed", f"Ray task failed: {_first_line(exc)}")
        out.metrics["ray_nodes"] = len(self.nodes)
        return out

    def measure_cells(self, cells: list[Cell], suite, refused: Callable[[Cell], CellOutcome | None],
                      progress: Callable[..., None],
                      stored: dict[str, dict[str, Any]]) -> Iterator[tuple[Cell, CellOutcome]]:
        """Fan-out: each cell as one task on a node of its own, at most one per node, yielded as it
        finishes (the driver stores it, and adds its metrics to ``stored``: each task is sent a copy of
        the run's cells stored by then). A cell ``refused`` has an outcome (unsupported, failed the
        gate) is yielded without a task. The processes of a cell have their own timeouts; a node
        that dies fails its cell. On an interrupt the running tasks are cancelled (their processes
        killed) and the cells not yet finished stay unmeasured, for ``--resume``."""
        task = self.ray.remote(_cell_task).options(num_cpus=self.node_cpus, num_gpus=self.node_gpus,
                                                   resources={NODE_RESOURCE: 1}, max_retries=0)
        queue, running = list(cells), {}
        try:
            while queue or running:
                while queue and len(running) < len(self.hardware):  # as many as nodes: each starts at once
                    cell = queue.pop(0)
                    progress("cell_start", cell=cell)
                    outcome = refused(cell)
                    if outcome is not None:
                        yield cell, outcome
                    else:
                        running[task.remote(cell, suite, dict(stored))] = cell
                if running:
                    (ref,), _ = self.ray.wait(list(running), num_returns=1)
                    cell = running.pop(ref)
                    yield cell, self._collect(cell, ref)
        finally:
            for ref in running:  # KeyboardInterrupt in the task: run_job kills its process group
                self.ray.cancel(ref)

    def _collect(self, cell: Cell, ref) -> CellOutcome:
        try:
            out, ran = self.ray.get(ref)
        except self.ray.exceptions.RayError as exc:
            return CellOutcome("failed", f"Ray task failed: {_first_line(exc)}")
        out.metrics["ray"] = {**self.hardware.get(ran["node_id"], {}), **ran, "dlbench_nodes": len(self.hardware),
                              "peak_node": self.peak_nodes.get(cell.threads)}
        if self.mixed:
            out.warnings.append(self.mixed)
        return out

    def close(self) -> None:
        self.ray.shutdown()

    def __enter__(self) -> RayLauncher:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
