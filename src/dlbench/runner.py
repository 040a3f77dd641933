"""Runs a suite: plan the cells, verify each model once, measure each cell in fresh processes,
store each result the moment it exists.

Order of work: validate all input (nothing is written before that) -> open the store and
create the run -> capture the environment -> measure the machine's peak at each thread count ->
the equivalence gate, one process per (framework, variant, device) -> the cells. Every step
checks what the store already holds, which is how ``--resume`` skips finished work.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dlbench import envs, resolve
from dlbench.errors import UsageError
from dlbench.frameworks import FRAMEWORKS, installed_version
from dlbench.launch.subprocess import run_job
from dlbench.measure import environment
from dlbench.measure.stats import summarize
from dlbench.models import get_model
from dlbench.plan import Cell, Suite, expand, load_suite, suite_from_dict
from dlbench.scenarios import TIMED
from dlbench.store import DEFAULT_DB, Sample, Store

Progress = Callable[..., None]


def _quiet(event: str, **_: Any) -> None:
    pass


@dataclass
class CellOutcome:
    status: str
    reason: str = ""
    samples: list[Sample] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0


def scenarios_of(framework: str, scenarios: list[str]) -> list[str]:
    """The suite's scenarios as the framework measures them: a per-batch scenario it stands in for with a
    whole-data-set one (H2O: ``train_step`` -> ``epoch``) is replaced, duplicates dropped, order kept."""
    out: list[str] = []
    for s in scenarios:
        s = FRAMEWORKS[framework].stands_in.get(s, s)
        if s not in out:
            out.append(s)
    return out


def _default_batch(model: str, scenario: str, data: str, data_dir: str | None = None) -> int:
    """The model's default batch; for convergence on a real data set, at least ten steps an epoch."""
    spec = get_model(model)
    if scenario == "convergence" and data != "synthetic":
        from dlbench.data import DataError, load_dataset
        from dlbench.scenarios.convergence import default_batch

        try:
            return default_batch(spec, len(load_dataset(data, data_dir, "train")))
        except DataError:
            return spec.default_batch  # check_data reports the problem
    return spec.default_batch


def plan_cells(suite: Suite) -> tuple[list[str], list[Cell]]:
    """Validate a suite against the registries and expand it (raises UsageError)."""
    resolve.models(suite.models)
    frameworks = resolve.suite_frameworks(suite)
    resolve.devices(frameworks, suite.devices)
    resolve.cluster_tools(suite)
    cells = expand(suite, frameworks, resolve.variants,
                   lambda m, s, d: _default_batch(m, s, d, suite.data_dir), scenarios_of=scenarios_of)
    if not cells:
        raise UsageError("the suite selects no cells (check its exclusions)")
    synthetic = sorted({c.model for c in cells if c.scenario == "convergence" and c.data == "synthetic"})
    if synthetic:
        raise UsageError(f"convergence needs a real data set for {', '.join(synthetic)} (--data digits, or "
                         "--data mnist|cifar10|imdb|ptb with --data-dir)")
    check_data(suite, cells)
    return frameworks, cells


def check_data(suite: Suite, cells: list[Cell]) -> None:
    """Every real data set named must load and fit its model, and hold a full batch (checked here,
    before anything is written, so a wrong path or a misfit is a usage error, not a failed run)."""
    from dlbench.data import DataError, adapt, list_datasets, load_dataset

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


# --- one cell --------------------------------------------------------------------------------
def _framework_env(cell: Cell) -> dict[str, str] | None:
    return FRAMEWORKS[cell.framework].variant_env.get(cell.variant)


def _job(cell: Cell, kind: str, suite: Suite) -> dict[str, Any]:
    return {"kind": kind, **cell.to_dict(), "seed": suite.seed, "data_dir": suite.data_dir,
            "convergence": suite.convergence.model_dump(), "protocol": {
        k: v for k, v in suite.protocol.model_dump().items() if k not in ("timeout_s",)}}


