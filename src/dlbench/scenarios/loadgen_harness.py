"""The LoadGen harness shared by the forward scenarios (:mod:`dlbench.scenarios.loadgen`) and the
generation ones (:mod:`dlbench.scenarios.generate_loadgen`): importing LoadGen, its TestSettings'
common part, one test run with its logs in a directory, the queue the system under test serves, and
the warnings a LoadGen result raises. What differs (the samples, the closures, the token latencies)
stays with each scenario."""

from __future__ import annotations

import os
import queue
import shutil
import sys
import threading
from pathlib import Path
from typing import Any, Protocol

from dlbench.core.errors import UsageError
from dlbench.core.outputs import OutputDir
from dlbench.scenarios.base import make_cell_artifacts

INSTALL = "pip install mlcommons-loadgen"


def import_loadgen() -> tuple[Any, dict[str, str] | None]:
    """LoadGen's module, or None and the measuring process's answer when it is not installed."""
    try:
        import mlperf_loadgen as lg
    except ImportError:
        return None, {"unsupported": f"MLPerf LoadGen (mlperf_loadgen) is not installed in {sys.executable}: "
                                     f"{INSTALL}"}
    return lg, None


class RunLength(Protocol):
    """What both LoadGen scenarios' settings say of a test's mode and length (``ServingSettings``,
    ``GenerationSettings``)."""

    find_peak: bool
    min_duration_s: float | None
    min_queries: int | None


def base_settings(lg, mode: str, length: RunLength) -> tuple[Any, tuple[int, int]]:
    """LoadGen's TestSettings for ``mode`` with the run's mode and length (``find_peak``,
    ``min_duration_s``, ``min_queries``) set, and LoadGen's own minimum duration and query count."""
    s = lg.TestSettings()
    s.scenario = getattr(lg.TestScenario, mode)
    s.mode = lg.TestMode.FindPeakPerformance if length.find_peak else lg.TestMode.PerformanceOnly
    defaults = s.min_duration_ms, s.min_query_count
    if length.min_duration_s is not None:
        s.min_duration_ms = int(length.min_duration_s * 1000)
    if length.min_queries is not None:
        s.min_query_count = length.min_queries
    return s, defaults


def meets_rules(s, defaults: tuple[int, int]) -> bool:
    """Whether the settings keep LoadGen's own minimum duration and query count."""
    return s.min_duration_ms >= defaults[0] and s.min_query_count >= defaults[1]


def run_test(lg, sut: QueueServer, count: int, settings, outdir: str) -> None:
    """One LoadGen test of ``sut`` over a library of ``count`` samples, its logs in ``outdir``; the
    serving thread is stopped and LoadGen's handles freed whatever happens."""
    handle = lg.ConstructSUT(sut.issue, sut.flush)
    qsl = lg.ConstructQSL(count, count, lambda _: None, lambda _: None)
    output = lg.LogOutputSettings()
    output.outdir, output.copy_summary_to_stdout = outdir, False
    log = lg.LogSettings()
    log.log_output, log.enable_trace = output, False
    try:
        lg.StartTestWithLogSettings(handle, qsl, settings, log)
    finally:
        sut.stop()
        lg.DestroyQSL(qsl)
        lg.DestroySUT(handle)


def read_summary(outdir: str) -> str:
    return (Path(outdir) / "mlperf_log_summary.txt").read_text()


def result_warnings(figures: dict[str, Any], meets: bool) -> list[str]:
    """The warnings a cell carries for shortened settings and for LoadGen's INVALID result."""
    out = []
    if not meets:
        out.append("shortened LoadGen settings (--loadgen-min-duration/--loadgen-min-queries): "
                   "the cell does not meet LoadGen's rules")
    if figures.get("valid") is False:
        why = [k for k in ("min_duration_satisfied", "min_queries_satisfied", "early_stopping_satisfied",
                           "constraints_satisfied") if str(figures.get(k, "Yes")).lower() == "no"]
        out.append(f"LoadGen's result is INVALID ({', '.join(why) or 'see its summary'} not satisfied)")
    return out


def described(s) -> dict[str, Any]:
    return {"scenario": s.scenario.name, "mode": s.mode.name, "min_duration_ms": s.min_duration_ms,
            "min_query_count": s.min_query_count, "server_target_qps": s.server_target_qps,
            "server_target_latency_ns": s.server_target_latency_ns,
            "offline_expected_qps": s.offline_expected_qps,
            "single_stream_expected_latency_ns": s.single_stream_expected_latency_ns}


def lg_version() -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version("mlcommons-loadgen")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def tempdir() -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="dlbench-loadgen-")


def artifact_dir(cell, ctx) -> tuple[Path | None, str | None]:
    """The cell's folder for LoadGen's logs (:func:`~dlbench.scenarios.base.make_cell_artifacts`; None:
    none kept), and why it cannot take them (``artifacts/`` beside the database a file, a dangling or
    foreign symlink, a read-only directory), or None when it can."""
    try:
        outdir = make_cell_artifacts(cell, ctx)
    except UsageError as exc:
        return None, str(exc)
    if outdir is not None and not os.access(outdir, os.W_OK | os.X_OK):
        return None, f"{outdir} is not writable"
    return outdir, None


def keep_logs(tmp: str, outdir: str | None) -> tuple[list[str], str | None]:
    """LoadGen's log files, which it wrote in ``tmp`` (a folder of our own: LoadGen follows any link it
    meets), copied into the cell's kept folder ``outdir`` through :mod:`dlbench.core.outputs` (never
    through a link planted there), and ``tmp`` removed. Returns the kept log files (``mlperf_log_*``;
    none when ``outdir`` is None) and why they could not be kept, or None."""
    try:
        if outdir is None:
            return [], None
        dest = Path(outdir)
        written = OutputDir(dest.parent, own=True).copy_from(Path(tmp), dest.name)
        return sorted(str(p) for p in written if p.parent == dest and p.name.startswith("mlperf_log_")), None
    except UsageError as exc:
        return [], str(exc)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class QueueServer:
    """The system under test's queue: LoadGen's queries queue up and one thread serves them, taking a
    whole batch (``size``) of waiting samples when that many wait, else those that do. Subclasses say
    how a list of waiting samples is served (:meth:`serve`)."""

    size: int
    thread_name = "dlbench-sut"

    def start(self) -> None:
        self.queue: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._serve, name=self.thread_name, daemon=True)
        self.thread.start()

    def issue(self, samples) -> None:
        for s in samples:
            self.queue.put(s)

    def flush(self) -> None:
        pass

    def stop(self) -> None:
        self.queue.put(None)
        self.thread.join()

    def serve(self, waiting: list) -> None:
        raise NotImplementedError

    def _serve(self) -> None:
        while (first := self.queue.get()) is not None:
            waiting = [first]
            while len(waiting) < self.size:
                try:
                    nxt = self.queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    self.queue.put(None)
                    break
                waiting.append(nxt)
            self.serve(waiting)
