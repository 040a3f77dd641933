"""``--profile``: the framework's own profiler after the timed calls, a Chrome trace kept with the run,
a top-operations table in the cell's metrics and the report; a framework without one loses its profile,
never its timings."""

import importlib.util
import json
from types import SimpleNamespace

import pytest

from dlbench import api
from dlbench.cli import main
from dlbench.measure.profile import complete_events, op_table, read_trace, xspace_events
from dlbench.report.build import write_report
from dlbench.scenarios.timed import _profile
from dlbench.store import Store

FAST = {"repeats": 1, "warmup": 1, "min_iters": 3, "min_time_s": 0.1, "profile_calls": 2}
PROFILED = [fw for fw, module in (("torch", "torch"), ("jax", "flax"), ("tensorflow", "tensorflow"))
            if importlib.util.find_spec(module) is not None]


def test_self_time_excludes_the_operations_nested_on_the_same_thread():
    ops = [{"ph": "X", "name": "linear", "ts": 0, "dur": 10, "pid": 1, "tid": 1},
           {"ph": "X", "name": "addmm", "ts": 2, "dur": 6, "pid": 1, "tid": 1},
           {"ph": "X", "name": "linear", "ts": 20, "dur": 4, "pid": 1, "tid": 1},
           {"ph": "X", "name": "addmm", "ts": 3, "dur": 5, "pid": 1, "tid": 2}]  # another thread: not nested
    rows = {r.name: r for r in op_table(ops)}
    assert (rows["linear"].calls, rows["linear"].self_us, rows["linear"].total_us) == (2, 8.0, 14.0)
    assert (rows["addmm"].calls, rows["addmm"].self_us) == (2, 11.0)
    assert [r.name for r in op_table(ops)] == ["addmm", "linear"]


def test_an_xspace_becomes_chrome_events_in_microseconds():
    meta = {7: SimpleNamespace(name="matmul:MatMul", display_name="MatMul"),
            8: SimpleNamespace(name="ExecutorState::Process", display_name="")}
    line = SimpleNamespace(id=3, name="tf_Compute", display_name="", timestamp_ns=1000,
                           events=[SimpleNamespace(metadata_id=7, offset_ps=2_000_000, duration_ps=5_000_000),
                                   SimpleNamespace(metadata_id=8, offset_ps=0, duration_ps=9_000_000)])
    space = SimpleNamespace(planes=[SimpleNamespace(name="/host:CPU", lines=[line], event_metadata=meta)])
    events = xspace_events(space)
    (op,) = complete_events(events, lambda e: "op_type" in e.get("args", {}))
    assert (op["name"], op["ts"], op["dur"], op["tid"]) == ("matmul:MatMul", 3.0, 5.0, 3)
    assert {e["name"] for e in events if e["ph"] == "M"} == {"process_name", "thread_name"}


def test_a_failing_profiler_costs_the_profile_and_says_why(tmp_path):
    def broken(run, calls, outdir):
        raise RuntimeError("planted")

    failed = _profile(SimpleNamespace(profile=broken), lambda: None, {"calls": 2, "outdir": str(tmp_path)})
    assert failed == {"failed": "the profiler failed: RuntimeError: planted"}


@pytest.mark.skipif(not PROFILED, reason="no framework with a profiler is installed")
def test_profiled_cells_keep_a_chrome_trace_and_their_top_operations(tmp_db, tmp_path):
    res = api.run(models=["lenet"], frameworks=PROFILED, scenarios=["forward"], threads=[1], protocol=FAST,
                  db=tmp_db)
    assert {c.cell.framework for c in res.cells if c.ok} == set(PROFILED)
    artifacts = Store(tmp_db, read_only=True).artifacts_dir(res.run_id)
    for c in res.cells:
        p = c.cell.metrics["profile"]
        assert p["calls"] == 2 and p["ops"] and p["self_us_total"] >= p["ops"][0]["self_us"] > 0
        assert c.time_ms is not None  # the timed samples are there beside the profile
        events = read_trace(artifacts / p["trace"])  # the format chrome://tracing and Perfetto read
        spans = [e for e in events if e.get("ph") == "X"]
        assert spans and all({"name", "ts", "dur", "pid", "tid"} <= e.keys() for e in spans)
        assert p["ops"][0]["name"] in {e["name"] for e in spans}
    md = write_report(res, tmp_path / "rep", db=tmp_db).markdown.read_text()
    assert "## Profiles" in md and f"{PROFILED[0]}/" in md and "self ms per call" in md


@pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None, reason="onnxruntime is not installed")
def test_a_framework_without_a_profiler_keeps_its_timings_and_warns(tmp_db):
    res = api.run(models=["lenet"], frameworks=["onnxruntime"], scenarios=["forward"], threads=[1], protocol=FAST,
                  db=tmp_db)
    (cell,) = res.cells
    assert cell.ok and cell.time_ms is not None and "profile" not in cell.cell.metrics
    assert any("no profile: onnxruntime has no profiler" in w for w in cell.cell.warnings), cell.cell.warnings


@pytest.mark.parametrize("value", ["0", "-1", "abc"])
def test_a_bad_profile_count_is_one_line_and_exit_2(value, tmp_db, capsys):
    code = main(["run", "--model", "lenet", "--framework", "torch", "--profile", value, "--db", str(tmp_db)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "profile" in err, err
    assert not tmp_db.exists() or json.dumps(Store(tmp_db, read_only=True).list_runs()) == "[]"
