"""Environments built when a run needs them: a pinned framework (``jax==0.4.38``) without its
environment gets one before anything is measured (:mod:`dlbench.envs.versions` says what a pin means;
:mod:`dlbench.envs` builds it). Here, above :mod:`dlbench.envs`, because it reads the framework registry,
which itself imports :mod:`dlbench.envs`."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from statistics import median

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


@dataclass
class BuildEstimate:
    """An environment a run would build, and what building it is likely to cost here: the median size on
    disk and build time of the environments already built on this machine (of the same framework where
    there are some); None where none has been built to go by."""

    framework: str
    size_bytes: float | None
    seconds: float | None
    basis: str  # what the estimate comes from, in words

    def text(self) -> str:
        if self.seconds is None:
            return f"{self.framework}: size and time unknown ({self.basis})"
        mib = (self.size_bytes or 0) / 2**20
        size = "size unknown" if not mib else f"about {mib / 1024:.1f} GiB" if mib >= 1024 else f"about {mib:.0f} MiB"
        return f"{self.framework}: {size}, about {self.seconds:.0f} s to build ({self.basis})"


def to_build(names: list[str]) -> list[str]:
    """The pinned frameworks of ``names`` a run would build an environment for (what :func:`ensure_envs` builds)."""
    out = []
    for name in dict.fromkeys(names):
        info = framework_info(name)
        if info.version is not None and installed_version(name) is None:
            out.append(name)
    return out


def du(path: Path) -> int:
    """Bytes of the files below ``path`` (links not followed; a file gone meanwhile counts 0)."""
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


def estimate_builds(names: list[str]) -> list[BuildEstimate]:
    """Each environment a run of ``names`` would build, with its likely size and build time."""
    built = envs.list_envs()
    out = []
    for name in to_build(names):
        base = framework_info(name).base
        same = [r for r in built if framework_info(r.framework).base == base]
        basis_records = same or built
        if not basis_records:
            out.append(BuildEstimate(name, None, None, "no environment has been built here to go by"))
            continue
        which = f"{base}'s" if same else "other frameworks'"
        out.append(BuildEstimate(name, median(du(Path(r.path)) for r in basis_records),
                                 median(r.create_seconds for r in basis_records),
                                 f"median of {len(basis_records)} of {which} environments built here"))
    return out
