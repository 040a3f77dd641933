"""The two-stage design of ``--target-ci`` (dlbench.measure.adaptive): its coverage by simulation, the plan's
arithmetic and the variance split."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dlbench.core.cell import Cell
from dlbench.measure import adaptive
from dlbench.measure.adaptive import Components, Floor, components, interval, plan, run_floor, variance_split
from tests.adaptive_sim import STUDY_SD, run_cell, simulate_cells


def _cell(rng, processes: int, calls: int, between_sd: float, within_sd: float, true_median: float):
    """``processes`` fresh processes of ``calls`` calls: each process's median is the true one shifted by a
    lognormal process effect, its calls lognormal around it (the shape measured on shared CPUs)."""
    shift = rng.normal(0, between_sd, (processes, 1))
    return true_median * np.exp(shift + rng.normal(0, within_sd, (processes, calls)))


def test_reported_intervals_cover_the_true_median_in_at_least_93_percent_of_1000_cells(monkeypatch):
    """The whole procedure as a run has it (dlbench.scenarios.processes.run_processes, the code a timed or a
    latency cell calls): pilot of 3 processes -> plan -> fresh second stage -> the interval it reports, with
    the plan's choice of processes and calls depending on the pilot, as optional stopping would. (It
    re-implemented the three steps before, so a run that reported another interval passed it.)"""
    monkeypatch.setattr("dlbench.envs.python_for", lambda framework: None)  # 25,000 fake processes: no lookups
    rng = np.random.default_rng(35)
    pilot_s = 3 * (3.0 + 20 * 0.01)  # 3 processes of 20 calls, 3 s to start each
    protocol = {"repeats": 3, "min_iters": 20, "target_ci": 2.0, "max_cell_s": 120.0 + pilot_s}
    cells, covered, met = 1000, 0, 0
    for _ in range(cells):
        spread = rng.uniform(0.05, 0.15)  # range of 3 process medians, as a share of the median
        between_sd = spread / 1.7  # the expected range of 3 normals is 1.69 sd
        within_sd = rng.uniform(0.02, 0.20)
        true = rng.uniform(1.0, 50.0)
        results, info, _, _ = run_cell(protocol, rng, between_sd=between_sd, within_sd=within_sd,
                                       median=true, process_s=3.0, call_s=0.01)
        # a second stage ran (the cap leaves it room), and the interval is of its processes alone
        assert info["first_counted"] == 3 and info["processes"] == len(results) - 3, info
        covered += info["low"] <= true <= info["high"]
        met += info["met"]
    assert covered / cells >= 0.93, covered
    assert covered / cells <= 0.98, covered  # not trivially wide either
    assert met > 0  # some cells reach +-2% within the cap


def test_the_pilot_alone_used_as_the_interval_when_it_looks_narrow_under_covers():
    """Why the second stage is fresh: stopping on a pilot that happens to agree and reporting its own
    interval covers less than stated. (The test that the design's guard matters at all.)"""
    rng = np.random.default_rng(1)
    cells, covered, stopped = 2000, 0, 0
    for _ in range(cells):
        pilot = _cell(rng, 3, 20, 0.05, 0.05, 10.0)
        iv = interval(list(pilot))
        if iv.half_width <= 0.05:  # "narrow enough": stop and report it
            stopped += 1
            covered += iv.low <= 10.0 <= iv.high
    assert stopped > 50 and covered / stopped < 0.93


def test_components_recover_a_known_split():
    rng = np.random.default_rng(0)
    groups = list(_cell(rng, 200, 400, 0.08, 0.10, 5.0))
    comp = components(groups)
    assert comp.between == pytest.approx(0.08**2, rel=0.25)
    # the variance of a median of normal values is pi/2 that of the mean
    assert comp.within == pytest.approx(math.pi / 2 * 0.10**2, rel=0.25)


def test_the_plan_s_between_variance_is_the_pilot_s_chi_square_upper_bound():
    """3 processes of identical calls (no within part): the bound is the sample variance times
    df / chi2.ppf(1 - level, df), 9.5x at 90% with 2 degrees of freedom."""
    groups = [[1.0] * 5, [1.1] * 5, [1.3] * 5]
    s2 = float(np.var(np.log([1.0, 1.1, 1.3]), ddof=1))
    assert components(groups).between == pytest.approx(s2)
    assert components(groups, upper=0.9).between == pytest.approx(s2 * 2 / 0.21072, rel=1e-4)
    assert components(groups, upper=0.5).between == pytest.approx(s2 * 2 / 1.38629, rel=1e-4)


def test_variance_split_shares():
    rng = np.random.default_rng(0)
    split = variance_split(list(_cell(rng, 100, 200, 0.10, 0.10 * math.sqrt(2 / math.pi), 5.0)))
    # the within part is in the units of a median's variance (pi/2 that of a mean, for normal calls)
    assert split["between_share"] == pytest.approx(0.5, abs=0.1)
    assert split["process_between_share"] > 0.95  # 200 calls a process: its median is nearly all between
    assert split["processes"] == 100 and split["calls"] == 200
    assert variance_split([[1.0, 2.0]]) == {}  # one process: no split


def test_plan_spends_calls_where_the_noise_is():
    noisy_calls = Components(between=0.0001, within=0.04, calls=20)
    noisy_processes = Components(between=0.004, within=0.0001, calls=20)
    a = plan(noisy_calls, 0.02, start_s=3.0, call_s=0.01, budget_s=600.0, min_calls=20)
    b = plan(noisy_processes, 0.02, start_s=3.0, call_s=0.01, budget_s=600.0, min_calls=20)
    assert a.calls > b.calls and b.processes > a.processes
    assert not a.capped


def test_plan_says_when_the_cap_cuts_it_short():
    p = plan(Components(between=0.01, within=0.01, calls=20), 0.01, start_s=5.0, call_s=0.1, budget_s=60.0,
             min_calls=20)
    assert p.capped and p.processes == 8  # 60 s // (5 s + 20 x 0.1 s)
    assert p.expected_half_width > 0.01
    with pytest.raises(ValueError):
        plan(Components(0.01, 0.01, 20), 0.0, 1.0, 0.1, 10.0)


def test_interval_of_identical_processes_is_a_point():
    iv = interval([[2.0, 2.0, 2.0]] * 3)
    assert iv.center == pytest.approx(2.0) and iv.half_width == pytest.approx(0.0)


# --- the two stages as the parent runs them (dlbench.scenarios.processes), with simulated processes ---------
def test_without_a_target_a_cell_is_its_repeats():
    results, info, out, jobs = run_cell({"repeats": 3, "min_iters": 20}, np.random.default_rng(0))
    assert len(results) == 3 and info is None and len(out.processes) == 3


def test_a_target_runs_a_pilot_then_the_planned_second_stage_and_reports_its_interval():
    results, info, out, jobs = run_cell({"repeats": 3, "min_iters": 20, "target_ci": 5.0, "max_cell_s": 1e4},
                                        np.random.default_rng(0))
    plan_ = info["plan"]
    assert info["pilot"] == 3 and len(results) == 3 + plan_["processes"]
    assert all(j.calls == plan_["calls"] for j in jobs[3:])
    assert info["first_counted"] == 3 and info["low"] < info["center"] < info["high"]
    # the cell keeps the pilot's estimate and the bound the plan was made on
    assert info["between_planned"] > info["between"] > 0 and info["plan_level"] == 0.9
    assert out.processes and sum(s for s, _ in out.processes) == pytest.approx(out.seconds)


def test_the_pilot_s_processes_never_enter_the_reported_interval():
    """The pilot's processes centred on 100 ms, the second stage's on 1 ms: the reported figure and interval
    are about 1 ms whatever the second stage's size. Pooling the pilot with the second stage (exp of the
    mean log of every process) puts them far above 1 ms."""
    for seed in range(3):
        results, info, out, jobs = run_cell(
            {"repeats": 3, "min_iters": 20, "target_ci": 5.0, "max_cell_s": 1e4}, np.random.default_rng(seed),
            median=1e6, pilot_median=100e6)
        assert info["first_counted"] == 3 and len(results) == 3 + info["processes"]
        assert 0.75e6 < info["low"] < info["center"] < info["high"] < 1.35e6, info


def test_a_cap_with_no_room_for_a_second_stage_reports_the_pilot_and_says_so():
    results, info, out, jobs = run_cell({"repeats": 3, "min_iters": 20, "target_ci": 0.1, "max_cell_s": 20.0},
                                              np.random.default_rng(0))
    assert len(results) == 3 and info["first_counted"] == 0 and not info["met"]
    assert any("left no room for a second stage" in w for w in out.warnings)


def test_at_least_80_percent_of_the_plans_that_fit_meet_their_target_and_the_intervals_keep_their_coverage(
        monkeypatch):
    """The planner's promise, on 1,000 cells as the adaptive study measured them (90-96% of a process median's
    variance between processes, the precision workload's process spread, its 60 s cap): of the cells whose
    plan fitted the cap, at least 80% met +-2%; every cell's interval (the second stage's) still covers the
    true median in at least 93%. The planner before, which took a 3-process pilot's between variance (2
    degrees of freedom) at its median-unbiased value, met it in 70% here (the study: 27 of 54 real cells)."""
    monkeypatch.setattr("dlbench.envs.python_for", lambda framework: None)
    for run_cells in (1, 32):  # each cell alone; runs of 32 cells, each planned over the run's floor too
        sim = simulate_cells(seed=45, cells=1000, run_cells=run_cells)
        assert sim.fitted >= 300, sim  # not met by planning so much that hardly any plan fits
        assert sim.met_rate >= 0.80, sim
        assert sim.coverage >= 0.93, sim


def test_the_promise_holds_in_runs_of_a_quiet_and_a_noisy_kind_of_cell_each_floored_by_its_own(monkeypatch):
    """Runs whose 1-thread cells are quiet and whose 2-thread cells spread as the quick suite's did on the AMD
    EPYC machine (process sd 2-15%), each cell planned over the floor of its own kind: the promise and the
    coverage hold, and the quiet cells' plans fit the cap more often than under one floor for the whole run,
    which the noisy cells set."""
    monkeypatch.setattr("dlbench.envs.python_for", lambda framework: None)
    kinds = (STUDY_SD, (0.02, 0.15))
    sim = simulate_cells(seed=45, cells=1000, run_cells=32, kinds=kinds)
    assert sim.met_rate >= 0.80, sim
    assert sim.coverage >= 0.93, sim
    monkeypatch.setattr("dlbench.scenarios.processes.run_floor", lambda stored, key=None: adaptive.run_floor(stored))
    whole = simulate_cells(seed=45, cells=1000, run_cells=32, kinds=kinds)
    assert sim.fitted > whole.fitted, (sim, whole)


def test_the_run_floor_is_the_median_between_variance_of_its_finished_cells():
    assert run_floor({}) is None
    cells = {f"c{i}": {"variance": {"between": b}} for i, b in enumerate((4e-4, 1e-3))}
    cells["no split"] = {"variance": {}}
    cells["other"] = {"loadgen": {}}
    assert run_floor(cells) is None  # two cells say little of the machine
    cells["c2"] = {"variance": {"between": 9e-3}}
    assert run_floor(cells) == Floor(1e-3, 3, "run")


def test_a_cells_floor_comes_from_the_runs_cells_of_its_kind_once_there_are_enough():
    """On the AMD EPYC machine the quick suite's 2-thread cells spread ten times more between processes than
    its 1-thread ones: one floor for the run put every quiet cell's plan over the cap (issue 45)."""
    def key(framework, threads, model):
        return Cell(framework, "v", model, "forward", 8, threads).key

    quiet = {key("torch", 1, m): {"variance": {"between": 1e-4}} for m in ("a", "b")}
    noisy = {key(fw, 2, m): {"variance": {"between": 1e-2}} for fw in ("torch", "jax") for m in ("a", "b")}
    stored = {**quiet, **noisy}
    # two 1-thread cells are too few for a kind's floor: the run's (its median is a noisy cell's)
    assert run_floor(stored, key("torch", 1, "c")) == Floor(1e-2, 6, "run")
    stored[key("jax", 1, "a")] = {"variance": {"between": 2e-4}}
    assert run_floor(stored, key("torch", 1, "c")) == Floor(1e-4, 3, "threads")  # the 1-thread cells' median
    stored[key("torch", 1, "c")] = {"variance": {"between": 3e-4}}
    assert run_floor(stored, key("torch", 1, "d")) == Floor(1e-4, 3, "framework and threads")
    assert run_floor(stored, key("jax", 2, "c")) == Floor(1e-2, 4, "threads")
    assert run_floor(stored, key("torch", 2, "c")) == Floor(1e-2, 4, "threads")  # two of its own: too few
    whole = run_floor(stored)  # no kind named: the whole run
    assert (whole.cells, whole.scope) == (8, "run") and whole.between == pytest.approx((3e-4 + 1e-2) / 2)


def test_a_quiet_pilot_in_a_run_whose_cells_disagreed_is_planned_on_the_runs_floor(monkeypatch):
    """The quick suite's two misses among fitted plans (issue 45) had pilots whose 3 processes agreed far
    more than the run's cells did; even the pilot's upper bound was low, the plan small, the target missed.
    Planned on the run's floor, such a plan asks for the processes the machine's spread needs."""
    monkeypatch.setattr("dlbench.envs.python_for", lambda framework: None)
    protocol = {"repeats": 3, "min_iters": 20, "target_ci": 2.0, "max_cell_s": 600.0}
    noisy = {f"c{i}": {"variance": {"between": 0.03 ** 2}} for i in range(3)}
    alone = run_cell(protocol, np.random.default_rng(2), between_sd=0.002, within_sd=0.01, process_s=1.0)[1]
    in_run = run_cell(protocol, np.random.default_rng(2), noisy, between_sd=0.002, within_sd=0.01, process_s=1.0)[1]
    assert alone["between_floor"] is None and alone["between_planned"] < 0.03 ** 2
    assert in_run["between_floor"] == in_run["between_planned"] == pytest.approx(0.03 ** 2)
    assert in_run["plan"]["processes"] > alone["plan"]["processes"]

