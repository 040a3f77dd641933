"""The ``latency`` scenario: tail latency of single forward calls, as a deployed model answers
requests one at a time.

A median over loops of calls (``forward``) says how fast a framework computes; a user serving a
model asks how slow its slowest answers are. Each fresh process builds the model, places a batch
(batch 1 by default, any ``--batch``), warms the forward closure up like every timed cell, then
times ``serving.latency_calls`` calls *one by one* (never a loop divided by k: a tail is made of
single calls), each followed by the backend's sync. The stored samples are those calls; the cell's
metrics hold p50, p90, p99 and p99.9 with bootstrap intervals, pooled over the processes and per
process, each with the number of samples behind it, or refused with the reason when too few
(:mod:`dlbench.measure.percentiles`).

Every framework with a ``forward`` closure runs it; nothing per framework.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dlbench.frameworks.base import UnsupportedError
from dlbench.job import CellJob
from dlbench.measure.percentiles import percentiles
from dlbench.scenarios.base import CellOutcome, Context, Flag, Scenario, SuiteView, check_range, run_in_turn
from dlbench.scenarios.prepare import prepare, versions
from dlbench.scenarios.timed import make_closure
from dlbench.store import Sample

if TYPE_CHECKING:
    from dlbench.cell_result import CellResult
    from dlbench.models.spec import ModelSpec


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
        check_range(self, "latency_calls", ge=1)
        for name in ("qps", "p99_ms", "min_duration_s"):
            check_range(self, name, gt=0)
        check_range(self, "min_queries", ge=1)


def report_sections(res) -> list:
    """The "Latency and load" section, which latency and the loadgen-* scenarios share."""
    from dlbench.report.latency import section

    return [section(res)]


def report_plots(res) -> tuple[list, list]:
    from dlbench.report.latency import plots

    return plots(res)


class Latency(Scenario):
    name = "latency"
    description = "single forward calls one by one (batch 1 by default): p50, p90, p99, p99.9 with intervals"
    requires = "forward"
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
        return p.repeats * (start_s + min(p.warmup * step_s, p.max_time_s / 4)
                            + min(self.settings_of(suite).latency_calls * step_s, p.max_time_s))

    # --- the parent's side ------------------------------------------------------------------------
    def measure(self, cell, ctx: Context) -> CellOutcome:
        suite = ctx.suite
        out = CellOutcome("ok")
        jobs = (self.job(cell, suite) for _ in range(suite.protocol.repeats))
        per_process = run_in_turn(cell, ctx, jobs, suite.protocol.timeout_s, out)
        if out.status == "unsupported" or not per_process:
            return out
        pooled: list[float] = []
        for r, result in enumerate(per_process):
            out.samples += [Sample(r, i, "warmup", v) for i, v in enumerate(result["warmup_ns"])]
            out.samples += [Sample(r, i, "measure", v) for i, v in enumerate(result["calls_ns"])]
            pooled += [v / 1e6 for v in result["calls_ns"]]
            if result["truncated"]:
                out.warnings.append(f"process {r}: stopped at max_time_s after {len(result['calls_ns'])} of "
                                    f"{self.settings_of(suite).latency_calls} calls")
        out.metrics = {
            "latency": {"pooled": [p.to_dict() for p in percentiles(pooled, seed=suite.seed)],
                        "per_process": [[p.to_dict() for p in percentiles([v / 1e6 for v in r["calls_ns"]],
                                                                          seed=suite.seed)] for r in per_process],
                        "calls": [len(r["calls_ns"]) for r in per_process]},
            "threads_readback": per_process[0]["threads_readback"], "versions": per_process[0]["versions"],
            "repeats_done": len(per_process)}
        refused = [p for p in out.metrics["latency"]["pooled"] if p["refused"]]
        if refused:
            out.warnings.append("not reported: " + "; ".join(f"p{p['q']:g} ({p['refused']})" for p in refused))
        return out

    # --- the measuring process's side -----------------------------------------------------------
    def work(self, job: CellJob) -> dict[str, Any]:
        p = prepare(job)
        backend = p.backend
        try:
            model = backend.build(p.spec, p.weights, job.cell.device, job.cell.variant)
            placed = backend.place(p.batch, model)  # kept while the closure runs: inputs may share its memory
            fn = make_closure("forward", backend, model, placed, p.spec)
        except UnsupportedError as exc:
            return {"unsupported": str(exc)}
        del p.weights
        protocol = job.protocol
        calls_wanted = ServingSettings(**job.settings).latency_calls
        warmup = [_call(fn, backend.sync) for _ in range(max(protocol["warmup"], 1))]
        calls: list[float] = []
        deadline = time.perf_counter() + protocol["max_time_s"]
        truncated = False
        for _ in range(calls_wanted):
            calls.append(_call(fn, backend.sync))
            if time.perf_counter() > deadline:
                truncated = len(calls) < calls_wanted
                break
        return {"warmup_ns": warmup, "calls_ns": calls, "truncated": truncated,
                "threads_readback": p.readback, "versions": versions(backend)}

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
