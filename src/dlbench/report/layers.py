"""Where the time goes: a run's ``layers`` cells as per-part breakdowns, the report's tables of them,
and ``dlbench explain``'s ranked account of the gap between two frameworks.

A breakdown is one (framework, variant, model, scenario, batch, threads, device): each part's median
time (:mod:`dlbench.models.split`), its analytic FLOPs and achieved GFLOP/s, the sum of the parts and
the whole model's own measured time beside it. An explanation sets two breakdowns side by side,
ranks the parts by how much of the difference they hold and says how much of the whole model's gap
the parts account for (the rest is in how each framework runs the model as one piece: fusion,
per-call overhead); for a gradient, with the same parts' forward times in the run, it splits each
part's difference into forward and backward. With the run's probe figures (``dlbench probe
--attach``) it adds each framework's GEMM and convolution rate, and where the whole model's cell was
profiled (``--profile``) the operations that took most of each framework's time.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from dlbench.cell_result import CellResult, RunResults
from dlbench.errors import UsageError
from dlbench.models import UnknownModelError, get_model
from dlbench.models.flops import closure_flops_per_sample
from dlbench.models.split import parse_part, split
from dlbench.report.document import DASH, Column, Section, Table, Value, fmt_num
from dlbench.scenarios.timed import FORWARD, GRADIENT

#: FLOPs of a part's call as a multiple of its forward pass, by the scenario it is timed in (the
#: layers scenario times parts in these two; more than 1: the call runs a backward pass)
FLOP_FACTORS = {s.name: s.flop_factor for s in (FORWARD, GRADIENT)}

#: a profiled whole model's operations an explanation names, by self time
PROFILE_OPS = 3

#: what the report's section says before its tables
INTRO = ("Each part of the model (models/split.py: a layer with its activation and pooling, a residual block, the "
         "LSTM) built alone through the framework's builders, gated, and timed in fresh processes like every cell: "
         "median ms, its share of the parts' sum and the GFLOP/s it reached, counted from what the part's closure "
         "computes (models/flops.py: the forward; for a gradient also the weight gradients and, after the first "
         "part, the input gradient). A rate above the machine's measured peak for its precision is marked. Below "
         "the parts, their sum and the whole model's own time: where the whole model is faster than the sum, fusion "
         "across parts saved time; where it is slower, per-call overhead added some. A difference within the 95% "
         "intervals of the whole model and of the parts' sum is marked as noise: neither.")


@dataclass
class PartTime:
    index: int
    label: str
    gflop: float  # per call (the cell's batch): what the part's closure computes (models/flops.py)
    ms: float | None
    status: str
    ci: tuple[float, float] | None = None  # the median's 95% interval
    pct_peak: float | None = None  # of its precision's measured peak (``CellResult.pct_peak``)
    peak: str | None = None  # that peak, named

    @property
    def above_peak(self) -> bool:
        """A rate above the machine's measured peak for its precision: the count or the peak is wrong."""
        return self.pct_peak is not None and self.pct_peak > 100

    @property
    def gflops(self) -> float | None:
        return self.gflop / (self.ms / 1e3) if self.ms else None


@dataclass
class Breakdown:
    framework: str
    variant: str
    model: str
    scenario: str
    batch: int
    threads: int
    device: str
    parts: list[PartTime]
    whole_ms: float | None
    whole_ci: tuple[float, float] | None = None  # the whole model's median's 95% interval
    whole_profile: dict[str, Any] | None = None  # the whole model's cell's profile (``measure.profile``)

    @property
    def sum_ms(self) -> float | None:
        times = [p.ms for p in self.parts]
        return None if any(t is None for t in times) else sum(times)  # type: ignore[arg-type]

    @property
    def sum_ci(self) -> tuple[float, float] | None:
        """The parts' sum's interval, conservatively: the sums of the parts' interval ends."""
        cis = [p.ci for p in self.parts]
        if any(c is None for c in cis):
            return None
        return sum(c[0] for c in cis), sum(c[1] for c in cis)  # type: ignore[index]

    @property
    def difference_is_noise(self) -> bool:
        """Whether whole - sum lies within the two figures' intervals (they overlap)."""
        a, b = self.whole_ci, self.sum_ci
        return a is not None and b is not None and a[0] <= b[1] and b[0] <= a[1]

    @property
    def measured_ms(self) -> float:
        """The sum over the parts that have a time (every part's share is of this)."""
        return sum(p.ms for p in self.parts if p.ms is not None)

    @property
    def where(self) -> tuple:
        return (self.model, self.scenario, self.batch, self.threads, self.device)


