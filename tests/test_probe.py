"""`dlbench probe`: the probe models are ordinary gated models, a probe is a stored run whose rows
name the kernel library each framework reports, and its figures attach to another run."""

import json

import pytest

from dlbench import api
from dlbench.cli.main import main
from dlbench.engines import probe
from dlbench.models import get_model
from dlbench.storage.store import Store
from tests.conftest import requires

FAST = {"repeats": 1, "warmup": 1, "min_iters": 3, "min_time_s": 0.1}


def test_probe_models_are_the_operations_they_name():
    gemm = get_model("gemm")
    assert gemm.flops_per_sample == pytest.approx(2 * 2048 * 4096, rel=0.01) and gemm.default_batch == 1024
    conv = get_model("conv")
    assert conv.flops_per_sample == pytest.approx(2 * 64 * 64 * 9 * 56 * 56, rel=0.01)
    floor = get_model("dense-1")
    assert floor.param_count == 2 and floor.default_batch == 1


def test_the_probe_suite_times_the_floor_in_training_and_the_kernels_forward_only():
    from dlbench.running.runner import plan_cells

    _, cells = plan_cells(probe.suite(["torch"], [1], None))
    assert sorted((c.model, c.scenario) for c in cells) == [
        ("conv", "forward"), ("dense-1", "forward"), ("dense-1", "train_step"), ("gemm", "forward")]


@requires("torch")
def test_a_probe_run_names_its_kernels_and_attaches_to_another_run(tmp_db):
    target = api.run(models=["dense-1"], frameworks=["torch"], scenarios=["forward"], threads=[1], protocol=FAST,
                     db=tmp_db)
    res = api.run(probe.suite(["torch"], [1], FAST), db=tmp_db)
    # every probe went through the gate and passed it (an all() over no verdicts passed)
    assert sorted(k[2] for k in res.verifications) == ["conv", "dense-1", "gemm"]
    assert all(v["verdict"] == "pass" for v in res.verifications.values())
    rows = probe.rows(res)
    assert {(r.probe, r.scenario) for r in rows} == {("gemm", "forward"), ("conv", "forward"),
                                                     ("dense-1", "forward"), ("dense-1", "train_step")}
    for r in rows:
        assert r.status == "ok" and r.median_ms > 0 and "BLAS_INFO=" in r.kernels
        assert (r.gflops is None) == (r.probe == "dense-1")
        # a kernel's share of the peak names the peak: its own precision's (fp32 here), engine and rate
        assert (r.peak is None) == (r.probe == "dense-1") and (r.pct_peak is None) == (r.probe == "dense-1")
        assert r.peak is None or r.peak.startswith("fp32 peak ")
    probe.attach(tmp_db, target.run_id, rows, res.run_id)
    store = Store(tmp_db, read_only=True)
    try:
        attached = store.environment(target.run_id)["probes"]
        assert len(store.cells(target.run_id)) == 1  # the run's own cells are untouched
    finally:
        store.close()
    assert {(p["op"], p["framework"], p["threads"]) for p in attached} >= {("gemm", "torch", 1)}
    assert all(p["probe_run"] == res.run_id for p in attached)


@pytest.mark.parametrize("argv, needle", [
    (["--attach", "no-such-run"], "no-such-run"),
    (["--threads", "0"], "thread"),
    (["--framework", "nosuchfw"], "nosuchfw"),
])
def test_bad_probe_input_is_one_line_and_exit_2(argv, needle, tmp_db, capsys):
    if argv[0] == "--attach":  # a database without that run
        Store(tmp_db).close()
    code = main(["probe", "--db", str(tmp_db), *argv])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and needle in err, err
    if tmp_db.exists():
        store = Store(tmp_db, read_only=True)
        try:
            assert store.list_runs() == []  # refused before anything was measured or stored
        finally:
            store.close()


def test_probe_json_lists_rows(monkeypatch, capsys, tmp_db):
    from types import SimpleNamespace

    fake = SimpleNamespace(run_id="r1", errors=[], cells=[], verifications={})
    monkeypatch.setattr(api, "run", lambda *a, **k: fake)
    assert main(["probe", "--framework", "torch", "--threads", "1", "--db", str(tmp_db), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"run_id": "r1", "attached_to": None, "rows": []}
