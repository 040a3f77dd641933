"""Framework profiles of a timed closure: a Chrome trace kept with the run and a top-operations table.

A profile answers "which operations" where a timing answers "how long". It is taken in the first
measuring process of a cell, after its timed calls and never during them (a profiler's hooks cost
time; the timed samples hold none of it), over a few more calls of the same closure. Each backend
runs its framework's own profiler (``Backend.profile``) and returns the trace it wrote, in the Chrome
trace event format (``{"traceEvents": [...]}``, which chrome://tracing and Perfetto read), and which
of its events are operations; this module turns those into the table: per operation name its calls,
self time (its duration minus that of the operations nested in it on the same thread) and total time.
"""

from __future__ import annotations

import gzip
import json
import re
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dlbench.core.outputs import OutputDir, write_file

#: operations kept in the stored table (the trace file keeps every event)
TOP = 25


@dataclass(frozen=True)
class ProfileTrace:
    """What a backend's profiler left: the trace file and the events that are operations."""

    path: Path
    ops: list[dict[str, Any]]
    #: the profiler, as the framework names it (e.g. ``torch.profiler``)
    tool: str


@dataclass(frozen=True)
class OpTime:
    name: str
    calls: int
    self_us: float
    total_us: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def read_trace(path: Path) -> list[dict[str, Any]]:
    """The events of a Chrome trace file (plain or gzipped JSON; an object with ``traceEvents`` or a
    bare list, both forms the format allows)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def write_trace(events: Iterable[dict[str, Any]], path: Path) -> Path:
    """A Chrome trace file, whole or not at all, never through a link (:func:`dlbench.core.outputs.write_file`)."""
    return write_file(path, json.dumps({"traceEvents": list(events), "displayTimeUnit": "ms"}))


def complete_events(events: Iterable[dict[str, Any]], keep: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
    """The complete (``ph == "X"``) events ``keep`` selects."""
    return [e for e in events if e.get("ph") == "X" and "dur" in e and keep(e)]


def paired_events(events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Begin/end pairs (``ph`` ``B`` then ``E`` on the same thread, nested as a stack, the form MXNet's
    profiler writes) as complete events (``X`` with ``dur``), the begin event's fields kept; complete
    events pass through."""
    out: list[dict[str, Any]] = []
    open_: dict[tuple, list[dict[str, Any]]] = {}
    for e in sorted(events, key=lambda e: float(e.get("ts", 0))):
        where = (e.get("pid"), e.get("tid"))
        if e.get("ph") == "B":
            open_.setdefault(where, []).append(e)
        elif e.get("ph") == "E" and open_.get(where):
            begin = open_[where].pop()
            out.append({**begin, "ph": "X", "dur": float(e["ts"]) - float(begin["ts"])})
        elif e.get("ph") == "X":
            out.append(e)
    return out


def op_table(ops: list[dict[str, Any]]) -> list[OpTime]:
    """Operations by self time, largest first: a nested operation's time is its parent's total, not
    its parent's self time (torch's ``aten::linear`` holds its ``aten::addmm``)."""
    self_us: dict[str, float] = {}
    total_us: dict[str, float] = {}
    calls: dict[str, int] = {}
    by_thread: dict[tuple, list[dict[str, Any]]] = {}
    for e in ops:
        by_thread.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    for events in by_thread.values():
        events.sort(key=lambda e: (float(e["ts"]), -float(e["dur"])))
        stack: list[tuple[float, str]] = []  # (end time, name) of the enclosing operations
        for e in events:
            start, dur, name = float(e["ts"]), float(e["dur"]), str(e["name"])
            while stack and stack[-1][0] <= start:
                stack.pop()
            if stack:  # nested: its time is not its parent's own
                self_us[stack[-1][1]] -= dur
            self_us[name] = self_us.get(name, 0.0) + dur
            total_us[name] = total_us.get(name, 0.0) + dur
            calls[name] = calls.get(name, 0) + 1
            stack.append((start + dur, name))
    rows = [OpTime(n, calls[n], max(self_us[n], 0.0), total_us[n]) for n in calls]
    return sorted(rows, key=lambda r: -r.self_us)