def _ms(c: CellResult | None) -> float | None:
    return c.time_ms.median if c is not None and c.ok and c.time_ms is not None else None


def _ci(c: CellResult | None) -> tuple[float, float] | None:
    return (c.time_ms.ci_low, c.time_ms.ci_high) if _ms(c) is not None else None


def breakdowns(res: RunResults) -> list[Breakdown]:
    """Every breakdown the run's cells make (a part's cell names its model; the whole model's cell
    of the same settings, when measured, is its ``whole_ms``)."""
    by_key = {(c.cell.framework, c.cell.variant, c.cell.model, c.cell.scenario, c.cell.batch, c.cell.threads,
               c.cell.device): c for c in res.cells}
    groups: dict[tuple, dict[int, CellResult]] = {}
    for (fw, variant, model, scenario, batch, threads, device), c in by_key.items():
        whole, index = parse_part(model)
        if index is not None:
            groups.setdefault((fw, variant, whole, scenario, batch, threads, device), {})[index] = c
    out = []
    for (fw, variant, whole, scenario, batch, threads, device), cells in groups.items():
        try:
            parts = split(get_model(whole))
        except UnknownModelError:  # a stored run of a model this dlbench no longer has
            continue
        backward = (FLOP_FACTORS.get(scenario) or 1.0) > 1  # the closure runs a backward pass
        times = [PartTime(p.index, p.label, closure_flops_per_sample(p.spec, backward) * batch / 1e9,
                          _ms(cells.get(p.index)), cells[p.index].cell.status if p.index in cells else "not measured",
                          _ci(cells.get(p.index)), cells[p.index].pct_peak if p.index in cells else None,
                          cells[p.index].peak if p.index in cells else None)
                 for p in parts]
        whole_cell = by_key.get((fw, variant, whole, scenario, batch, threads, device))
        ci = ((whole_cell.time_ms.ci_low, whole_cell.time_ms.ci_high) if _ms(whole_cell) is not None else None)
        profile = whole_cell.cell.metrics.get("profile") if whole_cell is not None else None
        out.append(Breakdown(fw, variant, whole, scenario, batch, threads, device, times, _ms(whole_cell), ci,
                             profile))
    return sorted(out, key=lambda b: (*b.where, b.framework, b.variant))


# --- the report's table ------------------------------------------------------------------------------
def _sum_value(b: Breakdown) -> Value:
    """The parts' sum; where a part has no time, a dash with the sum of the measured ones beside it."""
    if b.sum_ms is not None:
        return Value(fmt_num(b.sum_ms), b.sum_ms)
    measured = sum(p.ms is not None for p in b.parts)
    return Value(DASH, detail=f"{measured} of {len(b.parts)} parts measured: {fmt_num(b.measured_ms)}")


def _difference(b: Breakdown) -> Value:
    """whole - sum, marked as noise where it lies within the two figures' 95% intervals."""
    if b.whole_ms is None or b.sum_ms is None:
        return Value(DASH)
    d = b.whole_ms - b.sum_ms
    if b.difference_is_noise:
        return Value(f"{fmt_num(d)} (noise)", d, detail="within the 95% intervals of the whole and of the sum")
    return Value(fmt_num(d), d)


