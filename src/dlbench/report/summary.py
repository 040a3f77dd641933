"""The end-of-run summary: per model, rows framework + variant (+ batch, threads, device, precision),
columns each scenario's own (the median time with its 95% CI, and beside it that scenario's
samples/s), memory and the verdict. Each scenario says how its cell reads
(:meth:`dlbench.scenarios.base.Scenario.text`): whole-data-set scenarios (``epoch``, ``predict``:
H2O) in samples per second, never a per-batch time. A throughput is always labelled with its
scenario: a forward rate and a training rate never share a column."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dlbench.core.precision import DEFAULT as DEFAULT_PRECISION
from dlbench.envs import versions
from dlbench.measure.peak import by_precision, setters
from dlbench.models.split import parse_part
from dlbench.report.results import CellResult, RunResults
from dlbench.scenarios import registry
from dlbench.scenarios.convergence_report import agreement


@dataclass
class SummaryRow:
    framework: str
    variant: str
    batch: int
    threads: int
    device: str
    data: str
    precision: str
    verified: str
    cells: dict[str, CellResult] = field(default_factory=dict)  # scenario -> result
    #: the gate's forward error against the float64 reference at this precision (None: not checked)
    forward_error: float | None = None

    @property
    def precision_text(self) -> str:
        """The precision, and beside a reduced one its forward error against float64."""
        if self.precision == DEFAULT_PRECISION or self.forward_error is None:
            return self.precision
        return f"{self.precision} (error {self.forward_error:.1e})"
    #: how the framework is shown (``jax 0.4.38`` when the run has several versions of it: dlbench.envs.versions)
    label: str = ""
    #: a trained next-token model's quality on held-out text against float64 (dlbench.gate.quality; None: not measured)
    quality: dict | None = None

    @property
    def quality_text(self) -> str:
        """KL divergence, top-1 agreement and perplexity against the float64 reference ("–": not measured)."""
        q = self.quality
        if not q:
            return "–"
        return f"KL {q['kl']:.1e}, top-1 {q['top1']:.2%}, ppl {q['perplexity']:.3f} ({q['reference_perplexity']:.3f})"

    @property
    def shown_name(self) -> str:
        """The framework as every table shows it: its label, else its name."""
        return self.label or self.framework

    def text(self, scenario: str) -> str:
        """The scenario's cell, as the scenario writes it ("" when the row has no such cell)."""
        c = self.cells.get(scenario)
        return "" if c is None else registry.of_stored(scenario).text(c)

    def throughput(self, scenario: str) -> float | None:
        """Samples/s of the row's cell of ``scenario`` (None: no cell, no time, or no rate)."""
        c = self.cells.get(scenario)
        return None if c is None or not c.ok else registry.of_stored(scenario).throughput(c)

    def throughput_text(self, scenario: str) -> str:
        rate = self.throughput(scenario)
        return "" if scenario not in self.cells else "–" if rate is None else f"{rate:,.0f}"

    @property
    def peak_rss_mib(self) -> float | None:
        values = [c.cell.metrics.get("peak_rss_bytes") for c in self.cells.values()]
        values = [v for v in values if v]
        return max(values) / 2**20 if values else None

    @property
    def peak_includes_profiler(self) -> bool:
        """A peak stored before dlbench read it ahead of ``--profile``'s profiler: it holds the profiler's
        memory too (a profile record without its own ``peak_rss_bytes``)."""
        return any(isinstance(p := c.cell.metrics.get("profile"), dict) and "peak_rss_bytes" not in p
                   for c in self.cells.values())

    def to_dict(self) -> dict[str, Any]:
        per_batch = registry.per_batch()
        return {"framework": self.framework, "variant": self.variant, "batch": self.batch, "threads": self.threads,
                "device": self.device, "data": self.data, "precision": self.precision,
                "forward_error": self.forward_error, "quality": self.quality, "verified": self.verified,
                **{f"{s}_ms": (c.time_ms.to_dict() if c.time_ms else None) for s, c in self.cells.items()
                   if s in per_batch},
                **{f"{s}_samples_per_s": self.throughput(s) for s in self.cells},
                # a scenario's own figures (generate: ttft_ms...), as its column shows them
                **{f"{s}_{name}": f.to_dict() for s, c in self.cells.items() for name, f in c.figures.items()},
                "peak_rss_mib": self.peak_rss_mib, "peak_includes_profiler": self.peak_includes_profiler,
                **{k: v for s in registry.SCENARIOS.values() for k, v in s.summary_fields(self.cells.get(s.name)).items()},
                "statuses": {s: c.cell.status for s, c in self.cells.items()}}