def _failure(outcome) -> tuple[str, str]:
    if outcome.status == "timeout":
        return "timeout", outcome.reason
    return "failed", outcome.reason


def measure_timed(cell: Cell, suite: Suite, run_job=run_job) -> CellOutcome:
    """R fresh processes, each timing the scenario under the protocol."""
    out = CellOutcome("ok")
    per_repeat: list[dict] = []
    for r in range(suite.protocol.repeats):
        o = run_job(_job(cell, "cell", suite), suite.protocol.timeout_s, cell.threads,
                    python=envs.python_for(cell.framework), extra_env=_framework_env(cell))
        out.seconds += o.seconds
        if o.status != "ok":
            out.status, out.reason = _failure(o)
            break
        if "unsupported" in o.result:
            return CellOutcome("unsupported", o.result["unsupported"], seconds=out.seconds)
        t = o.result["timing"]
        out.samples += [Sample(r, i, "warmup", v) for i, v in enumerate(t["warmup_ns"])]
        out.samples += [Sample(r, i, "measure", v, t["loop_k"]) for i, v in enumerate(t["samples_ns"])]
        if t["first_call_ns"] is not None:
            out.samples.append(Sample(r, 0, "first_call", t["first_call_ns"]))
        if t.get("warmup_truncated"):
            out.warnings.append(f"repeat {r}: warm-up stopped at max_time_s/4 after {len(t['warmup_ns'])} calls")
        if t["truncated"]:
            out.warnings.append(f"repeat {r}: stopped at max_time_s with {len(t['samples_ns'])} samples")
        per_repeat.append(o.result)
    measured = [s for s in out.samples if s.phase == "measure"]
    if measured:
        out.warnings = summarize([s.value_ns for s in measured], suite.protocol.min_iters,
                                 groups=[s.repeat for s in measured]).warnings + out.warnings
    if per_repeat:
        loop_k = max(p["timing"]["loop_k"] for p in per_repeat)
        out.metrics = {
            "peak_rss_bytes": max(p["peak_rss_bytes"] for p in per_repeat),
            "rss_growth_bytes": max(p["peak_rss_bytes"] - p["rss_before_build_bytes"] for p in per_repeat),
            "build_ms": float(np.median([p["build_ns"] / 1e6 for p in per_repeat])),
            "device_memory": per_repeat[0]["device_memory"],
            "threads_readback": per_repeat[0]["threads_readback"],
            "cores": per_repeat[0].get("cores"),
            "python": per_repeat[0]["python"], "versions": per_repeat[0]["versions"],
            "loop_k": loop_k, "repeats_done": len(per_repeat),
        }
        reported = [p["framework_metrics"] for p in per_repeat if p.get("framework_metrics")]
        if reported:
            out.metrics["framework_metrics"] = reported
        call_samples = per_repeat[0].get("call_samples")
        if call_samples is not None and call_samples != cell.batch:
            out.metrics["call_samples"] = call_samples
            out.warnings.append(f"each call processed {call_samples} of the batch's {cell.batch} samples "
                                f"({cell.framework} caps its frames); samples/s counts those")
        if loop_k > 1:
            out.warnings.append(f"one iteration is under 1 ms: each sample times a loop of {loop_k}")
    return out


