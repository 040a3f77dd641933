"""Energy counters read around a measuring process's timed calls, and the figures made from them.

Two kinds of counter, both cumulative hardware counters read twice (never a power estimate, never a
TDP):

* **RAPL** through Linux's powercap sysfs interface: each CPU package's zone
  ``intel-rapl:N`` (name ``package-N``) and its DRAM subzone (``intel-rapl:N:M`` named ``dram``), file
  ``energy_uj`` in microjoules, wrapping back to 0 past ``max_energy_range_uj``. The root is
  ``/sys/class/powercap``, or ``$DLBENCH_POWERCAP_ROOT`` (the tests plant a fake tree there). Other
  zones are left out on purpose: ``core``/``uncore`` are parts of their package, ``psys`` holds the
  packages, and ``intel-rapl-mmio`` repeats a package through another interface.
* **NVML**'s ``nvmlDeviceGetTotalEnergyConsumption``: millijoules since the driver loaded (64 bits:
  no wrap), read through ``pynvml`` (nvidia-ml-py) where it is installed, only for a cell on a GPU,
  of the GPU the cell runs on.

:class:`Meter` is read by the timer right before the first and right after the last timed call
(:func:`dlbench.measure.timer.time_callable`; generation: around the timed generations). What it
stores is raw: per counter its start and end readings, its unit and its wrap range; with the window's
length, its calls and what one call processes (samples or tokens). :func:`figures` turns a cell's
records into J per sample (or per token) and average watts at analysis time, so every figure is
recomputable from what the store keeps. Where no counter can be read, the record says which were
looked for and why none served (``no_counter``), and :func:`figures` estimates nothing.

Why not Zeus or CodeCarbon (docs/energy.md): both read these same counters, but a measuring process
runs in every framework's own environment (Python 3.8 to 3.13), where neither can be installed
without pandas, pydantic and more; Zeus tracks RAPL wrap-around with a polling process per counter (a
process competing with the timed calls for the pinned cores) and reads a fixed sysfs path (no fake
tree without patching its module); CodeCarbon falls back to a TDP estimate where RAPL is missing, the
very figure dlbench must never show.
"""

from __future__ import annotations

import os
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: the environment variable naming another powercap root (a fake tree in the tests)
POWERCAP_ROOT_ENV = "DLBENCH_POWERCAP_ROOT"
POWERCAP_ROOT = "/sys/class/powercap"
#: NVML's function read, as the record names the counter
NVML_COUNTER = "nvmlDeviceGetTotalEnergyConsumption"
#: the units the counters count in, joules
RAPL_UNIT_J = 1e-6
NVML_UNIT_J = 1e-3
#: the power above which a RAPL counter could wrap twice in a window (checked at analysis: one wrap is
#: all two readings can see)
WRAP_CHECK_W = 1000.0

_PACKAGE = re.compile(r"intel-rapl:(\d+)")
_SUBZONE = re.compile(r"intel-rapl:(\d+):(\d+)")


@dataclass
class Counter:
    """One counter: where it is read, its unit and its wrap range (in its own units; None: none)."""

    domain: str  # "package-0", "dram-0", "gpu0"
    source: str  # "rapl", "nvml"
    counter: str  # the file read, or NVML's function and the GPU's index
    unit_j: float
    wrap: int | None
    read: Callable[[], int]  # the counter's value now

    def describe(self) -> dict[str, Any]:
        return {"domain": self.domain, "source": self.source, "counter": self.counter, "unit_j": self.unit_j,
                "wrap": self.wrap}


def powercap_root() -> Path:
    return Path(os.environ.get(POWERCAP_ROOT_ENV) or POWERCAP_ROOT)


def _read_int(path: Path) -> int:
    return int(path.read_text().strip())


def _rapl_counter(zone: Path, domain: str) -> Counter:
    """A zone's counter; raises OSError or ValueError where it cannot be read (root-only since Linux 5.10)."""
    energy = zone / "energy_uj"
    wrap = _read_int(zone / "max_energy_range_uj")
    _read_int(energy)
    return Counter(domain, "rapl", str(energy), RAPL_UNIT_J, wrap, lambda: _read_int(energy))


