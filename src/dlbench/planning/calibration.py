"""What one measuring process costs on this machine, per framework, for estimates made before any run.

A machine dlbench has never measured has no history (:mod:`dlbench.planning.history`), and the fixed
guess of :data:`dlbench.planning.estimate.START_S` a process was 1.6x to 2.6x off (issue 45): a LeNet cell
is mostly its process's start (the interpreter, the framework's import, the build, the first call), which
ranges from under a second (ONNX Runtime's import) to several (TensorFlow, a JVM), and with the machine's
speed. So the first ``--dry-run`` on a machine with no history of a framework *calibrates* it: it starts
one measuring process of that framework, as a cell would (its interpreter and variant's environment,
one thread), doing the cheapest cell there is (LeNet's forward at batch 1, one timed call), and keeps
what the process reported it spent outside its timed calls (start, build and the rest,
:mod:`dlbench.measure.cost`: what the history learns from a run). A few seconds per framework, once:
the figures are kept per machine, framework, variant, interpreter and version in a file
(:func:`calibration_path`, ``DLBENCH_CALIBRATION``: another path, or ``off``), and a framework's history,
once it has one, is preferred to them.

A calibration process is never a result: it is not verified, not stored and not shown; it only sizes an
estimate.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from dlbench import envs
from dlbench.core.cell import Cell
from dlbench.frameworks import framework_info, installed_version
from dlbench.launch.subprocess import run_job
from dlbench.measure.cost import process_cost
from dlbench.measure.environment import this_machine
from dlbench.measure.reuse import CACHE_ROOT, read_kept, setting, write_kept
from dlbench.scenarios import registry

#: the cell a calibration process does (the cheapest any framework that runs a CNN can do)
MODEL, SCENARIO = "lenet", "forward"
#: the calibration process's protocol: no warm-up, one timed call
PROTOCOL = {"warmup": 0, "min_iters": 1, "min_time_s": 0.0, "repeats": 1, "timeout_s": 120.0}


def calibration_path() -> Path | None:
    return setting("DLBENCH_CALIBRATION", CACHE_ROOT / "calibration.json")


def key(framework: str, variant: str, machine: dict[str, Any] | None = None) -> str:
    """What a kept calibration stands for: this machine (CPU model and flags, cores), the framework and its
    variant, the interpreter that runs it and the framework's version there."""
    parts = {"machine": this_machine() if machine is None else machine, "framework": framework, "variant": variant,
             "python": envs.python_for(framework) or "main", "version": installed_version(framework)}
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def load(path: Path | None = None) -> dict[str, dict[str, Any]]:
    """The kept calibrations (key -> entry with ``process_s``, or the reason a framework has none); an
    unreadable file is none."""
    path = calibration_path() if path is None else path
    return {} if path is None else read_kept(path, _usable_entry)


def _usable_entry(v: Any) -> bool:
    return isinstance(v, dict) and (_seconds(v.get("process_s")) is not None or isinstance(v.get("unusable"), str))


def _seconds(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1e5 else None


def forget(path: Path | None = None) -> bool:
    """Drop every kept calibration (the next estimate calibrates again); whether there was a file."""
    path = calibration_path() if path is None else path
    if path is None or not path.exists():
        return False
    path.unlink()
    return True


def measure(framework: str, variant: str, run: Callable[..., Any] = run_job) -> float | str | None:
    """Seconds one measuring process of ``framework`` spends outside its timed calls here, from one
    process doing :data:`MODEL`'s :data:`SCENARIO` at batch 1 on one thread. A reason (a string) where
    the framework cannot do that cell (a runtime of language models only): kept, so that it is not asked
    again. None where it cannot be measured now (not installed yet, or the process failed)."""
    from dlbench.planning.flags import build_suite

    if installed_version(framework) is None:
        return None  # a release the run will build first
    scenario = registry.of_stored(SCENARIO)
    info = framework_info(framework)
    if (why := scenario.unsupported(info)) is not None:
        return why
    suite = build_suite(None, models=[MODEL], frameworks=[framework], scenarios=[SCENARIO], batches=[1],
                        threads=[1], protocol=dict(PROTOCOL))
    cell = Cell(framework, variant, MODEL, SCENARIO, 1, 1)
    outcome = run(scenario.job(cell, suite), PROTOCOL["timeout_s"], 1, python=envs.python_for(framework),
                  extra_env=info.variant_env.get(variant))
    if outcome.status != "ok":
        return None
    if "unsupported" in outcome.result:
        return str(outcome.result["unsupported"])
    parts = process_cost(outcome.seconds, outcome.result.get("cost"))
    return parts["start_s"] + parts["build_s"] + parts["rest_s"]


def kept_seconds(groups: Iterable[tuple[str, str]]) -> dict[tuple[str, str], float]:
    """The kept per-process seconds of those (framework, variant) of ``groups`` calibrated here before."""
    return calibrate(groups, measure_missing=False)


def calibrate(groups: Iterable[tuple[str, str]], progress: Callable[[str], None] = lambda s: None,
              run: Callable[..., Any] = run_job, measure_missing: bool = True) -> dict[tuple[str, str], float]:
    """The per-process seconds of each (framework, variant) of ``groups``: kept ones as they are, the others
    measured now (:func:`measure`, one process each, announced through ``progress``) and kept. A group
    that cannot be calibrated is left out (the estimate keeps its fixed guess for it); one that cannot
    do the calibration's cell is kept as such, with the reason, and not asked again."""
    path = calibration_path()
    if path is None:
        return {}
    kept = load(path)
    machine = this_machine()
    out: dict[tuple[str, str], float] = {}
    changed = False
    for framework, variant in dict.fromkeys(groups):
        k = key(framework, variant, machine)
        if k in kept:
            if (seconds := _seconds(kept[k].get("process_s"))) is not None:
                out[(framework, variant)] = seconds
            continue
        if not measure_missing:
            continue
        progress(f"calibrating the estimate: one {framework}/{variant} process ({MODEL} {SCENARIO})")
        measured = measure(framework, variant, run)
        if measured is None:
            continue
        if isinstance(measured, str):
            kept[k] = {"framework": framework, "variant": variant, "unusable": measured[:300]}
        else:
            out[(framework, variant)] = measured
            kept[k] = {"framework": framework, "variant": variant, "process_s": round(measured, 3)}
        changed = True
    if changed:
        write_kept(path, kept)
    return out
