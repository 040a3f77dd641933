"""``--profile``: the framework's own profiler after the timed calls, a Chrome trace kept with the run,
a top-operations table in the cell's metrics and the report; a framework without one loses its profile,
never its timings."""

import importlib.util
import json
import os
from types import SimpleNamespace

import pytest

from dlbench import api
from dlbench.cli.main import main
from dlbench.measure.profile import (
    complete_events,
    kind_table,
    op_kind,
    op_table,
    paired_events,
    read_trace,
    xspace_events,
)
from dlbench.report.build import write_report
from dlbench.scenarios.timed import _profile
from dlbench.storage.store import Store
from tests.conftest import run_in_framework

FAST = {"repeats": 1, "warmup": 1, "min_iters": 3, "min_time_s": 0.1, "profile_calls": 2}
#: frameworks whose profiled cells run end to end here: torch, JAX and TensorFlow in CI (three profilers of
#: their own: torch.profiler, jax.profiler's trace, TensorFlow's XSpace converted); ONNX Runtime and OpenVINO
#: in the nightly set too (DLBENCH_SLOW_TESTS=1): CI checks their profilers in a process of their own below
#: (a second session, a second compiled model), which is what a profiled cell of theirs runs
NIGHTLY_PROFILED = ("onnxruntime", "openvino")
PROFILED = [fw for fw, module in (("torch", "torch"), ("jax", "flax"), ("tensorflow", "tensorflow"),
                                  ("onnxruntime", "onnxruntime"), ("openvino", "openvino"))
            if importlib.util.find_spec(module) is not None
            and (fw not in NIGHTLY_PROFILED or os.environ.get("DLBENCH_SLOW_TESTS"))]


def test_self_time_excludes_the_operations_nested_on_the_same_thread():
    ops = [{"ph": "X", "name": "linear", "ts": 0, "dur": 10, "pid": 1, "tid": 1},
           {"ph": "X", "name": "addmm", "ts": 2, "dur": 6, "pid": 1, "tid": 1},
           {"ph": "X", "name": "linear", "ts": 20, "dur": 4, "pid": 1, "tid": 1},
           {"ph": "X", "name": "addmm", "ts": 3, "dur": 5, "pid": 1, "tid": 2}]  # another thread: not nested
    rows = {r.name: r for r in op_table(ops)}
    assert (rows["linear"].calls, rows["linear"].self_us, rows["linear"].total_us) == (2, 8.0, 14.0)
    assert (rows["addmm"].calls, rows["addmm"].self_us) == (2, 11.0)
    assert [r.name for r in op_table(ops)] == ["addmm", "linear"]


def test_operations_sum_by_kind():
    """XLA names each fusion apart (transpose_copy_fusion.71, .75, ...): by name, a kind that held half
    of JAX's ResNet-56 gradient was spread over rows of 8% and less."""
    assert [op_kind(n) for n in ("transpose_copy_fusion.71", "aten::addmm", "node_Conv_5:Convolution",
                                 "dense/MatMul:_MklNativeFusedMatMul", "conv2d dygraph", "MatMul.4")] == [
        "transpose_copy_fusion", "aten::addmm", "Convolution", "_MklNativeFusedMatMul", "conv2d dygraph", "MatMul"]
    ops = [{"ph": "X", "name": f"transpose_copy_fusion.{i}", "ts": 10 * i, "dur": 3, "pid": 1, "tid": 1} for i in range(4)]
    ops.append({"ph": "X", "name": "convolution.1", "ts": 100, "dur": 5, "pid": 1, "tid": 1})
    kinds = kind_table(op_table(ops))
    assert [(k.name, k.calls, k.self_us) for k in kinds] == [("transpose_copy_fusion", 4, 12.0), ("convolution", 1, 5.0)]


def test_begin_end_pairs_become_complete_events_per_thread():
    """MXNet's profiler writes an operation as a begin and an end event; the table reads complete ones."""
    events = [{"ph": "B", "name": "outer", "ts": 0, "pid": 1, "tid": 1, "cat": "operator"},
              {"ph": "B", "name": "inner", "ts": 2, "pid": 1, "tid": 1, "cat": "operator"},
              {"ph": "B", "name": "other", "ts": 3, "pid": 1, "tid": 2, "cat": "operator"},
              {"ph": "E", "name": "inner", "ts": 5, "pid": 1, "tid": 1},
              {"ph": "E", "name": "other", "ts": 4, "pid": 1, "tid": 2},
              {"ph": "E", "name": "outer", "ts": 10, "pid": 1, "tid": 1},
              {"ph": "X", "name": "done", "ts": 11, "dur": 1, "pid": 1, "tid": 1},
              {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1}]
    got = {e["name"]: (e["ph"], e["ts"], e["dur"], e.get("cat")) for e in paired_events(events)}
    assert got == {"outer": ("X", 0, 10.0, "operator"), "inner": ("X", 2, 3.0, "operator"),
                   "other": ("X", 3, 1.0, "operator"), "done": ("X", 11, 1, None)}
    rows = {r.name: r for r in op_table(paired_events(events))}
    assert rows["outer"].self_us == 7.0 and rows["inner"].self_us == 3.0


