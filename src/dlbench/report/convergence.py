"""The convergence scenario's report: final accuracy and time-to-accuracy, and the agreement check
between frameworks that trained the same model on the same batches from the same weights.

Reached through :class:`dlbench.scenarios.convergence.Convergence`'s report hooks; it reads only the
cells' stored metrics, so it imports no scenario (a scenario's section sits below the report)."""

from __future__ import annotations

from typing import Any

import numpy as np

from dlbench.cell_result import CellResult
from dlbench.precision import DEFAULT as DEFAULT_PRECISION
from dlbench.report.document import DASH, Column, Section, Table, Value, fmt_num, mark_best
from dlbench.report.figures import Plot, Skipped, by, figure, safe, svg

INTRO = ("Every framework trained from the same canonical weights on the same sequence of batches; accuracy "
         "computed by dlbench over the full splits in eval mode. The agreement check compares the training loss "
         "step by step with the reference framework (repeat 0).")


def section(cells: list[CellResult]) -> Section:
    """The report's section of the convergence scenario's cells (its module asks for it)."""
    return Section("Convergence", INTRO, convergence_tables(cells))




def first_departure(reference: list[float], other: list[float], tolerance: float = 0.01) -> int | None:
    """The first step (1-based) where ``other``'s loss differs from ``reference``'s by more than
    ``tolerance`` relative; None when they agree over all the steps both logged."""
    for i, (a, b) in enumerate(zip(reference, other, strict=False)):
        if abs(b - a) > tolerance * max(abs(a), 1e-12):
            return i + 1
    return None


def agreement(cells: list, reference_framework: str | None = None, tolerance: float = 0.01) -> list[dict[str, Any]]:
    """For each group of convergence cells with the same model, data, batch, threads and device:
    the first step where a framework's training loss departs from the reference framework's by
    more than ``tolerance`` (relative), on repeat 0 (same seed, same weights, same batches). Float32
    cells are compared with the reference framework; a cell at a reduced precision with the same
    framework's float32 cell (what the precision changes, not what the framework does)."""
    groups: dict[tuple, list] = {}
    for c in cells:
        if c.cell.status == "ok" and c.cell.metrics.get("convergence"):  # a convergence cell's curves
            groups.setdefault((c.cell.model, c.cell.data, c.cell.batch, c.cell.threads, c.cell.device), []).append(c)
    rows = []
    for key, members in groups.items():
        fp32 = [m for m in members if m.cell.precision == DEFAULT_PRECISION]
        pairs = []
        if fp32:
            names = [m.cell.framework for m in fp32]
            ref_name = reference_framework if reference_framework in names else names[0]
            ref = next(m for m in fp32 if m.cell.framework == ref_name)
            pairs += [(ref, m) for m in fp32 if m is not ref]
        for m in members:
            own = [f for f in fp32 if (f.cell.framework, f.cell.variant) == (m.cell.framework, m.cell.variant)]
            if m.cell.precision != DEFAULT_PRECISION and own:
                pairs.append((own[0], m))
        for ref, m in pairs:
            ref_losses = ref.cell.metrics["convergence"][0]["step_losses"]
            losses = m.cell.metrics["convergence"][0]["step_losses"]
            n = min(len(losses), len(ref_losses))
            rel = [abs(b - a) / max(abs(a), 1e-12) for a, b in zip(ref_losses[:n], losses[:n], strict=True)]
            rows.append({"model": key[0], "data": key[1], "batch": key[2], "threads": key[3], "device": key[4],
                         "reference": _label(ref), "framework": _label(m), "steps_compared": n,
                         "first_departure_step": first_departure(ref_losses, losses, tolerance),
                         "max_rel_diff": max(rel) if rel else None,
                         "rel_diff_step1": rel[0] if rel else None})
    return rows


def _label(c) -> str:
    x = c.cell
    return f"{x.framework}/{x.variant}" + (f" {x.precision}" if x.precision != DEFAULT_PRECISION else "")


def agreement_table(cells: list[CellResult]) -> Table:
    """:func:`agreement` of the cells as a table (no rows: nothing to compare)."""
    cols = [Column(k, label, numeric=k in ("steps", "diff1", "maxdiff", "first")) for k, label in (
        ("model", "model"), ("reference", "reference"), ("framework", "framework"), ("steps", "steps compared"),
        ("diff1", "relative loss difference at step 1"), ("maxdiff", "largest relative difference"),
        ("first", "first step > 1% apart"))]
    return Table("agreement check (same weights, same batches)", cols, [[
        Value(a["model"]), Value(a["reference"]), Value(a["framework"]), Value(str(a["steps_compared"])),
        Value(f"{a['rel_diff_step1']:.1e}" if a["rel_diff_step1"] is not None else DASH),
        Value(f"{a['max_rel_diff']:.1e}" if a["max_rel_diff"] is not None else DASH),
        Value("none" if a["first_departure_step"] is None else str(a["first_departure_step"]))]
        for a in agreement(cells)])