def layer_tables(res: RunResults) -> list[Table]:
    """One table per model, scenario, batch, threads and device: a row per part, per framework its
    time, share of the parts' sum and GFLOP/s; then the sum, the whole model and their difference."""
    by_where: dict[tuple, list[Breakdown]] = {}
    for b in breakdowns(res):
        by_where.setdefault(b.where, []).append(b)
    tables = []
    for (model, scenario, batch, threads, device), group in by_where.items():
        cols = [Column("part", "part", numeric=False), Column("layers", "layers", numeric=False),
                Column("gflop", "GFLOP per call")]
        for b in group:
            cols.append(Column(f"{b.framework}/{b.variant}", f"{b.framework}/{b.variant} ms (share, GFLOP/s)",
                               better="low"))
        rows = []
        for i, part in enumerate(group[0].parts):
            row = [Value(f"#{part.index}"), Value(part.label), Value(fmt_num(part.gflop))]
            for b in group:
                p, total = b.parts[i], b.measured_ms
                if p.ms is None:
                    row.append(Value(DASH, detail=p.status))
                else:
                    share = f"{100 * p.ms / total:.0f}%"
                    over = (f" (above the {p.peak}: the FLOP count or the peak is wrong)" if p.above_peak else "")
                    row.append(Value(fmt_num(p.ms), p.ms, detail=f"{share}, {fmt_num(p.gflops)} GFLOP/s{over}"))
            rows.append(row)
        rows.append([Value("sum of parts"), Value(""), Value("")] + [_sum_value(b) for b in group])
        rows.append([Value("whole model (measured)"), Value(""), Value("")]
                    + [Value(fmt_num(b.whole_ms), b.whole_ms) for b in group])
        rows.append([Value("whole − sum"), Value("fusion saved (<0) or per-call overhead added (>0), unless noise"),
                     Value("")] + [_difference(b) for b in group])
        tables.append(Table(f"{model} {scenario}: per part (batch {batch}, {threads} thread(s), {device})", cols, rows))
    return tables


