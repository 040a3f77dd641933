"""The report's "Precision: speed against error" section, for runs with reduced-precision cells.

Per model: each framework's cells at each precision with the time, the speed-up over the same
framework's float32 cell of the same settings, and the gate's errors against the float64 reference
at that precision; a plot of time against forward error (one point per framework and precision);
and what the CPU does natively for each precision (a slow bf16 on a CPU without bf16 instructions
is its emulation, not the framework's).
"""

from __future__ import annotations

from dlbench.core.figures import finish as _finish
from dlbench.core.precision import DEFAULT as DEFAULT_PRECISION
from dlbench.core.precision import PRECISIONS
from dlbench.report.plots import Plot, Skipped, _by, _figure, _safe, _svg
from dlbench.report.results import RunResults
from dlbench.report.tables import DASH, Column, Section, Table, Value, fmt_num
from dlbench.scenarios import registry
from dlbench.storage.cell_result import CellResult

INTRO = ("Each framework at each precision (docs/precision.md): its median time, the speed-up over its own float32 "
         "cell of the same model, scenario, batch, threads and device (>1: faster), and the equivalence gate's "
         "errors at that precision against the float64 reference (forward: relative error of the outputs; "
         "gradient: the directional-derivative check); for a trained decoder (an hf: checkpoint), its next-token "
         "distribution on held-out text against the float64 reference's (KL divergence, top-1 agreement, "
         "perplexity; docs/checkpoints.md). The CPU line says what the machine computes natively.")


def _reduced(res: RunResults) -> bool:
    return any(c.cell.precision != DEFAULT_PRECISION for c in res.cells)


def _gate(res: RunResults, c: CellResult) -> dict:
    return res.verifications.get((c.cell.framework, c.cell.variant, c.cell.model, c.cell.device, c.cell.precision), {})


def _err(value: float | None) -> Value:
    return Value(DASH) if value is None else Value(f"{value:.1e}", value)


def _quality(res: RunResults, c: CellResult) -> dict:
    """A trained decoder's quality figures on held-out text (dlbench.gate.quality): the cell's, else its gate's."""
    return c.cell.metrics.get("quality") or _gate(res, c).get("quality") or {}


def _share(value: float | None) -> Value:
    return Value(DASH) if value is None else Value(f"{value:.2%}", value)


def _same_at_fp32(c: CellResult) -> tuple:
    x = c.cell
    return (x.framework, x.variant, x.model, x.scenario, x.batch, x.threads, x.device, x.data)


def precision_tables(res: RunResults) -> list[Table]:
    if not _reduced(res):
        return []
    fp32 = {_same_at_fp32(c): c for c in res.cells if c.cell.precision == DEFAULT_PRECISION and c.ok and c.time_ms}
    tables = []
    closures = registry.batch_closures()
    for (model,), cells in _by([c for c in res.cells if c.cell.scenario in closures],
                               lambda c: (c.cell.model,)).items():
        cols = [Column("framework", "framework", numeric=False), Column("precision", "precision", numeric=False),
                Column("scenario", "scenario", numeric=False), Column("threads", "threads"), Column("batch", "batch"),
                Column("ms", "ms (median)", better="low"), Column("speedup", "speed-up over its fp32", better="high"),
                Column("fwd", "forward error vs float64", better="low"),
                Column("grad", "gradient error vs float64", better="low")]
        quality = any(_quality(res, c) for c in cells)
        if quality:  # a trained decoder: what the precision does to its next-token distribution on held-out text
            cols += [Column("kl", "KL divergence vs float64 (held-out text)", better="low"),
                     Column("top1", "top-1 agreement", better="high"), Column("ppl", "perplexity", better="low")]
        rows, groups = [], []
        order = list(PRECISIONS)
        for c in sorted(cells, key=lambda c: (c.cell.scenario, c.cell.threads, c.cell.batch, c.cell.framework,
                                              c.cell.variant, order.index(c.cell.precision))):
            gate = _gate(res, c)
            base = fp32.get(_same_at_fp32(c))
            if c.ok and c.time_ms is not None:
                time = Value(fmt_num(c.time_ms.median), c.time_ms.median)
                speedup = (Value(f"{base.time_ms.median / c.time_ms.median:.2f}x", base.time_ms.median / c.time_ms.median)
                           if base is not None else Value(DASH, detail="no fp32 cell"))
            else:
                time = Value(DASH, detail=f"{c.cell.status}: {c.cell.reason}")
                speedup = Value(DASH)
            rows.append([Value(f"{c.cell.framework}/{c.cell.variant}"), Value(c.cell.precision), Value(c.cell.scenario),
                         Value(str(c.cell.threads)), Value(str(c.cell.batch)), time, speedup,
                         _err(gate.get("forward_error")), _err(gate.get("gradient_error"))])
            if quality:
                q = _quality(res, c)
                ppl = q.get("perplexity")
                rows[-1] += [_err(q.get("kl")), _share(q.get("top1")),
                             Value(DASH) if ppl is None else Value(f"{ppl:.3f}", ppl)]
            groups.append((c.cell.scenario, c.cell.threads, c.cell.batch))
        tables.append(Table(f"{model}: speed and error by precision", cols, rows, groups))
    return tables


