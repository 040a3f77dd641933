"""The ``latency`` scenario: tail latency of single forward calls, as a deployed model answers
requests one at a time.

A median over loops of calls (``forward``) says how fast a framework computes; a user serving a
model asks how slow its slowest answers are. Each fresh process builds the model, places a batch
(batch 1 by default, any ``--batch``), warms the forward closure up like every timed cell, then
times ``serving.latency_calls`` calls *one by one* (never a loop divided by k: a tail is made of
single calls), each followed by the backend's sync. The stored samples are those calls; the cell's
metrics hold p50, p90, p99 and p99.9 with bootstrap intervals, pooled over the processes (the
interval hierarchical: processes, then calls) and per process, each with the number of samples
behind it, or refused with the reason when too few (:mod:`dlbench.measure.percentiles`); the cell
warns where its processes disagree on a percentile.

Every framework with a ``forward`` closure runs it; nothing per framework.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from dlbench.core.job import CellJob
from dlbench.frameworks.base import UnsupportedError
from dlbench.measure.adaptive import prior_seconds, variance_split
from dlbench.measure.cost import WorkClock
from dlbench.measure.percentiles import disagreement, percentiles, samples_needed
from dlbench.measure.warmup import warmup_end
from dlbench.scenarios.base import (
    MAX_COUNT,
    MAX_SECONDS,
    MIN_BOUND_MS,
    CellOutcome,
    Context,
    Flag,
    Scenario,
    SuiteView,
    check_range,
)
from dlbench.scenarios.prepare import prepare, versions
from dlbench.scenarios.processes import run_processes
from dlbench.scenarios.timed import make_closure
from dlbench.storage.store import Sample

if TYPE_CHECKING:
    from dlbench.models.spec import ModelSpec
    from dlbench.storage.cell_result import CellResult


#: the percentile ``--target-ci`` is on for a latency cell
TARGET_Q = 99.0


@dataclass
class ServingSettings:
    """Settings of the deployment scenarios, ``latency`` and ``loadgen-*`` (a suite file's ``serving:``;
    see docs/serving.md). None keeps MLPerf LoadGen's own rule or dlbench's default, named beside each."""

    __pydantic_config__ = {"extra": "forbid"}  # noqa: RUF012  (read by pydantic, the registry's validator)
    #: timed single calls per process of a latency cell (3 processes x 3,500 calls: a p99.9 has its 10,000)
    latency_calls: int = 3500
    #: server: the target rate of Poisson-arriving queries (None: half the rate one stream of calls reaches)
    qps: float | None = None
    #: server: the bound on the 99th percentile latency, ms (None: LoadGen's default, 100 ms)
    p99_ms: float | None = None
    #: server: search the highest QPS meeting the bound (LoadGen's FindPeakPerformance mode)
    find_peak: bool = False
    #: LoadGen's minimum duration and query count (None: LoadGen's rules); shorter ones mark the cell
    #: as not meeting LoadGen's rules
    min_duration_s: float | None = None
    min_queries: int | None = None

    def __post_init__(self) -> None:
        check_range(self, "latency_calls", ge=1, le=MAX_COUNT)
        check_range(self, "qps", gt=0, le=1e6)
        check_range(self, "p99_ms", ge=MIN_BOUND_MS, le=MAX_SECONDS * 1000)  # LoadGen's whole nanoseconds
        check_range(self, "min_duration_s", gt=0, le=MAX_SECONDS)
        check_range(self, "min_queries", ge=1, le=MAX_COUNT)


def report_sections(res) -> list:
    """The "Latency and load" section, which latency and the loadgen-* scenarios share."""
    from dlbench.scenarios.latency_report import section

    return [section(res)]


def report_plots(res) -> tuple[list, list]:
    from dlbench.scenarios.latency_report import plots

    return plots(res)


class Latency(Scenario):
    name = "latency"
    description = "single forward calls one by one (batch 1 by default): p50, p90, p99, p99.9 with intervals"
    requires = ("forward",)
    flop_factor = 1.0

    settings_model = ServingSettings
    settings_section = "serving"
    flags = (Flag("--latency-calls", "latency_calls", "latency: single calls timed per process (default 3500)", int),)

    def default_batch(self, spec: ModelSpec, data: str, data_dir: str | None) -> int:
        return 1

    def report_sections(self, res) -> list:
        return report_sections(res)

    def report_plots(self, res) -> tuple[list, list]:
        return report_plots(res)

    def estimate(self, cell, suite: SuiteView, step_s: float, start_s: float, epoch_samples: int) -> float:
        p = suite.protocol
        warmup = min(p.warmup * step_s, p.max_time_s / 4)
        per_process = start_s + warmup + min(self.settings_of(suite).latency_calls * step_s, p.max_time_s)
        if p.target_ci is not None:
            return prior_seconds(p.target_ci / 100, max(p.repeats, 3), per_process, start_s + warmup, step_s,
                                 p.max_cell_s, samples_needed(TARGET_Q))
        return p.repeats * per_process

    # --- the parent's side ------------------------------------------------------------------------
    def measure(self, cell, ctx: Context) -> CellOutcome:
        suite = ctx.suite
        out = CellOutcome("ok")

        def job(calls: int | None) -> CellJob:
            j = self.job(cell, suite)
            j = replace(j, calls=calls)
            return j

        # with --target-ci the target is on the p99 of a process's calls (each needs 1,000 for one)
        per_process, adaptive = run_processes(cell, ctx, out, job, lambda r: r["calls_ns"], q=TARGET_Q,
                                              min_calls=samples_needed(TARGET_Q))
        if out.status == "unsupported" or not per_process:
            return out
        pooled: list[float] = []
        groups: list[int] = []
        for r, result in enumerate(per_process):
            out.samples += [Sample(r, i, "warmup", v) for i, v in enumerate(result["warmup_ns"])]
            out.samples += [Sample(r, i, "measure", v) for i, v in enumerate(result["calls_ns"])]
            pooled += [v / 1e6 for v in result["calls_ns"]]
            groups += [r] * len(result["calls_ns"])
            if result["truncated"]:
                out.warnings.append(f"process {r}: stopped at max_time_s after {len(result['calls_ns'])} of "
                                    f"{self.settings_of(suite).latency_calls} calls")
        together = percentiles(pooled, seed=suite.seed, groups=groups)
        each = [percentiles([v / 1e6 for v in r["calls_ns"]], seed=suite.seed) for r in per_process]
        out.warnings += disagreement(together, each)
        out.metrics = {
            "latency": {"pooled": [p.to_dict() for p in together],
                        "per_process": [[p.to_dict() for p in ps] for ps in each],
                        "calls": [len(r["calls_ns"]) for r in per_process], "interval": "hierarchical"},
            "threads_readback": per_process[0]["threads_readback"], "versions": per_process[0]["versions"],
            "repeats_done": len(per_process), "warmup_found": [r.get("warmup_found", 0) for r in per_process],
            "variance": variance_split([r["calls_ns"] for r in per_process])}
        if adaptive is not None:
            out.metrics["adaptive"] = adaptive
        refused = [p for p in out.metrics["latency"]["pooled"] if p["refused"]]
        if refused:
            out.warnings.append("not reported: " + "; ".join(f"p{p['q']:g} ({p['refused']})" for p in refused))
        return out

    # --- the measuring process's side -----------------------------------------------------------
    def work(self, job: CellJob, settings: ServingSettings) -> dict[str, Any]:
        clock = WorkClock()
        p = prepare(job)
        backend = p.backend
        clock.mark("prepare_s")
        try:
            model = backend.build(p.spec, p.weights, job.cell.device, job.cell.variant)
            placed = backend.place(p.batch, model)  # kept while the closure runs: inputs may share its memory
            fn = make_closure("forward", backend, model, placed, p.spec)
        except UnsupportedError as exc:
            return {"unsupported": str(exc)}
        del p.weights
        clock.mark("build_s")
        protocol = job.protocol
        calls_wanted = settings.latency_calls if job.calls is None else job.calls
        warmup = [_call(fn, backend.sync) for _ in range(max(protocol["warmup"], 1))]
        clock.mark("warmup_s")
        calls: list[float] = []
        deadline = time.perf_counter() + protocol["max_time_s"]

        def more(n: int) -> bool:
            """``n`` more calls; True if the deadline stopped them."""
            for _ in range(n):
                calls.append(_call(fn, backend.sync))
                if time.perf_counter() > deadline:
                    return True
            return False

        truncated = more(calls_wanted)
        found = warmup_end(calls) if protocol["find_warmup"] else 0
        if found:  # a slow start the fixed warm-up did not cover: warm-up too, and as many calls again
            warmup, calls = warmup + calls[:found], calls[found:]
            truncated = truncated or more(found)
        truncated = truncated and len(calls) < calls_wanted
        found_s = sum(warmup[len(warmup) - found:]) / 1e9 if found else 0.0
        clock.mark("timed_s")
        cost = clock.to_dict()
        cost["warmup_s"] += found_s
        cost["timed_s"] -= found_s
        return {"warmup_ns": warmup, "calls_ns": calls, "truncated": truncated, "warmup_found": found,
                "threads_readback": p.readback, "versions": versions(backend), "cost": cost}

    # --- results --------------------------------------------------------------------------------
    def text(self, res: CellResult) -> str:
        if not res.ok:
            return f"– ({res.cell.status})"
        shown = {f"p{p['q']:g}": p for p in res.cell.metrics.get("latency", {}).get("pooled", [])}
        parts = []
        for label in ("p50", "p99"):
            p = shown.get(label)
            if p is not None:
                parts.append(f"{label} {p['value']:.3g}" if p["value"] is not None else f"{label} –")
        return " / ".join(parts) or "–"

    @property
    def column(self) -> str:
        return "latency ms (p50 / p99)"


def _call(fn, sync) -> float:
    t0 = time.perf_counter_ns()
    sync(fn())
    return float(time.perf_counter_ns() - t0)


SCENARIOS = (Latency(),)
