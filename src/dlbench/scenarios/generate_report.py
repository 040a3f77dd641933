"""The report's "Generation" section (and ``dlbench show``'s tables after the summary): the figures of
``generate`` cells with their intervals, their TTFT and TPOT percentiles, the generation gate's
findings, and LoadGen's token-latency cells (``generate-server``, ``generate-offline``); plots of the
TTFT and TPOT distributions and of a server's rate against its TTFT p99.

Plain data (:class:`~dlbench.core.document.Table`) and plots, like the rest of the report. Beside
its scenarios (as the latency section is), so that they import nothing above them; reached through their
report hooks, it reads only the cells' stored metrics and imports no scenario.
"""

from __future__ import annotations

import numpy as np

from dlbench.core.document import DASH, Column, Section, Table, Value, fmt_bytes_mib, fmt_num
from dlbench.core.figures import Plot, Skipped
from dlbench.core.figures import by as _by
from dlbench.core.figures import figure as _figure
from dlbench.core.figures import finish as _finish
from dlbench.core.figures import safe as _safe
from dlbench.core.figures import svg as _svg
from dlbench.measure.stats import interval_value
from dlbench.storage.cell_result import CellResult, RunResults

INTRO = ("Greedy decoding with a key/value cache (dlbench's decoders, one per framework). TTFT: the prompt's "
         "prefill through the first token on the host; TPOT: each later token; tokens/s: new tokens over a "
         "generation's time, per sequence and x batch. Medians with 95% intervals over the fresh processes in "
         "brackets; percentiles pooled over the processes, refused with fewer than 10 samples above them. Every "
         "cell passed the generation gate (cached logits = recomputed, tokens = the float64 reference's outside "
         "ties). Cold start, each measuring process a fresh one: the seconds to convert the weights to the "
         "runtime's format and to load them (as the runtime's decoder reports them; – for a decoder built from "
         "the weights in memory), the decoder's whole build, and the first generation's TTFT (before any "
         "warm-up). LoadGen: its token-latency mode's own verdict and figures.")
QS = ("50", "90", "99")
LOADGEN_TITLE = "MLPerf LoadGen, token latencies"


def _generate_cells(res: RunResults) -> list[CellResult]:
    """Cells with a generate cell's figures (known by what they store: this module names no scenario)."""
    return [c for c in res.cells if c.ok and "ttft_ms" in c.cell.metrics.get("generation", {})]


def _loadgen_cells(res: RunResults) -> list[CellResult]:
    """LoadGen's cells in token-latency mode (their settings say so)."""
    return [c for c in res.cells if c.ok and c.cell.metrics.get("loadgen", {}).get("settings", {})
            .get("use_token_latencies")]


def _server(c: CellResult) -> bool:
    """A LoadGen cell of its Server scenario (LoadGen's own name, stored with its settings)."""
    return c.cell.metrics["loadgen"].get("settings", {}).get("scenario") == "Server"


def section(res: RunResults) -> Section:
    return Section("Generation", INTRO, tables(res))


def plots(res: RunResults) -> tuple[list[Plot], list[Skipped]]:
    """The section's plots: TTFT/TPOT CDFs and a server's request rate against its TTFT p99."""
    out, skipped = [], []
    for make in (token_cdfs, server_rate_ttft):
        p, k = make(res)
        out += p
        skipped += k
    return out, skipped


def figures_table(res: RunResults) -> Table | None:
    """``dlbench show``'s table after the summary: every generate cell's figures, one row each (None: none)."""
    cells = sorted(_generate_cells(res), key=lambda c: (c.cell.model, c.cell.batch, c.cell.threads,
                                                        c.cell.precision, c.cell.framework))
    if not cells:
        return None
    cols = [Column("model", "model", numeric=False), *WHO, Column("ttft", "TTFT ms", better="low"),
            Column("tpot", "TPOT ms", better="low"), Column("total", "tokens/s total", better="high"),
            *COLD_COLUMNS[:2], COLD_COLUMNS[3], Column("ties", "gate ties")]
    rows = []
    for c in cells:
        f = c.figures
        cold = _cold_values(c)
        rows.append([Value(c.cell.model), *_who(c), interval_value(f.get("ttft_ms")), interval_value(f.get("tpot_ms")),
                     interval_value(f.get("tokens_per_s_total")), *cold[:2], cold[3],
                     Value(str(len(c.cell.metrics.get("generation_gate", {}).get("ties", []))))])
    return Table("generation: TTFT, TPOT and tokens/s [95% CI]; cold start (medians over fresh processes)", cols, rows)


def figures_rows(res: RunResults) -> list[dict]:
    """``dlbench show --json``'s ``generation``: every generate cell's figures (medians with their 95%
    intervals) and its cold start."""
    out = []
    for c in _generate_cells(res):
        f = c.figures
        out.append({"key": c.cell.key, "model": c.cell.model, "framework": c.cell.framework,
                    "variant": c.cell.variant, "precision": c.cell.precision, "batch": c.cell.batch,
                    "threads": c.cell.threads,
                    **{k: {"median": f[k].median, "ci_low": f[k].ci_low, "ci_high": f[k].ci_high} if k in f else None
                       for k in ("ttft_ms", "tpot_ms", "tokens_per_s_total")},
                    "cold_start": _cold(c)})
    return out


