"""Convergence results: curves summarised over repeats, time-to-accuracy, and the agreement check
between frameworks that trained the same model on the same batches from the same weights."""

from __future__ import annotations

from typing import Any

from dlbench.scenarios.convergence import first_departure, summarise_curves

__all__ = ["agreement", "summarise_curves"]


def agreement(cells: list, reference_framework: str | None = None, tolerance: float = 0.01) -> list[dict[str, Any]]:
    """For each group of convergence cells with the same model, data, batch, threads and device:
    the first step where a framework's training loss departs from the reference framework's by
    more than ``tolerance`` (relative), on repeat 0 (same seed, same weights, same batches). Float32
    cells are compared with the reference framework; a cell at a reduced precision with the same
    framework's float32 cell (what the precision changes, not what the framework does)."""
    groups: dict[tuple, list] = {}
    for c in cells:
        if c.cell.scenario == "convergence" and c.cell.status == "ok":
            groups.setdefault((c.cell.model, c.cell.data, c.cell.batch, c.cell.threads, c.cell.device), []).append(c)
    rows = []
    for key, members in groups.items():
        fp32 = [m for m in members if m.cell.precision == "fp32"]
        pairs = []
        if fp32:
            names = [m.cell.framework for m in fp32]
            ref_name = reference_framework if reference_framework in names else names[0]
            ref = next(m for m in fp32 if m.cell.framework == ref_name)
            pairs += [(ref, m) for m in fp32 if m is not ref]
        for m in members:
            own = [f for f in fp32 if (f.cell.framework, f.cell.variant) == (m.cell.framework, m.cell.variant)]
            if m.cell.precision != "fp32" and own:
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
    return f"{x.framework}/{x.variant}" + (f" {x.precision}" if x.precision != "fp32" else "")