def test_an_xspace_becomes_chrome_events_in_microseconds():
    """An XLA cluster's HLO instructions (Keras's jit_compile on TensorFlow) have no op type; they were
    left out of the operations, and Keras-on-TF's profile of a jit-compiled model had none."""
    meta = {7: SimpleNamespace(name="matmul:MatMul", display_name="MatMul"),
            8: SimpleNamespace(name="ExecutorState::Process", display_name=""),
            9: SimpleNamespace(name="convolution.2", display_name="")}
    stat_meta = {1: SimpleNamespace(name="hlo_op"), 2: SimpleNamespace(name="convolution.2"),
                 3: SimpleNamespace(name="program_id")}
    hlo = [SimpleNamespace(metadata_id=1, ref_value=2, str_value=""), SimpleNamespace(metadata_id=3, ref_value=0,
                                                                                        str_value="")]
    line = SimpleNamespace(id=3, name="tf_Compute", display_name="", timestamp_ns=1000,
                           events=[SimpleNamespace(metadata_id=7, offset_ps=2_000_000, duration_ps=5_000_000, stats=[]),
                                   SimpleNamespace(metadata_id=8, offset_ps=0, duration_ps=9_000_000, stats=[]),
                                   SimpleNamespace(metadata_id=9, offset_ps=8_000_000, duration_ps=1_000_000,
                                                   stats=hlo)])
    space = SimpleNamespace(planes=[SimpleNamespace(name="/host:CPU", lines=[line], event_metadata=meta,
                                                    stat_metadata=stat_meta)])
    events = xspace_events(space)
    (op,) = complete_events(events, lambda e: "op_type" in e.get("args", {}))
    assert (op["name"], op["ts"], op["dur"], op["tid"]) == ("matmul:MatMul", 3.0, 5.0, 3)
    (xla,) = complete_events(events, lambda e: "hlo_op" in e.get("args", {}))
    assert (xla["name"], xla["args"], xla["dur"]) == ("convolution.2", {"hlo_op": "convolution.2"}, 1.0)
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
        names = {e["name"] for e in spans}
        top = p["ops"][0]["name"]  # ONNX Runtime's table says node:OpType of its event node_kernel_time
        assert top in names or f"{top.rpartition(':')[0]}_kernel_time" in names, (top, names)
    md = write_report(res, tmp_path / "rep", db=tmp_db).markdown.read_text()
    assert "## Profiles" in md and f"{PROFILED[0]}/" in md and "self ms per call" in md


def test_a_framework_without_a_profiler_keeps_its_timings_and_warns(tmp_db, fake_framework):
    res = api.run(models=["lenet"], frameworks=["fakefw"], variants=["noprofile"], scenarios=["forward"], threads=[1],
                  protocol=FAST, db=tmp_db)
    (cell,) = res.cells
    assert cell.ok and cell.time_ms is not None and "profile" not in cell.cell.metrics
    assert any("no profile: fakefw has no profiler" in w for w in cell.cell.warnings), cell.cell.warnings


def _profile_engine(framework: str, tmp_path):
    """An inference engine's LeNet forward, its output, and its profile over 3 calls into ``tmp_path``."""
    from dlbench.data.synthetic import make_batch
    from dlbench.frameworks import get_backend
    from dlbench.measure.profile import profile_closure
    from dlbench.models import get_model
    from dlbench.models.weights import init_weights

    backend = get_backend(framework)
    backend.set_threads(1)
    spec = get_model("lenet", small=True)
    model = backend.build(spec, init_weights(spec, seed=0))
    run = backend.forward(model, backend.place(make_batch(spec, 4, seed=0), model))
    expected = backend.to_numpy(run()).copy()
    return backend, model, run, expected, profile_closure(backend.profile, run, 3, tmp_path)


@pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None, reason="onnxruntime is not installed")
def test_onnxruntime_profiles_a_second_session_and_leaves_out_its_warm_up_call(tmp_path):
    """ONNX Runtime had no profile (its profiler is a session option): a second session of the same
    graph profiles the calls; the timed session is not touched and its warm-up call is not counted."""
    backend, model, run, expected, p = _profile_engine("onnxruntime", tmp_path)
    events = read_trace(tmp_path / p["trace"])
    assert p["tool"].startswith("onnxruntime profiler") and p["ops"]
    nodes = [e for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    first = {f'{e["name"].removesuffix("_kernel_time")}:{e["args"]["op_name"]}' for e in nodes}
    assert {r["name"] for r in p["ops"]} <= first and all(r["calls"] == 3 for r in p["ops"])  # not 4
    assert not model.session.get_session_options().enable_profiling
    assert (backend.to_numpy(run()) == expected).all()


@pytest.mark.parametrize("value", ["0", "-1", "abc"])
def test_a_bad_profile_count_is_one_line_and_exit_2(value, tmp_db, capsys):
    code = main(["run", "--model", "lenet", "--framework", "torch", "--profile", value, "--db", str(tmp_db)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "profile" in err, err
    assert not tmp_db.exists() or json.dumps(Store(tmp_db, read_only=True).list_runs()) == "[]"


@pytest.mark.skipif(importlib.util.find_spec("openvino") is None, reason="openvino is not installed")
def test_openvino_profiles_a_second_compiled_model_and_leaves_out_its_warm_up_call(tmp_path):
    """OpenVINO had no profile (its counters are a compile option, PERF_COUNT): a second compiled model
    of the same graph and inputs profiles the calls; the timed one keeps its counters off, and the
    first call of the profiled request is not counted. In a fresh process, as dlbench profiles a cell:
    OpenVINO models compiled earlier in a process (the nightly set's other tests) changed how many
    times some nodes of a later one ran per call."""
    out = run_in_framework("openvino", f"""
        import json
        from pathlib import Path
        from dlbench.data.synthetic import make_batch
        from dlbench.frameworks import get_backend
        from dlbench.measure.profile import profile_closure, read_trace
        from dlbench.models import get_model
        from dlbench.models.weights import init_weights
        backend = get_backend("openvino")
        backend.set_threads(1)
        spec = get_model("lenet", small=True)
        model = backend.build(spec, init_weights(spec, seed=0))
        run = backend.forward(model, backend.place(make_batch(spec, 4, seed=0), model))
        expected = backend.to_numpy(run()).copy()
        out = Path({str(tmp_path)!r})
        p = profile_closure(backend.profile, run, 3, out)
        (compiled,) = model.compiled.values()
        print(json.dumps({{"p": p, "calls": sorted({{e["args"]["call"] for e in read_trace(out / p["trace"])}}),
                          "perf_count": str(compiled.get_property("PERF_COUNT")),
                          "same": bool((backend.to_numpy(run()) == expected).all())}}))
    """)
    p = out["p"]
    assert p["tool"].startswith("OpenVINO PERF_COUNT") and p["ops"]
    assert out["calls"] == [0, 1, 2] and all(r["calls"] % 3 == 0 for r in p["ops"])
    assert all(":" in r["name"] for r in p["ops"])  # node:type
    assert out["perf_count"].upper() in ("NO", "FALSE")
    assert out["same"]


def test_the_report_sums_a_profile_by_kind_where_kinds_merge_operations(tmp_path):
    """XLA's fusions are one row each in the report's profile table; a kind spread over many rows
    (JAX's transpose_copy_fusion.N, 58% of its ResNet-56 gradient) read as several small ones."""
    from dlbench.storage.store import Sample

    ops = [{"name": f"transpose_copy_fusion.{i}", "calls": 2, "self_us": 3_000.0, "total_us": 3_000.0} for i in (71, 75)]
    ops.append({"name": "convolution.1", "calls": 2, "self_us": 4_000.0, "total_us": 4_000.0})
    kinds = [{"name": "transpose_copy_fusion", "calls": 4, "self_us": 6_000.0, "total_us": 6_000.0},
             {"name": "convolution", "calls": 2, "self_us": 4_000.0, "total_us": 4_000.0}]
    store = Store(tmp_path / "p.db")
    run = store.create_run("t", {})
    for fw, profile in (("xlafw", {"trace": "t.json", "tool": "planted", "calls": 2, "self_us_total": 10_000.0,
                                   "ops": ops, "kinds": kinds}),
                        ("oldfw", {"trace": "t.json", "tool": "planted", "calls": 2, "self_us_total": 4_000.0,
                                   "ops": ops[2:]})):  # stored before profiles had kinds
        cell = {"framework": fw, "variant": "v", "model": "lenet", "scenario": "forward", "batch": 64, "threads": 1,
                "device": "cpu", "data": "synthetic", "key": f"{fw}/v/lenet/forward/b64/t1/cpu"}
        store.save_cell(run, cell, "ok", "", 1.0, [], {"profile": profile},
                        [Sample(r, i, "measure", 1e6) for r in range(3) for i in range(5)])
    store.close()
    md = write_report(api.results(run, tmp_path / "p.db"), tmp_path / "rep", db=tmp_path / "p.db").markdown.read_text()
    section = md.split("## Profiles")[1]
    assert section.count(", by kind") == 1 and "xlafw/v lenet forward" in section.split(", by kind")[0]
    by_kind = section.split(", by kind")[1]
    assert "| transpose\\_copy\\_fusion | 2.00 | 3.00 | 60% |" in by_kind.split("### oldfw")[0], by_kind
