"""Runs a suite: plan the cells, verify each model once, measure each cell in fresh processes,
store each result the moment it exists.

Order of work: validate all input (nothing is written before that) -> open the store and
create the run -> capture the environment -> measure the machine's peak at each thread count ->
the equivalence gate, one process per (framework, variant, device) -> the cells. Every step
checks what the store already holds, which is how ``--resume`` skips finished work. While it
measures, the process holds the run's lease and a temporary directory of its own (dlbench.storage.lease),
and SIGTERM stops it as Ctrl-C does (dlbench.core.interrupt).
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, closing, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import Any

from dlbench import envs, frameworks
from dlbench.core.cell import DEFAULT_OPTIMIZER
from dlbench.core.errors import UsageError
from dlbench.core.interrupt import Interrupted, signals_interrupt
from dlbench.core.job import PeakJob, VerifyJob
from dlbench.core.precision import DEFAULT as DEFAULT_PRECISION
from dlbench.core.precision import unsupported as precision_unsupported
from dlbench.data import DataError, adapt, list_datasets, load_dataset
from dlbench.frameworks import framework_info, installed_version, ondemand
from dlbench.frameworks.ondemand import BuildEstimate, estimate_builds
from dlbench.launch.subprocess import run_job, thread_env
from dlbench.measure import environment, reuse
from dlbench.measure.cost import PARTS, cell_cost
from dlbench.measure.peak import describe, setters
from dlbench.models import get_model, hf_checkpoint
from dlbench.planning import calibration, resolve
from dlbench.planning.estimate import Estimate, runs_a_process
from dlbench.planning.history import History, load_history
from dlbench.planning.plan import Cell, Suite, expand, suite_from_dict
from dlbench.running.ray import RayLauncher
from dlbench.scenarios import registry
from dlbench.scenarios.base import CellOutcome, Context, JobRunner, Progress
from dlbench.storage import lease
from dlbench.storage.store import DEFAULT_DB, Store


def _quiet(event: str, **_: Any) -> None:
    pass




def scenarios_of(framework: str, scenarios: list[str]) -> list[str]:
    """The suite's scenarios as the framework measures them: a per-batch scenario it stands in for with a
    whole-data-set one (H2O: ``train_step`` -> ``epoch``) is replaced, duplicates dropped, order kept."""
    out: list[str] = []
    for s in scenarios:
        s = framework_info(framework).stands_in.get(s, s)
        if s not in out:
            out.append(s)
    return out


def _default_batch(model: str, scenario: str, data: str, data_dir: str | None = None) -> int:
    return registry.get(scenario).default_batch(get_model(model), data, data_dir)


def plan_cells(suite: Suite) -> tuple[list[str], list[Cell]]:
    """Validate a suite against the registries and expand it (raises UsageError)."""
    suite = resolve.canonical_models(suite)
    scenarios = [registry.get(s) for s in suite.scenarios]
    frameworks = resolve.suite_frameworks(suite)
    resolve.devices(frameworks, suite.devices)
    cells = expand(suite, frameworks, resolve.variants,
                   lambda m, s, d: _default_batch(m, s, d, suite.data_dir), scenarios_of=scenarios_of,
                   cells_of=lambda c: registry.get(c.scenario).cells(c, suite))
    if not cells:
        raise UsageError("the suite selects no cells (check its exclusions)")
    for scenario in scenarios:
        scenario.check(cells, suite)
    check_data(suite, cells)
    return frameworks, cells


def check_data(suite: Suite, cells: list[Cell]) -> None:
    """Every real data set named must load and fit its model, and hold a full batch (checked here,
    before anything is written, so a wrong path or a misfit is a usage error, not a failed run)."""
    for data, model in sorted({(c.data, c.model) for c in cells if c.data != "synthetic"}):
        if data not in list_datasets():
            raise UsageError(f"unknown data set {data!r}; known: {', '.join(list_datasets())}")
        try:
            dataset = adapt(load_dataset(data, suite.data_dir, "train"), get_model(model))
        except DataError as exc:
            raise UsageError(f"data set {data} for {model}: {exc}") from None
        largest = max(c.batch for c in cells if c.model == model and c.data == data)
        if dataset.num_batches(largest) < 1:
            raise UsageError(f"data set {data} has too few samples for batch {largest} of {model}")


# --- the plan: computed once, before anything is written ---------------------------------------------
@dataclass
class RunPlan:
    """A run as planned before anything is written (:func:`plan_new`, :func:`plan_resume`; the API's
    :func:`dlbench.api.plan`): ``dlbench run --dry-run`` prints it and :func:`start` / :func:`resume`
    measure it, so both see the same cells, kept gates and estimate. The estimate, the kept gates and
    the environments to build are worked out when first read (a run through the API reads none)."""

    suite: Suite  # validated; for a resume, the stored one
    frameworks: list[str]  # the suite's, resolved
    cells: list[Cell]  # every cell of the suite
    todo: list[Cell]  # those still to measure (a resume: those not stored yet)
    db: Path
    resume: str | None = None  # the stored run this plan finishes

    @property
    def stored(self) -> int:
        return len(self.cells) - len(self.todo)

    @property
    def measured(self) -> list[str]:
        """The scenarios the run measures: the suite's and those a framework stands in with."""
        return sorted(set(self.suite.scenarios) | {c.scenario for c in self.cells})

    @cached_property
    def kept_gates(self) -> frozenset[tuple[str, ...]]:
        return kept_gates(self.todo, self.suite.optimizer.name)

    @cached_property
    def estimate(self) -> Estimate:
        """How long the cells to measure take (:mod:`dlbench.planning.estimate`), knowing what this
        machine measured before, how its processes start (the kept calibration) and which gates it kept."""
        history = self.history
        history.calibrated = calibration.kept_seconds(self._uncharted())
        return Estimate(self.suite, self.todo, epoch_samples(self.suite, self.todo), history,
                        verified=self.kept_gates)

    @cached_property
    def history(self) -> History:
        """What this machine's earlier runs in the database say (read once: the calibration and the estimate ask)."""
        return load_history(self.db)

    def _uncharted(self) -> list[tuple[str, str]]:
        """The (framework, variant) of the cells to measure whose processes this machine's history knows nothing of."""
        return [(c.framework, c.variant) for c in self.todo
                if c.framework not in self.history.overhead_framework and runs_a_process(c)]

    def calibrate(self, progress: Callable[[str], None] = lambda s: None) -> None:
        """Measure what one process costs here for every framework of the plan that has neither history nor
        a kept calibration (:mod:`dlbench.planning.calibration`: a process each, seconds): ``--dry-run``
        does, so that a machine's first estimate is this machine's. A run does not: it uses what is kept."""
        calibration.calibrate(self._uncharted(), progress)
        self.__dict__.pop("estimate", None)

    @cached_property
    def builds(self) -> list[BuildEstimate]:
        """The environments the run builds first (a pinned release without one)."""
        return estimate_builds([c.framework for c in self.todo])

    @property
    def seconds(self) -> float:
        """The whole estimate: machine peak and gate, the cells, the environments to build."""
        return self.estimate.setup() + self.estimate.remaining(self.todo) + sum(b.seconds or 0 for b in self.builds)

    def left_out(self, name: str) -> str:
        """A line naming the installed frameworks a suite of ``frameworks: installed`` leaves out
        (``installed_except``) and how to include them in suite ``name`` (as given to --suite), and those
        of its ``installed_among`` not installed here; empty when it leaves none out."""
        suite = self.suite
        if suite.frameworks != "installed":
            return ""
        here = resolve.installed()
        out = [f for f in here if f in suite.installed_except]
        missing = [f for f in suite.installed_among if f not in here]
        what = f" ({suite.description.strip()})" if suite.description.strip() else ""
        lines = []
        if out:
            every = ",".join(resolve.suite_frameworks(suite) + out)
            lines.append(f"the {suite.name} suite{what} leaves out installed {', '.join(out)}; to include them, "
                         f"name every framework: dlbench run --suite {name} --framework {every}")
        if missing:
            lines.append(f"the {suite.name} suite compares {', '.join(suite.installed_among)}; not installed here: "
                         f"{', '.join(missing)} (dlbench list frameworks says how to install each)")
        return "\n".join(lines)


