"""The contract every scenario fulfils, and what a scenario's two sides share.

A scenario is one kind of measurement (``forward``, ``compile``, ``convergence``, ``scaling``...).
Everything dlbench knows about it lives in one module that subclasses :class:`Scenario` and says,
in one place:

* **cells**: how a cell the suite names expands (``scaling``: one per worker count and exchange),
  its default batch, and what a suite using it must provide (``convergence``: a real data set);
* **support**: which backend closure a framework must have to run it (``FrameworkInfo.closures``);
* **the parent's side** (:meth:`Scenario.measure`): which jobs, in which processes, and how their
  results become a :class:`CellOutcome` (status, raw samples, metrics) for the store;
* **the measuring process's side** (:meth:`Scenario.work`): what runs inside a fresh worker
  interpreter for one job, given the job and the scenario's settings rebuilt from it
  (:meth:`Scenario.settings_from`);
* **settings** (:attr:`Scenario.settings_model`, :attr:`Scenario.flags`): a dataclass (or pydantic
  model) of its own settings, held by a suite file under :attr:`Scenario.section` and validated through
  the registry, and the ``dlbench run`` flags that set its fields; only these travel in its jobs;
* **results** (:meth:`Scenario.analyse`, :meth:`Scenario.text`): how raw samples become statistics
  and the text of its column in the summary;
* **its report** (:meth:`Scenario.report_sections`, :meth:`Scenario.report_plots`,
  :meth:`Scenario.show`): the sections ``dlbench report`` and the lines ``dlbench show`` add for it.

The runner, the worker, the suite, the flags, :mod:`dlbench.report.results` and the report look scenarios up
in :mod:`dlbench.scenarios.registry` and hold no scenario names; a plug-in scenario (``SCENARIOS`` in a
module named by ``DLBENCH_PLUGINS``) is as good as a built-in one.
"""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from dlbench import envs
from dlbench.core.cell import Cell
from dlbench.core.errors import UsageError
from dlbench.core.job import CellJob, Job
from dlbench.core.outputs import OutputDir
from dlbench.core.suite_view import SuiteView  # noqa: F401  (scenarios import it from here)
from dlbench.frameworks import FrameworkInfo, framework_info
from dlbench.launch.subprocess import JobOutcome
from dlbench.measure.adaptive import prior_seconds
from dlbench.measure.reuse import compilation_cache_env, compilation_cache_mark
from dlbench.measure.stats import interval_text, summarize
from dlbench.models import UnknownModelError, get_model
from dlbench.models.flops import closure_flops_per_sample
from dlbench.models.spec import ModelSpec
from dlbench.storage.cell_result import CellOutcome  # noqa: F401  (scenarios import it from here)
from dlbench.storage.store import Sample

if TYPE_CHECKING:  # annotations only: a measuring process in a framework's own environment has no
    # pydantic for the suite model
    from dlbench.core.document import Section
    from dlbench.storage.cell_result import CellResult, RunResults

Progress = Callable[..., None]


class JobRunner(Protocol):
    """:func:`dlbench.launch.subprocess.run_job`, or the same contract on a Ray node."""

    def __call__(self, job: Job, timeout_s: float, threads: int | None = None, python: str | None = None,
                 extra_env: dict[str, str] | None = None) -> JobOutcome: ...


@dataclass(frozen=True)
class Flag:
    """One ``dlbench run`` flag of a scenario: it sets one field of the scenario's settings (the suite
    model then validates the value, so a flag, a suite file and the Python API obey one rule)."""

    option: str  # "--epochs"
    field: str  # the settings field it sets: "epochs"
    help: str = ""
    #: argparse's conversion of the text (int, float, str)
    type: Callable[[str], Any] = str
    #: comma-separated: the field is a list of ``type``
    many: bool = False
    choices: tuple[str, ...] | None = None
    #: a switch without a value: the value it sets (``--find-peak``: True)
    switch: Any = None

    @property
    def dest(self) -> str:
        return self.option.lstrip("-").replace("-", "_")


