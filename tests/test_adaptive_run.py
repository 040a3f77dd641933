"""Adaptive measurement end to end: a planted slow warm-up found and excluded, a cell measured to a target,
where the time went, and the gate's verdict reused across runs (and re-checked when the fingerprint changes)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dlbench import api
from dlbench.cli.main import main
from dlbench.core.cell import Cell
from dlbench.measure import reuse
from dlbench.running import runner
from tests.conftest import requires

pytestmark = requires("torch")

FAST = {"warmup": 2, "min_iters": 20, "min_time_s": 0.0, "repeats": 2, "timeout_s": 120}


def test_a_planted_slow_warmup_is_found_and_excluded(tmp_db, fake_framework):
    res = api.run(models=["lenet"], frameworks=["fakefw"], variants=["warmslow"], scenarios=["forward"], batches=[4],
                  threads=[1], protocol={**FAST, "repeats": 1, "min_iters": 60}, db=tmp_db)
    (cell,) = res.cells
    assert cell.cell.status == "ok"
    found = cell.cell.metrics["warmup_found"][0]
    # the warm-up calls took 10 ms: no loop (k = 1), so a sample is a call, and the 2 fixed warm-up calls
    # and the `found` samples after them are the first 2 + found calls
    assert cell.cell.metrics["loop_k"] == 1
    assert 2 + found >= 50  # every planted slow call is warm-up (how far past them the end lies depends on the
    # machine's own noise; tests/test_warmup.py checks the boundary on a seeded series)
    assert min(cell.warmup_ms[2:50]) > 10  # the planted calls (10 ms of sleep each)
    assert float(np.median(cell.samples_ms)) < min(cell.warmup_ms[2:50]) / 2
    assert len(cell.samples_ms) >= 60


def test_a_cell_measured_to_a_target_reports_its_two_stages_cost_and_variance(tmp_db, capsys):
    # +-10% within 30 s: a pilot and a second stage of a few processes (at +-5% and 60 s a loaded machine's
    # cell took a minute, the longest test of CI), both stages' accounting the same
    res = api.run(models=["lenet"], frameworks=["torch"], scenarios=["forward"], batches=[4], threads=[1],
                  protocol={**FAST, "target_ci": 10.0, "max_cell_s": 30.0}, db=tmp_db)
    (cell,) = res.cells
    m = cell.cell.metrics
    assert cell.cell.status == "ok"
    adaptive = m["adaptive"]
    assert adaptive["pilot"] == 3  # repeats 2: a pilot has 3 at least
    # a second stage of at least 3 processes, or (a loaded machine's pilot used the cap) the pilot's interval
    assert (adaptive["first_counted"], adaptive["processes"] >= 3) in ((3, True), (0, True))
    assert m["repeats_done"] == adaptive["first_counted"] + adaptive["processes"]
    # the figure is the second stage's interval
    assert cell.time_ms.ci_low == pytest.approx(adaptive["low"] / 1e6)
    assert cell.time_ms.ci_high == pytest.approx(adaptive["high"] / 1e6)
    # so are the samples `compare` tests and bounds its ratio with: the second stage's processes alone
    assert cell.sample_repeats and min(cell.sample_repeats) >= adaptive["first_counted"]
    assert (adaptive["half_width"] <= 0.10) == adaptive["met"]
    if not adaptive["met"]:
        assert any("target +-10% not met" in w for w in cell.cell.warnings)
    cost = m["cost"]
    assert cost["processes"] == m["repeats_done"]
    assert all(cost[k] > 0 for k in ("start_s", "build_s", "warmup_s", "timed_s"))
    assert sum(cost[k] for k in ("start_s", "build_s", "warmup_s", "timed_s", "rest_s")) == \
        pytest.approx(cell.cell.seconds, rel=1e-6)
    assert set(m["variance"]) == {"between", "within", "calls", "processes", "between_share", "process_between_share"}
    capsys.readouterr()
    assert main(["show", "--cost", "--db", str(tmp_db)]) == 0
    out = capsys.readouterr().out
    assert "timed" in out and "gate" in out and "lenet" in out


def test_target_ci_flag_and_its_refusals(tmp_db, capsys):
    assert main(["run", "--model", "lenet", "--framework", "torch", "--scenario", "forward", "--target-ci", "0",
                 "--dry-run", "--db", str(tmp_db)]) == 2
    assert main(["run", "--model", "lenet", "--framework", "torch", "--scenario", "forward", "--target-ci", "2",
                 "--max-time", "90", "--dry-run", "--json", "--db", str(tmp_db)]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["cells"] and plan["estimate_s"] > 0


def test_the_gates_pass_is_reused_on_this_host_and_rechecked_when_the_fingerprint_changes(tmp_db, tmp_path,
                                                                                         monkeypatch):
    monkeypatch.setenv("DLBENCH_GATE_CACHE", str(tmp_path / "gate.json"))
    tiny = {**FAST, "repeats": 1, "min_iters": 3}
    kw = dict(models=["lenet"], frameworks=["torch"], scenarios=["forward"], batches=[4], threads=[1], protocol=tiny,
              db=tmp_db)
    first = api.run(**kw)
    assert "reused" not in first.cells[0].cell.metrics or "gate" not in first.cells[0].cell.metrics["reused"]
    second = api.run(**kw)
    (cell,) = second.cells
    assert cell.verified == "pass" and first.run_id in cell.cell.metrics["reused"]["gate"]
    # --dry-run's estimate knows it: no gate process for the kept group (it counted one before)
    c = Cell("torch", "eager", "lenet", "forward", 4, 1)
    assert runner.kept_gates([c], "sgd") == {c.group}
    monkeypatch.setattr(reuse, "_source_hash", lambda extra=(): "another dlbench")
    assert runner.kept_gates([c], "sgd") == frozenset()
    third = api.run(**kw)
    assert "gate" not in third.cells[0].cell.metrics.get("reused", {})


def test_compilation_caches_only_for_timed_cells_of_frameworks_that_have_one(tmp_path, monkeypatch):

    monkeypatch.setenv("DLBENCH_COMPILATION_CACHE", str(tmp_path))

    from dlbench.scenarios.base import compilation_cache

    def cell(fw, variant, scenario):  # the framework, the variant's declared compiler and its variables
        return compilation_cache(Cell(fw, variant, "lenet", scenario, 4, 1, "cpu"))

    assert "JAX_COMPILATION_CACHE_DIR" in reuse.compilation_cache_env(*cell("jax", "jit", "forward"))
    assert "TORCHINDUCTOR_CACHE_DIR" in reuse.compilation_cache_env(*cell("torch", "compile", "train_step"))
    assert reuse.compilation_cache_env(*cell("torch", "eager", "forward")) == {}
    assert "JAX_COMPILATION_CACHE_DIR" in reuse.compilation_cache_env(*cell("keras", "keras-jax", "forward"))
    assert reuse.compilation_cache_env(*cell("keras", "keras-torch", "forward")) == {}
    mark = reuse.compilation_cache_mark(*cell("jax", "jit", "forward"))
    assert mark["entries_before"] == 0 and mark["compiler"] == "jax"
    monkeypatch.setenv("DLBENCH_COMPILATION_CACHE", "off")
    assert reuse.compilation_cache_mark(*cell("jax", "jit", "forward")) is None