def measure_compile(cell: Cell, suite: Suite, run_job=run_job) -> CellOutcome:
    """Per repeat and per closure, a fresh cache directory: a cold process, then a warm one reusing it.

    Each closure gets processes of its own: in one process a later closure reused what an earlier one
    compiled (torch.compile's train_step reuses the gradient's compiled loss, so its "first call" was
    a residual 0.4 s against XLA's whole 6 s), and only the first paid the JIT's one-time start-up.
    The time to a first training step in a fresh process is what a user waits for. Compile work done
    when the model is built (ONNX Runtime's session) is taken from the first closure's processes.
    """
    from dlbench.scenarios import TIMED

    out = CellOutcome("ok")
    per_repeat: list[dict] = []
    unsupported: dict[str, str] = {}
    for r in range(suite.protocol.repeats):
        build_taken = False
        for closure in TIMED:
            if closure in unsupported:
                continue
            with tempfile.TemporaryDirectory(prefix="dlbench-cache-") as cache:
                env = {**(_framework_env(cell) or {}), "DLBENCH_CACHE_DIR": cache, "TORCHINDUCTOR_CACHE_DIR": cache,
                       "DLBENCH_EXPORT_CACHE": ""}
                job = {**_job(cell, "first_calls", suite), "closures": [closure], "build_compile": not build_taken}
                for phase in ("cold", "warm"):
                    o = run_job(job, suite.protocol.timeout_s, cell.threads, python=envs.python_for(cell.framework),
                                extra_env=env)
                    out.seconds += o.seconds
                    if o.status != "ok":
                        out.status, out.reason = _failure(o)
                        return out
                    for name, ns in o.result["first_call_ns"].items():
                        out.samples.append(Sample(r, 0, f"compile_{phase}:{name}", ns))
                    per_repeat.append(o.result)
                    unsupported.update(o.result["unsupported"])
                    if not o.result["first_call_ns"]:  # this closure cannot run here: no warm process either
                        break
                build_taken = True
    if not any(s.phase.startswith("compile") for s in out.samples):
        return CellOutcome("unsupported", "; ".join(unsupported.values()) or "no closure to compile",
                           seconds=out.seconds)
    out.metrics = {"unsupported": unsupported, "threads_readback": per_repeat[0]["threads_readback"],
                   "python": per_repeat[0]["python"], "versions": per_repeat[0]["versions"],
                   "build_ms": float(np.median([p["build_ns"] / 1e6 for p in per_repeat])),
                   "processes": "one per closure and cache state (cold, then warm), a fresh cache per closure"}
    return out


def measure_convergence(cell: Cell, suite: Suite, run_job=run_job) -> CellOutcome:
    """R fresh processes, repeat r training from seed ``suite.seed + r`` (weights and batch order)."""
    out = CellOutcome("ok")
    repeats = []
    for r in range(suite.protocol.repeats):
        job = {**_job(cell, "convergence", suite), "seed": suite.seed + r}
        timeout = suite.protocol.timeout_s * suite.convergence.epochs
        o = run_job(job, timeout, cell.threads, python=envs.python_for(cell.framework),
                    extra_env=_framework_env(cell))
        out.seconds += o.seconds
        if o.status != "ok":
            out.status, out.reason = _failure(o)
            break
        if "unsupported" in o.result:
            return CellOutcome("unsupported", o.result["unsupported"], seconds=out.seconds)
        repeats.append(o.result["curves"])
        out.samples += [Sample(r, e["epoch"] - 1, "epoch_train", e["train_s"] * 1e9) for e in o.result["curves"]["epochs"]]
    out.metrics = {"convergence": repeats, "target_accuracy": suite.convergence.target_accuracy}
    return out


# --- the run ------------------------------------------------------------------------------------
@dataclass
class RunHandle:
    run_id: str
    db: Path
    cells_total: int


def _verify_groups(store: Store, run_id: str, cells: list[Cell], suite: Suite, progress: Progress,
                   run_job=run_job) -> None:
    done = store.verifications(run_id)
    groups: dict[tuple[str, str, str], list[str]] = {}
    for c in cells:
        if (c.framework, c.variant, c.model, c.device) not in done:
            models = groups.setdefault((c.framework, c.variant, c.device), [])
            if c.model not in models:
                models.append(c.model)
    for (fw, variant, device), models in groups.items():
        progress("phase", text=f"verify {fw}/{variant}: {len(models)} model(s)")
        job = {"kind": "verify", "framework": fw, "models": models, "variants": [variant], "device": device,
               "threads": None}
        timeout = max(suite.protocol.timeout_s, 60.0) * len(models)
        o = run_job(job, timeout, None, python=envs.python_for(fw), extra_env=FRAMEWORKS[fw].variant_env.get(variant))
        if o.status == "ok":
            info = o.result.get("info", {})
            for r in o.result["results"]:
                store.save_verification(run_id, fw, variant, r["model"], device, r["verdict"], r["reason"],
                                        {**r, "framework_info": info})
        else:
            for m in models:
                store.save_verification(run_id, fw, variant, m, device, "fail", f"verification process: {o.reason}", {})


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
    return Path(path), data if isinstance(data, dict) else {}


