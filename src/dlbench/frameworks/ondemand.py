"""Environments built when a run needs them: a pinned framework (``jax==0.4.38``) without its
environment gets one before anything is measured (:mod:`dlbench.envs.versions` says what a pin means;
:mod:`dlbench.envs` builds it). Here, above :mod:`dlbench.envs`, because it reads the framework registry,
which itself imports :mod:`dlbench.envs`."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from statistics import median

from dlbench import envs
from dlbench.envs import sizes
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
    """An environment a run would build, and what building it is likely to cost here.

    The time is the bytes of the packages pip would install (:mod:`dlbench.envs.sizes`) at this machine's
    seconds per byte, the median of its builds that recorded their bytes (of the same framework where
    there are some); where none did, or pip cannot say what it would install (no index reachable), it is
    the median time of the environments built here. None where nothing has been built to go by."""

    framework: str
    size_bytes: float | None  # on disk: the packages' bytes as those built here unpacked, else their median
    seconds: float | None
    basis: str  # what the estimate comes from, in words
    fetch_bytes: int | None = None  # the packages pip would install
    network_bytes: int | None = None  # of them, those not on this machine's disk

    def text(self) -> str:
        fetch = "" if self.fetch_bytes is None else (
            f"{_mib(self.fetch_bytes)} of packages ({_mib(self.network_bytes or 0)} over the network), ")
        if self.seconds is None:
            return f"{self.framework}: {fetch or 'size and '}time unknown ({self.basis})"
        mib = (self.size_bytes or 0) / 2**20
        size = "" if not mib else f"about {mib / 1024:.1f} GiB" if mib >= 1024 else f"about {mib:.0f} MiB"
        return f"{self.framework}: {fetch}{size + ', ' if size else ''}about {self.seconds:.0f} s to build ({self.basis})"


def _mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB"


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
    disk: dict[str, int] = {}  # each environment's folder walked once, however many estimates read it

    def on_disk(record: envs.EnvRecord) -> int:
        if record.path not in disk:
            disk[record.path] = du(Path(record.path))
        return disk[record.path]

    out = []
    for name in to_build(names):
        base = framework_info(name).base
        same = [r for r in built if framework_info(r.framework).base == base]
        basis_records = same or built
        try:
            planned: sizes.Sizes | None = sizes.resolve([sys.executable, "-m", "pip"], envs.requirements(name)[0])
            unsized = ""
        except (sizes.SizeError, envs.EnvError) as exc:
            planned, unsized = None, f"; the packages' sizes are unknown: {exc}"
        fetch = {} if planned is None else {"fetch_bytes": planned.total, "network_bytes": planned.network}
        if not basis_records:
            out.append(BuildEstimate(name, None, None, "no environment has been built here to go by" + unsized,
                                     **fetch))
            continue
        sized = [r for r in same if r.wheel_bytes > 0] or [r for r in built if r.wheel_bytes > 0]
        if planned is not None and planned.total > 0 and sized:
            rate = median(r.create_seconds / r.wheel_bytes for r in sized)
            which = f"{base}'s" if sized[0] in same else "other frameworks'"
            unpacked = median(on_disk(r) / r.wheel_bytes for r in sized)  # bytes on disk per packaged byte
            out.append(BuildEstimate(name, planned.total * unpacked, planned.total * rate,
                                     f"at {rate * 2**30:.0f} s per GiB of packages, the median of {len(sized)} of "
                                     f"{which} builds here", **fetch))
            continue
        which = f"{base}'s" if same else "other frameworks'"
        out.append(BuildEstimate(name, median(on_disk(r) for r in basis_records),
                                 median(r.create_seconds for r in basis_records),
                                 f"median of {len(basis_records)} of {which} environments built here" + unsized,
                                 **fetch))
    return out
