"""The end-of-run summary: per model, rows framework + variant (+ batch, threads, device),
columns the median time of each scenario with its 95% CI, throughput, memory and the verdict."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dlbench.report.convergence import agreement
from dlbench.results import CellResult, RunResults
from dlbench.scenarios import TIMED


@dataclass
class SummaryRow:
    framework: str
    variant: str
    batch: int
    threads: int
    device: str
    data: str
    verified: str
    cells: dict[str, CellResult] = field(default_factory=dict)  # scenario -> result

    def time_text(self, scenario: str) -> str:
        c = self.cells.get(scenario)
        if c is None:
            return ""
        if not c.ok or c.time_ms is None:
            return f"– ({c.cell.status})"
        t = c.time_ms
        return f"{t.median:.3g} [{t.ci_low:.3g}, {t.ci_high:.3g}]"

    @property
    def throughput(self) -> float | None:
        for s in ("train_step", "gradient", "forward"):
            c = self.cells.get(s)
            if c is not None and c.samples_per_s:
                return c.samples_per_s
        return None

    @property
    def peak_rss_mib(self) -> float | None:
        values = [c.cell.metrics.get("peak_rss_bytes") for c in self.cells.values()]
        values = [v for v in values if v]
        return max(values) / 2**20 if values else None

    @property
    def compile_text(self) -> str:
        c = self.cells.get("compile")
        if c is None or not c.compile_ms:
            return "" if c is None else f"– ({c.cell.status})"
        parts = [f"{k} {d.get('cold', float('nan')) / 1e3:.3g}/{d.get('warm', float('nan')) / 1e3:.3g} s"
                 for k, d in c.compile_ms.items()]
        return ", ".join(parts)

    @property
    def convergence_text(self) -> str:
        c = self.cells.get("convergence")
        if c is None:
            return ""
        if not c.convergence:
            return f"– ({c.cell.status})"
        v = c.convergence
        tta = f"{v['time_to_accuracy_s']:.1f} s" if v["time_to_accuracy_s"] is not None else f"not reached ({v['reached']})"
        return (f"test acc {v['final_test_acc_mean']:.3f} ± {v['final_test_acc_std']:.3f} after {v['epochs']} epochs; "
                f"to {v['target_accuracy']:.0%}: {tta}")

    def to_dict(self) -> dict[str, Any]:
        return {"framework": self.framework, "variant": self.variant, "batch": self.batch, "threads": self.threads,
                "device": self.device, "data": self.data, "verified": self.verified,
                **{f"{s}_ms": (c.time_ms.to_dict() if c.time_ms else None) for s, c in self.cells.items()
                   if s in TIMED},
                "samples_per_s": self.throughput, "peak_rss_mib": self.peak_rss_mib,
                "compile_ms": self.cells["compile"].compile_ms if "compile" in self.cells else None,
                "convergence": self.cells["convergence"].convergence if "convergence" in self.cells else None,
                "statuses": {s: c.cell.status for s, c in self.cells.items()}}


def summary_rows(results: RunResults) -> dict[str, list[SummaryRow]]:
    """model -> rows, in the order cells were planned."""
    tables: dict[str, dict[tuple, SummaryRow]] = {}
    for c in results.cells:
        if c.cell.scenario == "scaling":  # one row per worker count: see dlbench.distributed.report
            continue
        k = (c.cell.framework, c.cell.variant, c.cell.batch, c.cell.threads, c.cell.device, c.cell.data)
        rows = tables.setdefault(c.cell.model, {})
        if k not in rows:
            rows[k] = SummaryRow(*k, verified=c.verified)
        rows[k].cells[c.cell.scenario] = c
    return {m: list(rows.values()) for m, rows in tables.items()}


def summary_dict(results: RunResults) -> dict[str, Any]:
    return {
        "run_id": results.run_id, "status": results.run["status"], "suite": results.run["suite_name"],
        "peak_gflops": {str(t): max(r.values()) for t, r in results.peaks.items()},
        "models": {m: [r.to_dict() for r in rows] for m, rows in summary_rows(results).items()},
        "failed": [{"key": c.cell.key, "status": c.cell.status, "reason": c.cell.reason} for c in results.failed],
        "warnings": [{"key": c.cell.key, "warnings": c.cell.warnings} for c in results.cells if c.cell.warnings],
        "agreement": agreement(results.cells),
    }
