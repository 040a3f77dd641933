"""Environments built when a run needs them: a pinned framework (``jax==0.4.38``) without its
environment gets one before anything is measured (:mod:`dlbench.envs.versions` says what a pin means;
:mod:`dlbench.envs` builds it). Apart from :mod:`dlbench.envs` because it reads the framework registry,
which itself imports :mod:`dlbench.envs`."""

from __future__ import annotations

from collections.abc import Callable

from dlbench import envs
from dlbench.frameworks import framework_info, installed_version


def _pip_reason(text: str) -> str:
    """pip's own last error line (``ERROR: No matching distribution found for jax==99.0``)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ln.startswith("ERROR") or "error" in ln.lower():
            return ln[:500]
    return lines[-1][:500] if lines else "unknown error"


def ensure_envs(names: list[str], progress: Callable[[str], None] = lambda s: None) -> dict[str, str]:
    """Build the environment of every pinned framework of ``names`` that has none yet (and that the main
    Python does not have at that very version). Returns the names that could not be built, each with
    pip's own last error line; the full log stays beside the environments (``dlbench envs``)."""
    failed: dict[str, str] = {}
    for name in names:
        info = framework_info(name)
        if info.version is None or installed_version(name) is not None:
            continue
        progress(f"{name}: building its environment (dlbench envs create {name})")
        try:
            envs.create(info, progress=progress)
        except envs.EnvError as exc:
            failed[name] = f"{name} could not be installed: {_pip_reason(str(exc))} (log: {envs.log_path(name)})"
            progress(failed[name])
    return failed
