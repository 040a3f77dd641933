"""`dlbench run` end to end: the store, failures recorded as data, bad input (signals, kills and
resume: tests/test_faults.py)."""

import json
import os
import sqlite3
import time

import pytest

from dlbench import api
from dlbench.cli.main import main
from dlbench.frameworks import FRAMEWORKS, FrameworkInfo, register
from tests.conftest import requires

pytestmark = requires("torch")

TINY = {"warmup": 1, "min_iters": 3, "min_time_s": 0.0, "repeats": 1, "timeout_s": 120}


@pytest.fixture(autouse=True)
def _fake(fake_framework):
    """Every test here may use the fake framework (tests/fakefw.py)."""


def run(db, **kw):
    kw.setdefault("protocol", TINY)
    return api.run(db=db, **kw)


def test_run_stores_samples_environment_and_verdicts(tmp_db):
    res = run(tmp_db, models=["lenet"], frameworks=["torch"], scenarios=["forward", "train_step"], batches=[8],
              threads=[1])
    assert [c.cell.status for c in res.cells] == ["ok", "ok"]
    for c in res.cells:
        assert c.time_ms.n >= 3 and c.time_ms.ci_low <= c.time_ms.median <= c.time_ms.ci_high
        assert c.samples_per_s > 0 and c.gflops > 0 and c.pct_peak > 0
        assert c.cell.metrics["peak_rss_bytes"] > c.cell.metrics["rss_growth_bytes"] > 0
        assert c.cell.metrics["threads_readback"]["intra_op"] == 1
        assert c.cell.metrics["cores"] == [sorted(os.sched_getaffinity(0))[0]]
        assert c.first_call_ms is not None and len(c.warmup_ms) == 1
        assert c.verified == "pass"
    assert res.environment["python"] and res.environment["frameworks"]["torch"]
    assert res.peaks[1]
    conn = sqlite3.connect(tmp_db)
    assert conn.execute("SELECT COUNT(*) FROM samples WHERE phase='measure'").fetchone()[0] >= 6


def test_real_data_batches(tmp_db):
    res = run(tmp_db, models=["lenet"], frameworks=["torch"], scenarios=["forward"], batches=[16], threads=[1],
              data="digits")
    (cell,) = res.cells
    assert cell.cell.status == "ok" and cell.cell.data == "digits" and cell.cell.key.endswith("/digits")


def test_failures_are_results_and_the_run_goes_on(tmp_db):
    res = run(tmp_db, models=["lenet"], frameworks=["fakefw"], variants=["crash", "oom", "broken", "ok"],
              scenarios=["forward"], batches=[4], threads=[1])
    by = {c.cell.variant: c.cell for c in res.cells}
    assert by["crash"].status == "failed" and "SIGABRT" in by["crash"].reason
    assert by["oom"].status == "failed" and "out of memory" in by["oom"].reason
    assert by["broken"].status == "not_equivalent" and "forward error" in by["broken"].reason
    assert by["ok"].status == "ok"
    broken = next(c for c in res.cells if c.cell.variant == "broken")
    assert broken.time_ms is None and not broken.samples_ms


def test_hanging_cell_times_out_and_leaves_nothing_running(tmp_db):
    started = time.time()
    res = run(tmp_db, models=["lenet"], frameworks=["fakefw"], variants=["hang"], scenarios=["forward"], batches=[4],
              threads=[1], protocol={**TINY, "timeout_s": 5})
    (cell,) = res.cells
    assert cell.cell.status == "timeout" and "timed out after 5" in cell.cell.reason
    assert time.time() - started < 120


def test_timed_out_job_leaves_no_process():
    from dlbench.core.job import CellJob
    from dlbench.launch.subprocess import run_job
    from dlbench.planning.plan import Cell

    job = CellJob(threads=1, cell=Cell("fakefw", "hang", "lenet", "forward", 2, 1), seed=0, data_dir=None,
                  protocol={"warmup": 2, "min_iters": 1}, settings={})
    outcome = run_job(job, timeout_s=5, threads=1)
    assert outcome.status == "timeout"
    with pytest.raises(ProcessLookupError):
        os.killpg(outcome.pid, 0)


