"""One stored cell with its statistics: what a scenario's ``analyse`` fills from the raw samples.

Its own module so the scenarios, which fill it, do not import :mod:`dlbench.results` (which asks the
scenario registry to analyse each cell of a run).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from dlbench.measure.stats import Summary
from dlbench.store import CellRecord


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
    first_call_ms: float | None = None
    compile_ms: dict[str, dict[str, float]] = field(default_factory=dict)  # closure -> {cold, warm} medians
    convergence: dict[str, Any] = field(default_factory=dict)  # scenarios.convergence.summarise_curves
    #: every timed iteration in the order it ran: (repeat, "warmup" | "measure", ms); for warm-up plots
    series_ms: list[tuple[int, str, float]] = field(default_factory=list)

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
            # every figure a scenario derived (rates, first calls, compile times, curves), by field name
            **{f.name: getattr(self, f.name) for f in fields(self) if f.name not in _NOT_EXPORTED},
            "peak_rss_bytes": c.metrics.get("peak_rss_bytes"), "rss_growth_bytes": c.metrics.get("rss_growth_bytes"),
            "device_memory": c.metrics.get("device_memory"), "threads_readback": c.metrics.get("threads_readback"),
            "loop_k": c.metrics.get("loop_k"),
            # the update a training cell applied (None: the cell applies none, or was stored before it was recorded)
            "optimizer": c.metrics.get("optimizer"),
        }


#: CellResult fields that ``to_dict`` writes otherwise (cell, time_ms) or leaves to ``export`` (the raw series)
_NOT_EXPORTED = ("cell", "verified", "time_ms", "samples_ms", "warmup_ms", "sample_repeats", "series_ms")
