"""Values out of range are refused with one line and exit 2, by one validator: the suite's models
(dlbench.planning.suite) hold every bound, and flags go through them (dlbench.planning.flags.check_settings), so a
flag, a suite file, the Python API, a dry run and a resumed run refuse the same values (issue #31,
defects 3, 4, 5, 6, 8, 10).

Nothing here measures: ``runner.start`` stops at once, the plan having validated everything
(see tests/test_bad_input_flags.py).
"""

import math

import pytest

from dlbench import api, frameworks
from dlbench.cli.main import main
from dlbench.core.errors import UsageError
from dlbench.envs import versions
from dlbench.frameworks import framework_info, installed_version
from dlbench.measure import peak
from dlbench.planning import flags
from dlbench.running import runner
from dlbench.storage.store import Store
from tests.test_bad_input_flags import GPU, accepted, no_measuring, refused, run_args  # noqa: F401

# (flag, suite section, suite key, values that must be refused)
SETTINGS = [
    ("--qps", "serving", "qps", ["inf", "nan", "1e12", "0", "-5"]),
    ("--p99-ms", "serving", "p99_ms", ["inf", "1e300", "nan", "0", "1e-300", "1e-7"]),  # 1e-300: a bound of 0 ns
    ("--ttft-ms", "generation", "ttft_ms", ["inf", "nan", "0", "-1", "1e-300", "1e-7"]),
    ("--tpot-ms", "generation", "tpot_ms", ["inf", "nan", "0", "1e-300"]),
    ("--loadgen-min-queries", "serving", "min_queries", ["99999999999999999999", "0", "-1"]),
    ("--loadgen-min-duration", "serving", "min_duration_s", ["inf", "nan", "-1", "1e30"]),
    ("--latency-calls", "serving", "latency_calls", ["0", "10000000000"]),
    ("--timeout", "protocol", "timeout_s", ["inf", "nan", "0", "-1", "1e30"]),
    ("--min-time", "protocol", "min_time_s", ["inf", "nan", "-1"]),
    ("--warmup", "protocol", "warmup", ["-1", "99999999999"]),
    ("--min-iters", "protocol", "min_iters", ["0", "99999999999"]),
    ("--repeats", "protocol", "repeats", ["0", "100000"]),
    ("--profile", "protocol", "profile_calls", ["-1", "100000"]),
    ("--epochs", "convergence", "epochs", ["0", "10000000000"]),
    ("--target-accuracy", "convergence", "target_accuracy", ["nan", "inf", "0", "1.5"]),
    ("--lr", "optimizer", "lr", ["nan", "inf", "0", "-0.1", "1e8"]),  # the run's optimiser's (every training cell)
    ("--momentum", "optimizer", "momentum", ["nan", "inf", "-0.1", "1"]),
    ("--seed", None, "seed", ["-1", "4294967296", "99999999999999999999"]),
    ("--ps-shards", "distributed", "ps_shards", ["0", "-1", "100000"]),
    ("--nnodes", "distributed", "nnodes", ["0", "-1", "100000"]),
]


def _cases():
    for flag, section, key, values in SETTINGS:
        for value in values:
            yield pytest.param(flag, section, key, value, id=f"{flag}={value}")


@pytest.mark.parametrize("flag, section, key, value", list(_cases()))
def test_a_flag_out_of_range_is_refused_naming_flag_and_key(capsys, tmp_path, flag, section, key, value):
    refused(capsys, run_args(tmp_path, flag, value), flag, key)


@pytest.mark.parametrize("flag, section, key, value", list(_cases()))
def test_a_suite_file_refuses_what_the_flag_refuses(capsys, tmp_path, flag, section, key, value):
    """One validator: ``protocol: {timeout_s: .inf}`` was accepted while ``--timeout inf`` was refused."""
    yaml_value = {"inf": ".inf", "nan": ".nan"}.get(value, value)
    body = f"{key}: {yaml_value}" if section is None else f"{section}: {{{key}: {yaml_value}}}"
    path = tmp_path / "s.yaml"
    path.write_text(f"models: [lenet]\nframeworks: [gpufw]\nscenarios: [forward]\nthreads: [1]\n{body}\n")
    refused(capsys, ["run", "--suite", str(path), "--db", str(tmp_path / "r.db")], "invalid suite", key)


@pytest.mark.parametrize("flag, section, key, value", [p for p in _cases() if p.values[3] in ("inf", "-1")])
def test_a_dry_run_refuses_them_too(capsys, tmp_path, flag, section, key, value):
    """``--loadgen-min-duration inf --dry-run`` was an internal error."""
    refused(capsys, [*run_args(tmp_path, flag, value), "--dry-run"], flag)
    assert not (tmp_path / "r.db").exists()


