"""dlbench.planning.estimate: the time a run will take, from the protocol and then from the cells measured."""

import pytest

from dlbench.models import get_model
from dlbench.planning import estimate as est
from dlbench.planning.estimate import Estimate, format_duration, prior_seconds, runs_a_process, setup_seconds
from dlbench.planning.plan import Cell, suite_from_dict


def suite(**protocol):
    return suite_from_dict({"models": ["lenet"], "protocol": {"warmup": 3, "min_iters": 10, "min_time_s": 0.3,
                                                              "repeats": 1, **protocol}})


def cell(fw="torch", scenario="forward", threads=1, model="lenet", batch=64, variant="eager"):
    return Cell(fw, variant, model, scenario, batch, threads)


def test_a_cell_its_framework_cannot_run_costs_nothing():
    assert not runs_a_process(cell("onnxruntime", "gradient", variant="default"))
    assert prior_seconds(cell("onnxruntime", "gradient", variant="default"), suite()) == 0.0
    assert runs_a_process(cell("h2o", "epoch", variant="default")) and not runs_a_process(cell("h2o", "forward"))
    assert not runs_a_process(cell("onnxruntime", "convergence", variant="default"))
    assert runs_a_process(cell("onnxruntime", "compile", variant="default"))  # its forward's first call


def test_prior_follows_the_protocol():
    s1, s3 = suite(), suite(repeats=3)
    c = cell()
    # a small model's steps are far under min_time_s: a start-up and min_time_s per process
    assert prior_seconds(c, s1) == pytest.approx(est.START_S + 3 * est.step_seconds(c, s1) + 0.3)
    assert prior_seconds(c, s3) == pytest.approx(3 * prior_seconds(c, s1))
    assert prior_seconds(c, suite(min_time_s=5.0)) > prior_seconds(c, s1) + 4
    # a big model: its steps dominate, fewer threads take longer
    big1, big2 = cell(model="resnet-50", batch=16), cell(model="resnet-50", batch=16, threads=2)
    assert prior_seconds(big1, s1) > prior_seconds(big2, s1) > prior_seconds(c, s1)
    # a step never counts beyond the timer's caps (warm-up max_time_s/4, sampling max_time_s)
    capped = suite(max_time_s=8.0)
    assert prior_seconds(cell(model="resnet-50", batch=512), capped) <= est.START_S + 2 + 8 + 1e-9
    # compile: a cold and a warm process per closure the framework has
    assert prior_seconds(cell(scenario="compile"), s1) == pytest.approx(3 * 2 * (est.START_S + est.step_seconds(
        cell(scenario="compile"), s1)))


def test_setup_counts_peaks_per_thread_count_and_the_gate_per_group():
    cells = [cell(threads=1), cell(threads=2), cell("jax", threads=2, variant="jit"),
             cell("jax", threads=2, variant="jit", model="lstm-imdb")]
    assert setup_seconds(cells) == pytest.approx(2 * est.PEAK_S + 2 * est.START_S + 3 * est.VERIFY_MODEL_S)


def test_setup_counts_no_gate_for_a_group_whose_pass_this_host_kept():
    torch1, torch2, jax2 = cell(threads=1), cell(threads=2), cell("jax", threads=2, variant="jit")
    kept = frozenset({torch1.group})  # torch's lenet at fp32: one gate group for both thread counts
    assert setup_seconds([torch1, torch2, jax2], verified=kept) == pytest.approx(
        2 * est.PEAK_S + est.START_S + est.VERIFY_MODEL_S)
    assert Estimate(suite(), [torch1, torch2], verified=kept).setup() == pytest.approx(2 * est.PEAK_S)
    # a gate runs per precision, as the runner verifies
    bf16 = Cell("torch", "eager", "lenet", "forward", 64, 1, precision="bf16")
    assert setup_seconds([torch1, bf16]) == pytest.approx(est.PEAK_S + 2 * (est.START_S + est.VERIFY_MODEL_S))


