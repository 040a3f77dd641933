"""Stored rows that cannot be what dlbench wrote: named and set aside, never trusted.

A database is a file: a disk error, a hand edit or another program can leave a sample stored as the
text ``'NaN'``, a time of 0 or ``9e999`` or below zero, or text that is not JSON where the store keeps
JSON (a cell's metrics and warnings, a run's suite, its environment, a bisection), a precision this dlbench does
not know, a lease whose pid is text. One such row used to break every
reader of the database (``show``, ``report``, ``compare``, ``export``, ``history``). Now the store and
:mod:`dlbench.report.results` check what they read with the functions here: a damaged cell is left out of
its run with a note naming it and what is wrong, a damaged run-level field reads as empty with a
note, a damaged optional figure (a cell's cost, variance split, reuse record; a field of the environment) is left
out with a note, and every other cell and run reads as before. The contracts are data: the
dataclass a record decodes to (:func:`problem`), :data:`OPTIONAL_METRICS`, :data:`ENVIRONMENT`, :data:`LEASE`.
``dlbench check`` lists every note of a database. Nothing here writes.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from collections.abc import Iterable
from typing import Annotated, Any

#: a type hint for a number that may be NaN or infinite (a test's p-value or ratio); ``float`` is a finite one
Real = Annotated[float, "any number, NaN and infinities included"]


class Damaged(ValueError):
    """A stored cell that cannot be analysed; the message says what is wrong with it."""


def load_json(text: Any, kind: type, what: str, notes: list[str], default: Any) -> Any:
    """Stored JSON text that must decode to ``kind`` (dict, list); ``default`` with a note in ``notes``
    when it does not. None (a column left empty) is ``default`` without a note."""
    if text is None or text == "":
        return default
    try:
        value = json.loads(text)
    except (TypeError, ValueError) as exc:
        notes.append(f"{what} is not valid JSON ({type(exc).__name__}: {str(exc)[:80]})")
        return default
    if not isinstance(value, kind):
        notes.append(f"{what} is a JSON {type(value).__name__}, not a {kind.__name__}")
        return default
    return value


def is_number(value: Any) -> bool:
    """A real, finite number (not a bool, not text, not NaN or an infinity)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def check_samples(samples: Iterable[Any]) -> None:
    """Every sample's time a finite number above zero, its repeat and loop count integers (a loop of at
    least one call); :class:`Damaged` naming the first one that is not."""
    for s in samples:
        where = f"sample {s.idx!r} of process {s.repeat!r} ({s.phase})"
        if not is_number(s.value_ns):
            raise Damaged(f"{where} is {s.value_ns!r}, not a finite time")
        if s.value_ns <= 0:
            raise Damaged(f"{where} is {s.value_ns / 1e6:g} ms: a time must be above zero")
        if not isinstance(s.repeat, int) or not isinstance(s.loop_k, int) or s.loop_k < 1:
            raise Damaged(f"{where} has repeat {s.repeat!r} and loop count {s.loop_k!r}: not counts")
        if s.repeat < 0 or not isinstance(s.idx, int) or s.idx < 0 or not isinstance(s.phase, str) or not s.phase:
            raise Damaged(f"{where} has repeat {s.repeat!r}, index {s.idx!r} and phase {s.phase!r}: not counts and a "
                          "name")


#: metrics that every reader treats as numbers (bytes, a loop count)
NUMERIC_METRICS = ("peak_rss_bytes", "rss_growth_bytes", "loop_k", "global_batch", "call_samples")
#: the least each can be (a loop of at least one call; a peak memory; the growth may be negative)
AT_LEAST = {"peak_rss_bytes": 0, "loop_k": 1, "global_batch": 1}


def check_metrics(metrics: dict[str, Any]) -> None:
    """The metrics the readers compute with hold numbers (or nothing); :class:`Damaged` otherwise."""
    for key in NUMERIC_METRICS:
        value = metrics.get(key)
        if value is not None and not is_number(value):
            raise Damaged(f"metric {key} is {value!r}, not a number")
        if value is not None and value < AT_LEAST.get(key, -math.inf):
            raise Damaged(f"metric {key} is {value!r}, below {AT_LEAST[key]}")
    for key in ("device_memory", "threads_readback", "profile", "latency", "loadgen"):
        value = metrics.get(key)
        if value is not None and not isinstance(value, dict):
            raise Damaged(f"metric {key} is {value!r}, not a mapping")
    for key in ("convergence",):
        value = metrics.get(key)
        if value is not None and not isinstance(value, list):
            raise Damaged(f"metric {key} is {value!r}, not a list")