def rapl_counters(root: Path) -> tuple[list[Counter], list[str]]:
    """Each package's counter and its DRAM's, and why none (or some) could be read."""
    if not root.is_dir():
        return [], [f"RAPL: no powercap directory {root}"]
    counters, notes = [], []
    packages = sorted((p for p in root.iterdir() if _PACKAGE.fullmatch(p.name)),
                      key=lambda p: int(p.name.split(":")[1]))
    if not packages:
        return [], [f"RAPL: no intel-rapl:* zone under {root}"]
    for pkg in packages:
        zones = [(pkg, None)] + [(z, z.name) for z in sorted(pkg.iterdir()) if _SUBZONE.fullmatch(z.name)]
        for zone, sub in zones:
            try:
                name = (zone / "name").read_text().strip()
            except OSError as exc:
                notes.append(f"RAPL: {zone / 'name'}: {exc.strerror or exc}")
                continue
            if (name != "dram") if sub is not None else not name.startswith("package"):
                continue  # psys (holds the packages), core and uncore (parts of theirs)
            domain = name if sub is None else f"dram-{pkg.name.split(':')[1]}"
            try:
                counters.append(_rapl_counter(zone, domain))
            except (OSError, ValueError) as exc:
                why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
                notes.append(f"RAPL: {zone / 'energy_uj'} unreadable ({why})")
    if not counters and not notes:
        notes.append(f"RAPL: no package zone under {root}")
    return counters, notes


def gpu_indices(device: str) -> list[int]:
    """The NVML index of the GPU a cell's device names (``cuda``: 0, ``cuda:1``: 1), through
    ``CUDA_VISIBLE_DEVICES`` where it lists indices; none for the CPU."""
    if device == "cpu":
        return []
    tail = device.rpartition(":")[2]
    local = int(tail) if tail.isdigit() else 0
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if visible and all(v.isdigit() for v in visible) and local < len(visible):
        return [int(visible[local])]
    return [local]


def load_nvml() -> Any:
    """The ``pynvml`` module (nvidia-ml-py), or None where it is not installed."""
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        return None
    return pynvml


def nvml_counters(nvml: Any, gpus: list[int]) -> tuple[list[Counter], list[str]]:
    """The total-energy counter of each GPU in ``gpus``, and why none could be read. ``nvml``: the
    ``pynvml`` module or a stand-in with its functions (the tests' seam); None: not installed."""
    if not gpus:
        return [], ["NVML: not read (a CPU cell)"]
    if nvml is None:
        return [], ["NVML: pynvml (nvidia-ml-py) is not installed"]
    try:
        nvml.nvmlInit()
    except Exception as exc:  # no driver, no GPU: NVMLError's subclasses
        return [], [f"NVML: no driver ({exc})"]
    counters, notes = [], []
    for i in gpus:
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            int(nvml.nvmlDeviceGetTotalEnergyConsumption(handle))
        except Exception as exc:  # before Volta, or a GPU NVML does not list
            notes.append(f"NVML: GPU {i} has no total-energy counter ({exc})")
            continue
        counters.append(Counter(f"gpu{i}", "nvml", f"{NVML_COUNTER}(gpu {i})", NVML_UNIT_J, None,
                                lambda h=handle: int(nvml.nvmlDeviceGetTotalEnergyConsumption(h))))
    return counters, notes


class Meter:
    """The counters of one measuring process, read at :meth:`start` and :meth:`stop`."""

    def __init__(self, device: str = "cpu", root: Path | None = None, nvml: Any = None) -> None:
        """``root``: the powercap tree (default :func:`powercap_root`); ``nvml``: a stand-in for the
        ``pynvml`` module (default: the installed one, :func:`load_nvml`)."""
        self.nvml = load_nvml() if nvml is None else nvml
        rapl, notes = rapl_counters(root or powercap_root())
        gpu, gpu_notes = nvml_counters(self.nvml, gpu_indices(device))
        self.counters: list[Counter] = rapl + gpu
        self.notes = notes + gpu_notes
        self.start_ns = self.stop_ns = 0
        self.readings: dict[str, list[int | None]] = {}

    def _read(self, c: Counter) -> int | None:
        try:
            return c.read()
        except Exception as exc:  # a counter that turned unreadable mid-run: its domain is left out
            self.notes.append(f"{c.source.upper()}: {c.counter} unreadable ({exc})")
            return None

    def start(self) -> None:
        self.readings = {c.domain: [self._read(c), None] for c in self.counters}
        self.start_ns = time.perf_counter_ns()

    def stop(self) -> None:
        """The window's end (read again, a later call moves it: the timer reads after each sample)."""
        for c in self.counters:
            self.readings[c.domain][1] = self._read(c)
        self.stop_ns = time.perf_counter_ns()

    def close(self) -> None:
        """Let NVML go (RAPL holds nothing open)."""
        if self.nvml is not None and any(c.source == "nvml" for c in self.counters):
            try:
                self.nvml.nvmlShutdown()
            except Exception:  # shutting down what is gone changes no reading
                pass

    def record(self, calls: int, per_call: int, unit: str) -> dict[str, Any]:
        """The raw record a cell stores for this process: ``calls`` timed in the window, ``per_call``
        samples (or tokens, ``unit``) each."""
        counters = [{**c.describe(), "start": self.readings[c.domain][0], "end": self.readings[c.domain][1]}
                    for c in self.counters if None not in self.readings.get(c.domain, [None])]
        return {"window_ns": self.stop_ns - self.start_ns, "calls": calls, "per_call": per_call, "unit": unit,
                "counters": counters, "looked_for": list(dict.fromkeys(self.notes))}


