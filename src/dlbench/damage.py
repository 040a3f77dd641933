"""Stored rows that cannot be what dlbench wrote: named and set aside, never trusted.

A database is a file: a disk error, a hand edit or another program can leave a sample stored as the
text ``'NaN'``, a time of 0 or ``9e999`` or below zero, or text that is not JSON where the store keeps
JSON (a cell's metrics and warnings, a run's suite, its environment). One such row used to break every
reader of the database (``show``, ``report``, ``compare``, ``export``, ``history``). Now the store and
:mod:`dlbench.results` check what they read with the functions here: a damaged cell is left out of
its run with a note naming it and what is wrong, a damaged run-level field reads as empty with a
note, and every other cell and run reads as before. ``dlbench check`` lists every note of a
database. Nothing here writes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any


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


#: metrics that every reader treats as numbers (bytes, a loop count)
NUMERIC_METRICS = ("peak_rss_bytes", "rss_growth_bytes", "loop_k", "global_batch", "call_samples")


def check_metrics(metrics: dict[str, Any]) -> None:
    """The metrics the readers compute with hold numbers (or nothing); :class:`Damaged` otherwise."""
    for key in NUMERIC_METRICS:
        value = metrics.get(key)
        if value is not None and not is_number(value):
            raise Damaged(f"metric {key} is {value!r}, not a number")
    for key in ("device_memory", "threads_readback", "profile", "latency", "loadgen"):
        value = metrics.get(key)
        if value is not None and not isinstance(value, dict):
            raise Damaged(f"metric {key} is {value!r}, not a mapping")
    for key in ("convergence",):
        value = metrics.get(key)
        if value is not None and not isinstance(value, list):
            raise Damaged(f"metric {key} is {value!r}, not a list")