def cpu_line(res: RunResults) -> list[str]:
    support = res.environment.get("cpu", {}).get("precision")
    if not support or not _reduced(res):
        return []
    model = res.environment.get("cpu", {}).get("model") or "this CPU"
    return [f"{model}: " + "; ".join(f"{kind} {how}" for kind, how in support.items())]


def section(res: RunResults) -> Section:
    return Section("Precision: speed against error", INTRO, precision_tables(res), ("The CPU", cpu_line(res)))


def speed_error(res: RunResults) -> tuple[list[Plot], list[Skipped]]:
    """Per model and thread count: forward time against forward error, one point per framework and
    precision (float32 included, at its own small error)."""
    if not _reduced(res):
        return [], []
    forward = registry.batch_closures()[0]  # the forward pass: the error the gate measured is its outputs'
    cells = [c for c in res.cells if c.cell.scenario == forward and c.ok and c.time_ms is not None
             and _gate(res, c).get("forward_error")]
    plots = []
    for (model, threads), mcells in _by(cells, lambda c: (c.cell.model, c.cell.threads)).items():
        fig, (ax,) = _figure(1)
        for (fw,), fcells in _by(mcells, lambda c: (f"{c.cell.framework}/{c.cell.variant}",)).items():
            xs = [_gate(res, c)["forward_error"] for c in fcells]
            ys = [c.time_ms.median for c in fcells]
            ax.scatter(xs, ys, label=fw)
            for c, x, y in zip(fcells, xs, ys, strict=True):
                ax.annotate(c.cell.precision, (x, y), fontsize="x-small", xytext=(3, 3), textcoords="offset points")
        ax.set_xscale("log")
        ax.set_yscale("log")
        _finish(ax, "forward error vs float64 (relative, log scale)", "forward time (ms, median, log scale)",
                f"{model}, {threads} thread(s): speed against error")
        plots.append(Plot(f"precision-{_safe(model)}-t{threads}", f"{model}, {threads} thread(s): speed against error",
                          "One point per framework and precision; lower left is faster and closer to the exact "
                          "function.", _svg(fig)))
    return plots + _frontier(res), []


def _frontier(res: RunResults) -> list[Plot]:
    """Per trained decoder and thread count: forward time against the KL divergence of its next-token
    distribution from float64's on held-out text, per framework (the frontier of speed against quality)."""
    forward = registry.batch_closures()[0]
    cells = [c for c in res.cells if c.cell.scenario == forward and c.ok and c.time_ms is not None
             and "kl" in _quality(res, c)]
    plots = []
    for (model, threads), mcells in _by(cells, lambda c: (c.cell.model, c.cell.threads)).items():
        fig, (ax,) = _figure(1)
        for (fw,), fcells in _by(mcells, lambda c: (f"{c.cell.framework}/{c.cell.variant}",)).items():
            fcells = sorted(fcells, key=lambda c: _quality(res, c)["kl"])
            xs = [max(_quality(res, c)["kl"], 1e-18) for c in fcells]  # float32's can round to 0
            ys = [c.time_ms.median for c in fcells]
            ax.plot(xs, ys, marker="o", label=fw)
            for c, x, y in zip(fcells, xs, ys, strict=True):
                ax.annotate(c.cell.precision, (x, y), fontsize="x-small", xytext=(3, 3), textcoords="offset points")
        ax.set_xscale("log")
        ax.set_yscale("log")
        _finish(ax, "KL divergence from float64 on held-out text (nats/token, log scale)",
                "forward time (ms, median, log scale)", f"{model}, {threads} thread(s): speed against quality")
        plots.append(Plot(f"quality-{_safe(model)}-t{threads}", f"{model}, {threads} thread(s): speed against quality",
                          "One line per framework through its precisions; lower left is faster and closer to the "
                          "float64 model's next-token distribution.", _svg(fig)))
    return plots
