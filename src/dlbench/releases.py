"""A framework's published releases, as the user's own pip sees them: what ``dlbench bisect`` walks.

The list comes from ``pip index versions`` run by this Python's pip, so it honours whatever index the
user configured (``pip.conf``, ``PIP_INDEX_URL``, ``PIP_FIND_LINKS``, a mirror, a local directory); no
host is named here. pip lists only releases with a file this interpreter can install (its tags and
``Requires-Python``), and stable releases unless ``pre`` is asked. Releases are ordered by
:class:`packaging.version.Version`, the order pip itself uses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from packaging.version import InvalidVersion, Version

from dlbench import versions
from dlbench.envs import companions

__all__ = ["ReleaseError", "listed", "between"]


class ReleaseError(Exception):
    """pip could not list the releases (no index reachable, no such distribution): pip's own line."""


def _pip_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("ERROR")]
    return (errors or lines or ["pip printed nothing"])[-1][:500]


def _parse(stdout: str) -> list[str]:
    """pip's answer: JSON (``--json``, pip 23.3 and later) or its text line ``Available versions: a, b``."""
    text = stdout.strip()
    if text.startswith("{"):
        return list(json.loads(text).get("versions", []))
    for line in text.splitlines():
        if line.startswith("Available versions:"):
            return [v.strip() for v in line.partition(":")[2].split(",") if v.strip()]
    return []


def listed(distribution: str, pre: bool = False) -> list[str]:
    """Every release of ``distribution`` the configured index offers this interpreter, oldest first."""
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    base = [sys.executable, "-m", "pip", "index", "versions", distribution, *(["--pre"] if pre else [])]
    out = subprocess.run([*base, "--json"], capture_output=True, text=True, stdin=subprocess.DEVNULL, env=env)
    if out.returncode and "--json" in out.stderr:  # a pip older than --json: its text form
        out = subprocess.run(base, capture_output=True, text=True, stdin=subprocess.DEVNULL, env=env)
    if out.returncode:
        raise ReleaseError(f"pip index versions {distribution}: {_pip_line(out.stderr + out.stdout)}")
    found = []
    for v in _parse(out.stdout):
        try:
            found.append((Version(v), v))
        except InvalidVersion:
            continue
    return [v for _, v in sorted(found)]


def between(framework: str, good: str, bad: str, pre: bool = False) -> list[str]:
    """The releases of a pinnable framework from ``good`` to ``bad``, both included, oldest first.
    :class:`versions.SpecError` when an end is not a release pip lists, or the ends are out of order."""
    for end in (good, bad):
        versions.check(framework, end)
    if Version(good) >= Version(bad):
        raise versions.SpecError(f"--good {good} must be an older release than --bad {bad}")
    dist = companions.DISTRIBUTION[framework]
    every = listed(dist, pre=pre or Version(good).is_prerelease or Version(bad).is_prerelease)
    spelled = {Version(v): v for v in every}
    for flag, end in (("--good", good), ("--bad", bad)):
        if Version(end) not in spelled:
            near = ", ".join(every[-8:]) if every else "none"
            raise versions.SpecError(f"{flag} {end}: pip lists no such release of {dist} (the latest it lists: {near})")
    return [v for v in every if Version(good) <= Version(v) <= Version(bad)]
