"""What a report shows, as plain data: the per-model tables, their footnotes, the environment, the
machine's peaks and the warnings. The HTML and Markdown writers only render these; neither
formats a number or decides what is bold on its own, so the two always agree.

Table layout follows Bahrampour et al. (Tables 3-6) and Shi et al. (Table 7): one table per model,
rows framework + variant (+ device, threads, batch), a column per measured quantity. A value is
bold when it is the best of its column among the rows that measured the same thing: same batch,
threads and device (a smaller batch is always faster, so comparing across batches would only
bold the smallest). A cell that produced no time shows "–" and a footnote with its status and reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from dlbench.core.document import (
    DASH,
    Column,
    Footnote,
    Section,
    Table,
    Value,
    fmt_bytes_mib,
    fmt_num,
    mark_best,
)
from dlbench.core.precision import DEFAULT as DEFAULT_PRECISION
from dlbench.measure.peak import by_precision, engine_precision, peak_precision, setters
from dlbench.measure.stats import interval_value
from dlbench.report.results import CellResult, RunResults
from dlbench.report.summary import SummaryRow, summary_rows
from dlbench.scenarios import registry

# the report's plain-data primitives, shared with the scenarios' own sections (re-exported)
__all__ = ["DASH", "Column", "Footnote", "ReportContent", "Section", "Table", "Value", "fmt_bytes_mib", "fmt_num",
           "mark_best"]


@dataclass
class ReportContent:
    """Everything a report renders, format-neutral."""

    run: dict[str, Any]
    environment: list[tuple[str, str]]
    peaks: Table
    tables: list[Table]
    footnotes: list[Footnote]
    warnings: list[tuple[str, str]]  # (cell key, warning)
    verification: list[tuple[str, str]]  # (framework/variant/model/device, verdict and reason): failed the gate
    #: the scenario-specific sections after the results (layers, latency, profiles), each from its own module
    sections: list[Section] = field(default_factory=list)
    #: (framework/variant/model/device, reason): what a framework cannot run, so the gate had nothing to check
    unsupported: list[tuple[str, str]] = field(default_factory=list)


class _Notes:
    def __init__(self) -> None:
        self.by_text: dict[str, int] = {}

    def add(self, text: str) -> int:
        return self.by_text.setdefault(text, len(self.by_text) + 1)

    def list(self) -> list[Footnote]:
        return [Footnote(n, t) for t, n in self.by_text.items()]


def _memory_bytes(c: CellResult) -> float | None:
    """Peak memory of a cell: the allocator's peak on an accelerator, the process's peak RSS on the CPU."""
    m = c.cell.metrics
    if c.cell.device != "cpu":
        dev = m.get("device_memory") or {}
        if dev.get("allocator_peak_bytes"):
            return float(dev["allocator_peak_bytes"])
    return float(m["peak_rss_bytes"]) if m.get("peak_rss_bytes") else None


def row_memory_bytes(row: SummaryRow) -> float | None:
    values = [v for c in row.cells.values() if c.ok and (v := _memory_bytes(c))]
    return max(values) if values else None


def _failed(c: CellResult, notes: _Notes) -> Value:
    return Value(DASH, note=notes.add(f"{c.cell.status}: {c.cell.reason or 'no reason recorded'}"))


def _time_value(c: CellResult | None, notes: _Notes) -> Value:
    if c is None:
        return Value("")
    if not c.ok or c.time_ms is None:
        return _failed(c, notes)
    return interval_value(c.time_ms)


def _own_value(scenario: str, c: CellResult | None, notes: _Notes) -> Value:
    """A scenario's value in its own column (:attr:`~dlbench.scenarios.base.Scenario.report_column`)."""
    if c is None:
        return Value("")
    if not c.ok:
        return _failed(c, notes)
    text, number, detail = registry.of_stored(scenario).report_value(c)
    return Value(text, number, detail=detail)


