"""Simulated cells through the two stages as a run has them (``dlbench.scenarios.processes.run_processes``,
the code a timed or a latency cell calls, with simulated processes). Shared by tests/test_adaptive.py and
benchmarks/planner_simulation.py, which reports the same simulation at other settings. Callers make
``dlbench.envs.python_for`` answer None first: thousands of fake processes, no environment lookups."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np


def fake_runner(rng, between_sd=0.05, within_sd=0.1, process_s=5.0, call_s=0.01, median=1e6, pilot_median=None):
    """A JobRunner whose processes time ``min_iters`` calls (the pilot's: ``job.calls`` None) or ``job.calls``
    calls around a process median drawn afresh each time about ``median`` (the pilot's about ``pilot_median``
    where given)."""
    from dlbench.launch.subprocess import JobOutcome

    jobs = []

    def run_job(job, timeout_s, threads=None, python=None, extra_env=None):
        jobs.append(job)
        n = job.calls if job.calls is not None else job.protocol["min_iters"]
        centre = median if job.calls is not None or pilot_median is None else pilot_median
        calls = list(centre * np.exp(rng.normal(0, between_sd) + rng.normal(0, within_sd, n)))
        cost = {"prepare_s": 1.0, "build_s": 1.0, "warmup_s": 0.5, "timed_s": n * call_s, "work_s": 3.0 + n * call_s}
        return JobOutcome("ok", {"calls": calls, "cost": cost}, "", process_s + n * call_s, 0)

    return run_job, jobs


@lru_cache(maxsize=8)
def suite_of(protocol: tuple):
    """A suite of ``protocol`` (its items), built once: a simulation runs 1,000 cells of one."""
    from dlbench.planning.plan import suite_from_dict

    return suite_from_dict({"models": ["lenet"], "protocol": dict(protocol)})


def run_cell(protocol: dict, rng, stored: dict | None = None, cell=None, **kw):
    """One cell under ``protocol`` through run_processes, its processes :func:`fake_runner`'s (``kw``), in a
    run whose finished cells stored ``stored`` (their metrics by key): the processes' results, what the
    adaptive design did, the outcome and the jobs started. ``cell``: the Cell planned (its key names its
    kind for the run's floor); torch's LeNet forward on 1 thread where None."""
    from dlbench.core.cell import Cell
    from dlbench.core.job import CellJob
    from dlbench.scenarios.base import CellOutcome, Context
    from dlbench.scenarios.processes import run_processes

    suite = suite_of(tuple(sorted(protocol.items())))
    timer = suite.protocol.timer_fields()
    run_job, jobs = fake_runner(rng, **kw)
    out = CellOutcome("ok")

    cell = cell or Cell("torch", "eager", "lenet", "forward", 4, 1)

    def job(calls):
        return CellJob(threads=cell.threads, cell=cell, seed=0, data_dir=None, protocol=timer, settings={}, calls=calls)

    results, info = run_processes(cell, Context(suite, run_job, stored=stored if stored is not None else {}), out, job,
                                  lambda r: r["calls"], min_calls=suite.protocol.min_iters)
    return results, info, out, jobs


#: the process-to-process sd (log scale) of the simulated cells: log-uniform over this range. 0.5-5% has its
#: median at 1.6%, the precision workload's (its fixed protocol's median half-width, +-3.5% from 3 processes,
#: is a sd of about 1.4%, 1.7% once a 3-process sd's low bias is undone: docs/performance/adaptive_study.md)
STUDY_SD = (0.005, 0.05)


@dataclass(frozen=True)
class Simulated:
    """What :func:`simulate_cells` found over its cells."""

    cells: int
    fitted: int  # cells whose plan fitted the cap (a second stage ran, not cut short)
    met: int  # of those, the cells whose interval met the target
    covered: int  # cells (all) whose reported interval holds the true median
    processes: int  # all cells' processes, pilots included
    met_all: int  # cells (all, capped or not) whose interval met the target
    seconds: float  # all cells' process seconds

    @property
    def met_rate(self) -> float:
        return self.met / self.fitted if self.fitted else float("nan")

    @property
    def coverage(self) -> float:
        return self.covered / self.cells


def simulate_cells(seed: int, cells: int, sd_range: tuple[float, float] = STUDY_SD, target_ci: float = 2.0,
                   cap_s: float = 60.0, run_cells: int = 1,
                   kinds: tuple[tuple[float, float], ...] | None = None) -> Simulated:
    """``cells`` cells under ``--target-ci target_ci --max-time cap_s`` with the between-process share the
    adaptive study measured: 90-96% of a pilot process median's variance between processes, the process sd
    log-uniform over ``sd_range``; processes of 3 s to start and calls of 10 ms, a pilot of 3 x 20 calls.
    ``run_cells``: cells a run, in turn, each planned with what the run's finished cells stored (their
    variance split, as the timed scenario stores it: the run's floor, dlbench.measure.adaptive.run_floor);
    1: every cell alone, with no floor. ``kinds``: the process sd's range of each kind of cell (a kind is a
    thread count: cells on 1, 2, ... threads), the cells of a run taking them in turn; None: one kind, of
    ``sd_range``."""
    from dlbench.core.cell import Cell
    from dlbench.measure.adaptive import variance_split

    rng = np.random.default_rng(seed)
    stored: dict[str, dict] = {}
    calls, process_s, call_s = 20, 3.0, 0.01
    protocol = {"repeats": 3, "min_iters": calls, "target_ci": target_ci, "max_cell_s": cap_s}
    fitted = met = covered = processes = met_all = 0
    seconds = 0.0
    kinds = kinds or (sd_range,)
    for i in range(cells):
        kind = i % len(kinds)
        between_sd = math.exp(rng.uniform(*np.log(kinds[kind])))
        share = rng.uniform(0.90, 0.96)
        # a median of n normal calls has variance pi/2 * sd^2 / n: the within part of a pilot process's median
        within_sd = math.sqrt(between_sd**2 * (1 - share) / share * calls * 2 / math.pi)
        true = rng.uniform(1.0, 50.0)
        if len(stored) >= run_cells - 1:  # a new run
            stored = {}
        cell = Cell("torch", "eager", "lenet", "forward", batch=i + 1, threads=kind + 1)
        results, info, out, _ = run_cell(protocol, rng, stored, cell, between_sd=between_sd, within_sd=within_sd,
                                         median=true, process_s=process_s, call_s=call_s)
        stored[cell.key] = {"variance": variance_split([r["calls"] for r in results])}
        covered += info["low"] <= true <= info["high"]
        processes += len(results)
        seconds += out.seconds
        met_all += bool(info.get("met"))
        if "plan" in info and not info["plan"]["capped"] and info["first_counted"]:
            fitted += 1
            met += info["met"]
    return Simulated(cells, fitted, met, covered, processes, met_all, seconds)
