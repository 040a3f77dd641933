"""Step changes over a figure's history (dlbench.report.changes, ``dlbench history --changes``): a planted
step is found with its size, a flat noisy history gives none, a step at the newest point is found, and
one point that moved and came back is an outlier, not a step."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dlbench.cli import main
from dlbench.report.changes import detect
from dlbench.store import Store
from tests.synthetic_runs import ENV, cell, finish, metrics, timed_samples


def _history(levels: list[float], seed: int, noise: float = 0.03, drift: float = 0.02, processes: int = 3):
    """Per-point per-process medians: each point (a run) off by ``drift``, each process by ``noise``."""
    rng = np.random.default_rng(seed)
    return [list(lv * (1 + drift * rng.standard_normal()) * (1 + noise * rng.standard_normal(processes)))
            for lv in levels]


def _labels(n: int) -> list[str]:
    return [f"night {i}" for i in range(n)]


@pytest.mark.parametrize("seed", range(10))
def test_a_planted_step_is_found_with_its_size(seed):
    changes = detect(_history([10.0] * 18 + [13.0] * 12, seed), _labels(30))
    assert [(c.index, c.verdict) for c in changes] == [(18, "slower")]
    c = changes[0]
    assert c.ci_low < 1.3 < c.ci_high and 1.2 < c.ratio < 1.4 and c.p_value < 0.01 / 29
    assert (c.before, c.after, c.points_before, c.points_after) == ("night 17", "night 18", 18, 12)
    assert c.text.startswith("step +")


@pytest.mark.parametrize("seed", range(20))
def test_a_flat_noisy_history_has_no_step(seed):
    assert detect(_history([10.0] * 30, seed, noise=0.05, drift=0.03), _labels(30)) == []


def test_a_step_at_the_newest_point_is_found_and_an_outlier_is_not():
    newest = detect(_history([10.0] * 20 + [14.0], 3), _labels(21))
    assert [(c.index, c.points_after, c.verdict) for c in newest] == [(20, 1, "slower")]
    outlier = detect(_history([10.0] * 10 + [14.0] + [10.0] * 10, 3), _labels(21))
    assert outlier == []
    faster = detect(_history([10.0] * 8 + [7.0] * 8, 4), _labels(16))
    assert [(c.index, c.verdict) for c in faster] == [(8, "faster")]


def test_too_short_a_history_claims_nothing():
    assert detect(_history([10.0, 20.0], 0), _labels(2)) == []


def _runs(db, levels: list[float]) -> None:
    store = Store(db)
    try:
        for i, ms in enumerate(levels):
            run_id = store.create_run("nightly", {"name": "nightly"})
            store.conn.execute("UPDATE runs SET started_at=? WHERE id=?", (1.7e9 + i * 86400, run_id))
            store.conn.commit()
            store.save_environment(run_id, {**ENV, "frameworks": {"torch": "2.13.0"}})
            store.save_verification(run_id, "torch", "eager", "lenet", "cpu", "pass", "", {})
            store.save_cell(run_id, cell("torch", "eager", "forward", 8, 1), "ok", "", 1, [], metrics(),
                            timed_samples(ms, noise=0.02, repeats=3, process_noise=0.02, seed=i))
            finish(store, run_id)
    finally:
        store.close()


def test_history_changes_lists_a_planted_step_and_fails_the_job(tmp_db, capsys):
    rng = np.random.default_rng(7)
    _runs(tmp_db, [5.0 * (1 + 0.02 * rng.standard_normal()) * (1.35 if i >= 9 else 1.0) for i in range(14)])
    argv = ["history", "--framework", "torch", "--model", "lenet", "--scenario", "forward", "--db", str(tmp_db),
            "--changes"]
    assert main([*argv, "--json"]) == 0
    (series,) = json.loads(capsys.readouterr().out)
    (change,) = series["changes"]
    assert change["index"] == 9 and change["verdict"] == "slower" and 1.25 < change["ratio"] < 1.45
    assert sum(1 for p in series["points"] if p["step"]) == 1 and series["points"][9]["step"].startswith("step +")
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "step changes" in text and "step +" in text and "1 step change(s)" in text
    assert main([*argv, "--fail-on-slowdown"]) == 1


def test_history_changes_finds_none_in_a_flat_history(tmp_db, capsys):
    rng = np.random.default_rng(0)
    _runs(tmp_db, [5.0 * (1 + 0.03 * rng.standard_normal()) for _ in range(14)])
    assert main(["history", "--framework", "torch", "--model", "lenet", "--scenario", "forward", "--db", str(tmp_db),
                 "--changes", "--json"]) == 0
    (series,) = json.loads(capsys.readouterr().out)
    assert series["changes"] == [] and not any(p["step"] for p in series["points"])


def test_the_reports_versions_section_marks_a_step_across_releases(tmp_db, tmp_path):
    from dlbench import api
    from dlbench.report.build import write_report

    releases = ["2.8.0", "2.9.0", "2.10.0", "2.11.0", "2.12.0", "2.13.0"]
    store = Store(tmp_db)
    try:
        run_id = store.create_run("versions", {"name": "versions"})
        store.save_environment(run_id, {**ENV, "frameworks": {f"torch=={v}": v for v in releases}})
        for i, v in enumerate(releases):
            name = f"torch=={v}"
            store.save_verification(run_id, name, "eager", "lenet", "cpu", "pass", "", {})
            store.save_cell(run_id, cell(name, "eager", "forward", 8, 1), "ok", "", 1, [], metrics(),
                            timed_samples(6.5 if i >= 3 else 5.0, noise=0.02, repeats=3, process_noise=0.02, seed=i))
        finish(store, run_id)
    finally:
        store.close()
    files = write_report(api.results(run_id, tmp_db), tmp_path / "rep", db=tmp_db)
    md = files.markdown.read_text()
    assert "step change (history)" in md and md.count("step +") == 1
    (line,) = [ln for ln in md.splitlines() if "step +" in ln]
    assert "torch 2.11.0" in line