def test_measured_cells_replace_the_guess():
    torch_fwd, torch_train = cell(), cell(scenario="train_step")
    jax_fwd, jax_train = cell("jax", variant="jit"), cell("jax", "train_step", variant="jit")
    onnx_grad = cell("onnxruntime", "gradient", variant="default")
    e = Estimate(suite(), [torch_fwd, torch_train, jax_fwd, jax_train, onnx_grad])
    assert e.remaining(e.cells) == pytest.approx(sum(prior_seconds(c, e.suite) for c in e.cells))
    # the same framework, variant and scenario: its mean; another framework: the scenario's mean
    e.record(torch_fwd, 10.0, "ok")
    assert e.predict(cell(threads=2)) == 10.0 and e.predict(jax_fwd) == 10.0
    # a scenario not measured yet: its guess, scaled by how far the guesses were off so far
    ratio = 10.0 / prior_seconds(torch_fwd, e.suite)
    assert e.predict(jax_train) == pytest.approx(prior_seconds(jax_train, e.suite) * ratio)
    e.record(jax_fwd, 20.0, "ok")
    assert e.predict(jax_fwd) == 20.0 and e.predict(cell(threads=2)) == 10.0
    assert e.predict(cell("tensorflow", variant="function")) == 15.0
    # failures and cells without a process say nothing; those cost nothing
    e.record(torch_train, 500.0, "failed")
    e.record(onnx_grad, 3.0, "unsupported")
    assert e.measured == 2 and e.predict(onnx_grad) == 0.0
    assert e.remaining([torch_train, onnx_grad]) == pytest.approx(prior_seconds(torch_train, e.suite) * (30 / (
        prior_seconds(torch_fwd, e.suite) + prior_seconds(jax_fwd, e.suite))))


def test_convergence_counts_epochs_of_the_data_set():
    s = suite_from_dict({"models": ["lenet"], "scenarios": ["convergence"], "data": {"default": "digits"},
                         "convergence": {"epochs": 4}, "protocol": {"repeats": 1}})
    c = Cell("torch", "eager", "lenet", "convergence", 100, 1, data="digits")
    small = Estimate(s, [c], {"digits": 1000}).predict(c)
    assert small == pytest.approx(est.START_S + 4 * 10 * est.step_seconds(c, s))
    assert Estimate(s, [c], {"digits": 2000}).predict(c) > small


@pytest.mark.parametrize("seconds, text", [(0, "0 s"), (44.6, "45 s"), (60, "1 min 00 s"), (272, "4 min 32 s"),
                                           (750, "12 min"), (3600 + 5 * 60, "1 h 05 min")])
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


def _store_run(db, cells, env):
    """A stored run of ``cells`` ((cell, wall seconds, cost, call ms)) made on the machine ``env`` says."""
    from dlbench.storage.store import Sample, Store

    store = Store(db)
    run = store.create_run("quick", {})
    store.save_environment(run, env)
    for c, seconds, cost, call_ms in cells:
        store.save_cell(run, {**c.to_dict(), "key": c.key}, "ok", "", seconds, [], {"cost": cost},
                        [Sample(r, i, "measure", call_ms * 1e6) for r in range(2) for i in range(5)])
    store.finish_run(run, "complete")
    store.close()


def test_what_this_machine_measured_before_replaces_the_constants(tmp_path):
    """The estimate learns one call of a key it measured, a process's overhead and this machine's FLOP
    rate from the database's earlier runs on the same machine; another machine's runs teach nothing.
    (Before, a fixed 20 GFLOP/s per thread guessed gpt2's forward 5x too slow on an AVX-512 CPU.)"""
    from dlbench.measure.environment import machine
    from dlbench.planning.history import load_history

    env = {"cpu": {"model": "Test CPU", "flags": ["avx2"]}, "usable_cores": 2, "gpus": []}
    here = machine(env)
    lenet, resnet = cell(), cell(model="resnet-56", batch=128)
    cost = {"start_s": 6.0, "build_s": 2.0, "warmup_s": 1.0, "timed_s": 2.0, "rest_s": 0.0, "processes": 2}
    db = tmp_path / "r.db"
    _store_run(db, [(lenet, 12.0, cost, 40.0)], env)
    history = load_history(db, here)
    assert history.runs == 1 and history.call_s(lenet) == pytest.approx(0.040)
    assert history.start_s(resnet) == pytest.approx(4.0)  # (6 + 2 + 0) / 2 processes, same framework and scenario
    flops = get_model("lenet").flops_per_sample * 64 * 1.0
    assert history.flops_per_s(cell(threads=2)) == pytest.approx(2 * flops / 0.040)
    s1 = suite()
    e = Estimate(s1, [lenet, resnet], history=history)
    # lenet: its own call (40 ms) and overhead; resnet-56: never measured, its FLOPs at the rate lenet reached
    assert e.predict(lenet) == pytest.approx(4.0 + 3 * 0.040 + max(10 * 0.040, 0.3))
    step = get_model("resnet-56").flops_per_sample * 128 / (flops / 0.040)
    assert est.step_seconds(resnet, s1, history) == pytest.approx(step)
    # runs on another machine are not evidence
    assert load_history(db, {**here, "cpu": "Other CPU"}).calls == {}
    assert load_history(tmp_path / "none.db", here).runs == 0