def plan_new(suite: Suite, db: str | Path = DEFAULT_DB) -> RunPlan:
    """A new run of ``suite``: validated against the registries and expanded (raises UsageError)."""
    frameworks, cells = plan_cells(suite)
    return RunPlan(suite, frameworks, cells, cells, Path(db))


def plan_resume(run_id: str, db: str | Path = DEFAULT_DB) -> RunPlan:
    """The stored run ``run_id`` as it was stored, its cells not stored yet still to measure. Refused
    (UsageError): a run stored before a bound was added that holds a value the suite model now refuses,
    and a database with damage other than a dead driver's lease (the resume takes that over)."""
    store = Store(db, create=False)
    try:
        run = store.get_run(run_id)
        if damage := [n for n in store.damage if not Store.is_lease_note(n)]:
            raise UsageError(f"run {run_id} cannot be resumed: {damage[0]}")
        suite = suite_from_dict(run["suite"], f"run {run_id}")
        done = store.done_keys(run_id)
    finally:
        store.close()
    frameworks, cells = plan_cells(suite)
    return RunPlan(suite, frameworks, cells, [c for c in cells if c.key not in done], Path(db), run_id)


def epoch_samples(suite: Suite, cells: list[Cell]) -> dict[str, int]:
    """Training samples of each real data set the cells use (what a training epoch costs, for the estimate):
    a token stream's are its windows of the model's sequence length, not its tokens."""
    out = {}
    for c in cells:
        if c.data == "synthetic" or c.data in out:
            continue
        try:
            ds = load_dataset(c.data, suite.data_dir, "train")
        except DataError:
            continue  # plan_cells has checked it; a guess stands in
        out[c.data] = len(ds) // get_model(c.model).input.shape[0] if ds.kind == "stream" else len(ds)
    return out