# --- analysis ------------------------------------------------------------------------------------
def joules(counter: dict[str, Any]) -> float:
    """A counter's energy over its window: end - start, plus its wrap range where it wrapped (end <
    start: one wrap, all two readings can see). A counter without a wrap range that went back (a
    driver reloaded) has no figure: ValueError."""
    delta = counter["end"] - counter["start"]
    if delta < 0:
        if counter["wrap"] is None:
            raise ValueError(f"{counter['counter']} went back from {counter['start']} to {counter['end']}")
        delta += counter["wrap"]
    return delta * counter["unit_j"]


def unit_label(unit: str) -> str:
    return f"J/{unit}"


def resolution_text(unit_j: float) -> str:
    return {1e-6: "1 µJ", 1e-3: "1 mJ"}.get(unit_j, f"{unit_j:g} J")


def counter_text(counter: dict[str, Any]) -> str:
    """``RAPL package-0 (1 µJ)``: the counter's source, domain and resolution."""
    return f"{counter['source'].upper()} {counter['domain']} ({resolution_text(counter['unit_j'])})"


def figures(records: list[dict[str, Any]] | None) -> dict[str, Any]:
    """A cell's energy figures from its processes' raw records (empty: none recorded). Per process its
    joules (all domains) over the samples or tokens its timed calls processed, and over the window's
    seconds; the cell's figure is the median of its processes'. ``no_counter``: what was looked for,
    where no process read any counter."""
    if not records:
        return {}
    measured = [r for r in records if r["counters"]]
    if not measured:
        notes = list(dict.fromkeys(n for r in records for n in r["looked_for"]))
        return {"unit": records[0]["unit"], "no_counter": "; ".join(notes) or "no counter"}
    per_unit, watts, by_domain, warnings = [], [], {}, []
    for r in measured:
        seconds = r["window_ns"] / 1e9
        units = r["calls"] * r["per_call"]
        if seconds <= 0 or units <= 0:
            raise ValueError(f"an energy window of {seconds} s over {units} {r['unit']}s")
        total = 0.0
        for c in r["counters"]:
            j = joules(c)
            total += j
            by_domain.setdefault(c["domain"], []).append(j / units)
            if c["wrap"] is not None and seconds > c["wrap"] * c["unit_j"] / WRAP_CHECK_W:
                warnings.append(f"{c['counter']}: a window of {seconds:.0f} s could hold more than one wrap "
                                f"above {WRAP_CHECK_W:.0f} W; its energy may be undercounted")
        per_unit.append(total / units)
        watts.append(total / seconds)
    if len(measured) < len(records):
        warnings.append(f"{len(records) - len(measured)} of {len(records)} processes read no counter")
    return {"unit": measured[0]["unit"], "j_per_unit": statistics.median(per_unit),
            "watts": statistics.median(watts), "j_per_unit_processes": per_unit, "watts_processes": watts,
            "j_per_unit_by_domain": {d: statistics.median(v) for d, v in by_domain.items()},
            "counters": [{k: v for k, v in c.items() if k not in ("start", "end")} for c in measured[0]["counters"]],
            "processes": len(measured), "warnings": list(dict.fromkeys(warnings))}