def problem(value: Any, hint: Any, where: str) -> str | None:
    """What is wrong with ``value`` as a decoded JSON value of type ``hint`` (a type hint: str, int, float, bool,
    None, unions, list[X], tuple[X, Y], dict[K, V], Any, or a dataclass, read as a mapping of its fields),
    naming its place ``where``; None when it conforms. A float is any finite number; an int is not a bool."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return None
    if origin is Annotated:  # Real
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return None if ok else f"{where} is {_shown(value)}, not a number"
    if origin in (typing.Union, types.UnionType):
        found = [problem(value, a, where) for a in args]
        return None if None in found else next(f for f in found if f)
    if hint is None or hint is type(None):
        return None if value is None else f"{where} is {_shown(value)}, not null"
    if dataclasses.is_dataclass(hint):
        return _record_problem(value, hint, where)
    if origin is list or origin is tuple:
        if not isinstance(value, list | tuple):
            return f"{where} is {_shown(value)}, not a list"
        if origin is tuple and len(value) != len(args):
            return f"{where} has {len(value)} item(s), not {len(args)}"
        kinds = args if origin is tuple else [args[0] if args else Any] * len(value)
        return next((p for i, (v, k) in enumerate(zip(value, kinds, strict=True))
                     if (p := problem(v, k, f"{where}[{i}]"))), None)
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            return f"{where} is {_shown(value)}, not a mapping"
        key, item = args or (Any, Any)
        return next((p for k, v in value.items()
                     if (p := problem(k, key, f"{where} key") or problem(v, item, f"{where}.{k}"))), None)
    ok = {float: is_number, int: lambda v: isinstance(v, int) and not isinstance(v, bool),
          bool: lambda v: isinstance(v, bool), str: lambda v: isinstance(v, str)}[hint](value)
    return None if ok else f"{where} is {_shown(value)}, not {'a number' if hint is float else hint.__name__}"


def fields_problem(value: Any, contract: dict[str, Any], where: str) -> str | None:
    """What is wrong with ``value`` as a mapping whose fields named in ``contract`` (where present) have its types."""
    if not isinstance(value, dict):
        return f"{where} is {_shown(value)}, not a mapping"
    return next((p for k, h in contract.items() if k in value if (p := problem(value[k], h, f"{where}.{k}"))), None)


def _record_problem(value: Any, cls: type, where: str) -> str | None:
    if not isinstance(value, dict):
        return f"{where} is {_shown(value)}, not a mapping"
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    if unknown := [k for k in value if k not in fields]:
        return f"{where} has field(s) dlbench does not write: {', '.join(map(str, unknown[:3]))}"
    for name, f in fields.items():
        if name not in value:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                return f"{where} has no {name}"
        elif found := problem(value[name], hints[name], f"{where}.{name}" if where else name):
            return found
    return None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_record(cls: type, data: Any, what: str) -> None:
    """:class:`Damaged` naming the first field of ``data`` that does not fit the dataclass ``cls``."""
    if found := _record_problem(data, cls, ""):
        raise Damaged(f"{what}: {found.lstrip()}")


#: a cell's optional figures (what ``show --cost`` and the report's cost section read) and the type each must have;
#: a figure that does not fit is left out (the cell is shown without it), with a note
OPTIONAL_METRICS: dict[str, Any] = {
    "cost": dict[str, float | None],
    "variance": dict[str, float],
    "reused": dict[str, str],
    "adaptive": dict[str, Any],
}
#: fields of ``adaptive`` that the cost view computes with
ADAPTIVE_FIGURES: dict[str, Any] = {"half_width": float | None, "target": float | None, "met": bool | None}


def clean_metrics(metrics: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """``metrics`` without the optional figures that do not fit :data:`OPTIONAL_METRICS`, each noted."""
    out = dict(metrics)
    for key, hint in OPTIONAL_METRICS.items():
        if key not in out:
            continue
        found = problem(out[key], hint, f"its metric {key}")
        if found is None and key == "adaptive":
            found = fields_problem(out[key], ADAPTIVE_FIGURES, "its metric adaptive")
        if found:
            notes.append(f"{found}: shown without it")
            del out[key]
    return out


#: the fields of a run's environment the readers use (dlbench.measure.environment.capture) and their types; a field
#: that does not fit reads as absent, with a note (the report shows a dash)
ENVIRONMENT: dict[str, Any] = {
    "hostname": str | None, "os": str | None, "python": str | None, "dlbench_version": str | None,
    "git_commit": str | None, "kernel": str | None, "python_executable": str | None,
    "cpu": dict[str, Any], "frameworks": dict[str, str | None], "env": dict[str, str],
    "gpus": list[dict[str, Any]], "blas": list[dict[str, Any]],
    "memory_bytes": float | None, "usable_cores": int | None, "physical_cores": int | None,
    "logical_cores": int | None,
}
#: the fields of ``environment.cpu`` the readers use
CPU: dict[str, Any] = {"model": str | None, "arch": str | None, "flags": list[str], "precision": dict[str, str]}


def clean_environment(env: dict[str, Any], what: str, notes: list[str]) -> dict[str, Any]:
    """``env`` without the fields that do not fit :data:`ENVIRONMENT` (and :data:`CPU`), each noted."""
    out = dict(env)
    for key, hint in ENVIRONMENT.items():
        if key in out and (found := problem(out[key], hint, f"{what}.{key}")):
            notes.append(f"{found}: read as absent")
            del out[key]
    if "cpu" in out:
        cpu = out["cpu"] = dict(out["cpu"])
        for key, hint in CPU.items():
            if key in cpu and (found := problem(cpu[key], hint, f"{what}.cpu.{key}")):
                notes.append(f"{found}: read as absent")
                del cpu[key]
    return out


#: gate verdicts from the most to the least lenient: where two records of one verdict disagree the stricter stands
VERDICTS = ("pass", "unknown", "unsupported", "fail", "not_equivalent")


def stricter(a: Any, b: Any) -> Any:
    """The stricter of two stored verdicts (a verdict dlbench does not write counts as strictest: it is no pass)."""
    rank = {v: i for i, v in enumerate(VERDICTS)}
    return a if rank.get(a, len(VERDICTS)) >= rank.get(b, len(VERDICTS)) else b


#: a lease row's columns and their types (dlbench.storage.lease); a row that does not fit is a dead driver's
LEASE: dict[str, Any] = {"pid": int, "host": str, "token": str, "heartbeat": float}


def lease_problem(row: dict[str, Any]) -> str | None:
    """What is wrong with a stored lease (None: it fits :data:`LEASE`, its pid a process id)."""
    found = next((p for k, h in LEASE.items() if (p := problem(row.get(k), h, k))), None)
    if found is None and row["pid"] <= 0:
        found = f"pid is {row['pid']}, not a process id"
    return found