# --- the run ------------------------------------------------------------------------------------
@dataclass
class RunHandle:
    run_id: str
    db: Path
    cells_total: int


def _verify_groups(store: Store, run_id: str, cells: list[Cell], suite: Suite, progress: Progress,
                   run_job: JobRunner = run_job) -> None:
    done = store.verifications(run_id)
    groups: dict[tuple[str, str, str, str], list[str]] = {}
    for c in cells:
        if c.group not in done:
            models = groups.setdefault((c.framework, c.variant, c.device, c.precision), [])
            if c.model not in models:
                models.append(c.model)
    cache = reuse.GateCache()
    machine = environment.this_machine() if cache.enabled else {}
    prints: dict[tuple[str, str], str | None] = {}  # each (framework, variant)'s fingerprint, computed once
    kept = _kept(cache, machine, [(fw, variant, m, device, precision)
                                  for (fw, variant, device, precision), models in groups.items() for m in models],
                 suite.optimizer.name, prints)
    for (fw, variant, device, precision), models in groups.items():
        for m in list(models):  # a pass kept on this host for the same fingerprint is not re-verified
            verdict = kept.get((fw, variant, m, device, precision))
            if verdict is not None:
                store.save_verification(run_id, fw, variant, m, device, verdict["verdict"], verdict["reason"],
                                        {**verdict["data"], "seconds": 0.0, "cached_from": verdict["run_id"]},
                                        precision)
                models.remove(m)
        if not models:
            continue
        fp = _fingerprint_once(prints, fw, variant, machine) if cache.enabled else None
        at = f" at {precision}" if precision != DEFAULT_PRECISION else ""
        progress("phase", text=f"verify {fw}/{variant}{at}: {len(models)} model(s)")
        job = VerifyJob(threads=None, framework=fw, models=models, variants=[variant], device=device,
                        precision=precision, optimizers=[suite.optimizer.name])
        timeout = max(suite.protocol.timeout_s, 60.0) * len(models)
        o = run_job(job, timeout, None, python=envs.python_for(fw), extra_env=framework_info(fw).variant_env.get(variant))
        if o.status == "ok":
            records = verdict_records(o.result, o.seconds)
            for r, data in records:
                store.save_verification(run_id, fw, variant, r["model"], device, r["verdict"], r["reason"], data,
                                        precision)
            if fp is not None:
                keep_passes(cache, fp, job, records, run_id)
        else:
            for m in models:
                store.save_verification(run_id, fw, variant, m, device, "fail", f"verification process: {o.reason}", {},
                                        precision)