def test_the_api_refuses_the_same_values():
    for kwargs in ({"serving": {"qps": math.inf}}, {"protocol": {"timeout_s": math.nan}}, {"seed": -1},
                   {"serving": {"min_queries": 10**20}}, {"convergence": {"lr": math.inf}},
                   {"optimizer": {"lr": math.nan}}, {"optimizer": {"name": "adamw", "eps": math.inf}}):
        with pytest.raises(UsageError):
            api.run(models=["lenet"], frameworks=["gpufw"], scenarios=["forward"], threads=[1], **kwargs)


def test_a_model_level_refusal_of_a_section_is_not_passed_over():
    """A Suite check of the whole document (an error with no location) refuses, naming the section;
    reading only the errors located in the section passed such a value in silence."""
    from dlbench.planning.resolve import check_settings

    with pytest.raises(UsageError, match="^nosuchsection: Extra inputs are not permitted$"):
        check_settings("nosuchsection", {"a": 1})


def test_values_in_range_are_accepted(capsys, tmp_path):
    accepted(capsys, run_args(tmp_path, "--scenario", "loadgen-server", "--qps", "1000", "--p99-ms", "5",
                              "--loadgen-min-queries", "100", "--loadgen-min-duration", "1.5", "--seed", "4294967295",
                              "--timeout", "60"))
    accepted(capsys, run_args(tmp_path, "--p99-ms", "1e-6", "--scenario", "loadgen-server"))  # 1 ns: the least


@pytest.mark.parametrize("content", ['{"h/1": "abc"}', '{"h/1": {"numpy": "fast"}}', '{"h/1": {"numpy": -1}}',
                                     '{"h/1": null}', '[1, 2]', '"text"', "not json", '{"h/1": {"numpy": NaN}}'])
def test_a_wrongly_shaped_peak_cache_is_read_as_empty(tmp_path, tmp_db, monkeypatch, content):
    """``$DLBENCH_PEAK_CACHE`` holding anything but peaks (engine -> positive GFLOP/s) by host and thread
    count was an internal error when an entry was not a peak: its entries are as good as absent, the peak
    is measured again, and the file is rewritten with it; one that cannot be written is passed over."""
    import platform
    from types import SimpleNamespace

    from dlbench.planning.plan import Cell

    cache = tmp_path / "peaks.json"
    cache.write_text(content.replace("h/1", f"{platform.node()}/1"))
    monkeypatch.setenv("DLBENCH_PEAK_CACHE", str(cache))
    jobs = []
    monkeypatch.setattr(frameworks, "peak_engines", lambda: {"numpy": peak.NUMPY})  # one process per thread count

    def fake_job(job, timeout, threads):
        jobs.append(threads)
        return SimpleNamespace(status="ok", result={"gflops": {"numpy": 10.0}})

    store = Store(tmp_db)
    run = store.create_run("x", {})
    runner._peaks(store, run, [Cell("torch", "eager", "lenet", "forward", 8, 1, "cpu")], lambda *a, **k: None, fake_job)
    assert jobs == [1] and store.peaks(run) == {1: {"numpy": 10.0}}
    monkeypatch.setenv("DLBENCH_PEAK_CACHE", str(tmp_path))  # a folder: cannot be read or written
    runner._peaks(store, store.create_run("x", {}), [Cell("torch", "eager", "lenet", "forward", 8, 1, "cpu")],
                  lambda *a, **k: None, fake_job)
    store.close()
    assert jobs == [1, 1]


@pytest.mark.parametrize("value", ["١٢", "１２", "12\u0663"])
@pytest.mark.parametrize("flag", ["--seed", "--timeout", "--qps", "--warmup", "--batch", "--threads"])
def test_non_ascii_digits_are_refused(capsys, tmp_path, flag, value):
    """Python's int() and float() read Arabic-Indic and full-width digits as numbers."""
    refused(capsys, run_args(tmp_path, flag, value), flag.lstrip("-")[:5])


def test_a_resumed_run_whose_stored_suite_holds_an_infinity_is_refused(capsys, tmp_path):
    """A run stored before the bounds (``--loadgen-min-duration inf`` made an empty interrupted run)
    resumes as exit 2, not a crash."""
    db = tmp_path / "r.db"
    store = Store(db)
    run_id = store.create_run("x", {"name": "x", "models": ["lenet"], "frameworks": ["gpufw"], "scenarios": ["forward"],
                                    "threads": [1], "serving": {"min_duration_s": math.inf}})
    store.finish_run(run_id, "interrupted")
    store.close()
    refused(capsys, ["run", "--resume", run_id, "--db", str(db)], "min_duration_s", "finite")
    refused(capsys, ["run", "--resume", run_id, "--db", str(db), "--dry-run"], "min_duration_s")


def test_verify_timeout_follows_the_same_rule(capsys):
    for value in ("inf", "nan", "0", "1e30"):
        refused(capsys, ["verify", "--framework", "gpufw", "--timeout", value], "timeout")


