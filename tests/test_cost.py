"""Where the time went (dlbench.measure.cost, dlbench.report.cost) and what --dry-run adds for the
environments a run builds (dlbench.frameworks.ondemand.estimate_builds)."""

from __future__ import annotations

import json
import sys

import pytest

from dlbench.cli.main import main
from dlbench.frameworks.ondemand import estimate_builds
from dlbench.measure.cost import PARTS, cell_cost, process_cost
from dlbench.planning import estimate as est
from dlbench.planning.plan import Cell, suite_from_dict
from tests.old_schema import make_v2


def test_a_process_breakdown_adds_up_to_its_wall_time():
    work = {"prepare_s": 1.0, "build_s": 2.0, "warmup_s": 0.5, "timed_s": 3.0, "work_s": 7.0}
    cost = process_cost(10.0, work)
    assert cost["start_s"] == pytest.approx(3.0 + 1.0)  # before the work began, and the imports inside it
    assert cost["rest_s"] == pytest.approx(0.5)
    assert sum(cost[p] for p in PARTS) == pytest.approx(10.0)


def test_a_process_that_reported_nothing_is_all_rest():
    assert process_cost(4.0, None)["rest_s"] == 4.0
    cell = cell_cost([(4.0, None), (10.0, {"prepare_s": 1.0, "build_s": 2.0, "warmup_s": 0.5, "timed_s": 3.0,
                                          "work_s": 7.0})])
    assert cell["processes"] == 2 and sum(cell[p] for p in PARTS) == pytest.approx(14.0)


def test_show_cost_reads_a_database_of_an_older_dlbench(tmp_path, capsys, monkeypatch):
    """Cells stored before the breakdown existed: every part unknown ("–", None in JSON), never 0 s; the
    total is the cell's stored wall time; nothing is refused."""
    from dlbench.cli.common import console

    monkeypatch.setattr(console, "width", 1000)
    db = tmp_path / "old.db"
    make_v2(db)
    assert main(["show", "--cost", "--json", "--db", str(db)]) == 0
    out = json.loads(capsys.readouterr().out)
    (row,) = out["cells"]
    assert all(row[p] is None for p in (*PARTS, "gate_s")) and row["total_s"] == 1.0 and row["processes"] is None
    assert out["total"]["rest_s"] is None and out["total"]["cells_s"] == 1.0 and row["negative"] == []
    assert main(["show", "--cost", "--db", str(db)]) == 0
    text = capsys.readouterr().out
    line = next(x for x in text.splitlines() if "lenet" in x)
    cols = [c.strip() for c in line.split("│") if c.strip()]
    assert cols[2:8] == ["–"] * 6 and cols[8] == "1.00"
    assert "all cells" in text and "–: not recorded" in text


def test_a_negative_cost_is_flagged(tmp_db, capsys, monkeypatch):
    """A part below zero (a clock that stepped back, a damaged record) is named in the row, marked in the
    table and listed below it, not summed in silence."""
    from dlbench.cli.common import console
    from dlbench.storage.store import Store
    from tests.synthetic_runs import cell, finish, metrics, new_run, timed_samples, verify_pass

    monkeypatch.setattr(console, "width", 1000)
    store = Store(tmp_db)
    run_id = new_run(store)
    verify_pass(store, run_id, "alpha", "eager")
    cost = {"start_s": 1.0, "build_s": -0.5, "warmup_s": 0.1, "timed_s": 2.0, "rest_s": 0.1, "processes": 3}
    store.save_cell(run_id, cell("alpha", "eager", "forward", 4, 1), "ok", "", 3.0, [], {**metrics(), "cost": cost},
                    timed_samples(5.0))
    finish(store, run_id)
    store.close()
    assert main(["show", "--cost", "--json", "--db", str(tmp_db)]) == 0
    (row,) = json.loads(capsys.readouterr().out)["cells"]
    assert row["negative"] == ["build_s"] and row["build_s"] == -0.5
    assert main(["show", "--cost", "--db", str(tmp_db)]) == 0
    text = capsys.readouterr().out
    assert "-0.500 (negative!)" in text and "1 cell(s) with a negative time" in text


def test_dry_run_counts_the_environments_a_run_will_build(tmp_path, monkeypatch):
    monkeypatch.setenv("DLBENCH_ENVS_DIR", str(tmp_path / "envs"))
    (b,) = estimate_builds(["torch", "jax==0.4.38"])
    # nothing built here to go by: unknown, not a figure made up
    assert b.framework == "jax==0.4.38" and b.seconds is None and b.size_bytes is None
    # an environment built here before teaches the guess
    built = tmp_path / "envs" / "jax-0.4.30"
    built.mkdir(parents=True)
    (built / "blob").write_bytes(b"x" * 1000)
    (built / "dlbench-env.json").write_text(json.dumps({
        "framework": "jax==0.4.30", "path": str(built), "python": sys.executable, "python_version": "3.11",
        "created": "2026-11-26T00:00:00+00:00", "create_seconds": 77.0, "framework_version": "0.4.30"}))
    (b,) = estimate_builds(["jax==0.4.38"])
    assert b.seconds == 77.0 and b.size_bytes >= 1000 and "jax" in b.basis


