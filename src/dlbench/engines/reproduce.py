"""``dlbench reproduce``: re-run a published table on today's frameworks and print both.

A target (``bahrampour2016-table3``...) is a table of ``report/data/papers.yaml``: its rows and columns name
the paper's framework, model, scenario, batch size, thread count and device, and the value the paper
printed. Each paper framework maps to itself where dlbench can run it here (its own environment
included), else to its successor (:func:`map_framework`, from the ``frameworks`` of the data file); thread counts are
clipped to the cores present (the paper's 12 threads are all cores of a 2-core machine; on a larger
machine they stay 12). The distinct cells are run as one suite through the API, as `dlbench run` runs one (so they
are stored, reportable and comparable), then each published value is printed beside ours, with
both machines. A setting that cannot run here says why, and a value the paper never printed says so.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from dlbench.core.errors import UsageError
from dlbench.report.results import CellResult, RunResults

QUICK = {"warmup": 1, "min_iters": 3, "min_time_s": 0.0, "repeats": 1, "timeout_s": 600.0}
FULL = {"warmup": 10, "min_iters": 20, "min_time_s": 2.0, "repeats": 3, "timeout_s": 3600.0}


@functools.cache
def load_papers() -> dict[str, Any]:
    text = resources.files("dlbench.report").joinpath("data", "papers.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


def targets() -> dict[str, dict[str, Any]]:
    return load_papers()["tables"]


@dataclass(frozen=True)
class Lineage:
    """A paper framework today: ``itself`` (the dlbench framework that is the same project) and its
    ``successor`` (what continues it), either None where there is none."""

    itself: str | None
    successor: str | None
    why: str


@dataclass(frozen=True)
class FrameworkMap:
    """What a paper framework is measured as here, and whether that is the framework itself."""

    paper: str
    ours: str | None
    relation: str  # "itself", "successor" or "none"
    why: str

    @property
    def text(self) -> str:
        """``Chainer->chainer (itself)``, ``Caffe->torch (successor)``, ``Neon->none``."""
        return f"{self.paper}->{self.ours} ({self.relation})" if self.ours else f"{self.paper}->none"


def lineages() -> dict[str, Lineage]:
    """The data file's ``frameworks``: every framework a transcribed table names."""
    return {name: Lineage(d.get("itself"), d.get("successor"), d["why"])
            for name, d in load_papers()["frameworks"].items()}


def map_framework(paper_fw: str, backends: dict[str, str | None]) -> FrameworkMap:
    """Itself wherever dlbench can run it here (``backends``: dlbench framework -> installed version,
    a framework environment counting as installed), else its successor; where neither runs, the one
    that would (itself first), so the reason it is skipped names it."""
    lin = lineages().get(paper_fw)
    if lin is None:
        return FrameworkMap(paper_fw, None, "none", "unknown to dlbench")
    if lin.itself and backends.get(lin.itself):
        return FrameworkMap(paper_fw, lin.itself, "itself", lin.why)
    if lin.successor and (backends.get(lin.successor) or not lin.itself):
        why = lin.why
        if lin.itself:
            why += f"; {lin.itself} itself is not installed here ({_install_hint(lin.itself)})"
        return FrameworkMap(paper_fw, lin.successor, "successor", why)
    if lin.itself:
        return FrameworkMap(paper_fw, lin.itself, "itself", lin.why)
    return FrameworkMap(paper_fw, None, "none", lin.why)


def _install_hint(framework: str) -> str:
    from dlbench import envs

    return f"dlbench envs create {framework}" if framework in envs.recipes() else f"pip install 'dlbench[{framework}]'"


def paper_of(target: str) -> dict[str, Any]:
    return load_papers()["papers"][targets()[target]["paper"]]


def get_target(name: str) -> dict[str, Any]:
    if name not in targets():
        raise UsageError(f"no reproducible table {name!r}; known: {', '.join(targets())} (dlbench reproduce --list)")
    return targets()[name]


def parse_published(text: str | None) -> float | None:
    """A printed value as a number ("15.444" -> 15.444; "-" and "not printed" -> None)."""
    if text is None:
        return None
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


# --- the plan: every (row, column) of a table as one setting --------------------------------------
@dataclass
class Setting:
    row: str
    column: str
    paper_framework: str
    framework: str | None  # ours
    model: str
    scenario: str | None
    batch: int
    metric: str
    unit: str
    paper_threads: int | None
    threads: int | None  # ours
    paper_device: str
    device: str  # ours
    hardware: str
    published: str | None  # as printed; None: not printed
    relation: str = "successor"  # what ``framework`` is to ``paper_framework``: itself, successor or none
    sum_of: list[int] = field(default_factory=list)  # indexes of the settings this one adds up
    skip: str = ""  # why it is not run here

    @property
    def axes(self) -> tuple:
        return (self.framework, self.model, self.scenario, self.batch, self.threads, self.device)