def verdict_records(result: dict[str, Any], seconds: float) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Each model's result of a verification process, with the record kept of it: the result, the
    framework's build facts, and the process's wall time shared by its models (dlbench show --cost)."""
    info = result.get("info", {})
    return [(r, {**r, "framework_info": info, "seconds": seconds / len(result["results"])})
            for r in result["results"]]


def keep_passes(cache: reuse.GateCache, fp: str, job: VerifyJob, records: list[tuple[dict[str, Any], dict[str, Any]]],
                origin: str) -> None:
    """Keep on this host the passes among a verification process's ``records`` (:func:`verdict_records`) of
    ``job`` for fingerprint ``fp``, one per optimiser whose update it checked (a pass that checked SGD and
    AdamW stands for a run of either), in one write; ``origin`` is the run that verified, or ``verify@TIME``
    for ``dlbench verify`` (:func:`kept_from`)."""
    cache.put_all({reuse.gate_key(job.framework, job.variants[0], r["model"], job.device, job.precision, optimizer, fp):
                   {"verdict": r["verdict"], "reason": r["reason"], "data": _for_optimizer(data, optimizer),
                    "run_id": origin}
                   for r, data in records for optimizer in job.optimizers})


def _for_optimizer(data: dict[str, Any], optimizer: str) -> dict[str, Any]:
    """A verdict's record as a gate checking only ``optimizer``'s update would have made it: that update
    check and its worst error (a record without one, forward only or at an inference precision, as it is)."""
    update = data.get("update") or {}
    if optimizer not in update:
        return data
    errors = update[optimizer].get("errors") or []
    return {**data, "update": {optimizer: update[optimizer]}, "update_error": max(errors) if errors else None}


def keep_verified(job: VerifyJob, result: dict[str, Any], seconds: float) -> None:
    """``dlbench verify``'s passes kept on this host as a run keeps its gate's (:mod:`dlbench.measure.reuse`):
    a run after it on the same fingerprint verifies none of them again."""
    cache = reuse.GateCache()
    if not cache.enabled:
        return
    fp = _gate_fingerprint(job.framework, job.variants[0], environment.this_machine())
    if fp is not None:
        keep_passes(cache, fp, job, verdict_records(result, seconds),
                    f"verify@{datetime.now(UTC).isoformat(timespec='seconds')}")


def kept_from(origin: str) -> str:
    """Where a kept pass came from, in words: ``run ID`` or ``dlbench verify at TIME``."""
    kind, _, when = origin.partition("@")
    return f"dlbench verify at {when}" if kind == "verify" and when else f"run {origin}"


def kept_gates(cells: list[Cell], optimizer: str) -> frozenset[tuple[str, ...]]:
    """The gate groups (:attr:`Cell.group`) of ``cells`` whose pass this host kept for the present
    fingerprint: a run of them verifies none of these again (what ``--dry-run``'s estimate must know)."""
    cache = reuse.GateCache()
    if not cache.enabled:
        return frozenset()
    built = {f for f in {c.framework for c in cells} if installed_version(f) is not None}  # not a release to build
    return frozenset(_kept(cache, environment.this_machine(), {c.group for c in cells if c.framework in built},
                           optimizer, {}))


def _kept(cache: reuse.GateCache, machine: dict[str, Any], groups: Iterable[tuple[str, str, str, str, str]],
          optimizer: str, prints: dict[tuple[str, str], str | None]) -> dict[tuple[str, ...], dict[str, Any]]:
    """The kept passes of ``groups`` (framework, variant, model, device, precision), by group; ``prints``
    keeps each (framework, variant)'s fingerprint for the caller."""
    if not cache.enabled:
        return {}
    out = {}
    for fw, variant, model, device, precision in groups:
        fp = _fingerprint_once(prints, fw, variant, machine)
        verdict = None if fp is None else cache.get(reuse.gate_key(fw, variant, model, device, precision, optimizer, fp))
        if verdict is not None:
            out[(fw, variant, model, device, precision)] = verdict
    return out


def _fingerprint_once(prints: dict[tuple[str, str], str | None], framework: str, variant: str,
                      machine: dict[str, Any]) -> str | None:
    if (framework, variant) not in prints:
        prints[(framework, variant)] = _gate_fingerprint(framework, variant, machine)
    return prints[(framework, variant)]


def _gate_fingerprint(framework: str, variant: str, machine: dict[str, Any]) -> str | None:
    """The fingerprint of what ``framework``'s verdicts at ``variant`` depend on (dlbench.measure.reuse),
    with what its interpreter has installed as that interpreter reports it, started as a measuring
    process is (never an environment's record, which an edit or an upgrade in place leaves behind)."""
    info = framework_info(framework)
    module = info.module if info.module.endswith(".py") else None
    python = envs.python_for(framework)
    installed = reuse.installs(python or sys.executable, {**thread_env(None), **envs.worker_env(python)})
    return reuse.fingerprint(framework, variant, python or sys.executable, installed, info.variant_env.get(variant),
                             machine, module)


def _version_envs(store: Store, run_id: str, cells: list[Cell], frameworks: list[str], progress: Progress) -> None:
    """Build the environment of each pinned version the run names that has none (dlbench.envs.versions); the
    cells of one that cannot be installed are ``unsupported`` with pip's reason, through the gate's record."""
    failed = ondemand.ensure_envs(frameworks, lambda text: progress("phase", text=text, keep=True))
    done = store.verifications(run_id)
    for c in cells:
        if c.framework in failed and c.group not in done:
            store.save_verification(run_id, c.framework, c.variant, c.model, c.device, "unsupported",
                                    failed[c.framework], {})
            done[c.group] = {}


def _peak_cache() -> tuple[Path | None, dict]:
    """``$DLBENCH_PEAK_CACHE`` (a JSON file), when set: peaks measured earlier on this host, by thread
    count. Off by default, so every run measures its own peak; the tests share one file, because a peak
    takes about 5 s per thread count and the tests start dozens of runs."""
    path = os.environ.get("DLBENCH_PEAK_CACHE")
    if not path:
        return None, {}
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        data = {}
    # only entries shaped as a peak (engine -> GFLOP/s, each finite and positive) are read; anything else
    # is as good as absent, and that thread count is measured again (a cache never fails a run)
    return Path(path), {k: v for k, v in data.items() if _peak_shaped(v)} if isinstance(data, dict) else {}


def _peak_shaped(entry: Any) -> bool:
    return isinstance(entry, dict) and bool(entry) and all(
        isinstance(k, str) and isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v > 0
        for k, v in entry.items())


def _peaks(store: Store, run_id: str, cells: list[Cell], progress: Progress, run_job: JobRunner = run_job) -> None:
    have = store.peaks(run_id)
    cache_path, cache = _peak_cache()
    for t in sorted({c.threads for c in cells if c.device == "cpu"}):
        if t in have:
            continue
        key = f"{platform.node()}/{t}"
        if key in cache:
            store.save_peak(run_id, t, cache[key])
            continue
        rates, skipped = measure_peaks(t, progress, run_job)
        best = ", ".join(describe(e, rates[e]) for e in setters(rates).values())
        progress("phase", keep=True, text=f"machine peak, {t} thread(s): {best or 'none measured'}" + "".join(
            f"; {engine} skipped: {why}" for engine, why in skipped.items()))
        if rates:
            store.save_peak(run_id, t, rates)
            if cache_path is not None:
                cache[key] = rates
                try:
                    cache_path.write_text(json.dumps(cache))
                except OSError:  # a cache that cannot be written only costs the next run its peak
                    pass


def measure_peaks(threads: int, progress: Progress = _quiet,
                  run_job: JobRunner = run_job) -> tuple[dict[str, float], dict[str, str]]:
    """Every engine's GEMMs at ``threads`` (:func:`dlbench.frameworks.peak_engines`), each in a fresh process of its
    own (its threads set before its import): their rates (``engine[:precision]`` -> GFLOP/s), and the engines
    skipped with why (not installed; the process failed or answered with no peak)."""
    rates: dict[str, float] = {}
    skipped: dict[str, str] = {}
    for engine in frameworks.peak_engines().values():
        why = engine.missing()
        if why is None:
            progress("phase", text=f"machine peak, {threads} thread(s): {engine.name}")
            o = run_job(PeakJob(threads=threads, engine=engine.name), 300.0, threads)
            found = o.result.get("gflops") if o.status == "ok" and o.result else None
            if _peak_shaped(found):
                rates.update(found)
            else:
                why = o.reason if o.status != "ok" else f"its process answered {found!r}, not a peak"
        if why is not None:
            skipped[engine.name] = why
    return rates, skipped


def execute(store: Store, run_id: str, suite: Suite, cells: list[Cell], progress: Progress = _quiet) -> None:
    """Measure every cell of the run that the store does not hold yet."""
    done = store.done_keys(run_id)
    todo = [c for c in cells if c.key not in done]
    progress("start", total=len(cells), done=len(cells) - len(todo))

    # timed cells of a run share exports (ONNX) through a run-scoped directory: see
    # frameworks.onnxruntime.export_cached; measure_compile turns it off for its cold processes
    export_cache = tempfile.TemporaryDirectory(prefix="dlbench-exports-")
    previous = os.environ.get("DLBENCH_EXPORT_CACHE")
    os.environ["DLBENCH_EXPORT_CACHE"] = export_cache.name
    try:
        _execute(store, run_id, suite, todo, progress)
    finally:
        if previous is None:
            os.environ.pop("DLBENCH_EXPORT_CACHE", None)
        else:
            os.environ["DLBENCH_EXPORT_CACHE"] = previous
        export_cache.cleanup()


def _execute(store: Store, run_id: str, suite: Suite, todo: list[Cell], progress: Progress) -> None:
    with ExitStack() as stack:
        ray = None
        if suite.distributed.launcher == "ray":  # every job of the run becomes a task on the cluster
            ray = stack.enter_context(RayLauncher(suite.distributed.ray_address, suite.distributed.mixed_nodes))
        ctx = Context(suite, ray.run_job if ray is not None else run_job, ray=ray,
                      artifacts=store.artifacts_dir(run_id), stored={c.key: c.metrics for c in store.cells(run_id)})
        for name in dict.fromkeys(c.scenario for c in todo):  # run-scoped resources, in scenario order
            cells = [c for c in todo if c.scenario == name]
            ctx.sessions[name] = stack.enter_context(registry.get(name).session(suite, cells, ray, progress))
        _peaks(store, run_id, todo, progress, ctx.run_job)
        _verify_groups(store, run_id, todo, suite, progress, ctx.run_job)
        verdicts = store.verifications(run_id)

        def verdict(cell: Cell) -> dict[str, Any]:
            return verdicts.get(cell.group, {"verdict": "fail", "reason": "not verified"})

        # cells in turn here (job by job on a Ray cluster), or whole cells fanned out over its nodes
        measured = (ray.measure_cells(todo, suite, lambda c: gate(c, verdict(c)), progress, ctx.stored)
                    if ray is not None and ray.fans_out else _in_turn(todo, ctx, verdict, progress))
        for cell, outcome in stack.enter_context(closing(measured)):  # closed (tasks cancelled) before Ray is
            metrics = stored_metrics(outcome, verdict(cell))
            if hf_checkpoint.is_hf(cell.model):  # the folder's own name and its files' digest, with every cell
                metrics["checkpoint"] = hf_checkpoint.source(cell.model)
            store.save_cell(run_id, {**cell.to_dict(), "key": cell.key}, outcome.status, outcome.reason,
                            outcome.seconds, outcome.warnings, metrics, outcome.samples)
            ctx.stored[cell.key] = metrics
            progress("cell_done", cell=cell, status=outcome.status, reason=outcome.reason, samples=outcome.samples,
                     metrics=metrics)


def _in_turn(todo: list[Cell], ctx: Context, verdict: Callable[[Cell], dict[str, Any]],
             progress: Progress) -> Iterator[tuple[Cell, CellOutcome]]:
    for cell in todo:
        progress("cell_start", cell=cell)
        yield cell, measure_cell(cell, ctx, verdict(cell))


def stored_metrics(outcome: CellOutcome, verdict: dict[str, Any]) -> dict[str, Any]:
    """The cell's metrics with where its wall time went (dlbench.measure.cost), what it reused
    (dlbench.measure.reuse) and its precision's quality on real text (dlbench.gate.quality), for the store."""
    metrics = {**outcome.metrics, "cost": cell_cost(outcome.processes) if outcome.processes
               else {**dict.fromkeys(PARTS, 0.0), "rest_s": outcome.seconds, "processes": 0}}
    reused = dict(outcome.reused)
    if verdict.get("cached_from"):
        reused["gate"] = f"the gate's pass of {kept_from(verdict['cached_from'])} (same environment fingerprint)"
    if reused:
        metrics["reused"] = reused
    if verdict.get("quality"):  # the gate's quality figures (dlbench.gate.quality), beside the cell's time
        metrics["quality"] = verdict["quality"]
    return metrics


def gate(cell: Cell, verdict: dict[str, Any]) -> CellOutcome | None:
    """What its framework cannot run or the gate refused, as the cell's stored outcome (None: measure it)."""
    scenario = registry.get(cell.scenario)
    why = scenario.unsupported(framework_info(cell.framework)) or precision_unsupported(
        cell.precision, scenario.trains, cell.device) or (
        scenario.float32_only if cell.precision != DEFAULT_PRECISION else None) or (
        scenario.sgd_only if cell.optimizer != DEFAULT_OPTIMIZER else None)
    if why is not None:
        return CellOutcome("unsupported", why)
    if verdict["verdict"] == "fail":
        return CellOutcome("not_equivalent", f"failed the equivalence gate: {verdict['reason']}")
    if verdict["verdict"] == "unsupported":
        return CellOutcome("unsupported", verdict["reason"])
    return None


def measure_cell(cell: Cell, ctx: Context, verdict: dict[str, Any]) -> CellOutcome:
    """One cell: what its framework cannot run or the gate refused is stored with the reason; the
    rest is its scenario's measurement."""
    outcome = gate(cell, verdict)
    return outcome if outcome is not None else registry.get(cell.scenario).measure(cell, ctx)


def start(plan: RunPlan, argv: list[str] | None = None, progress: Progress = _quiet) -> RunHandle:
    """Create the run ``plan`` describes (:func:`plan_new`) and measure it."""
    resolved = resolve.canonical_models(plan.suite).model_copy(update={"frameworks": plan.frameworks})
    store = Store(plan.db)
    try:
        run_id = store.create_run(plan.suite.name, resolved.model_dump(), argv)
        with _run(store, run_id, progress) as progress:
            _version_envs(store, run_id, plan.cells, plan.frameworks, progress)
            progress("phase", text="environment")
            store.save_environment(run_id, environment.capture({f: installed_version(f) for f in plan.frameworks}))
            execute(store, run_id, resolved, plan.cells, progress)
    finally:
        store.close()
    return RunHandle(run_id, plan.db, len(plan.cells))


def resume(plan: RunPlan, progress: Progress = _quiet) -> RunHandle:
    """Finish the stored run ``plan`` describes (:func:`plan_resume`); refused (UsageError) while the
    driver measuring it lives, and on a machine other than the one its stored cells were measured on
    (their times would not compare)."""
    run_id = plan.resume
    if run_id is None:
        raise ValueError("a plan of a new run is started (runner.start), not resumed")
    store = Store(plan.db, create=False)
    try:
        store.get_run(run_id)
        stored = store.environment(run_id)
        if stored:
            changed = environment.machine_differences(environment.machine(stored), environment.this_machine())
            if changed:
                raise UsageError(f"run {run_id} was measured on another machine ({'; '.join(changed)}): cells "
                                 "measured here would not compare with its stored ones; start a new run")
        with _run(store, run_id, progress) as progress:
            _version_envs(store, run_id, plan.cells, plan.frameworks, progress)
            if not store.environment(run_id):
                store.save_environment(run_id, environment.capture({f: installed_version(f)
                                                                    for f in plan.frameworks}))
            execute(store, run_id, plan.suite, plan.cells, progress)
    finally:
        store.close()
    return RunHandle(run_id, plan.db, len(plan.cells))


@contextmanager
def _run(store: Store, run_id: str, progress: Progress) -> Iterator[Progress]:
    """This process measures ``run_id`` while inside: SIGTERM and SIGINT raise Interrupted (told the
    run's id, for the resume command), it holds the run's lease (refused if a live driver does) and
    a temporary directory of its own, and the run ends marked complete or interrupted. Yields the
    progress callback, renewing the lease's heartbeat as each cell finishes."""
    with signals_interrupt(), lease.hold(store, run_id) as beat, lease.scratch():
        def beating(event: str, **kw: Any) -> None:
            if event == "cell_done":
                beat()
            progress(event, **kw)

        try:
            yield beating
        except BaseException as exc:
            store.finish_run(run_id, "interrupted")
            if isinstance(exc, Interrupted):
                exc.run_id, exc.db = run_id, store.path
            raise
        store.finish_run(run_id, "complete")