def test_an_epoch_of_a_token_stream_counts_windows_not_tokens():
    """A language model's epoch over a stream is its windows of seq_len tokens: counting tokens as samples
    made --dry-run guess 14 min for a convergence cell that takes seconds."""
    from dlbench.running.runner import epoch_samples

    model = "gpt2:layers=1:dim=32:heads=2:vocab=256:seq_len=32"
    s = suite_from_dict({"models": [model], "scenarios": ["convergence"], "data": {"default": "genesis"}})
    c = Cell("torch", "eager", model, "convergence", 8, 1, data="genesis")
    assert epoch_samples(s, [c]) == {"genesis": 175849 // 32}


def test_a_damaged_stored_cell_is_no_evidence_and_breaks_no_estimate(tmp_path):
    """The estimate reads every recent run before `dlbench run` starts: a cell whose cost or samples are
    not times (text, negative, infinite) is skipped, not a traceback that would stop every run."""
    from dlbench.measure.environment import machine
    from dlbench.planning.history import load_history

    env = {"cpu": {"model": "Test CPU", "flags": []}, "usable_cores": 2, "gpus": []}
    good = {"start_s": 2.0, "build_s": 0.0, "warmup_s": 0.0, "timed_s": 1.0, "rest_s": 0.0, "processes": 1}
    bad = {**good, "start_s": "a while"}
    db = tmp_path / "r.db"
    _store_run(db, [(cell(), 5.0, bad, 40.0), (cell(threads=2), 5.0, good, float("inf")),
                    (cell(model="resnet-56"), 5.0, good, 30.0)], env)
    history = load_history(db, machine(env))
    # the store sets the damaged cost aside (dlbench.storage.damage), so that cell is no evidence of its
    # processes' overhead; its samples are intact and still time its calls; the infinite sample is no evidence
    assert set(history.calls) == {cell().key, cell(model="resnet-56").key} and history.start_s(cell()) == 2.0


def test_a_run_measures_the_plan_its_dry_run_prints(tmp_path, monkeypatch, capsys, fake_framework):
    """``dlbench run`` plans once, below the API (``api.plan``), and ``api.run`` measures that plan: the
    cells are expanded once, not once by the command and again by the runner, and they are the cells
    ``--dry-run`` prints."""
    import json

    from dlbench.cli.main import main
    from dlbench.running import runner

    planned, measured = [], []
    expand = runner.plan_cells
    monkeypatch.setattr(runner, "plan_cells", lambda suite: planned.append(suite.name) or expand(suite))
    monkeypatch.setattr(runner, "execute", lambda store, run_id, suite, cells, progress: measured.append(
        [c.key for c in cells]))
    argv = ["run", "--model", "lenet", "--framework", "fakefw", "--variant", "ok", "--scenario", "forward",
            "--batch", "2,4", "--threads", "1", "--db", str(tmp_path / "r.db"), "--json"]
    assert main([*argv, "--dry-run"]) == 0
    printed = [c["key"] for c in json.loads(capsys.readouterr().out)["cells"]]
    planned.clear()
    main(argv)
    assert len(planned) == 1 and measured == [printed] and len(printed) == 2


def test_a_plan_holds_its_settings(tmp_path, fake_framework):
    from dlbench import api
    from dlbench.core.errors import UsageError

    plan = api.plan(models=["lenet"], frameworks=["fakefw"], variants=["ok"], scenarios=["forward"], batches=[2],
                    threads=[1], db=tmp_path / "r.db")
    assert [c.key for c in plan.todo] == [c.key for c in plan.cells] and plan.stored == 0 and plan.resume is None
    with pytest.raises(UsageError, match="no models, resume, db"):
        api.run(plan, models=["mlp"], resume="x", db=tmp_path / "other.db")
    assert not (tmp_path / "r.db").exists()  # planning writes nothing