# --- explain ----------------------------------------------------------------------------------------------
@dataclass
class Explanation:
    a: str
    b: str
    model: str
    scenario: str
    batch: int
    threads: int
    device: str
    whole_ms: dict[str, float | None]
    sum_ms: dict[str, float | None]
    #: parts ranked by |b - a|: index, label, ms of a and b, difference, its share of the parts' total
    #: difference; for a gradient with forward parts measured, the forward times and the backward difference
    parts: list[dict[str, Any]] = field(default_factory=list)
    probes: list[dict[str, Any]] = field(default_factory=list)
    #: the whole model's 95% intervals: a gap inside both is noise, not something to explain
    whole_ci: dict[str, tuple[float, float] | None] = field(default_factory=dict)
    #: per framework whose whole model was profiled: the profiler and its top operations, self ms per call
    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def gap_ms(self) -> float | None:
        a, b = self.whole_ms[self.a], self.whole_ms[self.b]
        return None if a is None or b is None else b - a

    @property
    def parts_gap_ms(self) -> float:
        """The parts' difference (B - A) summed over the parts both frameworks have a time for."""
        return sum(p["diff_ms"] for p in self.parts)

    @property
    def covered(self) -> float | None:
        """The share of the whole model's gap the parts' difference accounts for (1.0: all of it)."""
        gap = self.gap_ms
        return self.parts_gap_ms / gap if gap else None

    @property
    def backward_ms(self) -> float | None:
        """The parts' backward difference (gradient - forward, B - A), where the run has the forward parts."""
        split_parts = [p["backward_diff_ms"] for p in self.parts if p.get("backward_diff_ms") is not None]
        return sum(split_parts) if split_parts else None

    @property
    def within_noise(self) -> bool:
        """Whether the two whole-model medians' 95% intervals overlap."""
        a, b = self.whole_ci.get(self.a), self.whole_ci.get(self.b)
        return a is not None and b is not None and a[0] <= b[1] and b[0] <= a[1]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "gap_ms": self.gap_ms, "parts_gap_ms": self.parts_gap_ms, "covered": self.covered,
                "backward_ms": self.backward_ms, "within_noise": self.within_noise}

    def text(self, top: int = 5) -> str:
        wa, wb = self.whole_ms[self.a], self.whole_ms[self.b]
        lines = [f"{self.model} {self.scenario}, batch {self.batch}, {self.threads} thread(s), {self.device}: "
                 f"{self.a} {fmt_num(wa)} ms vs {self.b} {fmt_num(wb)} ms (whole model; gap B - A "
                 f"{fmt_num(self.gap_ms) if self.gap_ms is not None else DASH} ms); sum of parts "
                 f"{fmt_num(self.sum_ms[self.a])} vs {fmt_num(self.sum_ms[self.b])} ms"]
        if self.within_noise or self.covered is None:
            account = (f"  the whole-model gap is within the two medians' 95% intervals: noise, nothing to attribute; "
                       f"the parts differ by {self.parts_gap_ms:+.3g} ms")
        else:
            account = f"  the parts' difference, {self.parts_gap_ms:+.3g} ms, is {self.covered:.0%} of the whole model's gap"
            if abs(1 - self.covered) > 0.2:
                account += (f"; the other {self.gap_ms - self.parts_gap_ms:+.3g} ms is in each framework's whole "
                            "model (fusion across parts, per-call overhead), not in any one part")
        if self.backward_ms is not None:
            account += f"; of the parts' difference, {self.backward_ms:+.3g} ms is in the backward (gradient - forward)"
        lines.append(account)
        for rank, p in enumerate(self.parts[:top], 1):
            back = (f"; backward {p['backward_diff_ms']:+.3g} ms" if p.get("backward_diff_ms") is not None else "")
            lines.append(f"  {rank}. #{p['index']} {p['label']}: {p['diff_ms']:+.3g} ms ({p['share']:.0%} of the parts' "
                         f"difference{back}): {self.a} {fmt_num(p['a_ms'])} ms ({fmt_num(p['a_gflops'])} GFLOP/s), "
                         f"{self.b} {fmt_num(p['b_ms'])} ms ({fmt_num(p['b_gflops'])} GFLOP/s)")
        rest = self.parts[top:]
        if rest:
            lines.append(f"  ... {len(rest)} more part(s): {sum(p['diff_ms'] for p in rest):+.3g} ms together")
        for p in self.probes:
            lines.append(f"  probe {p['op']} ({p['scenario']}, {p['threads']} thread(s)), {p['framework']}: "
                         f"{fmt_num(p.get('gflops')) + ' GFLOP/s' if p.get('gflops') else fmt_num(p['median_ms']) + ' ms'}"
                         f" [{p['kernels']}]")
        for name, prof in self.profiles.items():
            ops = ", ".join(f"{op['name']} {fmt_num(op['self_ms'])} ms ({op['share']:.0%})" for op in prof["ops"])
            lines.append(f"  profile of the whole model, {name} ({prof['tool']}), self time per call by {prof['by']}: {ops}")
        return "\n".join(lines)