@dataclass
class Shown:
    """A scenario's table after the summary of ``dlbench run``/``show``: ``table`` (a
    :class:`dlbench.report.tables.Table`) on a terminal, ``rows`` under ``key`` with ``--json``
    (no key: not in the JSON)."""

    table: Any
    rows: list[dict[str, Any]] = field(default_factory=list)
    key: str | None = None


@dataclass
class Context:
    """The parent's side of a run, as a scenario's :meth:`Scenario.measure` sees it."""

    suite: SuiteView
    run_job: JobRunner
    #: run-scoped resources opened by :meth:`Scenario.session`, by scenario name
    sessions: dict[str, Any] = field(default_factory=dict)
    #: the Ray launcher of ``--launcher ray`` (None: local processes)
    ray: Any = None
    #: the run's directory for files kept with it (:meth:`dlbench.storage.store.Store.artifacts_dir`); a
    #: cell's files go under :func:`cell_artifacts`
    artifacts: Path | None = None
    #: the metrics of the run's cells stored so far, by cell key (a resumed run's earlier cells included):
    #: where a scenario finds a run-level figure an earlier cell measured (LoadGen's harness floor)
    stored: dict[str, dict[str, Any]] = field(default_factory=dict)


class Scenario(ABC):
    """One kind of measurement. Subclasses set the class attributes and implement :meth:`measure`."""

    name: str = ""
    #: one line for ``--help`` and the docs
    description: str = ""
    #: the backend closures this scenario measures (``FrameworkInfo.closures``): a framework that offers none
    #: of them has its cells unsupported, with the reason; one that offers some is measured on those
    #: (:meth:`closures_of`; ``compile`` times each per-batch closure, ``layers`` forward and gradient,
    #: ``convergence`` and ``scaling`` train: ``train_step``). Empty: the scenario needs no closure
    requires: tuple[str, ...] = ()
    #: FLOPs of one call as a multiple of the forward pass: 1.0 a forward; above 1 the call runs a
    #: backward too, counted from what it computes (:mod:`dlbench.models.flops`: weight gradients and the
    #: input gradients needed, about 3x the forward, less where the first layer's input is the data; an
    #: optimiser's element-wise work is not counted; the time estimates use the multiple); None: no GFLOP/s
    flop_factor: float | None = None
    #: each stored ``measure`` sample is one call's time (so medians, CIs and ``compare`` apply)
    per_iteration: bool = True
    #: one call processes a whole data set of ``batch`` samples: shown as samples/s, never ms per batch
    whole_dataset: bool = False
    #: the summary shows cells of this scenario in its per-model table (scaling has its own table)
    in_summary: bool = True
    #: each sample times one batch through the backend closure of the scenario's name (``forward``,
    #: ``gradient``, ``train_step``): the calls precision tables compare
    times_closure: bool = False
    #: the scenario computes gradients or updates (an inference-only precision such as int8 cannot run it)
    trains: bool = False
    #: why the scenario runs float32 only (None: it runs at every precision a backend builds at)
    float32_only: str | None = None
    #: the scenario applies the run's optimiser (``Suite.optimizer``), so its cells carry it (``Cell.optimizer``)
    updates: bool = False
    #: why the scenario runs SGD with momentum only (None: it runs every optimiser the backend has)
    sgd_only: str | None = None
    #: thread counts a run of only this scenario from flags uses when ``--threads`` is not given
    #: (None: the suite's default, 1 and all cores)
    default_threads: list[int | str] | None = None
    #: the scenario's settings: a dataclass (importable without pydantic: measuring processes import
    #: scenarios) or a pydantic model, validated by pydantic through the registry; None: it has none
    settings_model: type | None = None
    #: the suite file's key of its settings ("" : the scenario's name); scenarios that share settings
    #: share it (``latency`` and ``loadgen-*``: ``serving``)
    settings_section: str = ""
    #: the ``dlbench run`` flags that set its settings' fields
    flags: tuple[Flag, ...] = ()

    @property
    def section(self) -> str:
        """The key of the scenario's settings in a suite file."""
        return self.settings_section or self.name

    def settings_of(self, suite: SuiteView) -> Any:
        """The scenario's settings in ``suite`` (an instance of :attr:`settings_model`)."""
        return suite.settings(self.section)

    # --- cells ---------------------------------------------------------------------------------
    def cells(self, cell: Cell, suite: SuiteView) -> list[Cell]:
        """The cells one point of the suite's cross product becomes (default: itself)."""
        return [cell]

    def default_batch(self, spec: ModelSpec, data: str, data_dir: str | None) -> int:
        return spec.default_batch

    def check(self, cells: list[Cell], suite: SuiteView) -> None:
        """Raise :class:`~dlbench.core.errors.UsageError` for what the suite lacks (nothing is stored yet)."""
        return None

    def closures_of(self, info: FrameworkInfo) -> tuple[str, ...]:
        """The closures of :attr:`requires` the framework offers, in the scenario's order."""
        return tuple(c for c in self.requires if c in info.closures)

    def unsupported(self, info: FrameworkInfo) -> str | None:
        """Why the framework cannot run this scenario at all (None: it can)."""
        if self.requires and not self.closures_of(info):
            needs = "" if self.requires == (self.name,) else f", which {self.name} needs"
            return (f"{info.name} supports only the {', '.join(info.closures)} closure(s), "
                    f"not {' or '.join(self.requires)}{needs}")
        return None

    # --- the parent's side -------------------------------------------------------------------------
    def session(self, suite: SuiteView, cells: list[Cell], ray: Any, progress: Progress) -> AbstractContextManager[Any]:
        """Run-scoped resources the scenario's cells share (``scaling``: network namespaces)."""
        return nullcontext()

    @abstractmethod
    def measure(self, cell: Cell, ctx: Context) -> CellOutcome:
        """Measure one verified cell: start its processes, collect samples and metrics."""

    def job(self, cell: Cell, suite: SuiteView) -> CellJob:
        """The job a measuring process gets for this cell: the cell, the run's seed, data directory and
        timer protocol, and the scenario's own settings (no other scenario's); a scenario that updates
        parameters (:attr:`updates`) gets the run's optimiser too."""
        settings = self.settings_of(suite) if self.settings_model is not None else None
        return CellJob(threads=cell.threads, cell=cell, seed=suite.seed, data_dir=suite.data_dir,
                       protocol=suite.protocol.timer_fields(), settings=settings_dict(settings),
                       optimizer=suite.optimizer.model_dump(mode="json") if self.updates else None)

    def call_flops(self, cell: Cell, factor: float | None = None) -> float | None:
        """FLOPs of one call of the cell's closure at this scenario's ``flop_factor`` (or ``factor``);
        None where the scenario counts none."""
        factor = factor or self.flop_factor
        return None if factor is None else get_model(cell.model).flops_per_sample * cell.global_batch * factor

    def call_seconds(self, cell: Cell, suite: SuiteView, flops_per_s: float) -> float:
        """A guess at one stored ``measure`` sample of the cell (here one call of its closure) at
        ``flops_per_s``, for a cell this machine never measured: the unit ``estimate`` counts in."""
        return max(self.call_flops(cell, self.flop_factor or 3.0) / flops_per_s, 1e-4)

    def estimate(self, cell: Cell, suite: SuiteView, step_s: float, start_s: float, epoch_samples: int) -> float:
        """A rough guess at the cell's wall time before anything is measured (``dlbench run --dry-run``
        and the progress's time left): ``repeats`` processes, each a start-up of ``start_s``, the
        warm-up and the sampling of calls of ``step_s``."""
        p = suite.protocol
        warmup = min(p.warmup * step_s, p.max_time_s / 4)
        sampling = min(max(p.min_iters * step_s, p.min_time_s), p.max_time_s)
        if p.target_ci is not None:  # a pilot, then a second stage planned for a typical variance split
            return prior_seconds(p.target_ci / 100, max(p.repeats, 3), start_s + warmup + sampling, start_s + warmup,
                                 step_s, p.max_cell_s, p.min_iters)
        return p.repeats * (start_s + warmup + sampling)

    # --- the measuring process's side -----------------------------------------------------------
    def settings_from(self, job: CellJob) -> Any:
        """The scenario's settings as its :meth:`work` gets them: an instance of :attr:`settings_model`
        rebuilt from the job's data (None: the scenario has none). The one place a measuring process
        rebuilds them, so that no scenario reads its settings as the job's dict."""
        if self.settings_model is None:
            return None
        if dataclasses.is_dataclass(self.settings_model):
            return self.settings_model(**job.settings)
        return self.settings_model.model_validate(job.settings)

    def work(self, job: CellJob, settings: Any) -> dict[str, Any]:
        """What a fresh worker interpreter does for one job of this scenario; ``settings``: its own,
        :meth:`settings_from` the job (None where it has none)."""
        raise NotImplementedError(f"the {self.name} scenario starts no worker job of its own")

    # --- results --------------------------------------------------------------------------------
    def analyse(self, res: CellResult, samples: list[Sample], peak: float | None) -> None:
        """Fill ``res`` from the cell's raw samples: per-call statistics, rates, share of peak."""
        analyse_iterations(res, samples, peak, self.flop_factor)

    def throughput(self, res: CellResult) -> float | None:
        """Samples/s shown in this scenario's own throughput column (None: no such column)."""
        return res.samples_per_s

    def text(self, res: CellResult) -> str:
        """The scenario's cell in the summary table."""
        if not res.ok or res.time_ms is None:
            return f"– ({res.cell.status})"
        t = res.time_ms
        if self.whole_dataset:
            n = res.cell.batch * 1e3
            return interval_text(t, lambda v: f"{v:,.0f}", lambda ms: n / ms)
        return interval_text(t, lambda v: f"{v:.3g}")

    @property
    def column(self) -> str:
        """Title of the scenario's column in the summary."""
        if self.whole_dataset:
            return f"{self.name} samples/s [95% CI] (whole data set)"
        return f"{self.name} ms [95% CI]"

    #: the title of the scenario's own column in the report's per-model table (None: a per-batch
    #: scenario has its time column there, any other none); :meth:`report_value` fills it
    report_column: str | None = None

    def report_value(self, res: CellResult) -> tuple[str, float | None, str]:
        """The scenario's value in its :attr:`report_column`: (text, the number it ranks by, detail)."""
        return self.text(res), None, ""

    def summary_fields(self, res: CellResult | None) -> dict[str, Any]:
        """The scenario's own fields in a row of ``dlbench show --json`` (``res``: the row's cell of this
        scenario; None: the row has none, and the fields are still there, empty)."""
        return {}

    # --- its report ---------------------------------------------------------------------------------
    def cells_of(self, res: RunResults) -> list[Any]:
        """The run's cells of this scenario (:class:`~dlbench.storage.cell_result.CellResult`)."""
        return [c for c in res.cells if c.cell.scenario == self.name]

    def report_sections(self, res: RunResults) -> list[Section]:
        """The sections of ``dlbench report`` about this scenario's cells of ``res`` (called once per
        scenario the run has; scenarios that share a section return it from one of them)."""
        return []

    def report_plots(self, res: RunResults) -> tuple[list[Any], list[Any]]:
        """The report's plots of this scenario's cells, and those skipped (with why)."""
        return [], []

    def show(self, res: RunResults, db: Any) -> Shown | None:
        """What ``dlbench run`` and ``show`` print for this scenario's cells after the summary (None:
        nothing). ``db``: the database the run is stored in (a scenario may read its raw samples)."""
        return None


