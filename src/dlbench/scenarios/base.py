"""The contract every scenario fulfils, and what a scenario's two sides share.

A scenario is one kind of measurement (``forward``, ``compile``, ``convergence``, ``scaling``...).
Everything dlbench knows about it lives in one module that subclasses :class:`Scenario` and says,
in one place:

* **cells**: how a cell the suite names expands (``scaling``: one per worker count and exchange),
  its default batch, and what a suite using it must provide (``convergence``: a real data set);
* **support**: which backend closure a framework must have to run it (``FrameworkInfo.scenarios``);
* **the parent's side** (:meth:`Scenario.measure`): which jobs, in which processes, and how their
  results become a :class:`CellOutcome` (status, raw samples, metrics) for the store;
* **the measuring process's side** (:meth:`Scenario.work`): what runs inside a fresh worker
  interpreter for one job;
* **results** (:meth:`Scenario.analyse`, :meth:`Scenario.text`): how raw samples become statistics
  and the text of its column in the summary.

The runner, the worker and :mod:`dlbench.results` look scenarios up in
:mod:`dlbench.scenarios.registry` and hold no scenario names; a plug-in scenario (``SCENARIOS`` in a
module named by ``DLBENCH_PLUGINS``) is as good as a built-in one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from dlbench import envs
from dlbench.cell import Cell
from dlbench.frameworks import FrameworkInfo, framework_info
from dlbench.launch.subprocess import JobOutcome
from dlbench.measure.stats import summarize
from dlbench.models import UnknownModelError, get_model
from dlbench.models.spec import ModelSpec
from dlbench.store import Sample

if TYPE_CHECKING:  # annotations only: a measuring process in a framework's own environment has no
    # pydantic for the suite model
    from dlbench.cell_result import CellResult
    from dlbench.suite import Suite

Progress = Callable[..., None]


class JobRunner(Protocol):
    """:func:`dlbench.launch.subprocess.run_job`, or the same contract on a Ray node."""

    def __call__(self, job: dict[str, Any], timeout_s: float, threads: int | None = None, python: str | None = None,
                 extra_env: dict[str, str] | None = None) -> JobOutcome: ...


@dataclass
class CellOutcome:
    """What measuring one cell produced, as the store keeps it."""

    status: str  # ok, failed, timeout, unsupported, not_equivalent
    reason: str = ""
    samples: list[Sample] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class Context:
    """The parent's side of a run, as a scenario's :meth:`Scenario.measure` sees it."""

    suite: Suite
    run_job: JobRunner
    #: run-scoped resources opened by :meth:`Scenario.session`, by scenario name
    sessions: dict[str, Any] = field(default_factory=dict)
    #: the Ray launcher of ``--launcher ray`` (None: local processes)
    ray: Any = None
    #: the run's directory for files kept with it (:meth:`dlbench.store.Store.artifacts_dir`); a
    #: cell's files go under :func:`cell_artifacts`
    artifacts: Path | None = None


class Scenario(ABC):
    """One kind of measurement. Subclasses set the class attributes and implement :meth:`measure`."""

    name: str = ""
    #: one line for ``--help`` and the docs
    description: str = ""
    #: the backend closure a framework must declare (``FrameworkInfo.scenarios``) to run this scenario
    #: (``convergence`` and ``scaling`` train: ``train_step``); None: see :meth:`unsupported`
    requires: str | None = None
    #: FLOPs of one call as a multiple of the forward pass (backward ~ 2x forward, the usual convention;
    #: an optimiser's element-wise work is not counted); None: no GFLOP/s
    flop_factor: float | None = None
    #: each stored ``measure`` sample is one call's time (so medians, CIs and ``compare`` apply)
    per_iteration: bool = True
    #: one call processes a whole data set of ``batch`` samples: shown as samples/s, never ms per batch
    whole_dataset: bool = False
    #: the summary shows cells of this scenario in its per-model table (scaling has its own table)
    in_summary: bool = True
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

    # --- cells ---------------------------------------------------------------------------------
    def cells(self, cell: Cell, suite: Suite) -> list[Cell]:
        """The cells one point of the suite's cross product becomes (default: itself)."""
        return [cell]

    def default_batch(self, spec: ModelSpec, data: str, data_dir: str | None) -> int:
        return spec.default_batch

    def check(self, cells: list[Cell], suite: Suite) -> None:
        """Raise :class:`~dlbench.errors.UsageError` for what the suite lacks (nothing is stored yet)."""
        return None

    def unsupported(self, info: FrameworkInfo) -> str | None:
        """Why the framework cannot run this scenario at all (None: it can)."""
        if self.requires is not None and self.requires not in info.scenarios:
            return (f"{info.name} supports only the {', '.join(info.scenarios)} scenario(s), not {self.name}")
        return None

    # --- the parent's side -------------------------------------------------------------------------
    def session(self, suite: Suite, cells: list[Cell], ray: Any, progress: Progress) -> AbstractContextManager[Any]:
        """Run-scoped resources the scenario's cells share (``scaling``: network namespaces)."""
        return nullcontext()

    @abstractmethod
    def measure(self, cell: Cell, ctx: Context) -> CellOutcome:
        """Measure one verified cell: start its processes, collect samples and metrics."""

    def job(self, cell: Cell, suite: Suite) -> dict[str, Any]:
        """The job a measuring process gets for this cell (JSON-serialisable)."""
        return {"kind": "scenario", **cell.to_dict(), "seed": suite.seed, "data_dir": suite.data_dir,
                "convergence": suite.convergence.model_dump(),
                "optimizer_settings": suite.optimizer.model_dump(),
                "protocol": suite.protocol.timer_fields()}

    def estimate(self, cell: Cell, suite: Suite, step_s: float, start_s: float, epoch_samples: int) -> float:
        """A rough guess at the cell's wall time before anything is measured (``dlbench run --dry-run``
        and the progress's time left): ``repeats`` processes, each a start-up of ``start_s``, the
        warm-up and the sampling of calls of ``step_s``."""
        p = suite.protocol
        warmup = min(p.warmup * step_s, p.max_time_s / 4)
        sampling = min(max(p.min_iters * step_s, p.min_time_s), p.max_time_s)
        return p.repeats * (start_s + warmup + sampling)

    # --- the measuring process's side -----------------------------------------------------------
    def work(self, job: dict[str, Any]) -> dict[str, Any]:
        """What a fresh worker interpreter does for one job of this scenario."""
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
            return f"{n / t.median:,.0f} [{n / t.ci_high:,.0f}, {n / t.ci_low:,.0f}]"
        return f"{t.median:.3g} [{t.ci_low:.3g}, {t.ci_high:.3g}]"

    @property
    def column(self) -> str:
        """Title of the scenario's column in the summary."""
        if self.whole_dataset:
            return f"{self.name} samples/s [95% CI] (whole data set)"
        return f"{self.name} ms [95% CI]"


