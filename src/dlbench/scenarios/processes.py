"""How many processes a cell starts, and how many calls each times: the fixed protocol (``repeats``
processes), or the two-stage design of ``--target-ci`` (:mod:`dlbench.measure.adaptive`): the
``repeats`` processes are the pilot, the plan fixes the second stage, and the cell's interval comes
from the second stage alone. Shared by the scenarios that time calls (timed, latency).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from dlbench.core.cell import Cell
from dlbench.core.job import CellJob
from dlbench.measure.adaptive import MIN_PROCESSES, PLAN_LEVEL, components, interval, percent, plan, run_floor
from dlbench.scenarios.base import CellOutcome, Context, run_in_turn

#: the fewest processes a pilot has, whatever ``repeats`` says (a variance from two has one degree of freedom)
MIN_PILOT = 3


def run_processes(cell: Cell, ctx: Context, out: CellOutcome, make_job: Callable[[int | None], CellJob],
                  values: Callable[[dict[str, Any]], list[float]], q: float = 50.0,
                  min_calls: int = 1) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The cell's processes' results, and what the adaptive design did (None: the fixed protocol).

    ``make_job(calls)`` is a process's job (``calls`` None: the protocol's own; else exactly that many
    timed calls, :attr:`CellJob.calls`); ``values(result)`` its timed calls; ``q`` the percentile the target is on."""
    p = ctx.suite.protocol
    if p.target_ci is None:
        return run_in_turn(cell, ctx, (make_job(None) for _ in range(p.repeats)), p.timeout_s, out), None
    pilot = run_in_turn(cell, ctx, (make_job(None) for _ in range(max(p.repeats, MIN_PILOT))), p.timeout_s, out)
    target = p.target_ci / 100
    info: dict[str, Any] = {"target": target, "q": q, "pilot": len(pilot), "cap_s": p.max_cell_s}
    if out.status != "ok" or len(pilot) < MIN_PILOT:
        return pilot, None
    comp = components([values(r) for r in pilot], q)
    call_s = float(np.median([r["cost"]["timed_s"] / max(len(values(r)), 1) for r in pilot]))
    start_s = float(np.median([r["process_s"] - r["cost"]["timed_s"] for r in pilot]))
    budget = p.max_cell_s - out.seconds  # the cell's processes so far (they run in turn)
    if budget < MIN_PROCESSES * (start_s + min_calls * call_s):
        # no room for a second stage: the pilot is the sample. Stopping here depends on what processes
        # cost, not on how much they agree, so its interval keeps its coverage
        info.update(interval([values(r) for r in pilot], q).to_dict(), first_counted=0, between=comp.between,
                    within_per_call=comp.within, start_s=start_s, call_s=call_s)
        info["met"] = info["half_width"] <= target
        if not info["met"]:
            out.warnings.append(f"target +-{p.target_ci:g}% not met: the cap of {p.max_cell_s:g} s left no room for "
                                f"a second stage; the pilot's {len(pilot)} processes reached "
                                f"+-{percent(info['half_width'])}")
        return pilot, info
    # planned on an upper bound of the between variance: 3 processes' estimate is low more often than not;
    # and on no less than the run's finished cells of its kind typically measured on this machine (run_floor)
    bound = components([values(r) for r in pilot], q, upper=PLAN_LEVEL)
    floor = run_floor(ctx.stored, cell.key)
    if floor is not None and floor.between > bound.between:
        bound = replace(bound, between=floor.between)
    second_plan = plan(bound, target, start_s, call_s, budget, min_calls=min_calls)
    info.update(plan=second_plan.to_dict(), between=comp.between, between_planned=bound.between,
                between_floor=floor and floor.between, floor_scope=floor and floor.scope,
                floor_cells=floor and floor.cells, plan_level=PLAN_LEVEL, within_per_call=comp.within,
                start_s=start_s, call_s=call_s)
    second = run_in_turn(cell, ctx, (make_job(second_plan.calls) for _ in range(second_plan.processes)),
                         p.timeout_s, out)
    info["first_counted"] = len(pilot)
    if len(second) < 2:
        out.warnings.append(f"target +-{p.target_ci:g}%: the second stage ended after {len(second)} process(es); "
                            "the interval is the pilot's")
        info["first_counted"] = 0
        return pilot + second, info
    iv = interval([values(r) for r in second], q)
    info.update(iv.to_dict(), met=iv.half_width <= target)
    if not info["met"]:
        why = f"the cap of {p.max_cell_s:g} s cut the plan short" if second_plan.capped else "by chance (the plan " \
              f"expected +-{percent(second_plan.expected_half_width)})"
        out.warnings.append(f"target +-{p.target_ci:g}% not met: reached +-{percent(iv.half_width)} with "
                            f"{len(second)} process(es) of {second_plan.calls} calls; {why}")
    return pilot + second, info
