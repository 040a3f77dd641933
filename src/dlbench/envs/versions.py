"""A framework's version as part of its name: ``jax==0.4.38`` is JAX 0.4.38, measured in an environment of its
own; a bare ``jax`` is the main Python's JAX, as always.

The name is the identity everywhere a framework appears (cells, their keys, the gate's records, the
store), so two versions of one framework are two frameworks to every part of dlbench, and no store
schema changes. This module parses a name (one place, so the command line, suites, the API and a
resumed run accept and refuse the same ones); :func:`dlbench.frameworks.framework_info` gives a
pinned name the base framework's entry with the version set, and
:func:`dlbench.frameworks.ondemand.ensure_envs` builds the environments a run needs (with the companion pins
of :mod:`dlbench.envs.companions`).
Nothing here imports a framework, and :mod:`packaging` is imported where a version is read: a
measuring process in a framework's own environment (which has no ``packaging``) imports this module
through :mod:`dlbench.frameworks` and, for a bare name, never reads a version.
"""

from __future__ import annotations

import re
from collections import Counter

import dlbench.envs.companions as companions  # the module alone: dlbench.envs itself imports this one

__all__ = ["SEP", "SpecError", "split", "normal_version", "normal_name", "same_release", "check", "base_of", "label",
           "labels"]

SEP = "=="
_OPERATORS = re.compile(r"[<>=!~]")


class SpecError(ValueError):
    """A framework name with a malformed or unsupported version (one line: what is wrong, what works)."""


def split(name: str) -> tuple[str, str | None]:
    """``jax==0.4.38`` -> (``jax``, ``0.4.38``); ``jax`` -> (``jax``, None). The version comes back in its
    normal form (:func:`normal_version`: ``jax==00.010.002`` and ``jax==0.10.2.0`` are ``0.10.2``); only
    the form is checked here."""
    if SEP not in name:
        if _OPERATORS.search(name):
            raise SpecError(f"framework {name!r}: only an exact version can be named (like jax==0.4.38)")
        return name, None
    base, _, version = name.partition(SEP)
    if not base:
        raise SpecError(f"framework {name!r}: no framework before '=='")
    if not version:
        raise SpecError(f"framework {name!r}: no version after '==' (like {base}==1.2.3, or {base} for this Python's)")
    try:
        return base, normal_version(version)
    except ValueError as exc:
        raise SpecError(f"framework {name!r}: {exc}") from None


def normal_version(text: str) -> str:
    """A release number in one spelling, so one release is one name (one environment, one identity in
    the store): PEP 440's reading (:mod:`packaging.version`; leading zeros dropped), the release padded
    to three parts and trailing zero parts past the third dropped (``2.13`` and ``2.13.0.0`` are
    ``2.13.0``, as pip holds them equal). ASCII digits only; no epoch, no local tag. ValueError otherwise."""
    if not text.isascii():
        raise ValueError(f"{text!r} is not a release number (ASCII digits, like 0.4.38)")
    release, pre, post, dev = _parse(text)
    release = list(release) + [0] * max(0, 3 - len(release))
    while len(release) > 3 and release[-1] == 0:
        release.pop()
    out = ".".join(map(str, release))
    if pre:
        out += f"{pre[0]}{pre[1]}"
    if post is not None:
        out += f".post{post}"
    if dev is not None:
        out += f".dev{dev}"
    return out


def _parse(text: str) -> tuple[tuple[int, ...], tuple[str, int] | None, int | None, int | None]:
    """(release, pre-release, post, dev) of a PEP 440 version. :mod:`packaging` reads it where it is
    installed (the main Python: a dependency); an environment's measuring process, which may lack it,
    reads the plain forms dlbench itself writes (``1.2.3``, ``2.16.0rc1``, ``.postN``, ``.devN``)."""
    try:
        from packaging.version import InvalidVersion, Version
    except ImportError:
        m = companions.RELEASE.fullmatch(text)
        if m is None:
            raise ValueError(f"{text!r} is not a release number (like 0.4.38)") from None
        nums, pre, pre_n, post, dev = m.groups()
        return (tuple(int(n) for n in nums.split(".")), (pre, int(pre_n)) if pre else None,
                int(post) if post is not None else None, int(dev) if dev is not None else None)
    try:
        v = Version(text)
    except InvalidVersion:
        raise ValueError(f"{text!r} is not a release number (like 0.4.38)") from None
    if v.epoch or v.local:
        raise ValueError(f"{text!r}: name the release alone (like 0.4.38), without an epoch or a local tag")
    return v.release, v.pre, v.post, v.dev


def normal_name(name: str) -> str:
    """The name with its version in normal form (``torch==2.13`` -> ``torch==2.13.0``); SpecError when malformed."""
    base, version = split(name)
    return base if version is None else f"{base}{SEP}{version}"


def same_release(a: str, b: str) -> bool:
    """Whether two version strings name one release (a local build tag, ``+cpu``, aside)."""
    try:
        return normal_version(a.split("+", 1)[0]) == normal_version(b.split("+", 1)[0])
    except ValueError:
        return a == b


def check(base: str, version: str) -> None:
    """A version dlbench can build an environment for: a pinnable framework, at or after its oldest line."""
    if base not in companions.LINES:
        raise SpecError(f"{base}'s version cannot be pinned (pinnable: {', '.join(companions.pinnable())}); "
                        f"name it without '=='")
    try:
        companions.line_for(base, version)
    except ValueError as exc:
        raise SpecError(str(exc)) from None


def base_of(name: str) -> str:
    """The framework a (possibly pinned) name is a version of; a stored name is trusted to be well formed."""
    return name.partition(SEP)[0]


def label(name: str, version: str | None) -> str:
    """How a framework is shown in tables: its base name and the exact version recorded for the run
    (``jax 0.4.38``); the name alone when no version was recorded."""
    return f"{base_of(name)} {version}" if version else name


def labels(names: list[str], recorded: dict[str, str | None]) -> dict[str, str]:
    """How each framework of a run is shown: with its recorded version (``jax 0.4.38``, ``jax 0.10.2``) when
    it is pinned or the run has several versions of it, so they never read alike; else its name, as ever."""
    names = list(dict.fromkeys(names))
    bases = Counter(base_of(n) for n in names)
    out = {n: label(n, recorded.get(n)) if SEP in n or bases[base_of(n)] > 1 else n for n in names}
    seen = Counter(out.values())  # two names at one release (jax==0.10.2 beside this Python's jax 0.10.2)
    return {n: f"{n} ({recorded.get(n) or '?'})" if seen[text] > 1 else text for n, text in out.items()}
