"""What a pinned framework version needs beside it: the companion packages of each release line.

A version spec (``jax==0.4.38``, see :mod:`dlbench.envs.versions`) gets an environment of its own, and
the framework alone does not make a working one: JAX needs the Flax and Optax of its time (a newer
Flax requires a newer JAX), TensorFlow the Keras 3 release published with it and the NumPy it was
built against, ONNX Runtime dlbench's exporter (torch, onnx, onnxscript) and the NumPy of its ABI.
dlbench resolves these from the release lines each framework folder declares (handed here by the
registry, :func:`register`), so a user names only the framework's version.

Each line covers the releases from its ``first`` up to the next line's (the last line: every later
release, which pip then resolves or refuses with its own reason). ``{v}`` in a pin is the pinned
version itself (jaxlib is released in lockstep with jax). A version below a framework's first line
is refused with the line's ``before`` reason. The pins are those each release's own metadata and
release notes name; docs/versions.md says which ones were built and gated on this machine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Line", "LINES", "BEFORE", "DISTRIBUTION", "release_key", "line_for", "companions", "pinnable", "register"]


@dataclass(frozen=True)
class Line:
    first: str  # the line's oldest release
    pins: tuple[str, ...]  # companion requirements; ``{v}`` is the pinned version
    note: str = ""


#: each pinnable framework's release lines, the distribution a pin installs and why releases before its first
#: line are refused: its folder declares them (dlbench.frameworks.declaration.Declaration.release_lines) and the
#: registry hands them here (:func:`register`; envs/ sits below the framework folders)
LINES: dict[str, tuple[Line, ...]] = {}
DISTRIBUTION: dict[str, str] = {}
BEFORE: dict[str, str] = {}


#: a release as dlbench writes one (PEP 440's plain forms; ASCII digits)
RELEASE = re.compile(r"([0-9]+(?:\.[0-9]+)*)(?:(a|b|rc)([0-9]+))?(?:\.post([0-9]+))?(?:\.dev([0-9]+))?")


def release_key(version: str) -> tuple:
    """A sortable key of a release (``0.4.38``, ``2.16.0rc1``, ``0.9.0.1``); ValueError when it is not one."""
    m = RELEASE.fullmatch(version)
    if m is None:
        raise ValueError(f"{version!r} is not a release number (like 0.4.38)")
    nums, pre, pre_n, post, dev = m.groups()
    parts = tuple(int(p) for p in nums.split("."))
    parts += (0,) * (4 - len(parts)) if len(parts) < 4 else ()
    # a dev release before its pre-releases, pre-releases before the release, post-releases after it
    stage = (-1 if dev is not None and pre is None else {"a": 0, "b": 1, "rc": 2}.get(pre or "", 3))
    return parts, stage, int(pre_n or 0), int(post) if post is not None else -1, int(dev or 0)


def pinnable() -> list[str]:
    """Frameworks whose version can be pinned."""
    return list(LINES)


def line_for(framework: str, version: str) -> Line:
    """The release line of ``version``; ValueError (with the reason) below the first one."""
    lines = LINES[framework]
    key = release_key(version)
    if key < release_key(lines[0].first):
        raise ValueError(f"{framework} {version} is older than the oldest release dlbench supports "
                         f"({lines[0].first}): {BEFORE[framework]}")
    return [line for line in lines if release_key(line.first) <= key][-1]


def companions(framework: str, version: str) -> list[str]:
    """The requirements of ``framework==version``'s environment: the framework first, then its line's pins."""
    line = line_for(framework, version)
    return [f"{DISTRIBUTION[framework]}=={version}", *(p.format(v=version) for p in line.pins)]


def register(framework: str, distribution: str, lines: tuple[Line, ...], before: str) -> None:
    """Make a framework pinnable (``jax==0.4.38``, a plugin's ``fakerel==1.3``): its pip distribution, its
    release lines and why releases before the first are refused. The registry calls this for every
    declaration with release lines, and a plugin may when it is imported, so every process that loads
    them (``DLBENCH_PLUGINS``) knows the lines."""
    LINES[framework] = tuple(lines)
    DISTRIBUTION[framework] = distribution
    BEFORE[framework] = before
