"""The Python API; mirrors the command line (each CLI verb calls one function here)."""

from __future__ import annotations

from pathlib import Path

from dlbench import envs
from dlbench.errors import UsageError
from dlbench.frameworks import FRAMEWORKS, UnknownFrameworkError, check_frameworks, installed_version
from dlbench.launch.subprocess import run_job
from dlbench.models import UnknownModelError, list_models, parse_model_ref
from dlbench.plan import Suite
from dlbench.results import RunResults, load_run
from dlbench.store import DEFAULT_DB, Store
from dlbench.verify import VerifyResult


def resolve_models(models: list[str] | None) -> list[str]:
    models = models or list_models()
    try:
        for m in models:
            parse_model_ref(m)
    except UnknownModelError as exc:
        raise UsageError(str(exc)) from None
    return models


def resolve_frameworks(frameworks: list[str] | None) -> list[str]:
    if not frameworks:
        found = [n for n in FRAMEWORKS if installed_version(n) is not None]
        if not found:
            raise UsageError("no supported framework is installed (pip install 'dlbench[torch]')")
        return found
    try:
        check_frameworks(frameworks)
    except UnknownFrameworkError as exc:
        raise UsageError(str(exc)) from None
    return frameworks


def resolve_variants(framework: str, variants: list[str] | None) -> list[str]:
    known = FRAMEWORKS[framework].variants
    if not variants:
        return [known[0]]
    if variants == ["all"]:
        return list(known)
    return [v for v in variants if v in known]


def verify(models: list[str] | None = None, frameworks: list[str] | None = None, variants: list[str] | None = None,
           device: str = "cpu", threads: int | None = None, timeout_s: float = 1800.0) -> list[VerifyResult]:
    """Run the equivalence gate, one fresh process per (framework, variant), in the framework's
    environment's interpreter when it has one (``dlbench envs``)."""
    models = resolve_models(models)
    frameworks = resolve_frameworks(frameworks)
    if variants and variants != ["all"]:
        unknown = [v for v in variants if not any(v in FRAMEWORKS[f].variants for f in frameworks)]
        if unknown:
            raise UsageError(f"unknown variant(s) {', '.join(unknown)} for {', '.join(frameworks)}")
    results: list[VerifyResult] = []
    for fw in frameworks:
        for variant in resolve_variants(fw, variants):
            job = {"kind": "verify", "framework": fw, "models": models, "variants": [variant], "device": device,
                   "threads": threads}
            outcome = run_job(job, timeout_s=timeout_s, threads=threads, python=envs.python_for(fw),
                              extra_env=FRAMEWORKS[fw].variant_env.get(variant))
            if outcome.status == "ok":
                results += [VerifyResult(**r) for r in outcome.result["results"]]
            else:
                results += [VerifyResult(model=m, framework=fw, variant=variant, verdict="fail", reason=outcome.reason)
                            for m in models]
    return results


def run(suite: str | Suite | None = None, *, models: list[str] | None = None, frameworks: list[str] | None = None,
        variants: list[str] | None = None, scenarios: list[str] | None = None, batches: list[int] | None = None,
        threads: list[int | str] | None = None, devices: list[str] | None = None, protocol: dict | None = None,
        seed: int | None = None, data: str | None = None, data_dir: str | None = None, convergence: dict | None = None,
        db: str | Path = DEFAULT_DB, resume: str | None = None, progress=None, argv: list[str] | None = None,
        distributed: dict | None = None) -> RunResults:
    """Run a suite (the built-in ``quick`` by default) and return its analysed results.

    Mirrors ``dlbench run``: ``suite`` is a name, a YAML file or a :class:`~dlbench.plan.Suite`; flags
    override the suite's axes; ``resume`` finishes a stored run; ``distributed`` sets the scaling
    scenario's options (workers, scaling, exchange, launcher, cluster)."""
    from dlbench import runner

    kwargs = {"progress": progress} if progress else {}
    if resume:
        handle = runner.resume(resume, db, **kwargs)
    else:
        s = runner.build_suite(suite, models=models, frameworks=frameworks, variants=variants, scenarios=scenarios,
                               batches=batches, threads=threads, devices=devices, protocol=protocol, seed=seed,
                               data=data, data_dir=data_dir, convergence=convergence, distributed=distributed)
        handle = runner.start(s, db, argv, **kwargs)
    return results(handle.run_id, db)


def results(run_id: str | None = None, db: str | Path = DEFAULT_DB) -> RunResults:
    """A stored run (the latest by default), analysed from its raw samples."""
    store = Store(db, read_only=True)
    try:
        return load_run(store, run_id)
    finally:
        store.close()
