"""dlbench.planning.calibration: a machine's first estimate rests on what one process of each framework costs
here, measured once and kept, never on a fixed guess alone."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dlbench.launch.subprocess import JobOutcome
from dlbench.planning import calibration
from dlbench.planning import estimate as est
from dlbench.planning.history import History
from dlbench.planning.plan import Cell, suite_from_dict
from tests.conftest import requires

ROOT = Path(__file__).resolve().parents[1]


def _fake_run(calls: list, cost: dict | None = None, status: str = "ok"):
    def run(job, timeout_s, threads, python=None, extra_env=None):
        calls.append((job.cell.framework, job.cell.variant, job.cell.model, job.cell.scenario, threads))
        # what a worker reports (dlbench.measure.cost.WorkClock); the process took 2.05 s in all
        result = {"cost": cost or {"prepare_s": 0.5, "build_s": 0.25, "warmup_s": 0.0, "timed_s": 0.05, "work_s": 0.8}}
        return JobOutcome(status, result if status == "ok" else None, "" if status == "ok" else "boom", 2.05, 0)
    return run


@pytest.fixture
def kept_file(tmp_path, monkeypatch):
    path = tmp_path / "calibration.json"
    monkeypatch.setenv("DLBENCH_CALIBRATION", str(path))
    return path


def test_a_framework_is_calibrated_once_by_one_lenet_process_and_then_read(kept_file):
    calls = []
    # start + build + rest (dlbench.measure.cost): what a process costs outside its timed calls
    assert calibration.calibrate([("torch", "eager"), ("torch", "eager")], run=_fake_run(calls)) == \
        {("torch", "eager"): pytest.approx(2.0)}
    assert calls == [("torch", "eager", "lenet", "forward", 1)]
    assert calibration.calibrate([("torch", "eager")], run=_fake_run(calls)) == {("torch", "eager"): pytest.approx(2.0)}
    assert len(calls) == 1  # kept
    assert calibration.kept_seconds([("torch", "eager"), ("jax", "jit")]) == {("torch", "eager"): pytest.approx(2.0)}
    assert calibration.forget() and not kept_file.exists() and calibration.kept_seconds([("torch", "eager")]) == {}


def test_a_process_that_fails_calibrates_nothing_and_keeps_nothing(kept_file):
    calls = []
    assert calibration.calibrate([("torch", "eager")], run=_fake_run(calls, status="failed")) == {}
    assert not kept_file.exists()
    # a release whose environment is not built yet starts no process
    assert calibration.calibrate([("torch==2.1.0", "eager")], run=_fake_run(calls)) == {} and len(calls) == 1


def test_a_framework_that_cannot_do_the_calibrations_cell_is_kept_as_such_and_not_asked_again(kept_file):
    """h2o has no forward closure (no process); a runtime of language models refuses LeNet in its process."""
    calls = []

    def refuses(job, timeout_s, threads, python=None, extra_env=None):
        calls.append(job.cell.framework)
        return JobOutcome("ok", {"unsupported": "builds language models only"}, "", 1.0, 0)

    groups = [("h2o", "default"), ("torch", "eager")]
    assert calibration.calibrate(groups, run=refuses) == {} and calls == ["torch"]
    reasons = {v["framework"]: v["unusable"] for v in json.loads(kept_file.read_text()).values()}
    assert reasons["torch"] == "builds language models only" and "forward" in reasons["h2o"]
    assert calibration.calibrate(groups, run=refuses) == {} and calls == ["torch"]  # asked once


@pytest.mark.parametrize("text", ["", "[]", "{not json", '{"k": {"process_s": "fast"}}', '{"k": {"process_s": -1}}'])
def test_a_damaged_calibration_file_reads_as_none_and_is_made_again(kept_file, text):
    kept_file.write_text(text)
    calls = []
    assert calibration.calibrate([("torch", "eager")], run=_fake_run(calls)) == {("torch", "eager"): pytest.approx(2.0)}
    assert len(calls) == 1 and len(json.loads(kept_file.read_text())) >= 1


def test_off_keeps_and_measures_nothing(monkeypatch):
    monkeypatch.setenv("DLBENCH_CALIBRATION", "off")
    calls = []
    assert calibration.calibrate([("torch", "eager")], run=_fake_run(calls)) == {} and calls == []


def test_history_is_preferred_and_the_calibration_replaces_the_fixed_guess():
    c = Cell("torch", "eager", "lenet", "forward", 64, 1)
    s = suite_from_dict({"models": ["lenet"], "protocol": {"warmup": 3, "min_iters": 10, "min_time_s": 0.3,
                                                           "repeats": 1}})
    assert est.prior_seconds(c, s, history=History()) == pytest.approx(
        est.START_S + 3 * est.step_seconds(c, s) + 0.3)
    calibrated = History(calibrated={("torch", "compile"): 0.7})  # another variant's, for want of this one's
    assert calibrated.start_s(c) == 0.7
    assert est.prior_seconds(c, s, history=calibrated) == pytest.approx(0.7 + 3 * est.step_seconds(c, s) + 0.3)
    assert est.setup_seconds([c], calibrated) == pytest.approx(est.PEAK_S + 0.7 + est.VERIFY_MODEL_S)
    learned = History(overhead_framework={"torch": 3.0}, calibrated={("torch", "eager"): 0.7})
    assert learned.start_s(c) == 3.0


@requires("torch")
def test_a_dry_run_calibrates_a_framework_it_has_no_history_of_once(tmp_path, kept_file):
    """A real process: the first dry run on this machine starts one torch process and says so; the second
    reads what the first kept."""
    argv = [sys.executable, "-m", "dlbench", "run", "--dry-run", "--model", "lenet", "--framework", "torch",
            "--scenario", "forward", "--threads", "1", "--db", str(tmp_path / "r.db")]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    first = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "calibrating the estimate: one torch/eager process (lenet forward)" in first.stderr
    assert "start of a process calibrated on this machine for torch" in first.stdout
    (entry,) = json.loads(kept_file.read_text()).values()
    assert entry["framework"] == "torch" and 0 < entry["process_s"] < 120
    second = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert second.returncode == 0 and "calibrating" not in second.stderr
    assert "start of a process calibrated on this machine for torch" in second.stdout