def test_dry_run_with_a_target_estimates_a_pilot_and_a_second_stage_within_the_cap():
    base = {"models": ["lenet"], "protocol": {"warmup": 3, "min_iters": 10, "min_time_s": 0.3, "repeats": 3}}
    fixed = suite_from_dict(base)
    target = suite_from_dict({**base, "protocol": {**base["protocol"], "target_ci": 2.0, "max_cell_s": 100.0}})
    c = Cell("torch", "eager", "lenet", "forward", 64, 1)
    assert fixed.protocol.target_ci is None
    assert est.prior_seconds(c, fixed) < est.prior_seconds(c, target) <= 100.0


def test_the_progress_line_of_a_cell_measured_to_a_target_gives_its_second_stage(capsys):
    from dlbench.cli.run import RichProgress
    from dlbench.storage.store import Sample

    cell = Cell("torch", "eager", "lenet", "forward", 64, 1)
    progress = RichProgress(terminal=False)
    progress("start", total=1, done=0)
    progress("cell_start", cell=cell)
    adaptive = {"q": 50.0, "center": 2e6, "low": 1.98e6, "high": 2.02e6, "half_width": 0.01, "target": 0.02,
                "met": True, "processes": 7}
    progress("cell_done", cell=cell, status="ok", reason="", metrics={"adaptive": adaptive},
             samples=[Sample(0, i, "measure", v * 1e6) for i, v in enumerate([9.0, 1.0, 3.0])])
    progress.stop()
    line = capsys.readouterr().out.splitlines()[-1]
    assert "ok 2.00 ms [1.98, 2.02], ±1% (target ±2% met, 7 processes)" in line


def test_a_timed_jax_cell_is_offered_the_persistent_cache_and_marked(tmp_path, monkeypatch):
    """run_in_turn gives each process the cache's environment and records what the cache held before."""
    from dlbench.core.job import CellJob
    from dlbench.launch.subprocess import JobOutcome
    from dlbench.scenarios.base import CellOutcome, Context, run_in_turn

    monkeypatch.setenv("DLBENCH_COMPILATION_CACHE", str(tmp_path))
    (tmp_path / "jax" / "jax").mkdir(parents=True)
    (tmp_path / "jax" / "jax" / "entry").write_bytes(b"compiled")
    envs_seen = []

    def run_job(job, timeout_s, threads=None, python=None, extra_env=None):
        envs_seen.append(extra_env)
        return JobOutcome("ok", {"cost": {"work_s": 1.0}}, "", 2.0, 0)

    out = CellOutcome("ok")
    suite = suite_from_dict({"models": ["lenet"]})
    cell = Cell("jax", "jit", "lenet", "forward", 4, 1)
    job = CellJob(threads=1, cell=cell, seed=0, data_dir=None, protocol=suite.protocol.timer_fields(), settings={})
    run_in_turn(cell, Context(suite, run_job), [job] * 2, 60.0, out)
    assert all(e["JAX_COMPILATION_CACHE_DIR"] == str(tmp_path / "jax" / "jax") for e in envs_seen)
    assert out.reused["compilation_cache"]["entries_before"] == 1
    assert [s for s, _ in out.processes] == [2.0, 2.0]


def test_protocol_flags_of_adaptive_measurement():
    import argparse

    from dlbench.cli.run import _protocol, add_protocol_flags
    from dlbench.core.errors import UsageError

    p = argparse.ArgumentParser()
    add_protocol_flags(p)
    assert _protocol(p.parse_args(["--target-ci", "2", "--max-time", "90", "--fixed-warmup"])) == {
        "target_ci": 2.0, "max_cell_s": 90.0, "find_warmup": False}
    assert _protocol(p.parse_args([])) == {}
    for bad in (["--target-ci", "0"], ["--target-ci", "100"], ["--max-time", "-1"]):
        with pytest.raises(UsageError):
            _protocol(p.parse_args(bad))


def test_the_bytes_of_what_pip_would_install_local_from_the_disk_remote_from_the_server(tmp_path):
    """dlbench.envs.sizes: a file pip reads from this disk is sized there (no download); a remote one by its
    server's Content-Length (a real HEAD to a local server here); a file the server does not have is an
    error in words, which the estimate turns into the median build."""
    import threading
    from functools import partial
    from http.server import HTTPServer, SimpleHTTPRequestHandler

    from dlbench.envs import sizes

    (tmp_path / "a-1.0-py3-none-any.whl").write_bytes(b"x" * 1234)
    (tmp_path / "b-2.0-py3-none-any.whl").write_bytes(b"y" * 5678)
    server = HTTPServer(("127.0.0.1", 0), partial(SimpleHTTPRequestHandler, directory=str(tmp_path)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        remote = f"http://127.0.0.1:{server.server_port}/b-2.0-py3-none-any.whl"
        report = {"install": [
            {"metadata": {"name": "a", "version": "1.0"},
             "download_info": {"url": (tmp_path / "a-1.0-py3-none-any.whl").as_uri()}},
            {"metadata": {"name": "b", "version": "2.0"}, "download_info": {"url": remote}}]}
        got = sizes.fetches(report)
        assert [(f.name, f.bytes, f.local) for f in got] == [("a", 1234, True), ("b", 5678, False)]
        assert sizes.Sizes.of(got) == sizes.Sizes(total=1234 + 5678, network=5678, files=2)
        with pytest.raises(sizes.SizeError, match="could not be read"):
            sizes.head_size(remote.replace("b-2.0", "c-3.0"))
        (tmp_path / "report.json").write_text(json.dumps(report))
        assert sizes.report_sizes(tmp_path / "report.json").total == 1234 + 5678
        assert sizes.report_sizes(tmp_path / "missing.json") is None
    finally:
        server.shutdown()
        server.server_close()