def convergence_tables(cells: list[CellResult]) -> list[Table]:
    """Per-framework final accuracy with its spread and time-to-accuracy (Liu et al. Fig. 8, DAWNBench),
    and the agreement check: the first step where a framework's loss leaves the reference's."""
    if not cells:
        return []
    cols = [Column("model", "model", numeric=False), Column("framework", "framework", numeric=False),
            Column("variant", "variant", numeric=False), Column("data", "data", numeric=False),
            Column("batch", "batch"), Column("threads", "threads"), Column("epochs", "epochs"),
            Column("acc", "final test accuracy (mean ± std over repeats)", "high"),
            Column("range", "min – max", numeric=False), Column("tta", "seconds to target accuracy", "low"),
            Column("rate", "training samples/s", "high")]
    rows, groups = [], []
    for c in cells:
        v = c.convergence
        head = [Value(c.cell.model), Value(c.cell.framework), Value(c.cell.variant), Value(c.cell.data),
                Value(str(c.cell.batch)), Value(str(c.cell.threads))]
        if not v:
            rows.append(head + [Value(DASH), Value(f"{c.cell.status}: {c.cell.reason}"), Value(DASH), Value(DASH),
                                Value(DASH)])
        else:
            tta = v["time_to_accuracy_s"]
            rows.append(head + [
                Value(str(v["epochs"])),
                Value(f"{v['final_test_acc_mean']:.4f} ± {v['final_test_acc_std']:.4f}", v["final_test_acc_mean"]),
                Value(f"{v['final_test_acc_min']:.4f} – {v['final_test_acc_max']:.4f}"),
                Value(fmt_num(tta), tta) if tta is not None else
                Value(f"not reached ({v['reached']} repeats reached {v['target_accuracy']:.0%})"),
                Value(fmt_num(v["train_samples_per_s"]), v["train_samples_per_s"])])
        groups.append((c.cell.model, c.cell.data, c.cell.batch, c.cell.threads, c.cell.device))
    table = Table("convergence", cols, rows, groups)
    mark_best(table)
    out = [table]
    agree = agreement_table(cells)
    if agree.rows:
        out.append(agree)
    return out


def convergence_curves(cells: list[CellResult]) -> tuple[list[Plot], list[Skipped]]:
    """Test accuracy against epoch and against training wall-clock of the convergence cells, mean with
    a +-1 std band over repeats, one line per framework/variant (Liu et al. Fig. 8)."""
    cells = [c for c in cells if c.convergence]
    if not cells:
        return [], []
    plots = []
    for (model, data), mcells in by(cells, lambda c: (c.cell.model, c.cell.data)).items():
        fig, (ax_e, ax_t) = figure(2)
        for c in mcells:
            curves = c.convergence["curves"]
            mean = np.array(curves["test_acc"]["mean"])
            std = np.array(curves["test_acc"]["std"])
            epochs = np.arange(1, len(mean) + 1)
            elapsed = np.array(curves["elapsed_train_s"]["mean"])
            label = f"{c.cell.framework}/{c.cell.variant} (b{c.cell.batch}, t{c.cell.threads})"
            (line,) = ax_e.plot(epochs, mean, marker="o", label=label)
            ax_e.fill_between(epochs, mean - std, mean + std, alpha=0.2, color=line.get_color())
            ax_t.plot(elapsed, mean, marker="o", label=label, color=line.get_color())
            ax_t.fill_between(elapsed, mean - std, mean + std, alpha=0.2, color=line.get_color())
        target = mcells[0].convergence["target_accuracy"]
        for ax, xlabel in ((ax_e, "epoch"), (ax_t, "training time (s, evaluation excluded)")):
            ax.axhline(target, color="grey", ls="--", lw=0.8, label=f"target {target:.0%}")
            ax.set_xlabel(xlabel)
            ax.set_ylabel("test accuracy (fraction)")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize="small")
        ax_e.set_title(f"{model} on {data}: accuracy per epoch")
        ax_t.set_title(f"{model} on {data}: accuracy over time")
        plots.append(Plot(f"convergence-{safe(model)}-{safe(data)}", f"{model} on {data}: test accuracy",
                          "Mean over repeats (different seeds) with a band of ±1 standard deviation; the dashed "
                          "line is the target accuracy of the time-to-accuracy column.", svg(fig)))
    return plots, []
