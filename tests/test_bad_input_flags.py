"""Input that used to be accepted and then ignored, or measured as something else, is refused with one
line and exit 2, the same through the command line, a suite file and the Python API.

Nothing here measures: ``runner.start`` and ``runner.resume`` stop at once (the run's plan, ``api.plan``,
has checked all there is to check before writing anything), and so does the gate's ``run_job``. An input
that gets that far was accepted; the stand-in frameworks are "installed" (their import name is ``json``).
"""

import os
from types import SimpleNamespace

import pytest

from dlbench import api
from dlbench.cli.main import main
from dlbench.core.errors import UsageError
from dlbench.frameworks import FRAMEWORKS, FrameworkInfo
from dlbench.planning import flags
from dlbench.running import runner

GPU = FrameworkInfo("gpufw", "tests.nowhere", "numpy", "json", ("a", "b"), "stand-in with cpu and cuda",
                    devices=("cpu", "cuda"))
CPU = FrameworkInfo("cpufw", "tests.nowhere", "numpy", "json", ("c",), "stand-in with cpu only")
ABSENT = FrameworkInfo("absentfw", "tests.nowhere", "no-such-distribution-dlbench", "no_such_module_dlbench", ("z",),
                       "stand-in that is not installed")


class Measured(Exception):
    """Raised where dlbench would start measuring: the input was accepted."""


@pytest.fixture(autouse=True)
def no_measuring(monkeypatch):
    jobs: list[dict] = []

    def start(plan, argv=None, progress=None):
        raise Measured("would measure")

    def resume(plan, progress=None):
        raise Measured("would resume")

    def run_job(job, **kw):
        jobs.append({**job.to_dict(), "timeout_s": kw["timeout_s"]})
        return SimpleNamespace(status="failed", reason="not measured in this test", result=None)

    monkeypatch.setattr(runner, "start", start)
    monkeypatch.setattr(runner, "resume", resume)
    monkeypatch.setattr(api, "run_job", run_job)
    for info in (GPU, CPU, ABSENT):
        monkeypatch.setitem(FRAMEWORKS, info.name, info)
    return jobs


def refused(capsys, argv: list[str], *needles: str) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


def accepted(capsys, argv: list[str]) -> None:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 1 and "Measured: would" in err, err


def run_args(tmp_path, *pairs: str) -> list[str]:
    """A small run on the stand-in, with ``pairs`` (flag, value, ...) added or replacing its flags."""
    flags = {"--model": "lenet", "--framework": "gpufw", "--scenario": "forward", "--threads": "1"}
    flags.update(zip(pairs[::2], pairs[1::2], strict=True))
    return ["run", *[x for kv in flags.items() for x in kv], "--db", str(tmp_path / "r.db")]


# --- empty lists are not the default ------------------------------------------------------------------
@pytest.mark.parametrize("flag, value", [
    ("--model", ","), ("--model", ""), ("--framework", ","), ("--scenario", ","), ("--batch", ","),
    ("--threads", ","), ("--variant", ","), ("--device", " , "),
])
def test_run_flag_naming_nothing_is_refused(tmp_path, capsys, flag, value):
    refused(capsys, run_args(tmp_path, flag, value), flag, "names nothing")
    assert not (tmp_path / "r.db").exists()


@pytest.mark.parametrize("flag", ["--model", "--framework", "--variant"])
def test_verify_flag_naming_nothing_is_refused(capsys, no_measuring, flag):
    refused(capsys, ["verify", flag, ","], flag, "names nothing")
    assert no_measuring == []


@pytest.mark.parametrize("key", ["models", "frameworks", "scenarios", "devices", "threads", "batch_sizes"])
def test_suite_file_with_an_empty_list_is_refused(tmp_path, capsys, key):
    suite = tmp_path / "s.yaml"
    suite.write_text("models: [lenet]\nframeworks: [gpufw]\n" + f"{key}: []\n")
    refused(capsys, ["run", "--suite", str(suite), "--db", str(tmp_path / "r.db")], "invalid suite", key)


def test_api_empty_list_is_refused(tmp_path):
    with pytest.raises(UsageError, match="models"):
        api.run(models=[], frameworks=["gpufw"], db=tmp_path / "r.db")
    with pytest.raises(UsageError, match="frameworks"):
        api.verify(models=["lenet"], frameworks=[])


# --- devices ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("framework, device", [
    ("gpufw", "cdua"), ("gpufw", "cuda:x"), ("gpufw", "cuda:"), ("gpufw", "cpu:0"), ("cpufw", "cuda"),
    ("cpufw", "cuda:0"),
])
def test_a_device_no_framework_of_the_run_has_is_refused(tmp_path, capsys, framework, device):
    refused(capsys, run_args(tmp_path, "--framework", framework, "--device", device), repr(device))
    assert not (tmp_path / "r.db").exists()


