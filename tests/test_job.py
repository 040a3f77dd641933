"""The job a measuring process runs: typed, versioned, read field by field."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from dataclasses import FrozenInstanceError, replace
from pathlib import Path

import pytest

from dlbench.core.job import (
    JOB_VERSION,
    CellJob,
    DataParallelJob,
    FaultAt,
    JobError,
    JobVersionError,
    ParameterServerJob,
    PeakJob,
    VerifyJob,
    decode,
    encode,
)
from dlbench.planning.plan import Cell, suite_from_dict
from dlbench.scenarios import registry

SRC = Path(__file__).parent.parent / "src" / "dlbench"


def test_a_cell_job_round_trips_through_its_json():
    job = CellJob(threads=2, cell=Cell("torch", "eager", "lenet", "latency", 1, 2, precision="bf16"), seed=3,
                  data_dir=None, protocol={"warmup": 1}, settings={"latency_calls": 7}, extra={"outdir": None})
    data = json.loads(json.dumps(encode(job)))
    assert data["version"] == JOB_VERSION and data["kind"] == "scenario"
    assert decode(data) == job
    verify = VerifyJob(threads=None, framework="jax", models=["lenet"], variants=["jit"], device="cpu",
                       precision="fp32", optimizers=["sgd", "adamw"])
    assert decode(json.loads(json.dumps(encode(verify)))) == verify
    assert decode(encode(PeakJob(threads=1, engine="numpy"))) == PeakJob(threads=1, engine="numpy")


def test_only_the_scenarios_own_settings_travel_in_its_job():
    suite = suite_from_dict({"models": ["lenet"], "scenarios": ["latency", "convergence"], "data": {"default": "digits"},
                             "serving": {"latency_calls": 9}, "convergence": {"epochs": 2}})
    latency = registry.get("latency").job(Cell("torch", "eager", "lenet", "latency", 1, 1), suite)
    convergence = registry.get("convergence").job(Cell("torch", "eager", "lenet", "convergence", 8, 1), suite)
    forward = registry.get("forward").job(Cell("torch", "eager", "lenet", "forward", 8, 1), suite)
    assert latency.settings["latency_calls"] == 9 and "epochs" not in latency.settings
    assert convergence.settings["epochs"] == 2 and "latency_calls" not in convergence.settings
    assert forward.settings == {}
    # the run's optimiser travels with the scenarios that update parameters, and only with them
    assert convergence.optimizer == suite.optimizer.model_dump(mode="json") and forward.optimizer is None
    assert latency.optimizer is None


def test_a_job_of_another_version_is_refused_in_one_line(tmp_path):
    with pytest.raises(JobVersionError, match="version 0"):
        decode({**encode(PeakJob(threads=1, engine="numpy")), "version": 0})
    job, result = tmp_path / "job.json", tmp_path / "result.json"
    job.write_text(json.dumps({"kind": "peak", "threads": 1}))  # a job as dlbench wrote them before versions
    proc = subprocess.run([sys.executable, "-m", "dlbench.worker", str(job), str(result)], capture_output=True,
                          timeout=120)
    assert proc.returncode == 1
    assert json.loads(result.read_text())["error"].startswith("JobVersionError: a job of version None")


def _job_gets(path: Path) -> list[int]:
    """Lines where ``job.get(...)`` or ``job[...].get(...)`` reads a job with a fallback."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                and "job" in ast.unparse(node.func.value).split(".")[0]):
            out.append(node.lineno)
    return out


def test_no_process_of_dlbench_reads_a_job_with_a_fallback(tmp_path):
    """Every process reads its typed job's attributes (a default lives in the job's dataclass): no
    ``job.get(`` anywhere in the package, the data-parallel workers and the parameter server included."""
    planted = tmp_path / "planted.py"
    planted.write_text("x = job.get('device', 'cpu')\ny = job.extra.get('outdir')\nz = other.get('a', 1)\n")
    assert _job_gets(planted) == [1, 2]
    assert not _job_gets(Path(__file__).parent / "toyscenario.py")
    modules = sorted(SRC.rglob("*.py"))
    assert SRC / "distributed" / "ps.py" in modules and SRC / "worker.py" in modules
    offenders = {p.relative_to(SRC).as_posix(): lines for p in modules if (lines := _job_gets(p))}
    assert offenders == {}
    # the issue's own check, as text: grep -rn 'job\.get(' src/dlbench
    assert [p.relative_to(SRC).as_posix() for p in modules if re.search(r"job\.get\(", p.read_text())] == []


# --- the scaling cells' jobs --------------------------------------------------------------------
def _dp_job(**changes) -> DataParallelJob:
    cell = Cell("torch", "eager", "lenet", "scaling", 8, 1, workers=2, scaling="strong")
    return DataParallelJob(**{"threads": 1, "cell": cell, "seed": 0, "protocol": {"warmup": 1},
                              "collective_timeout_s": 60.0, **changes})


def test_the_scaling_jobs_round_trip_with_their_defaults_in_one_place():
    dp = _dp_job(fault=FaultAt(rank=1, step=0))
    assert decode(json.loads(json.dumps(encode(dp)))) == dp
    ps = ParameterServerJob(threads=2, cell=replace(dp.cell, exchange="ps-async"), seed=3, protocol={}, ps_shards=2)
    assert decode(json.loads(json.dumps(encode(ps)))) == ps
    # what may be left out says so, and its default is the dataclass's
    plain = {k: v for k, v in encode(dp).items() if k not in ("fault", "small")}
    assert decode(plain) == _dp_job()
    assert (_dp_job().fault, _dp_job().small) == (None, False)
    with pytest.raises(FrozenInstanceError):
        dp.seed = 1  # type: ignore[misc]