# --- shared by the scenarios ---------------------------------------------------------------------
def framework_env(cell: Cell) -> dict[str, str] | None:
    """Environment a variant needs before its framework is imported (Keras' back end)."""
    return framework_info(cell.framework).variant_env.get(cell.variant)


def failure(outcome: JobOutcome) -> tuple[str, str]:
    """A job that went wrong as a cell's status and reason (a timeout stays a timeout)."""
    return ("timeout" if outcome.status == "timeout" else "failed"), outcome.reason


def run_in_turn(cell: Cell, ctx: Context, jobs: Iterable[dict[str, Any]], timeout_s: float,
                out: CellOutcome) -> list[dict[str, Any]]:
    """One fresh process per job (in the framework's interpreter, with its variant's environment), in
    turn; the results of those that succeeded. A process that fails ends the cell (``out``'s status and
    reason say why, the earlier results are kept); one that finds the cell unsupported makes it so."""
    results: list[dict[str, Any]] = []
    for job in jobs:
        o = ctx.run_job(job, timeout_s, cell.threads, python=envs.python_for(cell.framework),
                        extra_env=framework_env(cell))
        out.seconds += o.seconds
        if o.status != "ok":
            out.status, out.reason = failure(o)
            break
        if "unsupported" in o.result:
            out.status, out.reason = "unsupported", o.result["unsupported"]
            break
        results.append(o.result)
    return results


def cell_artifacts(cell: Cell, ctx: Context) -> Path | None:
    """The directory for one cell's kept files (None: the run keeps none, e.g. an API run without a
    store); not created here."""
    if ctx.artifacts is None:
        return None
    return ctx.artifacts / cell.key.replace("/", "__")


def flops_per_batch(model: str, batch: int) -> float | None:
    try:
        return get_model(model).flops_per_sample * batch
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
    res.samples_ms = [s.value_ns / 1e6 for s in measure]
    res.sample_repeats = [s.repeat for s in measure]
    res.time_ms = summarize(res.samples_ms, groups=res.sample_repeats)
    repeats = sorted({s.repeat for s in measure})
    res.repeat_medians_ms = [float(np.median([s.value_ns / 1e6 for s in measure if s.repeat == r])) for r in repeats]
    seconds = res.time_ms.median / 1e3
    # a scaling step counts every worker's samples; a capped call (H2O's frames) the samples it processed
    batch = int(cell.metrics.get("global_batch") or cell.metrics.get("call_samples") or cell.batch)
    res.samples_per_s = batch / seconds
    flops = flops_per_batch(cell.model, batch)
    if flops is not None and flop_factor is not None:
        res.gflops = flops * flop_factor / seconds / 1e9
        if peak:
            res.pct_peak = 100.0 * res.gflops / peak
