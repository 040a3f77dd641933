"""Two runs side by side: which cells got slower or faster, and is it more than noise.

Cells are matched by their axes (framework, variant, model, scenario, batch, threads, device). For
each matched timed cell: the ratio B/A of the median time with a 95% interval, and a p-value. A
change is *significant* only when p < ``alpha`` (0.01) AND the ratio is outside 1 ± ``threshold``
(5%): a tiny but consistent shift is not worth a red line, and neither is a large but noisy one.

The unit of replication is the process, not the iteration. Two fresh processes timing the same
step differ here by 10-20% while iterations within one process agree to a few percent, so a test
that treats iterations as independent (Mann-Whitney on the pooled samples, what this module did
first) called two runs of identical code "significantly different" with p ~ 1e-20. Now, when both
runs have >= 2 processes per cell, the ratio is that of the geometric means of the per-process
medians, p comes from Welch's t-test on their logarithms and the interval is the matching Welch
interval; only with a single process on a side does it fall back to the ratio of pooled medians
with a bootstrap interval and Mann-Whitney on the iterations, and says so in ``test``. The A and B
figures a row prints are the ones its ratio is computed from (``basis_a_ms``/``basis_b_ms``: the
geometric means of the process medians, or the pooled medians), so B/A and the change read
consistently with them; the pooled medians are kept beside them in the JSON.
Detecting a change of X% needs the process-to-process spread to be well under X%: use more
repeats (``--repeats``) for fine comparisons.

Pure: it works on two analysed :class:`RunResults` and never touches the store.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from dlbench.core.errors import UsageError
from dlbench.envs import versions
from dlbench.measure.stats import process_p_value, process_ratio_ci, ratio_ci
from dlbench.report.results import CellResult, RunResults
from dlbench.scenarios import registry

ALPHA = 0.01
THRESHOLD = 0.05
AXES = ("framework", "variant", "model", "scenario", "batch", "threads", "device")


def axes_of(c: CellResult) -> tuple:
    return tuple(getattr(c.cell, a) for a in AXES)


def key_of(axes: tuple) -> str:
    fw, variant, model, scenario, batch, threads, device = axes
    return f"{fw}/{variant}/{model}/{scenario}/b{batch}/t{threads}/{device}"


@dataclass
class CellChange:
    key: str
    axes: tuple
    median_a_ms: float
    median_b_ms: float
    ratio: float
    ci_low: float
    ci_high: float
    p_value: float
    n_a: int
    n_b: int
    significant: bool
    verdict: str  # slower, faster, same
    test: str = "welch-log-process-medians"  # or "mann-whitney-iterations" (one process on a side)
    processes_a: int = 1
    processes_b: int = 1
    #: what ``ratio`` is basis_b_ms / basis_a_ms of (the figures a row prints)
    basis_a_ms: float = float("nan")
    basis_b_ms: float = float("nan")

    @property
    def basis(self) -> str:
        """What the printed A and B figures are."""
        if self.test.startswith("welch"):
            return "geometric mean of the process medians"
        return "pooled median"

    @property
    def change_pct(self) -> float:
        return (self.ratio - 1.0) * 100.0


@dataclass
class Comparison:
    run_a: str
    run_b: str
    alpha: float
    threshold: float
    matched: list[CellChange] = field(default_factory=list)
    only_a: list[str] = field(default_factory=list)
    only_b: list[str] = field(default_factory=list)
    not_compared: list[tuple[str, str]] = field(default_factory=list)  # (key, why)
    broke: list[str] = field(default_factory=list)  # ok in A, no time in B
    #: cells of either run set aside as damaged: (key, "A" or "B", why); a CI gate fails on them
    damaged: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def slower(self) -> list[CellChange]:
        return [m for m in self.matched if m.verdict == "slower"]

    @property
    def faster(self) -> list[CellChange]:
        return [m for m in self.matched if m.verdict == "faster"]

    def failures(self, fail_above_pct: float) -> list[str]:
        """Why ``--fail-above PCT`` fails: each significant slowdown above PCT, and each cell that
        measured in A but not in B (a cell that stopped working is a slowdown without bound), and each cell
        of either run set aside as damaged (it has no time to compare: it must not pass as missing)."""
        out = [f"{m.key}: {m.change_pct:+.1f}% (p={m.p_value:.2g})" for m in self.slower if m.change_pct > fail_above_pct]
        return out + [f"{k}: ok in A, no time in B" for k in self.broke] + [
            f"{k}: damaged in {side}, no time to compare ({why})" for k, side, why in self.damaged]

    def to_dict(self) -> dict[str, Any]:
        return {"run_a": self.run_a, "run_b": self.run_b, "alpha": self.alpha, "threshold": self.threshold,
                "matched": [{**asdict(m), "axes": dict(zip(AXES, m.axes, strict=True)), "change_pct": m.change_pct,
                  "basis": m.basis}
                            for m in self.matched],
                "only_a": self.only_a, "only_b": self.only_b,
                "not_compared": [{"key": k, "why": w} for k, w in self.not_compared], "broke": self.broke,
                "damaged": [{"key": k, "run": side, "why": w} for k, side, w in self.damaged],
                "slower": [m.key for m in self.slower], "faster": [m.key for m in self.faster]}


def mann_whitney_p(a: list[float], b: list[float]) -> float:
    """Two-sided Mann-Whitney U p-value; 1.0 when every sample is the same value (nothing to test)."""
    from scipy.stats import mannwhitneyu

    if len(set(a) | set(b)) == 1:
        return 1.0
    return float(mannwhitneyu(a, b, alternative="two-sided").pvalue)


def _groups(c: CellResult) -> list[int] | None:
    return c.sample_repeats if len(c.sample_repeats) == len(c.samples_ms) else None


def compare_cells(a: CellResult, b: CellResult, alpha: float = ALPHA, threshold: float = THRESHOLD) -> CellChange:
    pa, pb = len(a.repeat_medians_ms), len(b.repeat_medians_ms)
    if pa >= 2 and pb >= 2:
        test, p = "welch-log-process-medians", process_p_value(a.repeat_medians_ms, b.repeat_medians_ms)
        ratio, lo, hi = process_ratio_ci(a.repeat_medians_ms, b.repeat_medians_ms)
    else:
        test, p = "mann-whitney-iterations", mann_whitney_p(a.samples_ms, b.samples_ms)
        ratio, lo, hi = ratio_ci(a.samples_ms, b.samples_ms, groups_a=_groups(a), groups_b=_groups(b))
    if test.startswith("welch"):
        basis_a, basis_b = (float(np.exp(np.mean(np.log(m)))) for m in (a.repeat_medians_ms, b.repeat_medians_ms))
    else:
        basis_a, basis_b = float(np.median(a.samples_ms)), float(np.median(b.samples_ms))
    significant = p < alpha and abs(ratio - 1.0) > threshold
    verdict = ("slower" if ratio > 1 else "faster") if significant else "same"
    return CellChange(key_of(axes_of(a)), axes_of(a), float(np.median(a.samples_ms)), float(np.median(b.samples_ms)),
                      ratio, lo, hi, p, len(a.samples_ms), len(b.samples_ms), significant, verdict,
                      test, max(pa, 1), max(pb, 1), basis_a, basis_b)


def compare_runs(a: RunResults, b: RunResults, alpha: float = ALPHA, threshold: float = THRESHOLD) -> Comparison:
    out = Comparison(a.run_id, b.run_id, alpha, threshold)
    out.damaged = [(k, side, why) for side, res in (("A", a), ("B", b)) for k, why in res.set_aside.items()]
    cells_a = {axes_of(c): c for c in a.cells}
    cells_b = {axes_of(c): c for c in b.cells}
    out.only_a = [key_of(k) for k in cells_a if k not in cells_b and key_of(k) not in b.set_aside]
    out.only_b = [key_of(k) for k in cells_b if k not in cells_a and key_of(k) not in a.set_aside]
    for k, ca in cells_a.items():
        cb = cells_b.get(k)
        if cb is None:
            continue
        key = key_of(k)
        if ca.cell.scenario not in registry.per_batch():
            out.not_compared.append((key, f"the {ca.cell.scenario} scenario has no per-iteration samples"))
        elif not (ca.ok and ca.samples_ms) or not (cb.ok and cb.samples_ms):
            out.not_compared.append((key, f"A {ca.cell.status}, B {cb.cell.status}"
                                          + (f": {cb.cell.reason}" if not cb.ok else f": {ca.cell.reason}")))
            if ca.ok and ca.samples_ms:  # B failed, or stored no time: a cell that stopped producing one
                out.broke.append(key)
        else:
            out.matched.append(compare_cells(ca, cb, alpha, threshold))
    return out


def compare_versions(res: RunResults, baseline: str, alpha: float = ALPHA,
                     threshold: float = THRESHOLD) -> list[Comparison]:
    """Within one run, every other version of ``baseline``'s framework (``jax==0.4.38``, or the bare
    ``jax`` of the main Python) against ``baseline``: A is the baseline, B the version, cells matched on
    every other axis and tested as two runs are. The keys name the base framework."""
    # a version whose cells were all set aside as damaged is still there: its comparison fails on them
    present = list(dict.fromkeys([c.cell.framework for c in res.cells] + [k.split("/")[0] for k in res.set_aside]))
    if baseline not in present:
        raise UsageError(f"--baseline {baseline}: run {res.run_id} has no such framework "
                         f"(it has {', '.join(present)})")
    base = versions.base_of(baseline)
    others = [f for f in present if f != baseline and versions.base_of(f) == base]
    if not others:
        raise UsageError(f"--baseline {baseline}: run {res.run_id} has no other version of {base} to compare")

    def side(name: str) -> RunResults:
        cells = [replace(c, cell=replace(c.cell, framework=base)) for c in res.cells if c.cell.framework == name]
        damaged = {k: why for k, why in res.set_aside.items() if k.split("/")[0] == name}  # a key names its framework
        return replace(res, run={**res.run, "id": f"{res.run_id} {name}"}, cells=cells, set_aside=damaged)

    return [compare_runs(side(baseline), side(other), alpha, threshold) for other in others]


def compare_rows(cmp: Comparison) -> tuple[list[str], list[list[str]]]:
    """The comparison as text rows (shared by the terminal table and the HTML page)."""
    from dlbench.report.tables import fmt_num

    header = ["cell", "A ms", "B ms", "B/A [95% CI]", "change", "A and B are", "processes A/B", "p", "verdict"]
    rows = [[m.key, fmt_num(m.basis_a_ms), fmt_num(m.basis_b_ms),
             f"{m.ratio:.3f} [{m.ci_low:.3f}, {m.ci_high:.3f}]", f"{m.change_pct:+.1f}%", m.basis,
             f"{m.processes_a}/{m.processes_b}",
             f"{m.p_value:.2g}" + ("" if m.test.startswith("welch") else " (iterations)"), m.verdict]
            for m in cmp.matched]
    return header, rows