@dataclass
class Environment:
    """What this machine offers a reproduction."""

    cores: int
    has_gpu: bool
    backends: dict[str, str | None]  # dlbench framework -> installed version (None: backend known, not installed)
    gpu_device: str = "cuda"  # where the paper's GPU rows run here ("cpu": on the CPU anyway)
    only: tuple[str, ...] = ()  # restrict to these of our frameworks


def _expand_rows(t: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows as printed; figure rows (``models`` + per-model batches, no values) become one row per batch."""
    out = []
    for r in t["rows"]:
        if "models" not in r:
            out.append(r)
            continue
        for model in r["models"]:
            for batch in t["batches_by_model"][model]:
                out.append({**r, "setting": f"{r['framework']} {model} b={batch}", "model": model, "batch": batch})
    return out


def _unavailable(paper_fw: str, env: Environment) -> tuple[str | None, str]:
    m = map_framework(paper_fw, env.backends)
    if m.ours is None:
        return None, f"{paper_fw}: {m.why}"
    fw = m.ours
    if fw not in env.backends:
        return fw, f"{paper_fw} -> {fw}: dlbench has no {fw} backend"
    if env.backends[fw] is None:
        return fw, f"{paper_fw} -> {fw}: {fw} is not installed ({_install_hint(fw)})"
    if env.only and fw not in env.only:
        return fw, f"{fw} not selected (--framework {','.join(env.only)})"
    return fw, ""


def plan(name: str, env: Environment) -> list[Setting]:
    t = get_target(name)
    paper = paper_of(name)
    defaults = t.get("defaults", {})
    settings: list[Setting] = []
    for r in _expand_rows(t):
        fw, why = _unavailable(r["framework"], env)
        relation = map_framework(r["framework"], env.backends).relation
        first = len(settings)
        for j, col in enumerate(t["columns"]):
            cfg = {**defaults, **col, **{k: v for k, v in r.items() if k not in ("values", "setting")}}
            model = cfg.get("model", "")
            batch = int(cfg.get("batch") or t.get("batch_by_model", {}).get(model, 0))
            paper_device = cfg.get("device", "cpu")
            hardware = str(cfg.get("hardware") or (paper["hardware"]["summary"] if paper_device == "cpu"
                                                   else paper["hardware"].get("gpu", "GPU")))
            if cfg.get("hardware") in ("desktop", "server"):
                hardware = paper["hardware"][cfg["hardware"]]
            published = None if t.get("printed", True) is False else r["values"][j]
            s = Setting(row=r.get("setting", r["framework"]), column=col["label"], paper_framework=r["framework"],
                        framework=fw, model=model, scenario=cfg.get("scenario"), batch=batch,
                        metric=cfg.get("metric", "time"), unit=cfg.get("unit", "ms"),
                        paper_threads=cfg.get("threads") if paper_device == "cpu" else None, threads=None,
                        paper_device=paper_device, device="cpu", hardware=hardware, published=published,
                        relation=relation, skip=why)
            if "sum_of" in col:
                ids = [c["id"] for c in t["columns"]]
                s.sum_of = [first + ids.index(c) for c in col["sum_of"]]
                s.scenario = None
            elif not s.skip:
                _place(s, int(cfg.get("gpus", 1)), env)
            settings.append(s)
    for s in settings:
        if s.sum_of and not s.skip:
            parts = [settings[i] for i in s.sum_of]
            s.skip = next((p.skip for p in parts if p.skip), "")
            s.threads, s.device = parts[0].threads, parts[0].device
    return settings


def _place(s: Setting, gpus: int, env: Environment) -> None:
    """Our device and thread count for a setting (or why it cannot run here)."""
    if s.paper_device == "cpu":
        s.threads = min(int(s.paper_threads or env.cores), env.cores)
        return
    s.threads = env.cores
    if gpus > 1:
        s.skip = f"needs {gpus} GPUs in data parallel; dlbench times one device per cell"
    elif env.gpu_device != "cpu" and not env.has_gpu:
        s.skip = "a GPU setting and this machine has no NVIDIA GPU (--gpu-device cpu runs it on the CPU)"
    else:
        s.device = env.gpu_device


def suite_for(name: str, settings: list[Setting], protocol: dict[str, Any]):
    """One suite holding exactly the cells the runnable settings need (or None: nothing to run)."""
    from dlbench.planning.plan import Suite, suite_from_dict
    from dlbench.running.runner import plan_cells

    runnable = [s for s in settings if not s.skip and s.scenario]
    if not runnable:
        return None
    models = list(dict.fromkeys(s.model for s in runnable))
    batches: dict[str, list[int]] = {}
    for s in runnable:
        batches.setdefault(s.model, [])
        if s.batch not in batches[s.model]:
            batches[s.model].append(s.batch)
    data = {"name": f"reproduce-{name}", "description": f"dlbench reproduce {name}",
            "frameworks": list(dict.fromkeys(s.framework for s in runnable)), "models": models,
            "scenarios": list(dict.fromkeys(s.scenario for s in runnable)), "batch_sizes": batches,
            "threads": sorted({s.threads for s in runnable}), "devices": list(dict.fromkeys(s.device for s in runnable)),
            "protocol": protocol}
    suite: Suite = suite_from_dict(data, f"reproduce {name}")
    needed = {(s.framework, s.model, s.scenario, s.batch, s.threads, s.device) for s in runnable}
    _, cells = plan_cells(suite)
    extra = [c.to_dict() for c in cells if (c.framework, c.model, c.scenario, c.batch, c.threads, c.device) not in needed]
    return suite.model_copy(update={"exclude": extra}) if extra else suite


# --- our numbers beside theirs ----------------------------------------------------------------------
@dataclass
class Line:
    row: str
    column: str
    mapping: str  # "Caffe -> torch/eager (successor)"
    threads: str  # "12 -> 2"
    device: str  # "gpu -> cuda"
    hardware: str
    published: str  # as printed, or "not printed"
    ours: float | None
    ours_low: float | None
    ours_high: float | None
    unit: str
    ratio: float | None  # ours / published
    note: str


def _cell_value(c: CellResult, s: Setting) -> tuple[float | None, float | None, float | None, str]:
    if not c.ok:
        return None, None, None, f"{c.cell.status}: {c.cell.reason}"
    if s.metric == "time" and c.time_ms:
        k = 1e-3 if s.unit == "s" else 1.0
        return c.time_ms.median * k, c.time_ms.ci_low * k, c.time_ms.ci_high * k, ""
    if s.metric == "throughput" and c.time_ms:
        return s.batch / (c.time_ms.median / 1e3), s.batch / (c.time_ms.ci_high / 1e3), \
            s.batch / (c.time_ms.ci_low / 1e3), ""
    if s.metric == "gpu_memory":
        peak = (c.cell.metrics.get("device_memory") or {}).get("allocator_peak_bytes")
        if peak:
            return peak / 2**30, None, None, "allocator peak, GiB"
        return None, None, None, "no device memory on this device"
    return None, None, None, "no value"


def compare_lines(settings: list[Setting], res: RunResults | None) -> list[Line]:
    from dlbench.frameworks import FRAMEWORKS

    cells: dict[tuple, CellResult] = {}
    if res is not None:
        for c in res.cells:
            cells[(c.cell.framework, c.cell.model, c.cell.scenario, c.cell.batch, c.cell.threads, c.cell.device)] = c
    values: list[tuple[float | None, float | None, float | None, str]] = []
    lines = []
    for s in settings:
        variant = FRAMEWORKS[s.framework].variants[0] if s.framework in FRAMEWORKS else ""
        mapping = f"{s.paper_framework} -> {s.framework + '/' + variant if variant else s.framework or 'none'}"
        if s.framework:
            mapping += f" ({s.relation})"
        if s.skip:
            v: tuple = (None, None, None, f"not reproduced: {s.skip}")
        elif s.sum_of:
            parts = [values[i] for i in s.sum_of]
            total = None if any(p[0] is None for p in parts) else math.fsum(p[0] for p in parts)
            v = (total, None, None, "sum of our medians" if total is not None else "a part has no value")
        elif res is None:
            v = (None, None, None, "not run")
        else:
            c = cells.get(s.axes)
            v = _cell_value(c, s) if c is not None else (None, None, None, "not measured in this run")
        values.append(v)
        published = parse_published(s.published)
        ratio = v[0] / published if v[0] is not None and published else None
        note = v[3]
        if s.paper_device != "cpu" and s.device == "cpu" and not s.skip:
            note = "; ".join(filter(None, [note, "paper ran this on a GPU, ours on the CPU"]))
        ours_where = "" if s.skip else f" -> {s.threads}"
        lines.append(Line(s.row, s.column, mapping,
                          f"{s.paper_threads}{ours_where}" if s.paper_threads else f"-{ours_where}",
                          s.paper_device + ("" if s.skip or s.device == s.paper_device else f" -> {s.device}"), s.hardware,
                          s.published if s.published is not None else "not printed",
                          v[0], v[1], v[2], s.unit, ratio, note))
    return lines


def wide(lines: list[Line], columns: list[str]) -> tuple[list[str], list[list[str]]]:
    """One text row per paper row: its setting, then per column "published / ours / ours÷published"
    stacked on three lines, then the row's notes (each once). For a terminal; --json has everything."""
    from dlbench.report.tables import fmt_num

    header = ["paper setting", "framework", "threads", "device", *columns, "note"]
    out = []
    for i in range(0, len(lines), len(columns)):  # lines come row by row, one per column
        ls = lines[i:i + len(columns)]
        row, mapping = ls[0].row, ls[0].mapping
        threads = sorted({x.threads for x in ls})
        devices = sorted({x.device for x in ls})
        cells = []
        for x in ls:
            ours = "–" if x.ours is None else fmt_num(x.ours)
            ratio = "" if x.ratio is None else f"\n×{x.ratio:.2f}"
            cells.append(f"{x.published}\n{ours}{ratio}")
        notes = list(dict.fromkeys(x.note for x in ls if x.note))
        out.append([row, mapping, threads[0] if len(threads) == 1 else "per column",
                    devices[0] if len(devices) == 1 else "per column", *cells, "; ".join(notes)])
    return header, out


@dataclass
class Reproduction:
    target: str
    table: dict[str, Any]
    paper: dict[str, Any]
    mapping: list[FrameworkMap]
    lines: list[Line]
    run_id: str | None
    ours_hardware: str
    protocol: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "paper": self.paper["cite"], "table": self.table["table"],
                "section": self.table.get("section"), "caption": self.table.get("caption"),
                "notes": self.table.get("notes", []), "not_printed": self.table.get("not_printed"),
                "paper_hardware": self.paper["hardware"], "ours_hardware": self.ours_hardware,
                "mapping": [{**asdict(m), "ours": m.ours or "none"} for m in self.mapping],
                "run_id": self.run_id, "protocol": self.protocol, "lines": [asdict(line) for line in self.lines]}