# --- shared by the scenarios ---------------------------------------------------------------------
#: sane maxima of settings (one week of seconds; ten million calls or iterations; a seed numpy takes), so a
#: suite file, a flag and the Python API refuse the same values (the suite's and the scenarios' models)
MAX_SECONDS = 7 * 24 * 3600.0
#: the smallest latency bound, in ms, a setting may name: LoadGen takes bounds in whole nanoseconds, and
#: a smaller one (``--ttft-ms 1e-300``) would become a bound of 0 ns
MIN_BOUND_MS = 1e-6
MAX_COUNT = 10_000_000
MAX_SEED = 2**32 - 1
#: the largest batch size, thread count or worker count a suite or a flag may name
MAX_BATCH = 2**24
MAX_WORKERS = 4096


def check_range(settings: Any, name: str, *, gt: float | None = None, ge: float | None = None,
                le: float | None = None) -> None:
    """A settings dataclass's bound on one field (None values pass: "not set"); raises ValueError, which
    the suite model reports with the section's name. Infinity and NaN never pass."""
    v = getattr(settings, name)
    if v is None:
        return
    if isinstance(v, float) and not math.isfinite(v):
        raise ValueError(f"{name} must be a finite number, got {v}")
    if (gt is not None and not v > gt) or (ge is not None and not v >= ge) or (le is not None and not v <= le):
        bounds = " and ".join(b for b in (f"> {gt}" if gt is not None else "", f">= {ge}" if ge is not None else "",
                                          f"<= {le}" if le is not None else "") if b)
        raise ValueError(f"{name} must be {bounds}, got {v}")


