"""A scenario registered from outside the package (its distribution's ``dlbench.scenarios`` entry point
``toy = "toyscenario:SCENARIOS"``, tests/toyplugin/pyproject.toml; or this file named in
``DLBENCH_PLUGINS``), to show a plug-in scenario works end to end: planned, verified, measured in a
fresh worker process, stored, analysed, shown and reported, with its own settings, flag and report
section, all in this one module.

``toy``: the time of a float64 NumPy matrix product of the batch's size, ``calls`` times in one
process. It needs no framework closure (``requires = ()``), so any framework's cells can run it.
Its settings: ``toy: {calls: N}`` in a suite file, ``--toy-calls N`` on ``dlbench run``,
``toy={"calls": N}`` in :func:`dlbench.api.run`.
"""

import time
from dataclasses import dataclass

from dlbench import envs
from dlbench.scenarios.base import CellOutcome, Flag, Scenario, check_range, failure, framework_env
from dlbench.storage.store import Sample


@dataclass
class ToySettings:
    """The toy's settings: a suite file's ``toy:`` section."""

    __pydantic_config__ = {"extra": "forbid"}  # noqa: RUF012  (read by pydantic)
    #: products timed in the process
    calls: int = 5

    def __post_init__(self) -> None:
        check_range(self, "calls", ge=1)


class Toy(Scenario):
    name = "toy"
    description = "a NumPy matrix product of the batch's size (test plug-in)"
    settings_model = ToySettings
    flags = (Flag("--toy-calls", "calls", "toy: matrix products timed per process (default 5)", int),)

    def measure(self, cell, ctx):
        o = ctx.run_job(self.job(cell, ctx.suite), ctx.suite.protocol.timeout_s, cell.threads,
                        python=envs.python_for(cell.framework), extra_env=framework_env(cell))
        if o.status != "ok":
            return CellOutcome(*failure(o), seconds=o.seconds)
        return CellOutcome("ok", samples=[Sample(0, i, "measure", ns) for i, ns in enumerate(o.result["ns"])],
                           metrics={"worker_pid": o.result["pid"], "calls": len(o.result["ns"])}, seconds=o.seconds)

    def work(self, job, settings: ToySettings):
        import os

        import numpy as np

        a = np.ones((job.cell.batch, job.cell.batch))
        ns = []
        for _ in range(settings.calls):
            t0 = time.perf_counter_ns()
            a @ a
            ns.append(time.perf_counter_ns() - t0)
        return {"ns": ns, "pid": os.getpid()}

    def report_sections(self, res):
        from dlbench.core.document import Column, Section, Table, Value, fmt_num

        rows = [[Value(c.cell.key), Value(str(c.cell.metrics.get("calls", 0))),
                 Value(fmt_num(c.time_ms.median) if c.time_ms else "–")] for c in self.cells_of(res)]
        table = Table("toy products", [Column("cell", "cell", numeric=False), Column("calls", "calls"),
                                       Column("ms", "median ms")], rows)
        return [Section("Toy matrix products", "Each cell's products, timed one by one.", [table])]


SCENARIOS = [Toy()]