# --- compare --fail-above ----------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_compare_fail_above_must_be_a_finite_percentage(capsys, tmp_path, value):
    """``--fail-above nan`` never failed: every comparison with NaN is false."""
    refused(capsys, ["compare", "A", "B", "--fail-above", value, "--db", str(tmp_path / "none.db")], "--fail-above")


# --- version names (PEP 440) -------------------------------------------------------------------------
@pytest.mark.parametrize("given, normal", [
    ("torch==2.13", "torch==2.13.0"), ("jax==00.010.002", "jax==0.10.2"), ("jax==0.10.2.0", "jax==0.10.2"),
    ("jax==0.4.38", "jax==0.4.38"), ("tensorflow-cpu==2.16.0rc1", "tensorflow-cpu==2.16.0rc1"),
    ("jax==0.9.0.1", "jax==0.9.0.1"), ("jax==0.4", "jax==0.4.0"),
])
def test_version_names_have_one_spelling(given, normal):
    assert versions.normal_name(given) == normal


def test_a_short_version_matches_the_installed_release():
    """``torch==2.13`` is this Python's torch 2.13.0: no new environment is built for it."""
    pytest.importorskip("torch")
    here = installed_version("torch")
    if here is None or not here.startswith("2.13.0"):
        pytest.skip(f"this Python has torch {here}, not 2.13.0")
    assert framework_info("torch==2.13").name == "torch==2.13.0"
    assert installed_version("torch==2.13") == here


@pytest.mark.parametrize("name", ["jax==٠.١٠.٢", "jax==0.١0.2", "jax==notaversion", "jax==1!0.4.38",
                                  "jax==0.4.38+cpu", "jax==0.4.x"])
def test_invalid_version_names_are_refused(capsys, tmp_path, name):
    """A version in non-ASCII digits built a venv and ended ``unsupported`` with exit 0."""
    refused(capsys, run_args(tmp_path, "--framework", name), "release")
    refused(capsys, ["envs", "create", name], "release")
    refused(capsys, ["history", "--framework", name, "--model", "lenet", "--scenario", "forward",
                     "--db", str(tmp_path / "r.db")], "release")


def test_a_run_names_a_release_in_its_normal_spelling():
    suite = flags.build_suite(models=["lenet"], frameworks=["jax==00.010.002", "jax==0.10.2.0"], scenarios=["forward"],
                              threads=[1])
    assert suite.frameworks == ["jax==0.10.2"]


# --- smaller ones -----------------------------------------------------------------------------------
def test_a_typo_in_a_suites_model_mapping_is_refused(capsys, tmp_path):
    for body in ("batch_sizes: {lenett: [8]}", "data: {lenett: digits}"):
        path = tmp_path / "s.yaml"
        path.write_text(f"models: [lenet]\nframeworks: [gpufw]\nscenarios: [forward]\n{body}\n")
        refused(capsys, ["run", "--suite", str(path), "--db", str(tmp_path / "r.db")], "lenett")


def test_a_flag_replacing_the_models_drops_the_suites_mapping_for_the_others(capsys, tmp_path):
    """``--suite quick --model fcn-r``: quick's ``data: {lenet: digits}`` is not a typo then."""
    suite = flags.build_suite("quick", models=["fcn-r"], frameworks=["gpufw"])
    assert suite.models == ["fcn-r"] and "lenet" not in suite.data


@pytest.mark.parametrize("argv, needle", [
    (["--framework", "torch,torch"], "twice"), (["--framework", "torch,jax", "--top", "-3"], "--top"),
    (["--framework", "torch,jax", "--top", "0"], "--top"),
])
def test_explain_refuses_what_names_nothing(capsys, tmp_path, argv, needle):
    refused(capsys, ["explain", *argv, "--model", "fcn-r", "--db", str(tmp_path / "none.db")], needle)


def test_history_refuses_a_version_that_is_not_one(capsys, tmp_path):
    refused(capsys, ["history", "--framework", "jax==notaversion", "--model", "lenet", "--scenario", "forward",
                     "--db", str(tmp_path / "r.db")], "notaversion")


def test_runner_start_is_not_reached_with_a_bad_value(tmp_path, monkeypatch):
    """The refusal comes before a run is created: no empty interrupted run is left behind."""
    called = []
    monkeypatch.setattr(runner, "start", lambda *a, **k: called.append(1))
    assert main(run_args(tmp_path, "--loadgen-min-duration", "inf")) == 2
    assert called == [] and not (tmp_path / "r.db").exists()


def test_reproduce_refuses_the_same_protocol_values(capsys, tmp_path):
    for value in ("inf", "nan", "-1"):
        refused(capsys, ["reproduce", "bahrampour2016-table3", "--timeout", value, "--dry-run",
                         "--db", str(tmp_path / "r.db")], "--timeout", "timeout_s")