def explain(res: RunResults, a: str, b: str, model: str, scenario: str, threads: int | None = None) -> list[Explanation]:
    """Why ``b`` differs from ``a`` on ``model``'s ``scenario``: one explanation per batch, thread count
    and device the run has breakdowns of both for (``threads``: only that count)."""
    found = [x for x in breakdowns(res) if x.model == model and x.scenario == scenario
             and (threads is None or x.threads == threads)]
    frameworks = {x.framework for x in found} | {f"{x.framework}/{x.variant}" for x in found}
    if not found:
        have = sorted({(x.model, x.scenario) for x in breakdowns(res)})
        raise UsageError(f"run {res.run_id} has no layers cells of {model} {scenario}"
                         + (f" (it has: {', '.join(f'{m} {s}' for m, s in have)})" if have else
                            " (measure them with: dlbench run --scenario layers)"))
    missing = [f for f in (a, b) if f not in frameworks]
    if missing:
        raise UsageError(f"run {res.run_id} has no {model} {scenario} layers cells of {', '.join(missing)} "
                         f"(it has {', '.join(sorted(x.framework for x in found))})")
    probes = res.environment.get("probes", [])
    # a scenario with a backward pass: the same parts' forward times split each difference
    forward = FORWARD.name
    forwards = [x for x in breakdowns(res) if x.model == model and x.scenario == forward] if scenario != forward else []
    out = []
    wheres = dict.fromkeys(x.where for x in found)
    for where in wheres:
        xa, xb = (next((x for x in found if x.where == where and _named(x, n)), None) for n in (a, b))
        if xa is None or xb is None:
            continue
        fa, fb = (next((x for x in forwards if x.where[2:] == where[2:] and _named(x, n)), None) for n in (a, b))
        rows = []
        for i, (pa, pb) in enumerate(zip(xa.parts, xb.parts, strict=True)):
            if pa.ms is None or pb.ms is None:
                continue
            row = {"index": pa.index, "label": pa.label, "a_ms": pa.ms, "b_ms": pb.ms, "diff_ms": pb.ms - pa.ms,
                   "a_gflops": pa.gflops, "b_gflops": pb.gflops}
            a_fwd, b_fwd = (f.parts[i].ms if f is not None else None for f in (fa, fb))
            if a_fwd is not None and b_fwd is not None:
                row.update(a_forward_ms=a_fwd, b_forward_ms=b_fwd,
                           backward_diff_ms=(pb.ms - b_fwd) - (pa.ms - a_fwd))
            rows.append(row)
        total = sum(r["diff_ms"] for r in rows)
        for r in rows:
            r["share"] = r["diff_ms"] / total if total else 0.0
        rows.sort(key=lambda r: -abs(r["diff_ms"]))
        relevant = [p for p in probes if p["framework"] in (xa.framework, xb.framework) and p["threads"] == where[3]]
        profiles = {n: _top_ops(x.whole_profile) for n, x in ((a, xa), (b, xb)) if x.whole_profile}
        out.append(Explanation(a, b, model, scenario, where[2], where[3], where[4],
                               {a: xa.whole_ms, b: xb.whole_ms}, {a: xa.sum_ms, b: xb.sum_ms}, rows, relevant,
                               {a: xa.whole_ci, b: xb.whole_ci}, profiles))
    return out


def _top_ops(profile: dict[str, Any]) -> dict[str, Any]:
    """A stored profile's :data:`PROFILE_OPS` largest kinds of operation (``measure.profile.op_kind``;
    a profile stored before kinds were, its largest operations), self ms per profiled call and their
    share of every operation's self time."""
    calls, total = profile["calls"], profile["self_us_total"]
    by = "kind" if "kinds" in profile else "operation"
    ops = [{"name": op["name"], "self_ms": op["self_us"] / calls / 1e3, "share": op["self_us"] / total if total else 0.0}
           for op in profile["kinds" if by == "kind" else "ops"][:PROFILE_OPS]]
    return {"tool": profile["tool"], "by": by, "ops": ops}


def _named(x: Breakdown, name: str) -> bool:
    """``torch`` names a framework's (first measured) variant, ``torch/compile`` one variant."""
    return name in (x.framework, f"{x.framework}/{x.variant}")


def report_explanations(res: RunResults) -> list[str]:
    """For the report: per breakdown setting with two or more frameworks, the fastest against the slowest."""
    by_where: dict[tuple, list[Breakdown]] = {}
    for x in breakdowns(res):
        if x.whole_ms is not None:
            by_where.setdefault(x.where, []).append(x)
    lines = []
    for (model, scenario, _, threads, _), group in by_where.items():
        if len({x.framework for x in group}) < 2:
            continue
        group.sort(key=lambda x: x.whole_ms)
        fast, slow = (f"{x.framework}/{x.variant}" for x in (group[0], group[-1]))
        for e in explain(res, fast, slow, model, scenario, threads):
            lines.append(e.text(top=3))
    return lines


def section(res: RunResults) -> Section:
    """The report's "Where the time goes": the per-part tables, then the largest gaps explained."""
    return Section("Where the time goes", INTRO, layer_tables(res),
                   ("The largest gaps, part by part", report_explanations(res)))