@pytest.mark.parametrize("framework, devices", [
    ("gpufw", "cuda:1"), ("gpufw", "cpu,cuda"), ("gpufw,cpufw", "cpu,cuda"),
])
def test_declared_devices_are_accepted(tmp_path, capsys, framework, devices):
    accepted(capsys, run_args(tmp_path, "--framework", framework, "--device", devices))


def test_verify_checks_its_device_too(capsys, no_measuring):
    refused(capsys, ["verify", "--model", "lenet", "--framework", "gpufw", "--device", "gpu0"], "'gpu0'")
    assert no_measuring == []


# --- one rule for threads and timeouts ------------------------------------------------------------------
@pytest.mark.parametrize("threads, message", [("0", "must be > 0"), ("-2", "must be > 0"),
                                              ("lots", "or 'all', 'half'")])
def test_verify_and_run_refuse_the_same_thread_counts_alike(tmp_path, capsys, no_measuring, threads, message):
    from_run = refused(capsys, run_args(tmp_path, "--threads", threads), message)
    from_verify = refused(capsys, ["verify", "--model", "lenet", "--framework", "gpufw", "--threads", threads],
                          message)
    assert from_run == from_verify
    assert no_measuring == []


@pytest.mark.parametrize("timeout", ["0", "-1", "nan", "inf"])
def test_verify_and_run_refuse_the_same_timeouts_alike(tmp_path, capsys, no_measuring, timeout):
    from_run = refused(capsys, run_args(tmp_path, "--timeout", timeout), "timeout")
    from_verify = refused(capsys, ["verify", "--model", "lenet", "--framework", "gpufw", "--timeout", timeout],
                          "timeout")
    assert from_run == from_verify
    assert no_measuring == []


def test_verify_takes_all_or_half_as_run_does(capsys, no_measuring):
    assert main(["verify", "--model", "lenet", "--framework", "gpufw", "--threads", "all"]) == 1
    assert [j["threads"] for j in no_measuring] == [len(os.sched_getaffinity(0))]


# --- variants: one resolution for run and verify -----------------------------------------------------------
def test_a_variant_of_a_framework_not_in_the_run_is_refused_not_dropped(tmp_path, capsys):
    """`--variant z` with the quick suite (installed frameworks): z belongs to a framework that is not
    installed, so the run measured without it and said nothing."""
    refused(capsys, ["run", "--variant", "z", "--db", str(tmp_path / "r.db")], "unknown variant", "z")
    with pytest.raises(UsageError, match="unknown variant"):
        api.run(variants=["z"], db=tmp_path / "r.db")
    with pytest.raises(UsageError, match="unknown variant"):
        api.verify(models=["lenet"], frameworks=["gpufw"], variants=["z"])


def test_verify_gives_a_framework_without_the_named_variant_its_default_as_run_does(capsys, no_measuring):
    assert main(["verify", "--model", "lenet", "--framework", "gpufw,cpufw", "--variant", "b"]) == 1
    assert [(j["framework"], j["variants"]) for j in no_measuring] == [("gpufw", ["b"]), ("cpufw", ["c"])]
    suite = flags.build_suite(models=["lenet"], frameworks=["gpufw", "cpufw"], variants=["b"])
    assert suite.variants == {"gpufw": ["b"], "cpufw": "default"}


# --- reproduce ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("framework, message", [("nosuch", "unknown framework"), ("absentfw", "not installed"),
                                                ("gpufw", "no setting for gpufw"), (",", "names nothing")])
def test_reproduce_with_a_framework_that_runs_nothing_is_refused(tmp_path, capsys, framework, message):
    refused(capsys, ["reproduce", "bahrampour2016-table3", "--framework", framework, "--db", str(tmp_path / "r.db")],
            message)
    assert not (tmp_path / "r.db").exists()


# --- --resume measures the stored run ----------------------------------------------------------------------
def test_resume_refuses_measuring_flags_naming_them(tmp_path, capsys):
    from dlbench.storage.store import Store

    db = tmp_path / "r.db"
    store = Store(db)
    rid = store.create_run("t", flags.build_suite(models=["lenet"], frameworks=["gpufw"]).model_dump())
    store.close()
    refused(capsys, ["run", "--resume", rid, "--model", "lenet", "--threads", "1", "--cluster",
                     "--db", str(db)], "--model", "--threads", "--cluster")
    accepted(capsys, ["run", "--resume", rid, "--json", "--db", str(db)])
    with pytest.raises(UsageError, match="models, threads"):
        api.run(resume=rid, models=["lenet"], threads=[1], db=db)