def machine_summary(env: dict[str, Any]) -> str:
    cpu = (env.get("cpu") or {}).get("model") or "unknown CPU"
    mem = env.get("memory_bytes")
    gpus = ", ".join(g.get("name", "?") for g in env.get("gpus") or []) or "no GPU"
    return f"{cpu} ({env.get('usable_cores', '?')} usable cores), {mem / 2**30:.0f} GiB; {gpus}" if mem else \
        f"{cpu}; {gpus}"


def mapping_of(name: str, backends: dict[str, str | None]) -> list[FrameworkMap]:
    """Each framework the table names, as :func:`map_framework` maps it with ``backends``."""
    seen = dict.fromkeys(r["framework"] for r in targets()[name]["rows"])
    return [map_framework(fw, backends) for fw in seen]


def installed_backends() -> dict[str, str | None]:
    """Every dlbench framework -> its installed version here (None: not installed)."""
    from dlbench.frameworks import FRAMEWORKS, installed_version

    return {f: installed_version(f) for f in FRAMEWORKS}


def current_environment(gpu_device: str = "cuda", only: tuple[str, ...] = ()) -> Environment:
    import os

    from dlbench.measure.environment import gpu_info

    return Environment(cores=len(os.sched_getaffinity(0)), has_gpu=bool(gpu_info()),
                       backends=installed_backends(), gpu_device=gpu_device, only=only)