#: the cold start's columns (:func:`dlbench.scenarios.generate.cold_start`'s figures)
COLD_COLUMNS = [Column("convert", "convert s", better="low"), Column("load", "load s", better="low"),
                Column("build", "build s", better="low"), Column("cold_ttft", "first TTFT ms", better="low")]


def _cold(c: CellResult) -> dict:
    """The cell's stored cold start (empty: a cell stored before it was)."""
    return c.cell.metrics["generation"].get("cold_start") or {}


def _cold_values(c: CellResult) -> list[Value]:
    """The cold start's four values (:data:`COLD_COLUMNS`); the conversion's cache state beside it."""
    cold = _cold(c)
    caches = sorted({p["convert_cache"] for p in cold.get("processes", []) if p.get("convert_cache")})
    ttft_ms = cold["cold_ttft_s"] * 1e3 if cold.get("cold_ttft_s") is not None else None
    return [Value(fmt_num(cold.get("convert_s")), cold.get("convert_s"),
                  detail=f"cache: {', '.join(caches)}" if caches else ""),
            *(Value(fmt_num(cold.get(k)), cold.get(k)) for k in ("load_s", "build_s")), Value(fmt_num(ttft_ms), ttft_ms)]


def loadgen_table(res: RunResults) -> Table | None:
    """LoadGen's token-latency cells (None: the run has none)."""
    return next((t for t in tables(res) if t.title == LOADGEN_TITLE), None)


def _who(c: CellResult) -> list[Value]:
    cell = c.cell
    return [Value(f"{cell.framework}/{cell.variant}"), Value(cell.precision), Value(str(cell.batch)),
            Value(str(cell.threads))]


WHO = [Column("framework", "framework", numeric=False), Column("precision", "precision", numeric=False),
       Column("batch", "batch"), Column("threads", "threads")]


def tables(res: RunResults) -> list[Table]:
    out = []
    for (model,), cells in _by(_generate_cells(res), lambda c: (c.cell.model,)).items():
        cells = sorted(cells, key=lambda c: (c.cell.batch, c.cell.threads, c.cell.precision, c.cell.framework))
        s = cells[0].cell.metrics["generation"]["settings"]
        cols = WHO + [Column("ttft", "TTFT ms", better="low"), Column("tpot", "TPOT ms", better="low"),
                      Column("seq", "tokens/s per sequence", better="high"),
                      Column("total", "tokens/s total", better="high"), Column("cache", "cache MiB"),
                      Column("peak", "peak MiB"), Column("gate", "gate: cache err, logit err, ties", numeric=False)]
        rows = []
        for c in cells:
            g, gate = c.cell.metrics["generation"], c.cell.metrics.get("generation_gate", {})
            gate_text = DASH if not gate else (f"{fmt_num(gate.get('cache_error'))}, {fmt_num(gate.get('logit_error'))}, "
                                               f"{len(gate.get('ties', []))}")
            rows.append(_who(c) + [*(interval_value(c.figures.get(k)) for k in
                                     ("ttft_ms", "tpot_ms", "tokens_per_s_sequence", "tokens_per_s_total")),
                                   Value(fmt_bytes_mib(g["cache_bytes"])),
                                   Value(fmt_bytes_mib(c.cell.metrics.get("peak_rss_bytes"))), Value(gate_text)])
        out.append(Table(f"{model}: generation, prompt {s['prompt']}, {s['new_tokens']} new tokens", cols, rows))
        cols = WHO + [Column(f"{w}{q}", f"{w.upper()} p{q} ms", better="low") for w in ("ttft", "tpot") for q in QS]
        rows = []
        for c in cells:
            g = c.cell.metrics["generation"]
            row = _who(c)
            for which in ("ttft_percentiles", "tpot_percentiles"):
                shown = {f"{p['q']:g}": p for p in g[which]}
                for q in QS:
                    p = shown.get(q)
                    if p is None or p["value"] is None:
                        row.append(Value(DASH, detail=p["refused"] if p else ""))
                    else:
                        row.append(Value(fmt_num(p["value"]), p["value"],
                                         detail=f"[{fmt_num(p['ci_low'])}, {fmt_num(p['ci_high'])}]"))
            rows.append(row)
        out.append(Table(f"{model}: TTFT and TPOT percentiles", cols, rows))
        if any(_cold(c) for c in cells):
            out.append(Table(f"{model}: cold start, medians over fresh processes", WHO + COLD_COLUMNS,
                             [_who(c) + _cold_values(c) for c in cells]))
    lg = _loadgen_cells(res)
    if lg:
        cols = [Column("model", "model", numeric=False), Column("scenario", "scenario", numeric=False), *WHO,
                Column("mode", "LoadGen mode", numeric=False), Column("result", "LoadGen result", numeric=False),
                Column("rate", "tokens/s", better="high"),
                Column("qps", "requests/s scheduled")]
        cols += [Column(f"{w}{q}", f"{w.upper()} p{q} ms") for w in ("ttft", "tpot") for q in ("50", "99")]
        cols += [Column("ttft_bound", "TTFT bound ms"), Column("tpot_bound", "TPOT bound ms"),
                 Column("goodput", "goodput requests/s", better="high"),
                 Column("rules", "LoadGen's rules", numeric=False)]
        rows = []
        for c in sorted(lg, key=lambda c: (c.cell.model, c.cell.scenario, c.cell.framework)):
            f = c.cell.metrics["loadgen"]
            settings, server = f.get("settings", {}), _server(c)
            row = [Value(c.cell.model), Value(c.cell.scenario.removeprefix("generate-")), *_who(c),
                   Value(str(settings.get("mode", DASH))), Value(str(f.get("result", DASH))),
                   Value(fmt_num(c.samples_per_s), c.samples_per_s),
                   Value(fmt_num(_number(f.get("scheduled_samples_per_s"))) if server else DASH,
                         detail=f"target {fmt_num(settings.get('server_target_qps'))}" if server else "")]
            row += [Value(fmt_num(f.get(f"{w}_percentiles_ms", {}).get(q))) for w in ("ttft", "tpot") for q in ("50", "99")]
            row += [Value(fmt_num(settings.get("ttft_latency_ns", 0) / 1e6) if server else DASH),
                    Value(fmt_num(settings.get("tpot_latency_ns", 0) / 1e6) if server else DASH),
                    _goodput_value(f.get("goodput")),
                    Value("met" if f.get("meets_rules") else "short")]
            rows.append(row)
        out.append(Table(LOADGEN_TITLE, cols, rows))
    return out