def _peaks(store: Store, run_id: str, cells: list[Cell], progress: Progress, run_job=run_job) -> None:
    have = store.peaks(run_id)
    cache_path, cache = _peak_cache()
    for t in sorted({c.threads for c in cells if c.device == "cpu"}):
        if t in have:
            continue
        key = f"{platform.node()}/{t}"
        if key in cache:
            store.save_peak(run_id, t, cache[key])
            continue
        progress("phase", text=f"machine peak, {t} thread(s)")
        o = run_job({"kind": "peak", "threads": t}, 300.0, t)
        if o.status == "ok":
            store.save_peak(run_id, t, o.result["gflops"])
            if cache_path is not None:
                cache[key] = o.result["gflops"]
                cache_path.write_text(json.dumps(cache))


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
    from dlbench.distributed.scaling import Session  # namespaces / Ray for the scaling scenario, when asked

    with Session(suite, todo, progress) as session:
        jobs = session.job_runner()
        _peaks(store, run_id, todo, progress, jobs)
        _verify_groups(store, run_id, todo, suite, progress, jobs)
        verdicts = store.verifications(run_id)
        for cell in todo:
            progress("cell_start", cell=cell)
            v = verdicts.get(cell.group, {"verdict": "fail", "reason": "not verified"})
            supported = FRAMEWORKS[cell.framework].scenarios
            needs = {"convergence": "train_step", "scaling": "train_step"}.get(cell.scenario, cell.scenario)
            if needs != "compile" and needs not in supported:
                outcome = CellOutcome("unsupported", f"{cell.framework} supports only the {', '.join(supported)} "
                                      f"scenario(s), not {cell.scenario}")
            elif cell.scenario == "compile" and not set(supported) & set(TIMED):
                outcome = CellOutcome("unsupported", f"{cell.framework} has no per-batch closure whose first call "
                                      f"the compile scenario could time (it measures {', '.join(supported)})")
            elif v["verdict"] == "fail":
                outcome = CellOutcome("not_equivalent", f"failed the equivalence gate: {v['reason']}")
            elif v["verdict"] == "unsupported":
                outcome = CellOutcome("unsupported", v["reason"])
            elif cell.scenario == "scaling":
                outcome = session.measure(cell)
            elif cell.scenario == "compile":
                outcome = measure_compile(cell, suite, jobs)
            elif cell.scenario == "convergence":
                outcome = measure_convergence(cell, suite, jobs)
            else:
                outcome = measure_timed(cell, suite, jobs)
            store.save_cell(run_id, {**cell.to_dict(), "key": cell.key}, outcome.status, outcome.reason,
                            outcome.seconds, outcome.warnings, outcome.metrics, outcome.samples)
            progress("cell_done", cell=cell, status=outcome.status, reason=outcome.reason)


def start(suite: Suite, db: str | Path = DEFAULT_DB, argv: list[str] | None = None,
          progress: Progress = _quiet) -> RunHandle:
    """Validate, create the run, and measure it."""
    frameworks, cells = plan_cells(suite)
    resolved = suite.model_copy(update={"frameworks": frameworks})
    store = Store(db)
    try:
        run_id = store.create_run(suite.name, resolved.model_dump(), argv)
        progress("phase", text="environment")
        store.save_environment(run_id, environment.capture({f: installed_version(f) for f in frameworks}))
        _run(store, run_id, resolved, cells, progress)
    finally:
        store.close()
    return RunHandle(run_id, Path(db), len(cells))


