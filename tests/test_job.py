"""The job a measuring process runs: typed, versioned, read field by field."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from dlbench.core.job import JOB_VERSION, CellJob, JobVersionError, PeakJob, VerifyJob, decode, encode
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


def test_the_measuring_process_reads_job_fields_and_guesses_no_default(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("x = job.get('device', 'cpu')\ny = job.extra.get('outdir')\nz = other.get('a', 1)\n")
    assert _job_gets(planted) == [1, 2]
    assert not _job_gets(Path(__file__).parent / "toyscenario.py")
    offenders = {p.relative_to(SRC).as_posix(): lines for p in [SRC / "worker.py", *sorted((SRC / "scenarios").glob("*.py"))]
                 if (lines := _job_gets(p))}
    assert offenders == {}
