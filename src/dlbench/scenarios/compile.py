"""The ``compile`` scenario: wall time of each closure's first call (tracing + JIT) in fresh
processes, with the framework's caches cold and then warm (Bahrampour et al.'s Table 8).

Per repeat and per closure, a fresh cache directory: a cold process, then a warm one reusing it.
Each closure gets processes of its own: in one process a later closure reused what an earlier one
compiled (torch.compile's train_step reuses the gradient's compiled loss, so its "first call" was
a residual 0.4 s against XLA's whole 6 s), and only the first paid the JIT's one-time start-up.
The time to a first training step in a fresh process is what a user waits for. Compile work done
when the model is built (ONNX Runtime's session) is taken from the first closure's processes.

Samples: phase ``compile_cold:<closure>`` / ``compile_warm:<closure>``, one per process.
"""

from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import replace
from typing import Any

import numpy as np

from dlbench import envs
from dlbench.core.document import fmt_num
from dlbench.core.job import CellJob
from dlbench.frameworks import framework_info
from dlbench.frameworks.base import UnsupportedError
from dlbench.scenarios.base import CellOutcome, Context, Scenario, failure, framework_env
from dlbench.scenarios.prepare import prepare, versions
from dlbench.scenarios.timed import CLOSURES, make_closure, optimizer_of
from dlbench.storage.store import Sample


class Compile(Scenario):
    name = "compile"
    description = "first-call time of each closure in fresh processes, caches cold then warm"
    per_iteration = False
    updates = True  # train_step's first call
    requires = CLOSURES

    def measure(self, cell, ctx: Context) -> CellOutcome:
        suite = ctx.suite
        out = CellOutcome("ok")
        per_repeat: list[dict] = []
        unsupported: dict[str, str] = {}
        for r in range(suite.protocol.repeats):
            build_taken = False
            for closure in CLOSURES:
                if closure in unsupported:
                    continue
                with tempfile.TemporaryDirectory(prefix="dlbench-cache-") as cache:
                    env = {**(framework_env(cell) or {}), "DLBENCH_CACHE_DIR": cache,
                           "TORCHINDUCTOR_CACHE_DIR": cache, "DLBENCH_EXPORT_CACHE": ""}
                    job = replace(self.job(cell, suite), extra={"closures": [closure], "build_compile": not build_taken})
                    for phase in ("cold", "warm"):
                        o = ctx.run_job(job, suite.protocol.timeout_s, cell.threads,
                                        python=envs.python_for(cell.framework), extra_env=env)
                        out.seconds += o.seconds
                        if o.status != "ok":
                            out.status, out.reason = failure(o)
                            return out
                        for name, ns in o.result["first_call_ns"].items():
                            out.samples.append(Sample(r, 0, f"compile_{phase}:{name}", ns))
                        per_repeat.append(o.result)
                        unsupported.update(o.result["unsupported"])
                        if not o.result["first_call_ns"]:  # this closure cannot run here: no warm process either
                            break
                    build_taken = True
        if not out.samples:
            return CellOutcome("unsupported", "; ".join(unsupported.values()) or "no closure to compile",
                               seconds=out.seconds)
        first = per_repeat[0]
        out.metrics = {"unsupported": unsupported, "threads_readback": first["threads_readback"],
                       "python": first["python"], "versions": first["versions"],
                       "build_ms": float(np.median([p["build_ns"] / 1e6 for p in per_repeat])),
                       "processes": "one per closure and cache state (cold, then warm), a fresh cache per closure"}
        return out

    def estimate(self, cell, suite, step_s: float, start_s: float, epoch_samples: int) -> float:
        """A cold and a warm process per closure the framework has, per repeat."""
        closures = len(self.closures_of(framework_info(cell.framework)))
        return suite.protocol.repeats * closures * 2 * (start_s + step_s)

    def work(self, job: CellJob, settings: None) -> dict[str, Any]:
        """First-call wall time of each of the job's ``closures`` in this process, and of compile work
        done in build when its ``build_compile``."""
        p = prepare(job)
        backend = p.backend
        t0 = time.perf_counter_ns()
        model = backend.build(p.spec, p.weights, job.cell.device, job.cell.variant)
        placed = backend.place(p.batch, model)
        build_ns = time.perf_counter_ns() - t0
        first = dict(backend.build_compile_ns(model)) if job.extra["build_compile"] else {}
        # what the backend cannot do at all is said for every closure, so the parent starts no process for it
        unsupported = {s: f"{backend.name} does not support {s}" for s in CLOSURES if s not in backend.closures}
        for closure in job.extra["closures"]:
            if closure in unsupported:
                continue
            try:
                fn = make_closure(closure, backend, model, placed, p.spec, optimizer_of(job, p.spec))
            except UnsupportedError as exc:
                unsupported[closure] = str(exc)
                continue
            t0 = time.perf_counter_ns()
            backend.sync(fn())
            first[closure] = time.perf_counter_ns() - t0
        return {"first_call_ns": first, "unsupported": unsupported, "build_ns": build_ns,
                "threads_readback": p.readback, "python": sys.executable, "versions": versions(backend)}

    def analyse(self, res, samples, peak) -> None:
        by: dict[str, dict[str, list[float]]] = {}
        for s in samples:
            kind, _, closure = s.phase.partition(":")
            if kind in ("compile_cold", "compile_warm"):
                by.setdefault(closure, {}).setdefault(kind[len("compile_"):], []).append(s.value_ns / 1e6)
        res.compile_ms = {k: {t: float(np.median(v)) for t, v in d.items()} for k, d in by.items()}

    def throughput(self, res) -> float | None:
        return None

    def text(self, res) -> str:
        if not res.compile_ms:
            return f"– ({res.cell.status})"
        return ", ".join(f"{k} {d.get('cold', float('nan')) / 1e3:.3g}/{d.get('warm', float('nan')) / 1e3:.3g} s"
                         for k, d in res.compile_ms.items())

    @property
    def column(self) -> str:
        return "compile cold/warm"

    report_column = "compile s (cold first calls)"

    def report_value(self, res) -> tuple[str, float | None, str]:
        cold = sum(d.get("cold", 0.0) for d in res.compile_ms.values()) / 1e3
        warm = sum(d.get("warm", 0.0) for d in res.compile_ms.values()) / 1e3
        return fmt_num(cold), cold, f"warm {fmt_num(warm)}"

    def summary_fields(self, res) -> dict[str, Any]:
        return {"compile_ms": res.compile_ms if res is not None else None}


SCENARIOS = (Compile(),)