def _no_peak(c: CellResult) -> str:
    if c.cell.device != "cpu":
        return "no peak FLOP/s is measured for accelerators (the peaks are the CPU's matmul rates)"
    if c.gflops is None:
        return f"model {c.cell.model} has no FLOP count"
    return (f"no {peak_precision(c.cell.precision)} peak was measured for {c.cell.threads} thread(s) (a cell is "
            "divided by its own precision's peak, never by another's)")


def _rate_scenario(rows: list[SummaryRow]) -> str | None:
    """The scenario whose throughput a table shows: the same one for every row, so they compare (the
    most work per call of the scenarios that time one batch's closure)."""
    for s in reversed(registry.batch_closures()):
        if any(s in r.cells for r in rows):
            return s
    return None


VERIFIED = {"pass": "yes", "fail": "NO", "unsupported": "unsupported", "unknown": "unknown"}


def model_table(model: str, rows: list[SummaryRow], notes: _Notes) -> Table:
    scenarios = [s for s in registry.per_batch() if any(s in r.cells for r in rows)]
    rate = _rate_scenario(rows)
    own = [s for s in registry.names() if registry.get(s).report_column and any(s in r.cells for r in rows)]
    reduced = any(r.precision != DEFAULT_PRECISION for r in rows)
    columns = [Column("framework", "framework", numeric=False), Column("variant", "variant", numeric=False),
               Column("device", "device", numeric=False), Column("threads", "threads"), Column("batch", "batch")]
    if reduced:
        columns.append(Column("precision", "precision (forward error vs float64)", numeric=False))
    columns += [Column(s, f"{s} ms (median [95% CI])", "low") for s in scenarios]
    if rate:
        columns += [Column("samples_per_s", f"samples/s ({rate})", "high"),
                    Column("pct_peak", f"% of its precision's peak FLOP/s ({rate})", "high")]
    columns.append(Column("memory", "peak memory MiB", "low"))
    columns += [Column(s, registry.get(s).report_column, "low") for s in own]
    columns.append(Column("verified", "verified", numeric=False))

    out: list[list[Value]] = []
    groups: list[tuple] = []
    for r in rows:
        values = [Value(r.label or r.framework), Value(r.variant), Value(r.device), Value(str(r.threads)),
                  Value(str(r.batch))]
        if reduced:
            values.append(Value(r.precision_text))
        values += [_time_value(r.cells.get(s), notes) for s in scenarios]
        if rate:
            c = r.cells.get(rate)
            if c is None:
                values += [Value(""), Value("")]
            elif not c.ok or c.samples_per_s is None:
                values += [_failed(c, notes), _failed(c, notes)]
            else:
                values.append(Value(fmt_num(c.samples_per_s), c.samples_per_s))
                values.append(Value(fmt_num(c.pct_peak), c.pct_peak, detail=f"of the {c.peak}",
                                    note=notes.add(c.rate_warnings[0]) if c.rate_warnings else None)
                              if c.pct_peak is not None else Value(DASH, note=notes.add(_no_peak(c))))
        mem = row_memory_bytes(r)
        values.append(Value(fmt_bytes_mib(mem), mem / 2**20 if mem else None))
        values += [_own_value(s, r.cells.get(s), notes) for s in own]
        values.append(Value(VERIFIED.get(r.verified, r.verified)))
        out.append(values)
        groups.append((r.batch, r.threads, r.device, r.precision))  # the best of each precision is bold
    table = Table(model, columns, out, groups)
    mark_best(table)
    return table


def _when(ts: float | None) -> str:
    return datetime.fromtimestamp(ts).isoformat(timespec="seconds") if ts else DASH