def settings_dict(settings: Any) -> dict[str, Any]:
    """A scenario's settings as JSON-ready data (a dataclass or a pydantic model; None: none)."""
    if settings is None:
        return {}
    if dataclasses.is_dataclass(settings):
        return dataclasses.asdict(settings)
    return settings.model_dump(mode="json")


def framework_env(cell: Cell) -> dict[str, str] | None:
    """Environment a variant needs before its framework is imported (Keras' back end)."""
    return framework_info(cell.framework).variant_env.get(cell.variant)


def failure(outcome: JobOutcome) -> tuple[str, str]:
    """A job that went wrong as a cell's status and reason (a timeout stays a timeout)."""
    return ("timeout" if outcome.status == "timeout" else "failed"), outcome.reason


def compilation_cache(cell: Cell) -> tuple[str, str | None, Mapping[str, str]]:
    """The cell's framework, its variant's compiler with a persistent cache (None: none) and the variables
    that point it at a directory, as the framework declares them (dlbench.measure.reuse's arguments)."""
    declared = framework_info(cell.framework).compilation_caches.get(cell.variant)
    return (cell.framework, None, {}) if declared is None else (cell.framework, declared.compiler, declared.env)


def run_in_turn(cell: Cell, ctx: Context, jobs: Iterable[CellJob], timeout_s: float,
                out: CellOutcome) -> list[dict[str, Any]]:
    """One fresh process per job (in the framework's interpreter, with its variant's environment), in
    turn; the results of those that succeeded (each with its wall time, ``process_s``). A process that
    fails ends the cell (``out``'s status and reason say why, the earlier results are kept); one that
    finds the cell unsupported makes it so."""
    results: list[dict[str, Any]] = []
    cache = compilation_cache(cell)
    for job in jobs:
        if "compilation_cache" not in out.reused and (mark := compilation_cache_mark(*cache)) is not None:
            out.reused["compilation_cache"] = mark
        o = ctx.run_job(job, timeout_s, cell.threads, python=envs.python_for(cell.framework),
                        extra_env={**(framework_env(cell) or {}), **compilation_cache_env(*cache)} or None)
        out.seconds += o.seconds
        out.processes.append((o.seconds, o.result.get("cost") if o.status == "ok" else None))
        if o.status != "ok":
            out.status, out.reason = failure(o)
            break
        if "unsupported" in o.result:
            out.status, out.reason = "unsupported", o.result["unsupported"]
            break
        results.append({**o.result, "process_s": o.seconds})
    return results


