"""What `--target-ci`'s planner promises and what it keeps, by simulation (issue #45; docs/measurement.md).

Cells simulated through the two stages as a run has them (`dlbench.scenarios.processes.run_processes`, with
simulated processes: tests/adaptive_sim.py, the same simulation tests/test_adaptive.py checks), each with
the between-process share the adaptive study measured (90-96% of a process median's variance), under
`--target-ci 2 --max-time 60` as the study ran. For each confidence level of the upper bound the plan is
made on (dlbench.measure.adaptive.PLAN_LEVEL; 50% is about the planner before it, which planned on the
median-unbiased estimate), each cell alone, and at the level in use also in runs of 32 cells whose finished
cells' variances floor a plan (dlbench.measure.adaptive.run_floor, what a run does), for two spreads of
process medians; and runs of two kinds of cell, a quiet one and a noisy one taking turns, with the floor of
the cell's kind (in use) and one floor for the whole run (before): the share of the cells whose plan
fitted the cap that met the target (the planner's promise: 80%), the share that fitted, the coverage of
the reported 95% intervals, the share of all cells that met the target, and the processes and the
(simulated) seconds a cell took. A simulation, not a timing: it may run on a busy machine.

    python benchmarks/update_performance.py planner_simulation
    python benchmarks/planner_simulation.py --cells 300 --seeds 1     # checks the script runs
"""

from __future__ import annotations

import argparse
import sys

from _common import ROOT, header

sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))  # tests.adaptive_sim: the simulation the tests check

import dlbench.envs  # noqa: E402
import dlbench.scenarios.processes as processes  # noqa: E402
from dlbench.measure import adaptive  # noqa: E402
from dlbench.measure.adaptive import PLAN_LEVEL  # noqa: E402
from tests.adaptive_sim import STUDY_SD, simulate_cells  # noqa: E402

#: cells a simulated run has for the run's floor (dlbench.measure.adaptive.run_floor): the quick suite's 32
RUN_CELLS = 32
#: spreads of the process sd over cells (log-uniform): the precision workload's, and a noisier one
POPULATIONS = {"precision workload (sd 0.5-5%, median 1.6%)": STUDY_SD,
               "noisier (sd 1-10%, median 3.2%)": (0.01, 0.10)}
#: a run of two kinds of cell taking turns (1 and 2 threads), as the quick suite's on the AMD EPYC machine: its
#: 1-thread cells' process sd mostly 2-3%, its 2-thread cells' 2-17% (docs/measurement.md)
MIXED = ("1-thread cells sd 0.5-5%, 2-thread cells sd 2-15%, in turn", (STUDY_SD, (0.02, 0.15)))


def _whole_run_floor(stored, key=None):
    """The floor before it was taken per kind of cell: the median of all the run's finished cells."""
    return adaptive.run_floor(stored)


def _row(name: str, note: str, sims: list) -> str:
    cells, fitted = sum(s.cells for s in sims), sum(s.fitted for s in sims)
    met, covered, n = sum(s.met for s in sims), sum(s.covered for s in sims), sum(s.processes for s in sims)
    met_all, seconds = sum(s.met_all for s in sims), sum(s.seconds for s in sims)
    return (f"| {name} | {note} | {100 * met / max(fitted, 1):.1f}% | {100 * fitted / cells:.1f}% | "
            f"{100 * covered / cells:.1f}% | {100 * met_all / cells:.1f}% | {n / cells:.1f} | {seconds / cells:.1f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", type=int, default=1000, help="cells a seed")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--levels", default=f"0.5,0.8,{PLAN_LEVEL:g},0.95")
    args = ap.parse_args()
    dlbench.envs.python_for = lambda framework: None  # simulated processes: no environment to look up
    levels = sorted({float(x) for x in args.levels.split(",")})
    print(header("The planner's promise, simulated: --target-ci 2 --max-time 60"))
    print(f"{args.seeds} x {args.cells} simulated cells a row (seeds 1-{args.seeds}); the level in use is "
          f"{100 * PLAN_LEVEL:g}%. Processes and seconds: a cell's mean, its 3-process pilot included (3 s to "
          "start a process, 10 ms a call; simulated, not timed).\n")
    print("| process spread | upper bound's level | met, of the plans that fitted | plans that fitted | "
          "coverage of the 95% intervals | met, of all cells | processes a cell | seconds a cell |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, sd_range in POPULATIONS.items():
        for level, run_cells in [(level, 1) for level in levels] + [(PLAN_LEVEL, RUN_CELLS)]:
            processes.PLAN_LEVEL = level
            sims = [simulate_cells(seed, args.cells, sd_range, run_cells=run_cells) for seed in range(1, args.seeds + 1)]
            note = " (≈ before)" if level == 0.5 else ""
            if level == PLAN_LEVEL:
                note = f" and the run's floor ({run_cells} cells a run; in use)" if run_cells > 1 else " alone"
            print(_row(name, f"{100 * level:g}%{note}", sims))
    processes.PLAN_LEVEL = PLAN_LEVEL
    name, kinds = MIXED
    for note, floor in ((f"{100 * PLAN_LEVEL:g}% and the floor of the cell's kind ({RUN_CELLS} cells a run; in use)",
                         adaptive.run_floor),
                        (f"{100 * PLAN_LEVEL:g}% and one floor for the whole run (before)", _whole_run_floor)):
        processes.run_floor = floor
        sims = [simulate_cells(seed, args.cells, run_cells=RUN_CELLS, kinds=kinds) for seed in range(1, args.seeds + 1)]
        print(_row(name, note, sims))
    processes.run_floor = adaptive.run_floor


if __name__ == "__main__":
    main()