def op_kind(name: str) -> str:
    """What kind of operation an event is: the op type of a ``name:Type`` event (TensorFlow, ONNX Runtime,
    OpenVINO), an HLO instruction without XLA's instance number (``transpose_copy_fusion.71``), any
    other name as it is (torch's ``aten::addmm``). XLA names each fusion apart, so a kind that takes
    half of a compiled model's time can be spread over a hundred small rows of the table."""
    kind = name.rpartition(":")[2] if ":" in name and "::" not in name else name
    return re.sub(r"\.\d+$", "", kind) or name


def kind_table(rows: list[OpTime]) -> list[OpTime]:
    """The operation table summed by :func:`op_kind`, largest self time first."""
    kinds: dict[str, list[float]] = {}
    for r in rows:
        k = kinds.setdefault(op_kind(r.name), [0, 0.0, 0.0])
        k[0] += r.calls
        k[1] += r.self_us
        k[2] += r.total_us
    return sorted((OpTime(n, int(c), s, t) for n, (c, s, t) in kinds.items()), key=lambda r: -r.self_us)


def profile_closure(profile: Callable[[Callable[[], Any], int, Path], ProfileTrace], fn: Callable[[], Any],
                    calls: int, outdir: Path) -> dict[str, Any]:
    """Run ``calls`` calls of ``fn`` under a backend's profiler; every file it wrote is kept in
    ``outdir`` (a folder of the run's own, made by the parent). What a cell stores: the trace file
    (relative to ``outdir``), the profiler, every operation's self time summed, the :data:`TOP`
    operations and the :data:`TOP` kinds of operation (:func:`kind_table`).

    A profiler follows any link it meets, so it writes in a fresh temporary folder, and its files are
    copied into ``outdir`` through :class:`~dlbench.core.outputs.OutputDir` (a link planted there is
    replaced, never written through)."""
    with tempfile.TemporaryDirectory(prefix="dlbench-profile-") as tmp:
        trace = profile(fn, calls, Path(tmp))
        table = op_table(trace.ops)
        rel = trace.path.relative_to(tmp)
        OutputDir(outdir.parent, own=True).copy_from(Path(tmp), outdir.name)
    return {"trace": str(rel), "tool": trace.tool, "calls": calls,
            "self_us_total": sum(r.self_us for r in table), "ops": [r.to_dict() for r in table[:TOP]],
            "kinds": [r.to_dict() for r in kind_table(table)[:TOP]]}


def xspace_events(space: Any) -> list[dict[str, Any]]:
    """Chrome trace events from an XSpace (the protobuf TensorFlow's and XLA's profilers write as
    ``*.xplane.pb``): one process per plane, one thread per line; an event's metadata display name
    (TensorFlow's op type, e.g. ``MatMul``) is kept as ``args.op_type``, and the HLO instruction an
    event of an XLA-compiled cluster ran (its ``hlo_op`` stat, e.g. ``convolution.2``) as ``args.hlo_op``."""
    events: list[dict[str, Any]] = []
    for pid, plane in enumerate(space.planes):
        events.append({"ph": "M", "pid": pid, "name": "process_name", "args": {"name": plane.name}})
        for line in plane.lines:
            tid = line.id
            events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name",
                           "args": {"name": line.display_name or line.name}})
            origin_ps = line.timestamp_ns * 1000
            for ev in line.events:
                meta = plane.event_metadata[ev.metadata_id]
                out = {"ph": "X", "pid": pid, "tid": tid, "name": meta.name,
                       "ts": (origin_ps + ev.offset_ps) / 1e6, "dur": ev.duration_ps / 1e6}
                args = {"op_type": meta.display_name} if meta.display_name else {}
                for stat in ev.stats:
                    if plane.stat_metadata[stat.metadata_id].name == "hlo_op":
                        args["hlo_op"] = plane.stat_metadata[stat.ref_value].name if stat.ref_value else stat.str_value
                if args:
                    out["args"] = args
                events.append(out)
    return events