def check_selection(name: str, only: tuple[str, ...]) -> None:
    """``--framework`` must name installed frameworks that continue one of the table's: a selection
    that could run nothing is refused, not reported as an empty success."""
    if not only:
        return
    from dlbench.planning import resolve

    resolve.frameworks(list(only))
    ours = list(dict.fromkeys(m.ours for m in mapping_of(name, installed_backends()) if m.ours))
    stray = [f for f in only if f not in ours]
    if stray:
        raise UsageError(f"{name} has no setting for {', '.join(stray)} (its frameworks today: {', '.join(ours)})")


def reproduce(name: str, env: Environment | None = None, protocol: dict[str, Any] | None = None,
              db: str | Path | None = None, progress=None, dry_run: bool = False) -> Reproduction:
    """Plan the table's settings, run the runnable ones as one suite, and line them up with the paper."""
    from dlbench import api
    from dlbench.measure.environment import capture
    from dlbench.storage.store import DEFAULT_DB

    get_target(name)
    env = env or current_environment()
    check_selection(name, env.only)
    protocol = {**FULL, **(protocol or {})}
    settings = plan(name, env)
    suite = None if dry_run else suite_for(name, settings, protocol)
    res = None
    if suite is not None:
        res = api.run(suite, db=db or DEFAULT_DB, progress=progress, argv=["reproduce", name])
    machine = machine_summary(res.environment if res else capture())
    return Reproduction(name, targets()[name], paper_of(name), mapping_of(name, env.backends), compare_lines(settings, res),
                        res.run_id if res else None, machine, protocol)