def resume(run_id: str, db: str | Path = DEFAULT_DB, progress: Progress = _quiet) -> RunHandle:
    store = Store(db, create=False)
    try:
        run = store.get_run(run_id)
        suite = suite_from_dict(run["suite"], f"run {run_id}")
        frameworks, cells = plan_cells(suite)
        if not store.environment(run_id):
            store.save_environment(run_id, environment.capture({f: installed_version(f) for f in frameworks}))
        _run(store, run_id, suite, cells, progress)
    finally:
        store.close()
    return RunHandle(run_id, Path(db), len(cells))


def _run(store: Store, run_id: str, suite: Suite, cells: list[Cell], progress: Progress) -> None:
    try:
        execute(store, run_id, suite, cells, progress)
    except BaseException:
        store.finish_run(run_id, "interrupted")
        raise
    store.finish_run(run_id, "complete")


def build_suite(suite: str | Suite | None = None, *, models: list[str] | None = None,
                frameworks: list[str] | None = None, variants: list[str] | None = None,
                scenarios: list[str] | None = None, batches: list[int | str] | None = None,
                threads: list[int | str] | None = None, devices: list[str] | None = None,
                protocol: dict | None = None, seed: int | None = None, data: str | None = None,
                data_dir: str | None = None, convergence: dict | None = None,
                distributed: dict | None = None) -> Suite:
    """A suite from a name, a file or a built :class:`Suite`, and flag overrides (flags alone build one
    on the spot). None leaves an axis as the suite has it; an empty list is refused."""
    if models is not None:
        resolve.models(models)
    if frameworks is not None:
        resolve.frameworks(frameworks)
    resolve.not_empty(scenarios, "scenarios")
    resolve.not_empty(devices, "devices")
    if batches is not None:
        resolve.batches(batches)
    if threads is not None:
        resolve.threads(threads)
    flags_given = any(x is not None for x in (models, frameworks, scenarios, batches, threads))
    base: dict[str, Any]
    if isinstance(suite, Suite):  # built by a caller (e.g. dlbench reproduce)
        base = suite.model_dump()
    elif suite is None and flags_given:
        base = {"name": "custom", "models": models or ["lenet"]}
    else:
        base = load_suite(suite or "quick").model_dump()
    if models is not None:
        base["models"] = models
        if isinstance(base.get("batch_sizes"), dict):
            base["batch_sizes"] = ["default"]
    if frameworks is not None:
        base["frameworks"] = frameworks
    if scenarios is not None:
        base["scenarios"] = scenarios
    if batches is not None:
        base["batch_sizes"] = batches
    if threads is not None:
        base["threads"] = threads
    elif suite is None and flags_given and base.get("scenarios") == ["convergence"]:
        # accuracy curves do not depend on the thread count: measure training to accuracy once, on
        # every core, unless --threads asks for more (1 and all cores doubled the run's time)
        base["threads"] = ["all"]
    if devices is not None:
        base["devices"] = devices
    if protocol:
        base["protocol"] = {**base.get("protocol", {}), **protocol}
    if seed is not None:
        base["seed"] = seed
    if data:
        base["data"] = {"default": data}
    if data_dir:
        base["data_dir"] = data_dir
    if base.get("data_dir") and all(d == "synthetic" for d in base.get("data", {}).values()):
        raise UsageError("a data directory (--data-dir, data_dir) is given but no data set reads from it "
                         "(--data NAME, data:)")
    if convergence:
        base["convergence"] = {**base.get("convergence", {}), **convergence}
    if distributed:
        base["distributed"] = {**base.get("distributed", {}), **distributed}
    if variants is not None:
        base["variants"] = resolve.variant_map(resolve.suite_frameworks(suite_from_dict(base, "command line")),
                                               variants)
    return suite_from_dict(base, "command line")
