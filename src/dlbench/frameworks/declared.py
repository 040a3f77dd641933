"""What a backend class declares about itself (its variants, devices and scenarios), read from its
module's source without importing it.

The registry (:data:`dlbench.frameworks.FRAMEWORKS`) must answer "which variants, devices and
scenarios does this framework have" in a process that cannot import the framework (it is not
installed here, or lives in its own environment, or must not be imported before the thread count is
pinned). Rather than a second copy of each answer beside the backend, the registry reads the
backend's own class attributes from its source: literal tuples, found on the class named for the
framework or on its bases (followed through the module's imports, down to
:class:`dlbench.frameworks.base.Backend`'s defaults).
"""

from __future__ import annotations

import ast
import importlib.util
import re
from functools import cache
from typing import Any

#: the class attributes the registry reads
ATTRS = ("variants", "devices", "scenarios")
BASE_MODULE = "dlbench.frameworks.base"


#: a top-level class statement and its bases
CLASS = re.compile(r"^class (\w+)(?:\((.*?)\))?:", re.MULTILINE)
#: one of the read attributes, assigned at class level (four spaces in)
ATTR = re.compile(r"^    (name|variants|devices|scenarios)(?:\s*:[^=\n]+)?\s*=\s*(.*)$")
FROM = re.compile(r"^from ([\w.]+) import (?:\(([^)]*)\)|([\w, ]+))", re.MULTILINE)
IMPORT = re.compile(r"^import ([\w.]+)(?: as (\w+))?", re.MULTILINE)


@cache
def _source(module: str) -> str:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(f"no module {module}")
    with open(spec.origin, encoding="utf-8") as f:
        return f.read()


@cache
def _classes(module: str) -> dict[str, tuple[list[str], dict[str, Any]]]:
    """Class name -> (its base expressions, its literal class attributes), by a scan of the source's
    lines (parsing every backend's module whole cost most of a second in each process)."""
    text = _source(module)
    lines = text.splitlines()
    out = {}
    for m in CLASS.finditer(text):
        first = text.count("\n", 0, m.start())
        end = next((i for i in range(first + 1, len(lines)) if lines[i][:1] not in ("", " ", "#", ")")), len(lines))
        attrs: dict[str, Any] = {}
        for i in range(first + 1, end):
            a = ATTR.match(lines[i])
            if a is None:
                continue
            value = a.group(2)
            for more in range(i + 1, min(i + 6, end) + 1):  # a tuple may run over a few lines
                try:
                    attrs[a.group(1)] = ast.literal_eval(value.strip())
                    break
                except (ValueError, SyntaxError):
                    if more < end:
                        value += "\n" + lines[more]
        out[m.group(1)] = ([b.strip() for b in (m.group(2) or "").split(",") if b.strip()], attrs)
    return out


@cache
def _imports(module: str) -> dict[str, str]:
    """Local name -> the dotted name it was imported as (``km`` -> ``dlbench.frameworks.keras_model``,
    ``Backend`` -> ``dlbench.frameworks.base.Backend``); top-level imports."""
    text = re.sub(r"#[^\n]*", "", _source(module))  # a comment may hold parentheses
    out = {}
    for m in FROM.finditer(text):
        names = m.group(2) or m.group(3)
        for part in filter(None, (p.strip() for p in names.split(","))):
            name, _, alias = part.partition(" as ")
            out[alias.strip() or name.strip()] = f"{m.group(1)}.{name.strip()}"
    for m in IMPORT.finditer(text):
        out[m.group(2) or m.group(1)] = m.group(1)
    return out


def _resolve(module: str, base: str) -> tuple[str, str] | None:
    """(module, class name) a base-class expression of ``module`` names (None: not dlbench's)."""
    if base in _classes(module):
        return module, base
    head, _, attr = base.partition(".")
    dotted = _imports(module).get(head)
    if dotted is None:
        return None
    dotted = f"{dotted}.{attr}" if attr else dotted
    if not dotted.startswith("dlbench."):
        return None
    where, _, name = dotted.rpartition(".")
    return where, name


def _attrs(module: str, cls_name: str) -> dict[str, Any]:
    """The class's declarations, its own over its bases' (first base first, as Python's MRO)."""
    bases, own = _classes(module)[cls_name]
    out: dict[str, Any] = {}
    for base in reversed(bases):
        found = _resolve(module, base)
        if found is not None and found[1] in _classes(found[0]):
            out.update(_attrs(*found))
    out.update(own)
    return out


@cache
def declared(module: str, framework: str) -> dict[str, tuple[str, ...]]:
    """:data:`ATTRS` as the backend class of ``framework`` (the class whose ``name`` is it) in
    ``module`` declares them, its bases' and :class:`~dlbench.frameworks.base.Backend`'s defaults
    filling what it leaves out."""
    for cls_name in _classes(module):
        attrs = _attrs(module, cls_name)
        if attrs.get("name") == framework:
            return {k: tuple(attrs[k]) for k in ATTRS if k in attrs}
    raise LookupError(f"{module} has no backend class named {framework!r}")