def cell_artifacts(cell: Cell, ctx: Context) -> Path | None:
    """The directory for one cell's kept files (None: the run keeps none, e.g. an API run without a
    store); not created here (:func:`make_cell_artifacts` makes it)."""
    if ctx.artifacts is None:
        return None
    return ctx.artifacts / cell.key.replace("/", "__")


def make_cell_artifacts(cell: Cell, ctx: Context, sub: str = "") -> Path | None:
    """:func:`cell_artifacts` (with ``sub`` inside it) made in ``artifacts/``, whose run folders are
    dlbench's own: a symbolic link found at the run's folder or below is replaced by a real folder,
    never followed (:class:`~dlbench.core.outputs.OutputDir`). None where the run keeps no files;
    raises :class:`~dlbench.core.errors.UsageError` saying why it cannot be made (the caller warns: a
    cell loses its kept files, never its figures)."""
    outdir = cell_artifacts(cell, ctx)
    if outdir is None or ctx.artifacts is None:
        return None
    # from artifacts/ down (a user may link it to a bigger disk), the run's folder and below ours
    run = ctx.artifacts
    return OutputDir(run.parent, own=True).make_dir("/".join(filter(None, (run.name, outdir.name, sub))))


def profile_dir(cell: Cell, ctx: Context, out: CellOutcome) -> Path | None:
    """The folder a profiled cell's trace is kept in (``profile/`` in :func:`make_cell_artifacts`), made;
    None, with the reason among the cell's warnings, where it cannot be (the cell keeps its figures)."""
    try:
        made = make_cell_artifacts(cell, ctx, "profile")
    except UsageError as exc:
        out.warnings.append(f"no profile: {exc}")
        return None
    if made is None:
        out.warnings.append("no profile: the run has no directory to keep a trace in")
    return made


