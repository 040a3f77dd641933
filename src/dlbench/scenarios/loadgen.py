"""MLPerf LoadGen's scenarios, run by the real load generator (``mlcommons-loadgen``) against a
framework's forward closure: ``loadgen-offline``, ``loadgen-single-stream`` and ``loadgen-server``.

LoadGen decides when queries arrive and judges the run (minimum duration and query count, early
stopping, the server's latency bound); dlbench supplies, inside one fresh measuring process:

* the **query sample library**: ``performance_sample_count`` samples of the model (synthetic and
  seeded, or the first of ``--data``), each placed once as a batch of one, and in groups of the
  cell's batch when that is above one;
* the **system under test**: one serving thread that takes queued samples, runs a placed group
  through the forward closure when a whole batch of them waits (offline always, server when queries
  pile up), else one placed sample per call, and tells LoadGen each sample is complete. Outputs are
  not returned (performance mode: LoadGen checks no accuracy; the gate has checked the function).

Settings: LoadGen's own defaults (TestSettings: 10 s minimum duration, 100 queries, early stopping
on), so a cell meets LoadGen's rules unless ``--loadgen-min-duration``/``--loadgen-min-queries``
shorten them; such a cell says it does not. MLPerf submissions use longer durations (mlperf.conf):
dlbench's cells are LoadGen runs, not submissions. The server's target QPS is ``--qps`` (default:
half the rate one stream of single calls reaches in the warm-up), its bound ``--p99-ms`` (default
LoadGen's 100 ms); ``--find-peak`` runs LoadGen's FindPeakPerformance mode, which searches the
highest QPS meeting the bound. LoadGen's summary is stored verbatim with its key figures parsed, and
its log files are kept with the run (:func:`dlbench.scenarios.base.make_cell_artifacts`, copied there from
the temporary folder LoadGen wrote them in: :func:`dlbench.scenarios.loadgen_harness.keep_logs`).

**The harness floor.** Everything runs in the one measuring process, pinned to the cell's cores
(``--threads``): LoadGen's own threads (the one issuing queries and the one logging and timing
responses), the serving thread and the framework's compute threads share them, so at a light load
a server's latency can be the harness's rather than the framework's (0.43 ms against 0.095 ms for a
lone call was seen). After the measured test the first cell of a setting (:meth:`LoadGen.floor_setting`:
scenario, threads, batch, LoadGen's settings) runs LoadGen again with the same settings and the same
serving thread in the same process, against a system under test that completes each query at once (a
closure that does nothing): that run's figures, the floor, are stored with the cell
(``metrics["loadgen"]["floor"]``, with its setting and ``measured_in``, the cell's key); every later
cell of the run with that setting, a resumed run's included, stores a copy naming the cell that
measured it and runs LoadGen once. Each cell shows the floor beside its figures and warns where its
median latency is within :data:`NEAR_FLOOR` x of the floor's. A server at its default rate (half its
own warm-up's) measures a floor of its own. The floor is kept in the cells, not in a run-level table,
so that every reader and ``dlbench check`` read it as they read any cell's metrics (no schema change).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dlbench.core.job import CellJob
from dlbench.data.synthetic import Batch
from dlbench.frameworks.base import UnsupportedError
from dlbench.scenarios.base import CellOutcome, Context, Flag, Scenario, SuiteView, run_in_turn
from dlbench.scenarios.latency import ServingSettings, report_plots, report_sections
from dlbench.scenarios.loadgen_harness import (
    QueueServer,
    artifact_dir,
    base_settings,
    described,
    import_loadgen,
    keep_logs,
    lg_version,
    meets_rules,
    read_summary,
    result_warnings,
    run_test,
    tempdir,
)
from dlbench.scenarios.prepare import cell_batch, prepare, versions
from dlbench.scenarios.timed import make_closure

if TYPE_CHECKING:
    from dlbench.models.spec import ModelSpec
    from dlbench.storage.cell_result import CellResult

#: samples LoadGen may ask for (its performance sample count): at least this, and two batches
SAMPLES = 64
#: summary lines kept as key figures (LoadGen's own wording)
KEY_FIGURES = {
    "Scenario": "scenario", "Mode": "mode", "Result is": "result",
    "Samples per second": "samples_per_s", "Completed samples per second": "samples_per_s",
    "QPS w/ loadgen overhead": "samples_per_s",  # single stream: one sample per query
    "Scheduled samples per second": "scheduled_samples_per_s",
    "Min duration satisfied": "min_duration_satisfied", "Min queries satisfied": "min_queries_satisfied",
    "Early stopping satisfied": "early_stopping_satisfied",
    "Performance constraints satisfied": "constraints_satisfied",
    "target_qps": "target_qps", "target_latency (ns)": "target_latency_ns",
    "min_duration (ms)": "min_duration_ms", "min_query_count": "min_query_count",
}
PERCENTILE = re.compile(r"^(\d+(?:\.\d+)?) percentile latency \(ns\)$")
#: a median latency within this multiple of the harness floor's is mostly the harness's
NEAR_FLOOR = 2.0
#: the floor's figures kept with a cell (the rest of its summary is LoadGen's boilerplate)
FLOOR_FIGURES = ("result", "samples_per_s", "percentiles_ms", "mean_ms")


def parse_summary(text: str) -> dict[str, Any]:
    """Key figures of ``mlperf_log_summary.txt``: the result, rates, rules met and latency percentiles
    (ms, by percentile). Lines are ``name : value``; anything else is left to the verbatim text."""
    out: dict[str, Any] = {"percentiles_ms": {}}
    for line in text.splitlines():
        if ":" not in line:
            continue
        key, _, value = (part.strip() for part in line.partition(":"))
        if m := PERCENTILE.match(key):
            out["percentiles_ms"][f"{float(m.group(1)):g}"] = float(value) / 1e6
        elif key in KEY_FIGURES and KEY_FIGURES[key] not in out:
            out[KEY_FIGURES[key]] = _number(value)
        elif key == "Mean latency (ns)":
            out["mean_ms"] = float(value) / 1e6
    if "result" in out:
        out["valid"] = out["result"] == "VALID"
    return out


def _number(value: str) -> Any:
    try:
        return float(value) if re.fullmatch(r"-?\d+(\.\d+)?(e[-+]?\d+)?", value) else value
    except ValueError:
        return value


class LoadGen(Scenario):
    """One of LoadGen's scenarios; one measuring process per cell (LoadGen's run is the unit)."""

    requires = ("forward",)
    per_iteration = False
    settings_model = ServingSettings
    settings_section = "serving"
    flags = (
        Flag("--qps", "qps", "loadgen-server: target queries per second (default: half of one stream's rate)", float),
        Flag("--p99-ms", "p99_ms", "loadgen-server: bound on the 99th percentile latency in ms (default LoadGen's 100)",
             float),
        Flag("--find-peak", "find_peak", "loadgen-server: search the highest QPS meeting the bound (LoadGen's "
             "FindPeakPerformance)", switch=True),
        Flag("--loadgen-min-duration", "min_duration_s",
             "LoadGen's minimum run time in s (shorter than LoadGen's rule: the cell is marked so)", float),
        Flag("--loadgen-min-queries", "min_queries",
             "LoadGen's minimum query count (fewer than LoadGen's rule: the cell is marked so)", int),
    )

    def __init__(self, mode: str, description: str):
        self.mode = mode  # LoadGen's TestScenario name
        self.name = "loadgen-" + {"Offline": "offline", "SingleStream": "single-stream", "Server": "server"}[mode]
        self.description = description

    def default_batch(self, spec: ModelSpec, data: str, data_dir: str | None) -> int:
        return spec.default_batch if self.mode == "Offline" else 1

    def check(self, cells, suite: SuiteView) -> None:
        from dlbench.core.errors import UsageError

        s = self.settings_of(suite)
        server = any(c.scenario == "loadgen-server" for c in cells)
        if (s.find_peak or s.qps is not None or s.p99_ms is not None) and not server:
            raise UsageError("--find-peak, --qps and --p99-ms set the loadgen-server scenario; the suite has none")

    def estimate(self, cell, suite: SuiteView, step_s: float, start_s: float, epoch_samples: int) -> float:
        s = self.settings_of(suite)
        duration = s.min_duration_s or 10.0  # the measured test, then the harness floor's (counted for every
        # cell: a cell alone cannot tell whether an earlier one of its setting measures the floor)
        return start_s + SAMPLES * step_s + duration * ((6 if s.find_peak else 1.2) + 1.2)

    def report_sections(self, res) -> list:
        return report_sections(res)

    def report_plots(self, res) -> tuple[list, list]:
        return report_plots(res)

    # --- the parent's side ------------------------------------------------------------------------
    def measure(self, cell, ctx: Context) -> CellOutcome:
        out = CellOutcome("ok")
        job = self.job(cell, ctx.suite)
        outdir, why = artifact_dir(cell, ctx)
        if why is not None:  # as --profile does: the logs are lost, the cell and the run are not
            out.warnings.append(f"LoadGen's log files are not kept: {why}")
        job.extra["outdir"] = str(outdir) if outdir is not None else None  # None: none kept
        setting = self.floor_setting(cell, self.settings_of(ctx.suite))
        known = stored_floor(ctx.stored, setting)
        job.extra["floor"] = known is None  # measured once per run and setting: a later cell reuses it
        results = run_in_turn(cell, ctx, [job], ctx.suite.protocol.timeout_s, out)
        if not results:
            return out
        r = results[0]
        if r.get("logs_lost"):
            out.warnings.append(f"LoadGen's log files are not kept: {r['logs_lost']}")
        figures = parse_summary(r["summary"])
        if known is None:
            measured = parse_summary(r["floor_summary"])
            floor = {**{k: measured[k] for k in FLOOR_FIGURES if k in measured}, "setting": setting,
                     "measured_in": cell.key}
        else:
            floor = known
        out.metrics = {"loadgen": {**figures, "summary": r["summary"], "settings": r["settings"],
                                   "meets_rules": r["meets_rules"], "logs": r["logs"], "floor": floor},
                       "threads_readback": r["threads_readback"], "versions": r["versions"]}
        if warning := near_floor(self.mode, figures, floor):
            out.warnings.append(warning)
        out.warnings += result_warnings(figures, r["meets_rules"])
        return out

    def floor_setting(self, cell, s: ServingSettings) -> str | None:
        """What this cell's harness floor depends on, as the key it is stored under: the scenario, the cores
        (the thread count), the batch (the library's size and grouping) and the run's LoadGen settings
        (minimum duration and query count; a server's target rate and bound). Not the framework, the model
        or the data: the floor computes nothing. A server at its default rate (half its own warm-up's) has
        a rate of its own, hence a floor of its own: None, measured with the cell."""
        if self.mode == "Server" and s.qps is None:
            return None
        parts = [self.name, f"threads {cell.threads}", f"batch {cell.batch}", f"min_duration_s {s.min_duration_s}",
                 f"min_queries {s.min_queries}"]
        if self.mode == "Server":
            parts += [f"qps {s.qps:g}", f"p99_ms {s.p99_ms}"]
        return ", ".join(parts)

    # --- the measuring process's side -----------------------------------------------------------
    def work(self, job: CellJob, settings: ServingSettings) -> dict[str, Any]:
        lg, missing = import_loadgen()
        if missing is not None:
            return missing
        p = prepare(job)
        backend, spec, size = p.backend, p.spec, job.cell.batch
        count = max(SAMPLES, 2 * size) // size * size
        samples = cell_batch(job, spec, count)
        try:
            model = backend.build(spec, p.weights, job.cell.device, job.cell.variant)
            # the placed batches are kept beside their closures: an engine's inputs may share their memory
            placed = [backend.place(_rows(samples, i, i + 1), model) for i in range(count)]
            singles = [make_closure("forward", backend, model, one, spec) for one in placed]
            grouped = [backend.place(_rows(samples, i, i + size), model) for i in range(0, count, size)] if size > 1 else []
            groups = [make_closure("forward", backend, model, group, spec) for group in grouped]
        except UnsupportedError as exc:
            return {"unsupported": str(exc)}
        del p.weights
        warm = max(job.protocol["warmup"], 1)
        single_s = _warm(singles, backend.sync, warm)
        group_s = _warm(groups, backend.sync, warm) if groups else single_s
        test, meets_rules = _settings(lg, self.mode, settings, single_s, size / group_s)
        del p.batch  # only the QSL's samples are served
        sut = _Server(lg, singles, groups, size, backend.sync)
        tmp = tempdir()  # LoadGen writes here; what is kept is copied into the cell's folder
        try:
            run_test(lg, sut, count, test, tmp)
            summary = read_summary(tmp)
            floor_summary = _floor(lg, test, count, size, str(Path(tmp) / "floor")) if job.extra["floor"] else None
        finally:
            kept, lost = keep_logs(tmp, job.extra["outdir"])
        return {"summary": summary, "floor_summary": floor_summary, "meets_rules": meets_rules,
                "settings": described(test), "logs": kept, "logs_lost": lost,
                "threads_readback": p.readback, "versions": {**versions(backend), "mlcommons-loadgen": lg_version()}}

    # --- results --------------------------------------------------------------------------------
    def analyse(self, res: CellResult, samples, peak: float | None) -> None:
        figures = res.cell.metrics.get("loadgen", {})
        rate = figures.get("samples_per_s")
        res.samples_per_s = float(rate) if isinstance(rate, int | float) else None

    def text(self, res: CellResult) -> str:
        if not res.ok:
            return f"– ({res.cell.status})"
        f = res.cell.metrics.get("loadgen", {})
        parts = [str(f.get("result", "?")), f"{res.samples_per_s:,.0f}/s" if res.samples_per_s else "–/s"]
        p99 = f.get("percentiles_ms", {}).get("99")
        if p99 is not None and self.mode != "Offline":  # offline's one query has no tail
            parts.append(f"p99 {p99:.3g} ms")
            floor = (f.get("floor") or {}).get("percentiles_ms", {}).get("99")
            if floor is not None:
                parts.append(f"(floor {floor:.3g})")
        if not f.get("meets_rules", True):
            parts.append("(short)")
        return " ".join(parts)

    def summary_fields(self, res) -> dict[str, Any]:
        """The harness floor beside the cell in ``show --json``: its percentiles, its setting and the cell
        whose process measured it (this cell's own key, or the earlier cell of the same setting)."""
        floor = (res.cell.metrics.get("loadgen") or {}).get("floor") if res is not None and res.ok else None
        return {f"{self.name}_floor": {k: floor.get(k) for k in ("percentiles_ms", "setting", "measured_in")}
                if isinstance(floor, dict) else None}

    @property
    def column(self) -> str:
        return f"{self.name} (LoadGen)"


def stored_floor(stored: dict[str, dict[str, Any]], setting: str | None) -> dict[str, Any] | None:
    """The harness floor a cell of the run already stored for ``setting`` (None: none, or the setting is
    the cell's own): measured once per run and setting, ``--resume`` included."""
    if setting is None:
        return None
    for metrics in stored.values():
        floor = (metrics.get("loadgen") or {}).get("floor") if isinstance(metrics.get("loadgen"), dict) else None
        if (isinstance(floor, dict) and floor.get("setting") == setting and isinstance(floor.get("measured_in"), str)
                and isinstance(floor.get("percentiles_ms"), dict)):
            return floor
    return None


def near_floor(mode: str, figures: dict[str, Any], floor: dict[str, Any]) -> str | None:
    """A warning where the cell's median latency is within :data:`NEAR_FLOOR` x of the harness floor's
    (offline's one query has no per-sample latency to compare)."""
    mine, base = figures.get("percentiles_ms", {}).get("50"), floor.get("percentiles_ms", {}).get("50")
    if mode == "Offline" or mine is None or not base or mine > NEAR_FLOOR * base:
        return None
    return (f"p50 {mine:.3g} ms is within {NEAR_FLOOR:g}x of the harness floor's {base:.3g} ms (LoadGen and the "
            "serving thread answering at once, same settings and cores): the figure is mostly the harness's")


def _floor(lg, settings, count: int, size: int, outdir: str) -> str:
    """LoadGen's summary of the same settings against a system under test that completes every query at
    once (the same serving thread, no compute): what the harness alone costs. Performance mode only: a
    peak search of a system that does nothing measures nothing."""
    settings.mode = lg.TestMode.PerformanceOnly
    Path(outdir).mkdir(parents=True, exist_ok=True)

    def nothing():
        return None
    groups = count // size if size > 1 else 0
    sut = _Server(lg, [nothing] * count, [nothing] * groups, size, lambda _: None)
    run_test(lg, sut, count, settings, outdir)
    return read_summary(outdir)


def _rows(batch: Batch, start: int, stop: int) -> Batch:
    return Batch(batch.x[start:stop], None if batch.y is None else batch.y[start:stop],
                 None if batch.mask is None else batch.mask[start:stop])


def _warm(closures: list, sync, calls: int) -> float:
    """Run every closure once (each placed sample's first call), then ``calls`` more of the first;
    the median seconds of those."""
    for fn in closures:
        sync(fn())
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        sync(closures[0]())
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _settings(lg, mode: str, settings: ServingSettings, single_s: float, group_rate: float) -> tuple[Any, bool]:
    """LoadGen's TestSettings for the cell in ``mode``, and whether they keep LoadGen's own rules."""
    s, defaults = base_settings(lg, mode, settings)
    s.single_stream_expected_latency_ns = max(int(single_s * 1e9), 1)
    s.offline_expected_qps = max(group_rate, 1.0)
    s.server_target_qps = settings.qps if settings.qps is not None else max(0.5 / single_s, 1.0)
    if settings.p99_ms is not None:
        s.server_target_latency_ns = int(settings.p99_ms * 1e6)
    return s, meets_rules(s, defaults)


class _Server(QueueServer):
    """The system under test: one thread serves the queued queries (a whole batch of waiting samples
    as one call on a placed group, else one placed sample per call)."""

    def __init__(self, lg, singles: list, groups: list, size: int, sync):
        self.lg, self.singles, self.groups, self.size, self.sync = lg, singles, groups, size, sync
        self.start()

    def serve(self, waiting: list) -> None:
        if self.groups and len(waiting) == self.size:
            self.sync(self.groups[(waiting[0].index // self.size) % len(self.groups)]())
            self._done(waiting)
            return
        for s in waiting:
            self.sync(self.singles[s.index % len(self.singles)]())
            self._done([s])

    def _done(self, samples) -> None:
        self.lg.QuerySamplesComplete([self.lg.QuerySampleResponse(s.id, 0, 0) for s in samples])


SCENARIOS = (
    LoadGen("Offline", "MLPerf LoadGen offline: every sample at once, batched; samples/s"),
    LoadGen("SingleStream", "MLPerf LoadGen single stream: one query after another; latency percentiles"),
    LoadGen("Server", "MLPerf LoadGen server: Poisson arrivals at --qps under a --p99-ms bound; --find-peak"),
)
