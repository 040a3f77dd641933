"""One stored cell with its statistics (what a scenario's ``analyse`` fills from the raw samples),
and a run of them (:class:`RunResults`, what the report and a scenario's report section read).

Their own module so the scenarios, which fill and read them, do not import :mod:`dlbench.report.results`
(which asks the scenario registry to analyse each cell of a run). Beside them, what measuring a cell
produced before it is stored (:class:`CellOutcome`): here, below the scenarios, so an engine a scenario
drives (``distributed/scaling.py``) returns one without importing ``scenarios/``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from dlbench.core.precision import DEFAULT as DEFAULT_PRECISION
from dlbench.measure.peak import peak_for
from dlbench.measure.stats import Summary
from dlbench.storage.store import CellRecord, Sample


@dataclass
class CellResult:
    cell: CellRecord
    verified: str  # pass, fail, unsupported, unknown
    time_ms: Summary | None = None  # per batch
    samples_ms: list[float] = field(default_factory=list)
    warmup_ms: list[float] = field(default_factory=list)
    sample_repeats: list[int] = field(default_factory=list)  # the process (repeat) of each sample
    repeat_medians_ms: list[float] = field(default_factory=list)
    samples_per_s: float | None = None
    gflops: float | None = None
    pct_peak: float | None = None
    #: the peak ``pct_peak`` is a share of (``measure.peak.describe``: its precision, rate and engine)
    peak: str | None = None
    #: what the analysis found wrong with the derived rates (a rate above its precision's measured peak)
    rate_warnings: list[str] = field(default_factory=list)
    first_call_ms: float | None = None
    compile_ms: dict[str, dict[str, float]] = field(default_factory=dict)  # closure -> {cold, warm} medians
    convergence: dict[str, Any] = field(default_factory=dict)  # scenarios.convergence.summarise_curves
    #: every timed iteration in the order it ran: (repeat, "warmup" | "measure", ms); for warm-up plots
    series_ms: list[tuple[int, str, float]] = field(default_factory=list)
    #: the scenario's own figures beyond the per-call time, by name with its unit (``generate``: ttft_ms,
    #: tpot_ms, tokens_per_s_sequence, tokens_per_s_total), each from the raw samples with its interval
    #: and its processes' medians: what the scenario's column shows, in every JSON output and the export
    figures: dict[str, Summary] = field(default_factory=dict)
    #: J per sample (or token) and watts from the stored counter readings (:func:`dlbench.measure.energy.figures`);
    #: ``no_counter`` where none was readable; empty where the cell recorded none
    energy: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.cell.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        c = self.cell
        return {
            "key": c.key, "framework": c.framework, "variant": c.variant, "model": c.model, "scenario": c.scenario,
            "batch": c.batch, "threads": c.threads, "device": c.device, "data": c.data, "precision": c.precision,
            "status": c.status,
            "reason": c.reason,
            "verified": self.verified, "warnings": c.warnings,
            "time_ms": self.time_ms.to_dict() if self.time_ms else None,
            "figures": {name: f.to_dict() for name, f in self.figures.items()},
            # every figure a scenario derived (rates, first calls, compile times, curves), by field name
            **{f.name: getattr(self, f.name) for f in fields(self) if f.name not in _NOT_EXPORTED},
            "peak_rss_bytes": c.metrics.get("peak_rss_bytes"), "rss_growth_bytes": c.metrics.get("rss_growth_bytes"),
            "device_memory": c.metrics.get("device_memory"), "threads_readback": c.metrics.get("threads_readback"),
            "loop_k": c.metrics.get("loop_k"),
            # the update a training cell applied (None: the cell applies none, or was stored before it was recorded)
            "optimizer": c.metrics.get("optimizer"),
        }


#: CellResult fields that ``to_dict`` writes otherwise (cell, time_ms) or leaves to ``export`` (the raw series)
_NOT_EXPORTED = ("cell", "verified", "time_ms", "figures", "samples_ms", "warmup_ms", "sample_repeats", "series_ms")


@dataclass
class RunResults:
    run: dict[str, Any]
    environment: dict[str, Any]
    peaks: dict[int, dict[str, float]]
    verifications: dict
    cells: list[CellResult]
    #: what was found damaged while reading the run and set aside, one line each (dlbench.storage.damage)
    damaged: list[str] = field(default_factory=list)
    #: the cells set aside as damaged: key -> why (a CI gate must fail on them, not pass them as missing)
    set_aside: dict[str, str] = field(default_factory=dict)

    @property
    def run_id(self) -> str:
        return self.run["id"]

    @property
    def without_time(self) -> list[CellResult]:
        """Every cell without a time: :attr:`errors` and :attr:`unsupported` (the summary lists them all)."""
        return [c for c in self.cells if not c.ok]

    @property
    def errors(self) -> list[CellResult]:
        """Cells that went wrong: crashed, timed out, ran out of memory, failed the gate. ``unsupported``
        (a scenario or model the framework cannot express, with its reason) is a fact about the framework,
        not an error: the quick suite's ONNX Runtime training cells must not make ``dlbench run`` exit 1."""
        return [c for c in self.without_time if c.cell.status != "unsupported"]

    @property
    def unsupported(self) -> list[CellResult]:
        """Cells the framework cannot express (each with its reason): no time, and no error."""
        return [c for c in self.without_time if c.cell.status == "unsupported"]

    def peak_gflops(self, threads: int, precision: str = DEFAULT_PRECISION) -> float | None:
        """The measured peak of ``precision``'s compute type at ``threads`` (None: not measured)."""
        found = peak_for(self.peaks.get(threads), precision)
        return found[1] if found else None

    def to_dict(self) -> dict[str, Any]:
        return {"run": self.run, "environment": self.environment,
                "peaks": {str(k): v for k, v in self.peaks.items()},
                "verifications": [{"framework": k[0], "variant": k[1], "model": k[2], "device": k[3],
                                   "precision": k[4], **v}
                                  for k, v in self.verifications.items()],
                "cells": [c.to_dict() for c in self.cells]}


@dataclass
class CellOutcome:
    """What measuring one cell produced, as the store keeps it."""

    status: str  # ok, failed, timeout, unsupported, not_equivalent
    reason: str = ""
    samples: list[Sample] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: each process started: its wall time and the parts it reported (dlbench.measure.cost), or None
    processes: list[tuple[float, dict[str, float] | None]] = field(default_factory=list)
    #: what the cell reused (dlbench.measure.reuse): ``compilation_cache``, ``gate``
    reused: dict[str, Any] = field(default_factory=dict)