def _goodput_value(good: dict | None) -> Value:
    """A generate-server cell's goodput (found by ``--find-peak``), with the share and preset it holds to."""
    if not isinstance(good, dict):
        return Value(DASH)
    rate = good["requests_per_s"]
    return Value(fmt_num(rate), rate, detail=f"{good['share_pct']:g}% within bounds"
                 + (f" ({good['slo']})" if good.get("slo") else ""))


def _number(x) -> float | None:
    return float(x) if isinstance(x, int | float) else None


def token_cdfs(res: RunResults) -> tuple[list[Plot], list[Skipped]]:
    """TTFT and TPOT distributions, one line per cell, per model."""
    plots = []
    for (model,), cells in _by(_generate_cells(res), lambda c: (c.cell.model,)).items():
        fig, axes = _figure(2)
        for ax, which, label in zip(axes, ("ttft_samples_ms", "tpot_samples_ms"), ("TTFT", "TPOT"), strict=True):
            for c in cells:
                x = np.sort(np.asarray(c.cell.metrics["generation"][which]))
                if x.size:
                    ax.plot(x, np.arange(1, x.size + 1) / x.size,
                            label=f"{c.cell.framework}/{c.cell.variant} b{c.cell.batch} {c.cell.precision}")
            ax.set_xscale("log")
            ax.set_xlabel(f"{label} (ms, log scale)")
            ax.set_ylabel("fraction at or below")
            ax.grid(True, alpha=0.3)
        axes[0].legend(fontsize="small")
        fig.suptitle(f"{model}: TTFT and TPOT CDFs")
        plots.append(Plot(f"generation-cdf-{_safe(model)}", f"{model}: TTFT and TPOT CDFs",
                          "Every timed generation's TTFT (left) and every later token's time (right), pooled over "
                          "the cell's processes.", _svg(fig)))
    return plots, []


def server_rate_ttft(res: RunResults) -> tuple[list[Plot], list[Skipped]]:
    """generate-server cells: the request rate LoadGen scheduled against the TTFT p99, with the bound."""
    cells = [c for c in _loadgen_cells(res) if _server(c)
             and "99" in c.cell.metrics["loadgen"].get("ttft_percentiles_ms", {})]
    plots = []
    for (model,), mcells in _by(cells, lambda c: (c.cell.model,)).items():
        fig, (ax,) = _figure(1)
        for (fw,), fcells in _by(mcells, lambda c: (f"{c.cell.framework}/{c.cell.variant}",)).items():
            pts = sorted((float(c.cell.metrics["loadgen"].get("scheduled_samples_per_s") or 0.0),
                          c.cell.metrics["loadgen"]["ttft_percentiles_ms"]["99"]) for c in fcells)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=fw)
        for b in sorted({c.cell.metrics["loadgen"]["settings"].get("ttft_latency_ns", 0) / 1e6 for c in mcells}):
            ax.axhline(b, color="grey", ls="--", lw=0.8, label=f"TTFT bound {fmt_num(b)} ms")
        ax.set_yscale("log")
        _finish(ax, "requests/s (LoadGen's scheduled rate)", "TTFT p99 (ms, log scale)",
                f"{model}: generate-server, request rate vs TTFT p99")
        plots.append(Plot(f"generate-server-{_safe(model)}", f"{model}: request rate vs TTFT p99",
                          "One point per generate-server cell; points above the dashed bound fail it. Runs at "
                          "several --qps trace the curve.", _svg(fig)))
    return plots, []