# --- --data-dir needs a data set ---------------------------------------------------------------------------
def test_data_dir_without_a_data_set_is_refused(tmp_path, capsys):
    refused(capsys, run_args(tmp_path, "--data-dir", str(tmp_path)), "--data-dir", "--data")
    suite = tmp_path / "s.yaml"
    suite.write_text(f"models: [lenet]\nframeworks: [gpufw]\ndata_dir: {tmp_path}\n")
    refused(capsys, ["run", "--suite", str(suite), "--db", str(tmp_path / "r.db")], "--data-dir")
    assert flags.build_suite(models=["lenet"], data="digits", data_dir=str(tmp_path)).data_dir == str(tmp_path)


# --- distributed settings: the suite's rule, so the API is held to it too -------------------------------------
@pytest.mark.parametrize("flags, message", [
    (["--nnodes", "2", "--launcher", "torchrun"], "rdzv"),
    (["--node-rank", "1"], "torchrun"),
    (["--launcher", "torchrun", "--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "h:1"], "node_rank"),
    (["--launcher", "torchrun", "--rdzv-endpoint", "nohost"], "HOST:PORT"),
    (["--address", "h:1"], "launcher ray"),
    (["--cluster", "--launcher", "ray"], "does not combine"),
    (["--latency", "1ms"], "--cluster"),
    (["--cluster", "--bandwidth", "fast"], "bad bandwidth"),
    (["--exchange", ","], "names nothing"),
])
def test_distributed_flags_that_do_not_fit_together(tmp_path, capsys, flags, message):
    refused(capsys, [*run_args(tmp_path, "--scenario", "scaling"), *flags], message)


@pytest.mark.parametrize("distributed, message", [
    ({"node_rank": 1}, "torchrun"),
    ({"launcher": "torchrun", "nnodes": 2}, "rdzv"),
    ({"ray_address": "h:1"}, "launcher ray"),
    ({"latency": "1ms"}, "cluster"),
])
def test_api_gets_the_same_distributed_checks(tmp_path, distributed, message):
    with pytest.raises(UsageError, match=message):
        api.run(models=["lenet"], frameworks=["gpufw"], scenarios=["scaling"], distributed=distributed,
                db=tmp_path / "r.db")


# --- suite errors stay on one line -----------------------------------------------------------------------------
def test_a_suite_error_is_one_line_even_for_a_key_with_a_newline(tmp_path, capsys):
    suite = tmp_path / "s.yaml"
    suite.write_text('models: [lenet]\n"colour\\nscheme": red\n')
    refused(capsys, ["run", "--suite", str(suite), "--db", str(tmp_path / "r.db")], "invalid suite", "colour")


@pytest.mark.parametrize("pairs, message", [
    (("--prompt-len", "8"), "--prompt-len sets the generate"),
    (("--new-tokens", "8"), "--new-tokens sets the generate"),
    (("--ttft-ms", "5"), "--ttft-ms sets the generate"),
    (("--qps", "5"), "--qps sets the loadgen-offline"),
    (("--epochs", "2"), "--epochs sets the convergence"),
    (("--latency-calls", "20"), "--latency-calls sets the latency"),
    (("--max-time", "50"), "without --target-ci"),
])
def test_a_flag_that_would_do_nothing_is_refused(tmp_path, capsys, pairs, message):
    """``--prompt-len`` and ``--max-time`` beside ``--scenario forward`` were accepted and ignored while
    ``--ttft-ms`` was refused: every flag that no scenario of the run reads is refused, in one line."""
    refused(capsys, run_args(tmp_path, *pairs), message, "(forward)" if pairs[0] != "--max-time" else "")
    refused(capsys, [*run_args(tmp_path, *pairs), "--dry-run"], message)


def test_the_flags_of_a_scenario_of_the_run_are_accepted(tmp_path, capsys):
    accepted(capsys, run_args(tmp_path, "--scenario", "forward,convergence", "--epochs", "2", "--data", "digits"))
    accepted(capsys, run_args(tmp_path, "--scenario", "latency", "--latency-calls", "20"))
    accepted(capsys, run_args(tmp_path, "--target-ci", "5", "--max-time", "9"))


@pytest.mark.parametrize("pairs", [("--max-time", "1e-9"), ("--max-time", "8.9"),
                                   ("--max-time", "3", "--min-time", "0.1", "--repeats", "2")])
def test_a_cap_below_what_the_pilot_takes_is_refused(tmp_path, capsys, pairs):
    """``--target-ci 5 --max-time 1e-9`` ran a 30 s pilot: a cap the pilot (3 processes at the least, each
    a start and --min-time of sampling) cannot fit in is refused, from a flag and from a suite file."""
    refused(capsys, run_args(tmp_path, "--target-ci", "5", *pairs), "--max-time (max_cell_s) cannot hold the pilot")
    path = tmp_path / "s.yaml"
    path.write_text("models: [lenet]\nframeworks: [gpufw]\nscenarios: [forward]\nthreads: [1]\n"
                    "protocol: {target_ci: 5, max_cell_s: 1.0e-9}\n")
    refused(capsys, ["run", "--suite", str(path), "--db", str(tmp_path / "r.db")], "cannot hold the pilot")