def summary_rows(results: RunResults) -> dict[str, list[SummaryRow]]:
    """model -> rows, in the order cells were planned."""
    tables: dict[str, dict[tuple, SummaryRow]] = {}
    shown = versions.labels([c.cell.framework for c in results.cells], results.environment.get("frameworks") or {})
    for c in results.cells:
        if not registry.of_stored(c.cell.scenario).in_summary:  # scaling: see dlbench.distributed.report
            continue
        if parse_part(c.cell.model)[1] is not None:  # a model's part: see dlbench.scenarios.layers_report
            continue
        k = (c.cell.framework, c.cell.variant, c.cell.batch, c.cell.threads, c.cell.device, c.cell.data,
             c.cell.precision)
        rows = tables.setdefault(c.cell.model, {})
        if k not in rows:
            gate = results.verifications.get((c.cell.framework, c.cell.variant, c.cell.model, c.cell.device,
                                              c.cell.precision), {})
            rows[k] = SummaryRow(*k, verified=c.verified, forward_error=gate.get("forward_error"),
                                 label=shown[c.cell.framework])
        rows[k].cells[c.cell.scenario] = c
        rows[k].quality = rows[k].quality or c.cell.metrics.get("quality") or gate.get("quality") or None
    return {m: list(rows.values()) for m, rows in tables.items()}


def summary_scenarios(rows: list[SummaryRow]) -> list[str]:
    """The scenarios of these rows, in the registry's order (then any stored one it does not know)."""
    present = dict.fromkeys(s for r in rows for s in r.cells)
    return [s for s in registry.names() if s in present] + [s for s in present if s not in registry.SCENARIOS]


def summary_dict(results: RunResults) -> dict[str, Any]:
    return {
        "run_id": results.run_id, "status": results.run["status"], "suite": results.run["suite_name"],
        "peak_gflops": {str(t): results.peak_gflops(t) for t in results.peaks},
        "peak_gflops_by_precision": {str(t): by_precision(r) for t, r in results.peaks.items()},
        "peak_engine_by_precision": {str(t): setters(r) for t, r in results.peaks.items()},
        "models": {m: [r.to_dict() for r in rows] for m, rows in summary_rows(results).items()},
        # what went wrong apart from what the framework cannot express: a consumer that reads "failed" as
        # errors (its name) was told an ONNX Runtime training cell had failed
        "failed": [{"key": c.cell.key, "status": c.cell.status, "reason": c.cell.reason} for c in results.errors],
        "unsupported": [{"key": c.cell.key, "reason": c.cell.reason} for c in results.unsupported],
        "warnings": [{"key": c.cell.key, "warnings": [*c.cell.warnings, *c.rate_warnings]} for c in results.cells
                     if c.cell.warnings or c.rate_warnings],
        "agreement": agreement(results.cells),
    }


def optimizer_text(rows: list[SummaryRow]) -> str:
    """The optimiser of the rows' training cells, as each cell recorded it, where it is not SGD with
    momentum (every paper's, the default): ``optimizer adamw (lr 5e-05, betas 0.9/0.999, ...)``; empty
    otherwise."""
    seen = {}
    for r in rows:
        for c in r.cells.values():
            opt = c.cell.metrics.get("optimizer")
            if opt and opt.get("name") != "sgd":
                seen[repr(opt)] = opt
    texts = []
    for opt in seen.values():
        betas = "/".join(f"{b:g}" for b in opt.get("betas", []))
        texts.append(f"optimizer {opt['name']} (lr {opt['lr']:g}, betas {betas}, eps {opt['eps']:g}, "
                     f"weight decay {opt['weight_decay']:g})")
    return "; ".join(texts)