def environment_items(res: RunResults) -> list[tuple[str, str]]:
    env = res.environment
    cpu = env.get("cpu") or {}
    gpus = env.get("gpus") or []
    mem = env.get("memory_bytes")
    blas = [f"{b.get('internal_api', '?')} {b.get('version') or ''}".strip() for b in env.get("blas") or []
            if "error" not in b]
    items = [
        ("run", res.run_id),
        ("suite", str(res.run.get("suite_name") or DASH)),
        ("status", str(res.run.get("status"))),
        ("started / finished", f"{_when(res.run.get('started_at'))} / {_when(res.run.get('finished_at'))}"),
        ("command", " ".join(["dlbench", *res.run.get("argv", [])]) if res.run.get("argv") else DASH),
        ("machine", str(env.get("hostname") or DASH)),
        ("OS", str(env.get("os") or DASH)),
        ("CPU", f"{cpu.get('model') or DASH} ({cpu.get('arch') or '?'})"),
        ("cores", f"{env.get('usable_cores', '?')} usable, {env.get('physical_cores', '?')} physical, "
                  f"{env.get('logical_cores', '?')} logical"),
        ("memory", f"{mem / 2**30:.1f} GiB" if mem else DASH),
        ("GPU", "; ".join(f"{g.get('name')} ({g.get('memory')}, driver {g.get('driver')})" for g in gpus) or "none"),
        ("CPU features", ", ".join(cpu.get("flags") or []) or DASH),
        ("BLAS", ", ".join(blas) or DASH),
        ("Python", str(env.get("python") or DASH)),
        ("dlbench", f"{env.get('dlbench_version', '?')} ({env.get('git_commit') or 'no git commit'})"),
    ]
    frameworks = env.get("frameworks") or {}
    items += [(f"framework {name}", str(version or "not installed")) for name, version in frameworks.items()]
    if env.get("env"):
        items.append(("thread variables", ", ".join(f"{k}={v}" for k, v in env["env"].items())))
    return items


def peaks_table(res: RunResults) -> Table:
    """Each engine's matmul rate per thread count, then each precision's peak (the fastest of its engines, named
    under it): what a cell of that precision's "% of peak" divides by."""
    engines = sorted({e for rates in res.peaks.values() for e in rates}, key=lambda e: (engine_precision(e), e))
    precisions = sorted({engine_precision(e) for e in engines}, key=lambda p: (p != DEFAULT_PRECISION, p))
    columns = [Column("threads", "threads")] + [Column(e, f"{e} GFLOP/s") for e in engines] + \
        [Column(f"peak {p}", f"{p} peak GFLOP/s") for p in precisions]
    rows = []
    for t in sorted(res.peaks):
        rates, best, by = res.peaks[t], by_precision(res.peaks[t]), setters(res.peaks[t])
        rows.append([Value(str(t))] + [Value(fmt_num(rates.get(e)), rates.get(e)) for e in engines]
                    + [Value(fmt_num(best.get(p)), best.get(p), detail=by.get(p, "")) for p in precisions])
    return Table("measured matmul peak per precision", columns, rows)


def _per_batch(row: SummaryRow) -> bool:
    """The row has a cell the per-model table shows (a convergence-only row has its own section)."""
    return any(registry.of_stored(s).per_iteration for s in row.cells)


def build_content(res: RunResults) -> ReportContent:
    notes = _Notes()
    tables = [model_table(m, [r for r in rows if _per_batch(r)], notes)
              for m, rows in summary_rows(res).items() if any(_per_batch(r) for r in rows)]
    warnings = [(c.cell.key, w) for c in res.cells for w in (*c.cell.warnings, *c.rate_warnings)]
    verification, unsupported = [], []
    for (fw, variant, model, device, precision), v in res.verifications.items():
        name = "/".join([fw, variant, model, device] + ([precision] if precision != DEFAULT_PRECISION else []))
        if v.get("verdict") == "unsupported":  # not a failure of the gate: nothing to check
            unsupported.append((name, v.get("reason") or ""))
        elif v.get("verdict") != "pass":
            verification.append((name, f"{v['verdict']}: {v.get('reason') or ''}".strip(": ")))
    return ReportContent(res.run, environment_items(res), peaks_table(res), tables, notes.list(), warnings,
                         verification, unsupported=unsupported)
