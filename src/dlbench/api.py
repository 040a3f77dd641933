"""The Python API; mirrors the command line (each CLI verb calls one function here)."""

from __future__ import annotations

from collections.abc import Callable
from itertools import product
from pathlib import Path

from dlbench import envs
from dlbench.core.cell import DEFAULT_DEVICE, DEFAULT_SEED
from dlbench.core.errors import UsageError
from dlbench.core.job import VerifyJob
from dlbench.frameworks import framework_info, ondemand
from dlbench.gate.verify import VerifyResult
from dlbench.launch.subprocess import run_job
from dlbench.planning import flags, resolve
from dlbench.planning.plan import Suite
from dlbench.report.results import RunResults, read_run
from dlbench.running import runner
from dlbench.running.runner import RunPlan
from dlbench.storage.store import DEFAULT_DB


def verify(models: list[str] | None = None, frameworks: list[str] | None = None, variants: list[str] | None = None,
           device: str = DEFAULT_DEVICE, threads: int | str | None = None, timeout_s: float = 1800.0,
           precisions: list[str] | None = None, progress: Callable[[str], None] = lambda s: None,
           optimizers: list[str] | None = None) -> list[VerifyResult]:
    """Run the equivalence gate, one fresh process per (framework, variant, precision), in the
    framework's environment's interpreter when it has one (``dlbench envs``). Input is resolved as
    :func:`run` resolves it (:mod:`dlbench.planning.resolve`); ``threads`` is one count, ``all`` or ``half``;
    ``precisions`` default to float32 (dlbench.core.precision). A pinned version (``jax==0.4.38``) without
    an environment gets one built first; one that cannot be built is ``unsupported`` with pip's reason.
    ``optimizers``: those whose update check (f) runs (default both, sgd and adamw). Passes are kept on this
    host as a run's gate keeps them (:mod:`dlbench.measure.reuse`): a run after it on the same fingerprint
    verifies none of them again."""
    models = resolve.models(models)
    frameworks = resolve.frameworks(frameworks)
    chosen = resolve.variant_map(frameworks, variants) if variants is not None else {}
    resolve.devices(frameworks, [device])
    threads = resolve.thread_count(threads)
    timeout_s = resolve.timeout(timeout_s)
    precisions = resolve.precisions(precisions)
    optimizers = resolve.optimizers(optimizers)
    results: list[VerifyResult] = []
    failed = ondemand.ensure_envs(frameworks, progress)
    for fw, precision in product(frameworks, precisions):
        for variant in resolve.variants(fw, chosen.get(fw)):
            if fw in failed:
                results += [VerifyResult(model=m, framework=fw, variant=variant, verdict="unsupported",
                                         reason=failed[fw], precision=precision) for m in models]
                continue
            job = VerifyJob(threads=threads, framework=fw, models=models, variants=[variant], device=device,
                            precision=precision, optimizers=optimizers)
            outcome = run_job(job, timeout_s=timeout_s, threads=threads, python=envs.python_for(fw),
                              extra_env=framework_info(fw).variant_env.get(variant))
            if outcome.status == "ok":
                runner.keep_verified(job, outcome.result, outcome.seconds)  # a run after it reuses its passes
                # the full name: the backend reports its base name, the gate's records are per version
                results += [VerifyResult(**{**r, "framework": fw}) for r in outcome.result["results"]]
            else:
                results += [VerifyResult(model=m, framework=fw, variant=variant, verdict="fail", reason=outcome.reason,
                                         precision=precision) for m in models]
    return results


def plan(suite: str | Suite | None = None, *, models: list[str] | None = None, frameworks: list[str] | None = None,
         variants: list[str] | None = None, scenarios: list[str] | None = None, batches: list[int | str] | None = None,
         threads: list[int | str] | None = None, devices: list[str] | None = None, protocol: dict | None = None,
         seed: int | None = None, data: str | None = None, data_dir: str | None = None,
         db: str | Path = DEFAULT_DB, resume: str | None = None, precisions: list[str] | None = None,
         optimizer: dict | None = None, **settings: dict | None) -> RunPlan:
    """What :func:`run` would measure, validated, with nothing written: the suite, its cells (those a
    resume has stored left out), and, when read, the gates this host kept and the time it takes
    (:class:`~dlbench.running.runner.RunPlan`). ``dlbench run --dry-run`` prints it; :func:`run` takes it,
    so a dry run and the run it announces are one plan. Arguments as :func:`run`'s."""
    if resume:
        settings = {"suite": suite, "models": models, "frameworks": frameworks, "variants": variants,
                    "scenarios": scenarios, "batches": batches, "threads": threads, "devices": devices,
                    "protocol": protocol, "seed": seed, "data": data, "data_dir": data_dir,
                    "precisions": precisions, "optimizer": optimizer, **settings}
        given = [name for name, value in settings.items() if value is not None]
        if given:
            raise UsageError(f"resume measures run {resume} as it was stored; it takes no {', '.join(given)}")
        return runner.plan_resume(resume, db)
    s = flags.build_suite(suite, models=models, frameworks=frameworks, variants=variants, scenarios=scenarios,
                           batches=batches, threads=threads, devices=devices, protocol=protocol, seed=seed,
                           data=data, data_dir=data_dir, precisions=precisions, optimizer=optimizer, **settings)
    return runner.plan_new(s, db)


