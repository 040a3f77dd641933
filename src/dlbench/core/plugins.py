"""Plug-ins the Python way: a distribution outside dlbench names what it adds in its entry points.

A package declares, in its ``pyproject.toml``::

    [project.entry-points."dlbench.frameworks"]
    myfw = "myfw_pkg:DECLARATION"          # a dlbench.frameworks.declaration.Declaration
    [project.entry-points."dlbench.scenarios"]
    mything = "myfw_pkg.scenarios:SCENARIOS"  # a Scenario, or a list/tuple of them

Once it is installed, every process of that interpreter finds it, the measuring processes
(``python -m dlbench.worker``) included: no variable to set, no edit inside dlbench. The groups are
read once per process (one scan of the installed distributions, kept); the registries
(:mod:`dlbench.frameworks`, :mod:`dlbench.scenarios.registry`) load each entry and check what it gives.
A broken one (its import fails, it loads to the wrong thing, it takes a name already registered)
becomes a :class:`PluginError` of one line naming its distribution and entry point: the registry
keeps it aside, the built-ins work, and the command line prints it (exit 2 where the plug-in is
asked for).
"""

from __future__ import annotations

import functools
import importlib.metadata
from collections.abc import Callable
from typing import Any

from dlbench.core.errors import UsageError

#: the entry-point group of plug-in frameworks: each entry loads to a ``Declaration``
FRAMEWORKS_GROUP = "dlbench.frameworks"
#: the entry-point group of plug-in scenarios: each entry loads to a ``Scenario`` or a list/tuple of them
SCENARIOS_GROUP = "dlbench.scenarios"


class PluginError(UsageError):
    """A plug-in that cannot be registered; the message is one line naming its distribution and entry point."""


def entry_points(group: str) -> tuple[importlib.metadata.EntryPoint, ...]:
    """The installed distributions' entry points of ``group``."""
    return tuple(_installed().select(group=group))


@functools.cache
def _installed() -> importlib.metadata.EntryPoints:
    """Every installed distribution's entry points, read once per process for both groups: a scan of
    each distribution on ``sys.path`` (15 to 25 ms in a Python with every framework), and every
    measuring process starts by importing the registries."""
    return importlib.metadata.entry_points()


def read_again() -> None:
    """Forget the entry points read (tests plant distributions, then read them)."""
    _installed.cache_clear()


def where(ep: importlib.metadata.EntryPoint) -> str:
    """The entry point and the distribution that declares it, as a user would look them up."""
    dist = ep.dist
    owner = f"distribution {dist.name} {dist.version}" if dist is not None else "no distribution"
    return f"plug-in {ep.name!r} ({owner}, entry point {ep.group}: {ep.name} = {ep.value})"


def load(ep: importlib.metadata.EntryPoint, problem: Callable[[Any], str | None]) -> Any:
    """What ``ep`` names, imported; :class:`PluginError` when the import fails or ``problem`` finds
    something wrong with it (it returns why, or None)."""
    try:
        value = ep.load()
    except Exception as exc:  # whatever a plug-in's import raises is the plug-in's fault, told in one line
        text = str(exc).strip()
        detail = f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__
        raise PluginError(f"{where(ep)}: cannot be loaded: {detail}") from None
    why = problem(value)
    if why is not None:
        raise PluginError(f"{where(ep)}: {why}")
    return value
