"""A scenario registered from outside the package (``DLBENCH_PLUGINS``), to show a plug-in scenario
works end to end: planned, verified, measured in a fresh worker process, stored, analysed, shown.

``toy``: the time of a float64 NumPy matrix product of the batch's size, a few times in one process.
It needs no framework closure (``requires = None``), so any framework's cells can run it.
"""

import time

from dlbench import envs
from dlbench.scenarios.base import CellOutcome, Scenario, failure, framework_env
from dlbench.store import Sample


class Toy(Scenario):
    name = "toy"
    description = "a NumPy matrix product of the batch's size (test plug-in)"

    def measure(self, cell, ctx):
        o = ctx.run_job(self.job(cell, ctx.suite), ctx.suite.protocol.timeout_s, cell.threads,
                        python=envs.python_for(cell.framework), extra_env=framework_env(cell))
        if o.status != "ok":
            return CellOutcome(*failure(o), seconds=o.seconds)
        return CellOutcome("ok", samples=[Sample(0, i, "measure", ns) for i, ns in enumerate(o.result["ns"])],
                           metrics={"worker_pid": o.result["pid"]}, seconds=o.seconds)

    def work(self, job):
        import os

        import numpy as np

        a = np.ones((job["batch"], job["batch"]))
        ns = []
        for _ in range(job["protocol"]["min_iters"]):
            t0 = time.perf_counter_ns()
            a @ a
            ns.append(time.perf_counter_ns() - t0)
        return {"ns": ns, "pid": os.getpid()}


SCENARIOS = [Toy()]