def run(suite: str | Suite | RunPlan | None = None, *, models: list[str] | None = None,
        frameworks: list[str] | None = None, variants: list[str] | None = None, scenarios: list[str] | None = None,
        batches: list[int | str] | None = None, threads: list[int | str] | None = None,
        devices: list[str] | None = None, protocol: dict | None = None, seed: int | None = None,
        data: str | None = None, data_dir: str | None = None, db: str | Path = DEFAULT_DB,
        resume: str | None = None, progress=None, argv: list[str] | None = None,
        precisions: list[str] | None = None, optimizer: dict | None = None, **settings: dict | None) -> RunResults:
    """Run a suite (the built-in ``quick`` by default) and return its analysed results.

    Mirrors ``dlbench run``: ``suite`` is a name, a YAML file, a :class:`~dlbench.planning.plan.Suite` or a
    plan (:func:`plan`, which takes no other argument here: it holds them); flags override the suite's
    axes; ``resume`` finishes a stored run; ``precisions`` the numeric
    precisions (dlbench.core.precision); ``optimizer`` the update of every cell that trains
    (:class:`~dlbench.planning.plan.OptimizerModel`: name sgd or adamw, lr, momentum, betas, eps, weight_decay).
    Every other keyword is a scenario's settings section, as in a suite file: ``convergence`` (epochs,
    lr...), ``distributed`` (the scaling scenario's workers, scaling, exchange,
    launcher, cluster), ``serving`` (latency and LoadGen), a plug-in's own
    (:func:`dlbench.scenarios.registry.sections`). A resumed run is measured as it was stored: any other
    setting given with ``resume`` is refused."""
    arguments = {"models": models, "frameworks": frameworks, "variants": variants, "scenarios": scenarios,
                 "batches": batches, "threads": threads, "devices": devices, "protocol": protocol, "seed": seed,
                 "data": data, "data_dir": data_dir, "precisions": precisions, "optimizer": optimizer, **settings}
    if isinstance(suite, RunPlan):
        given = [name for name, value in arguments.items() if value is not None] + (["resume"] if resume else [])
        if Path(db) not in (Path(DEFAULT_DB), suite.db):
            given.append("db")
        if given:
            raise UsageError(f"a plan holds its settings and database; run it with no {', '.join(given)}")
        run_plan = suite
    else:
        run_plan = plan(suite, db=db, resume=resume, **arguments)
    kwargs = {"progress": progress} if progress else {}
    if run_plan.resume:
        handle = runner.resume(run_plan, **kwargs)
    else:
        handle = runner.start(run_plan, argv, **kwargs)
    return results(handle.run_id, run_plan.db)


def export_model(model: str, folder: str | Path, force: bool = False, seed: int = DEFAULT_SEED) -> list[str]:
    """Write a transformer (a zoo one with its options, ``gpt2:layers=2``, or an ``hf:DIR``) with the weights a
    run starts it from (``seed``) as a Hugging Face folder that ``transformers`` and ``hf:DIR`` read; the
    files written. Refused (:class:`UsageError`): a model with no Hugging Face family, a part, a folder
    that is a file or a link to one, a non-empty folder unless ``force``."""
    from dlbench.models import get_model, hf_checkpoint, split
    from dlbench.models.weights import init_weights

    model = resolve.models([model])[0]
    if split.parse_part(model)[1] is not None:
        raise UsageError(f"export-model writes whole models, not a part ({model})")
    spec = get_model(model)
    try:
        fam = hf_checkpoint.family_of(spec)
        path = hf_checkpoint.export_path(folder, force)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if fam not in ("gpt2", "llama", "bert", "vit"):
        raise UsageError(f"export-model writes gpt2, llama, bert and vit models; {model} is {fam}")
    try:
        from dlbench.gate.hf_transformers import save_folder
    except ImportError as exc:
        raise UsageError(f"export-model needs torch and transformers ({exc})") from None
    weights = init_weights(spec, seed)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create {path}: {exc.strerror}") from None
    return save_folder(spec, weights, path)


def results(run_id: str | None = None, db: str | Path = DEFAULT_DB) -> RunResults:
    """A stored run (the latest by default), analysed from its raw samples."""
    return read_run(run_id, db)