def test_cli_json_and_exit_code(tmp_db, capsys):
    code = main(["run", "--model", "lenet", "--framework", "fakefw", "--variant", "ok,crash", "--scenario", "forward",
                 "--batch", "4", "--threads", "1", "--warmup", "1", "--min-iters", "3", "--min-time", "0",
                 "--repeats", "1", "--db", str(tmp_db), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1
    assert [f["status"] for f in out["failed"]] == ["failed"]
    assert out["models"]["lenet"][0]["forward_ms"]["median"] > 0


def test_the_json_summary_keeps_failed_cells_and_unsupported_ones_apart(tmp_path):
    """`run --json`'s ``failed`` listed unsupported cells too, so a consumer reading it by its name took
    an ONNX Runtime training cell (a framework that cannot train) for a failure."""
    from dlbench.report.summary import summary_dict
    from tests.synthetic_runs import report_run

    db = tmp_path / "r.db"
    data = summary_dict(api.results(report_run(db), db))
    assert [(f["key"].split("/")[0], f["key"].split("/")[3], f["status"]) for f in data["failed"]] == \
        [("gamma", "forward", "failed")]
    (unsupported,) = data["unsupported"]
    assert unsupported["key"].split("/")[3] == "train_step" and "cannot train" in unsupported["reason"]


def test_cli_threads_take_all_and_half_as_a_suite_file_does(tmp_db, capsys):
    """`--threads all` was refused ("must be integers") though suite files and the docs use it."""
    code = main(["run", "--model", "lenet", "--framework", "fakefw", "--variant", "ok", "--scenario", "forward",
                 "--batch", "4", "--threads", "all,half", "--warmup", "1", "--min-iters", "3", "--min-time", "0",
                 "--repeats", "1", "--db", str(tmp_db), "--json"])
    out = json.loads(capsys.readouterr().out)
    cores = len(os.sched_getaffinity(0))
    assert code == 0
    assert sorted({r["threads"] for r in out["models"]["lenet"]}) == sorted({cores, max(1, cores // 2)})


@pytest.mark.parametrize("args, message", [
    (["--model", "nosuchnet"], "unknown model"),
    (["--framework", "nosuchfw"], "unknown framework"),
    (["--framework", "ghost"], "not installed"),
    (["--batch", "0"], "must be > 0"),
    (["--batch", "x"], "integers"),
    (["--threads", "-1"], "must be > 0"),
    (["--threads", "most"], "or 'all', 'half'"),
    (["--scenario", "dance"], "scenario"),
    (["--repeats", "0"], "--repeats (protocol.repeats): Input should be greater than or equal to 1"),
    (["--data", "nosuchdata"], "unknown data set"),
    (["--data", "mnist", "--data-dir", "/nonexistent"], "data set mnist for lenet"),
    (["--model", "lstm-imdb", "--data", "digits"], "data set digits for lstm-imdb"),
])
def test_bad_input_one_line_exit_2_nothing_written(tmp_path, capsys, args, message):
    register(FrameworkInfo("ghost", "dlbench.frameworks.ghost", "ghost-dist", "ghost_pkg_not_here", ("x",), "absent"))
    db = tmp_path / "r.db"
    try:
        code = main(["run", "--db", str(db), *args])
    finally:
        FRAMEWORKS.pop("ghost", None)
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not db.exists()


def test_bad_suite_files(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("models: [lenet\n")
    invalid = tmp_path / "invalid.yaml"
    invalid.write_text("models: [lenet]\nthreads: [zero]\n")
    for path, message in ((bad, "malformed YAML"), (invalid, "invalid suite")):
        assert main(["run", "--suite", str(path), "--db", str(tmp_path / "r.db")]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "r.db").exists()


def test_unusable_databases(tmp_path, capsys):
    foreign = tmp_path / "notes.txt"
    foreign.write_text("my notes")
    assert main(["run", "--model", "lenet", "--db", str(foreign)]) == 2
    assert "not a dlbench database" in capsys.readouterr().err
    assert foreign.read_text() == "my notes"
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    assert main(["run", "--model", "lenet", "--db", str(blocker / "x" / "r.db")]) == 2
    assert "cannot create" in capsys.readouterr().err
    assert main(["runs", "--db", str(tmp_path / "none.db")]) == 2
    assert main(["show", "nope", "--db", str(tmp_path / "none.db")]) == 2


def test_runs_show_export(tmp_db, capsys):
    res = run(tmp_db, models=["lenet"], frameworks=["torch"], scenarios=["forward"], batches=[4], threads=[1])
    capsys.readouterr()
    assert main(["runs", "--db", str(tmp_db), "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)
    assert runs[0]["id"] == res.run_id and runs[0]["cells_ok"] == 1
    assert main(["show", res.run_id, "--db", str(tmp_db)]) == 0
    assert "lenet" in capsys.readouterr().out
    assert main(["export", res.run_id, "--format", "csv", "--db", str(tmp_db)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("key,framework") and len(lines) == 2
    assert main(["export", "--format", "json", "--db", str(tmp_db)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["cells"][0]["samples_ms"]) >= 3


def test_compile_scenario_times_cold_and_warm_first_calls(tmp_db):
    res = run(tmp_db, models=["lenet"], frameworks=["torch"], scenarios=["compile"], batches=[4], threads=[1])
    (cell,) = res.cells
    assert cell.cell.status == "ok"
    assert set(cell.compile_ms) == {"forward", "gradient", "train_step"}
    assert all(set(d) == {"cold", "warm"} and min(d.values()) > 0 for d in cell.compile_ms.values())


def test_compile_scenario_gives_each_closure_its_own_fresh_processes_and_cache():
    """In one process torch.compile's train_step reused the gradient's compiled loss, so its "first
    call" was a residual (0.4 s beside XLA's 6 s): every closure now gets a cold process with a
    fresh cache, then a warm one on that cache; build-time compile work is taken once."""
    from dlbench.launch.subprocess import JobOutcome
    from dlbench.planning.plan import Cell, suite_from_dict
    from dlbench.scenarios import registry
    from dlbench.scenarios.base import Context

    calls = []

    def fake_run_job(job, timeout, threads, python=None, extra_env=None):
        calls.append((job.extra["closures"], job.extra["build_compile"], extra_env["DLBENCH_CACHE_DIR"]))
        first = {c: 1e6 for c in job.extra["closures"] if c != "train_step"}
        if job.extra["build_compile"]:
            first["session"] = 5e5
        result = {"first_call_ns": first, "unsupported": {"train_step": "no optimiser"}, "build_ns": 1e6,
                  "threads_readback": {}, "python": "py", "versions": {}}
        return JobOutcome("ok", result, "", 1.0, 0)

    suite = suite_from_dict({"models": ["lenet"], "threads": [1], "protocol": {"repeats": 2}})
    out = registry.get("compile").measure(Cell("torch", "compile", "lenet", "compile", 4, 1), Context(suite, fake_run_job))
    assert out.status == "ok"
    # per repeat: forward cold+warm (with the build's compile work), gradient cold+warm; train_step
    # is found unsupported by the first process and never started
    assert [(c, b) for c, b, _ in calls] == [(["forward"], True)] * 2 + [(["gradient"], False)] * 2 + \
        [(["forward"], True)] * 2 + [(["gradient"], False)] * 2
    caches = [cache for _, _, cache in calls]
    assert caches[0] == caches[1] and caches[2] == caches[3] and len(set(caches[::2])) == 4
    phases = sorted({s.phase for s in out.samples})
    assert phases == sorted(f"compile_{p}:{c}" for c in ("forward", "gradient", "session") for p in ("cold", "warm"))
    assert out.metrics["unsupported"] == {"train_step": "no optimiser"}


@requires("onnxruntime")
def test_compile_scenario_times_onnxruntime_session_creation(tmp_db):
    """ONNX Runtime compiles when it creates the session (in build): the compile cell showed only a cheap first run."""
    res = run(tmp_db, models=["lenet"], frameworks=["onnxruntime"], scenarios=["compile"], batches=[4], threads=[1])
    (cell,) = res.cells
    assert cell.cell.status == "ok"
    assert set(cell.compile_ms) == {"session", "forward"}
    assert all(set(d) == {"cold", "warm"} and min(d.values()) > 0 for d in cell.compile_ms.values())


@requires("onnxruntime")
def test_scenario_a_framework_lacks_is_unsupported_with_reason(tmp_db):
    res = run(tmp_db, models=["lenet"], frameworks=["onnxruntime"], scenarios=["gradient"], batches=[4], threads=[1])
    (cell,) = res.cells
    assert cell.cell.status == "unsupported" and "supports only the forward" in cell.cell.reason
    assert res.without_time == [cell] == res.unsupported and res.errors == []


@requires("onnxruntime")
def test_unsupported_cells_are_listed_but_do_not_fail_the_run(tmp_db, capsys):
    """`dlbench run` on the quick suite exited 1 because ONNX Runtime cannot train: a capability, not an error."""
    args = ["run", "--model", "lenet", "--framework", "onnxruntime", "--scenario", "forward,gradient",
            "--batch", "4", "--threads", "1", "--warmup", "1", "--min-iters", "3", "--min-time", "0", "--repeats", "1",
            "--db", str(tmp_db)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "unsupported" in out and "onnxruntime/default/lenet/gradient" in out


@requires("openvino")
@requires("onnxscript")
def test_openvino_forward_cell_on_the_cells_thread_and_its_training_cells_unsupported(tmp_db):
    res = run(tmp_db, models=["lenet"], frameworks=["openvino"], scenarios=["forward", "gradient"], batches=[4],
              threads=[1])
    by = {c.cell.scenario: c for c in res.cells}
    assert by["forward"].cell.status == "ok" and by["forward"].verified == "pass" and by["forward"].samples_per_s > 0
    assert by["forward"].cell.metrics["threads_readback"] == {"inference_num_threads": 1, "num_streams": 1}
    assert by["forward"].cell.metrics["cores"] == [sorted(os.sched_getaffinity(0))[0]]
    assert by["gradient"].cell.status == "unsupported" and "supports only the forward" in by["gradient"].cell.reason


def test_convergence_curves_and_agreement_flags_a_planted_difference(tmp_db):
    res = run(tmp_db, models=["lenet"], frameworks=["torch", "fakefw"], variants=["eager", "ok", "lr"],
              scenarios=["convergence"], threads=[1], data="digits", convergence={"epochs": 2, "log_steps": 10})
    by = {(c.cell.framework, c.cell.variant): c for c in res.cells}
    assert all(c.cell.status == "ok" for c in res.cells)
    torch_curve = by["torch", "eager"].convergence
    assert torch_curve["epochs"] == 2 and 0.5 < torch_curve["final_test_acc_mean"] <= 1.0
    assert len(torch_curve["curves"]["test_acc"]["mean"]) == 2
    from dlbench.scenarios.convergence_report import agreement

    rows = {r["framework"]: r for r in agreement(res.cells, "torch")}
    assert rows["fakefw/ok"]["first_departure_step"] is None  # same arithmetic, same batches
    assert rows["fakefw/lr"]["first_departure_step"] == 2  # step 1 is before any update
    from dlbench.scenarios import registry

    (section,) = registry.get("convergence").report_sections(res)  # the report asks the scenario for it
    assert [t.title for t in section.tables] == ["convergence", "agreement check (same weights, same batches)"]
    plots, _ = registry.report_plots(res)
    assert len(plots) == 1 and "<svg" in plots[0].svg


def test_convergence_needs_real_data(tmp_path, capsys):
    assert main(["run", "--scenario", "convergence", "--model", "lenet", "--db", str(tmp_path / "r.db")]) == 2
    assert "convergence needs a real data set" in capsys.readouterr().err
