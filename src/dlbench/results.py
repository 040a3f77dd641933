"""A stored run, analysed: statistics and derived rates computed from the raw samples.

Everything shown to a user (summary, report, compare, export) goes through here, so the numbers
agree everywhere and are always recomputable from what the store keeps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dlbench.measure.stats import Summary, summarize
from dlbench.models import UnknownModelError, get_model
from dlbench.scenarios import FLOP_FACTOR
from dlbench.store import CellRecord, Store


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
    convergence: dict[str, Any] = field(default_factory=dict)  # report.convergence.summarise_curves
    #: every timed iteration in the order it ran: (repeat, "warmup" | "measure", ms); for warm-up plots
    series_ms: list[tuple[int, str, float]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.cell.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        c = self.cell
        return {
            "key": c.key, "framework": c.framework, "variant": c.variant, "model": c.model, "scenario": c.scenario,
            "batch": c.batch, "threads": c.threads, "device": c.device, "data": c.data, "status": c.status,
            "reason": c.reason,
            "verified": self.verified, "warnings": c.warnings,
            "time_ms": self.time_ms.to_dict() if self.time_ms else None,
            "repeat_medians_ms": self.repeat_medians_ms,
            "samples_per_s": self.samples_per_s, "gflops": self.gflops, "pct_peak": self.pct_peak,
            "first_call_ms": self.first_call_ms, "compile_ms": self.compile_ms, "convergence": self.convergence,
            "peak_rss_bytes": c.metrics.get("peak_rss_bytes"), "rss_growth_bytes": c.metrics.get("rss_growth_bytes"),
            "device_memory": c.metrics.get("device_memory"), "threads_readback": c.metrics.get("threads_readback"),
            "loop_k": c.metrics.get("loop_k"),
        }


@dataclass
class RunResults:
    run: dict[str, Any]
    environment: dict[str, Any]
    peaks: dict[int, dict[str, float]]
    verifications: dict
    cells: list[CellResult]

    @property
    def run_id(self) -> str:
        return self.run["id"]

    @property
    def failed(self) -> list[CellResult]:
        """Every cell without a time, ``unsupported`` ones included (the summary lists them all)."""
        return [c for c in self.cells if not c.ok]

    @property
    def errors(self) -> list[CellResult]:
        """Cells that went wrong: crashed, timed out, ran out of memory, failed the gate. ``unsupported``
        (a scenario or model the framework cannot express, with its reason) is a fact about the framework,
        not an error: the quick suite's ONNX Runtime training cells must not make ``dlbench run`` exit 1."""
        return [c for c in self.failed if c.cell.status != "unsupported"]

    def peak_gflops(self, threads: int) -> float | None:
        rates = self.peaks.get(threads)
        return max(rates.values()) if rates else None

    def to_dict(self) -> dict[str, Any]:
        return {"run": self.run, "environment": self.environment,
                "peaks": {str(k): v for k, v in self.peaks.items()},
                "verifications": [{"framework": k[0], "variant": k[1], "model": k[2], "device": k[3], **v}
                                  for k, v in self.verifications.items()],
                "cells": [c.to_dict() for c in self.cells]}


def _flops_per_batch(model: str, batch: int) -> float | None:
    try:
        return get_model(model).flops_per_sample * batch
    except UnknownModelError:
        return None


def analyse_cell(store: Store, cell: CellRecord, verified: str, peak: float | None) -> CellResult:
    res = CellResult(cell=cell, verified=verified)
    samples = store.samples(cell.id)
    if cell.scenario == "convergence":
        from dlbench.report.convergence import summarise_curves

        res.convergence = summarise_curves(cell.metrics.get("convergence", []), cell.metrics.get("target_accuracy", 1.0))
        res.samples_per_s = res.convergence.get("train_samples_per_s")
        return res
    if cell.scenario == "compile":
        by: dict[str, dict[str, list[float]]] = {}
        for s in samples:
            kind, _, closure = s.phase.partition(":")
            if kind in ("compile_cold", "compile_warm"):
                by.setdefault(closure, {}).setdefault(kind[8:], []).append(s.value_ns / 1e6)
        res.compile_ms = {k: {t: float(np.median(v)) for t, v in d.items()} for k, d in by.items()}
        return res
    measure = [s for s in samples if s.phase == "measure"]
    res.warmup_ms = [s.value_ns / 1e6 for s in samples if s.phase == "warmup"]
    order = {"warmup": 0, "measure": 1}
    res.series_ms = [(s.repeat, s.phase, s.value_ns / 1e6) for s in
                     sorted((s for s in samples if s.phase in order), key=lambda s: (s.repeat, order[s.phase], s.idx))]
    first = [s.value_ns / 1e6 for s in samples if s.phase == "first_call"]
    res.first_call_ms = float(np.median(first)) if first else None
    if not measure or cell.status != "ok":
        return res
    res.samples_ms = [s.value_ns / 1e6 for s in measure]
    res.sample_repeats = [s.repeat for s in measure]
    res.time_ms = summarize(res.samples_ms, groups=res.sample_repeats)
    repeats = sorted({s.repeat for s in measure})
    res.repeat_medians_ms = [float(np.median([s.value_ns / 1e6 for s in measure if s.repeat == r])) for r in repeats]
    seconds = res.time_ms.median / 1e3
    # a scaling step counts every worker's samples; a capped call (H2O's frames) the samples it processed
    batch = int(cell.metrics.get("global_batch") or cell.metrics.get("call_samples") or cell.batch)
    res.samples_per_s = batch / seconds
    flops = _flops_per_batch(cell.model, batch)
    if flops is not None:
        res.gflops = flops * FLOP_FACTOR[cell.scenario] / seconds / 1e9
        if peak and cell.scenario != "scaling":  # W workers use W x threads cores: no single-process peak
            res.pct_peak = 100.0 * res.gflops / peak
    return res


def load_run(store: Store, run_id: str | None = None) -> RunResults:
    run_id = run_id or store.latest_run_id()
    run = store.get_run(run_id)
    peaks = store.peaks(run_id)
    verifications = store.verifications(run_id)
    cells = []
    for cell in store.cells(run_id):
        v = verifications.get((cell.framework, cell.variant, cell.model, cell.device), {}).get("verdict", "unknown")
        rates = peaks.get(cell.threads)
        cells.append(analyse_cell(store, cell, v, max(rates.values()) if rates else None))
    return RunResults(run, store.environment(run_id), peaks, verifications, cells)