@pytest.mark.parametrize(("change", "said"), [
    (lambda d: d.pop("seed"), "the data-parallel job lacks seed"),
    (lambda d: d.update(global_batch=8), "the data-parallel job has unknown global_batch"),
    (lambda d: d.update(seed="0"), "the data-parallel job's seed must be int, not '0'"),
    (lambda d: d["cell"].pop("model"), "the data-parallel job's cell lacks model"),
    (lambda d: d["cell"].update(workers=None), "the data-parallel job's cell's workers must be int, not None"),
    (lambda d: d.update(fault={"rank": 1}), "the data-parallel job's fault lacks step"),
    (lambda d: d.update(collective_timeout_s=True), "collective_timeout_s must be float, not True"),
    (lambda d: d.update(kind="allreduce"), "a job of unknown kind 'allreduce'"),
])
def test_a_malformed_job_is_refused_saying_what_is_wrong(change, said):
    data = json.loads(json.dumps(encode(_dp_job())))
    change(data)
    with pytest.raises(JobError) as caught:
        decode(data)
    assert said in str(caught.value) and "\n" not in str(caught.value)


def test_a_malformed_data_parallel_job_is_refused_before_the_worker_runs(tmp_path, monkeypatch, capsys):
    """The entry point every data-parallel worker shares reads the job once: a malformed one is refused
    in one line (stderr and ``error.<rank>.json``, which the launcher reads), exit status 2, and the worker
    never runs; a job of the parameter server's kind is not a worker's."""
    from dlbench.frameworks import data_parallel as common

    ran = []
    monkeypatch.setenv("DLBENCH_RANK", "1")
    data = encode(_dp_job())
    del data["collective_timeout_s"]
    for bad, said in ((data, "lacks collective_timeout_s"), ("{not json", "cannot read the job"),
                      (encode(ParameterServerJob(threads=1, cell=_dp_job().cell, seed=0, protocol={}, ps_shards=2)),
                       "is a parameter-server job, not the data-parallel job")):
        path = tmp_path / "job.json"
        path.write_text(bad if isinstance(bad, str) else json.dumps(bad))
        assert common.worker_main(["worker", str(path), str(tmp_path)], lambda job, out: ran.append(job)) == 2
        err = capsys.readouterr().err
        assert said in err and err.count("\n") == 1 and err.startswith("dlbench: "), err
        assert said in json.loads((tmp_path / "error.1.json").read_text())["error"]
    assert ran == []
    path.write_text(json.dumps(encode(_dp_job())))
    assert common.worker_main(["worker", str(path), str(tmp_path)], lambda job, out: ran.append(job)) == 0
    assert ran == [_dp_job()]


def test_a_malformed_parameter_server_job_is_refused_in_one_line(tmp_path):
    """The parameter server's driver, as the launcher starts it: no traceback, no KeyError, exit 2."""
    ps = encode(ParameterServerJob(threads=1, cell=replace(_dp_job().cell, exchange="ps-sync"), seed=0, protocol={},
                                   ps_shards=2))
    del ps["ps_shards"]
    (tmp_path / "job.json").write_text(json.dumps(ps))
    proc = subprocess.run([sys.executable, "-m", "dlbench.distributed.ps", str(tmp_path / "job.json"), str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr == "dlbench: the parameter-server job lacks ps_shards\n"
    assert json.loads((tmp_path / "error.0.json").read_text())["error"] == (
        "JobError: the parameter-server job lacks ps_shards")


# --- a scenario's settings in its measuring process -----------------------------------------------
def test_every_scenario_gets_its_settings_dataclass_rebuilt_from_its_job():
    """What a scenario's ``work`` is given is its settings model's instance, equal to the suite's, rebuilt
    in one place (``Scenario.settings_from``); a scenario without settings gets None."""
    suite = suite_from_dict({"models": ["lenet"], "scenarios": ["forward"], "serving": {"latency_calls": 9},
                             "generation": {"new_tokens": 3}, "convergence": {"epochs": 2}})
    seen = set()
    for scenario in (registry.get(name) for name in registry.names()):
        job = scenario.job(Cell("torch", "eager", "lenet", scenario.name, 8, 1), suite)
        rebuilt = scenario.settings_from(job)
        if scenario.settings_model is None:
            assert rebuilt is None, scenario.name
            continue
        assert type(rebuilt) is scenario.settings_model, scenario.name
        assert rebuilt == scenario.settings_of(suite), scenario.name
        seen.add(scenario.section)
    assert {"serving", "generation", "convergence", "distributed"} <= seen


def test_the_measuring_process_hands_work_the_dataclass_not_the_jobs_dict(monkeypatch):
    """The worker's dispatch: ``work`` gets ``ServingSettings``; a dict planted in its place (the job's
    own data, as scenarios once read it) fails here."""
    from dlbench import worker
    from dlbench.scenarios.latency import Latency, ServingSettings

    given = []
    monkeypatch.setattr(Latency, "work", lambda self, job, settings: given.append(settings) or {})
    job = CellJob(threads=None, cell=Cell("torch", "eager", "lenet", "latency", 1, 1), seed=0, data_dir=None,
                  protocol={}, settings={"latency_calls": 7})
    worker.run_scenario(job)
    assert type(given[0]) is ServingSettings and given[0].latency_calls == 7
    monkeypatch.setattr(Latency, "settings_from", lambda self, job: job.settings)  # a dict planted in its place
    worker.run_scenario(job)
    assert type(given[1]) is dict  # which the check above refuses