def flops_per_batch(model: str, batch: int, backward: bool = False) -> float | None:
    """FLOPs of one call on ``batch`` samples: the forward, or with ``backward`` the forward and the
    gradients the call computes (:func:`dlbench.models.flops.closure_flops_per_sample`)."""
    try:
        return closure_flops_per_sample(get_model(model), backward) * batch
    except UnknownModelError:  # a stored run of a model this dlbench no longer has
        return None


def analyse_iterations(res: CellResult, samples: list[Sample], peak: float | None, flop_factor: float | None) -> None:
    """Statistics of per-call samples (``warmup``, ``measure``, ``first_call`` phases) and the rates
    derived from them: samples/s, GFLOP/s and its share of the machine's peak."""
    cell = res.cell
    measure = [s for s in samples if s.phase == "measure"]
    res.warmup_ms = [s.value_ns / 1e6 for s in samples if s.phase == "warmup"]
    order = {"warmup": 0, "measure": 1}
    res.series_ms = [(s.repeat, s.phase, s.value_ns / 1e6) for s in
                     sorted((s for s in samples if s.phase in order), key=lambda s: (s.repeat, order[s.phase], s.idx))]
    first = [s.value_ns / 1e6 for s in samples if s.phase == "first_call"]
    res.first_call_ms = float(np.median(first)) if first else None
    if not measure or cell.status != "ok":
        return
    adaptive = cell.metrics.get("adaptive") or {}
    # measured to a target on the median: the figure is the second stage's (dlbench.measure.adaptive)
    targeted = "center" in adaptive and adaptive.get("q", 50.0) == 50.0
    if targeted:
        measure = [s for s in measure if s.repeat >= adaptive["first_counted"]]
    res.samples_ms = [s.value_ns / 1e6 for s in measure]
    res.sample_repeats = [s.repeat for s in measure]
    res.time_ms = summarize(res.samples_ms, groups=res.sample_repeats)
    if targeted:
        res.time_ms.median, res.time_ms.ci_low, res.time_ms.ci_high = (
            adaptive[k] / 1e6 for k in ("center", "low", "high"))
    repeats = sorted({s.repeat for s in measure})
    res.repeat_medians_ms = [float(np.median([s.value_ns / 1e6 for s in measure if s.repeat == r])) for r in repeats]
    seconds = res.time_ms.median / 1e3
    # a scaling step counts every worker's samples; a capped call (H2O's frames) the samples it processed
    batch = int(cell.metrics.get("global_batch") or cell.metrics.get("call_samples") or cell.batch)
    res.samples_per_s = batch / seconds
    flops = flops_per_batch(cell.model, batch, backward=flop_factor is not None and flop_factor > 1)
    if flops is not None and flop_factor is not None:
        res.gflops = flops / seconds / 1e9
        if peak:
            res.pct_peak = 100.0 * res.gflops / peak
            if res.pct_peak > 100.0:  # more than the machine did: the FLOP count or the peak is wrong
                res.rate_warnings.append(f"{res.gflops:,.0f} GFLOP/s is above the measured {cell.precision} peak "
                                         f"({peak:,.0f} GFLOP/s at {cell.threads} thread(s)): the FLOP count "
                                         "overstates the work, or the peak was measured low")
