"""The gate's kept pass (dlbench.measure.reuse) proves only what it checked: every distribution the
measuring interpreter has installed, as that interpreter reports it, and every file of those installs
(edited in place or not) are in its fingerprint; an entry of the verdicts file that is not an explicit,
whole pass is never reused and never crashes a run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from dlbench import envs
from dlbench.core.cell import Cell
from dlbench.launch.subprocess import JobOutcome, thread_env
from dlbench.measure import reuse
from dlbench.running import runner
from dlbench.storage.store import Store

MACHINE = {"cpu": "a CPU", "flags": ["avx2", "fma"], "usable_cores": 2, "gpus": []}


@pytest.fixture(autouse=True)
def fresh_installs():
    """Each test reads interpreters afresh (what one has installed is read once per process)."""
    reuse.forget_installs()
    yield
    reuse.forget_installs()


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A real interpreter with nothing installed (made once: ``venv --without-pip`` is quick)."""
    root = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    return root


@pytest.fixture
def site(venv) -> Path:
    """The venv's site-packages with a fake JAX and Flax installed, emptied again after each test."""
    (where,) = venv.glob("lib/python*/site-packages")
    install(where, "jax", "0.4.30")
    install(where, "flax", "0.8.0", {"linear.py": "def dense(x, w):\n    return x @ w\n"})
    yield where
    for p in where.iterdir():
        subprocess.run(["rm", "-rf", str(p)], check=True)


def install(site: Path, name: str, version: str, files: dict[str, str] | None = None) -> None:
    """A distribution as pip leaves it: its dist-info (what importlib.metadata reads) and its package."""
    for old in site.glob(f"{name}-*.dist-info"):
        subprocess.run(["rm", "-rf", str(old)], check=True)
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (site / name).mkdir(exist_ok=True)
    for file, text in (files or {"__init__.py": ""}).items():
        (site / name / file).write_text(text)


@pytest.fixture
def files_unseen(monkeypatch):
    """The installed files' digest held still, so that a test sees what the distributions' list alone
    covers (an upgrade renames its dist-info folder, which the digest sees too)."""
    monkeypatch.setattr(reuse, "files_digest", lambda roots: "the same files")


def print_of(python: Path | str, framework: str = "jax", variant: str = "jit", machine: dict | None = None) -> str | None:
    reuse.forget_installs()
    return reuse.fingerprint(framework, variant, str(python), reuse.installs(str(python), thread_env(None)), None,
                             MACHINE if machine is None else machine, None)


# --- what the fingerprint covers -------------------------------------------------------------------
def test_the_interpreter_reports_what_it_has_installed(venv, site):
    (site / "broken-1.0.dist-info").mkdir()  # no METADATA: listed, not a failure
    installed = reuse.installs(str(venv / "bin" / "python"), thread_env(None))
    assert ("flax", "0.8.0") in installed.distributions and ("jax", "0.4.30") in installed.distributions
    assert ("?", "?") in installed.distributions
    assert installed.interpreter[0].startswith(sys.version.split()[0])


def test_a_companion_upgraded_beside_an_unchanged_framework_moves_the_fingerprint(venv, site, files_unseen):
    before = print_of(venv / "bin" / "python")
    install(site, "flax", "0.8.1", {"linear.py": "def dense(x, w):\n    return x @ w\n"})
    assert print_of(venv / "bin" / "python") != before


def test_the_framework_s_own_version_moves_the_fingerprint(venv, site, files_unseen):
    before = print_of(venv / "bin" / "python")
    install(site, "jax", "0.4.31")
    assert print_of(venv / "bin" / "python") != before
    subprocess.run(["rm", "-rf", str(next(site.glob("jax-*.dist-info")))], check=True)  # uninstalled
    assert print_of(venv / "bin" / "python") not in (before, None)


def test_a_file_edited_in_place_moves_the_fingerprint_and_a_bytecode_cache_does_not(venv, site):
    before = print_of(venv / "bin" / "python")
    linear = site / "flax" / "linear.py"
    # what the hostile probe did: the same version, a layer's output scaled by 1.01
    linear.write_text("def dense(x, w):\n    return 1.01 * (x @ w)\n")
    edited = print_of(venv / "bin" / "python")
    assert edited != before
    st = linear.stat()
    os.utime(linear, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # same size, touched
    assert print_of(venv / "bin" / "python") != edited
    # an interpreter writes __pycache__ as it imports: a verification must not unkeep its own pass
    touched = print_of(venv / "bin" / "python")
    (site / "flax" / "__pycache__").mkdir()
    (site / "flax" / "__pycache__" / "linear.cpython-311.pyc").write_bytes(b"\0" * 16)
    assert print_of(venv / "bin" / "python") == touched


def test_the_machine_s_instruction_set_and_the_variant_s_environment_move_the_fingerprint(venv, site):
    before = print_of(venv / "bin" / "python")
    assert print_of(venv / "bin" / "python", machine={**MACHINE, "flags": ["avx2"]}) != before
    assert print_of(venv / "bin" / "python", variant="eager") != before
    assert print_of(venv / "bin" / "python") == before  # and nothing else moves it


def test_an_interpreter_that_cannot_say_what_it_has_gives_no_fingerprint(tmp_path):
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho not json\n")
    broken.chmod(0o755)
    assert print_of(broken) is None
    assert print_of(tmp_path / "no-such-python") is None


def test_an_environment_s_fingerprint_comes_from_its_interpreter_not_from_its_record(venv, site, tmp_path,
                                                                                     monkeypatch, files_unseen):
    monkeypatch.setenv("DLBENCH_ENVS_DIR", str(tmp_path / "envs"))
    monkeypatch.setattr(reuse, "_source_hash", lambda extra=(): "this dlbench")
    path = tmp_path / "envs" / "jax"
    path.mkdir(parents=True)

    def record(version: str) -> None:
        rec = envs.EnvRecord(framework="jax", path=str(path), python=str(venv / "bin" / "python"),
                             python_version="3.11", created="2026-01-01T00:00:00+00:00", create_seconds=1.0,
                             framework_version=version, versions={"jax": version, "flax": "0.8.0"})
        (path / envs.RECORD).write_text(json.dumps(rec.to_dict()))

    def fp() -> str | None:
        reuse.forget_installs()
        return runner._gate_fingerprint("jax", "jit", MACHINE)

    record("0.4.30")
    assert envs.python_for("jax") == str(venv / "bin" / "python")
    before = fp()
    assert before is not None
    record("9.9.9")  # the record says another version: what is installed did not change
    assert fp() == before
    install(site, "jax", "0.4.31")  # what the interpreter reports did
    assert fp() != before


# --- what a kept entry must be ---------------------------------------------------------------------
PASS = {"verdict": "pass", "reason": "equivalent", "data": {"verdict": "pass"}, "run_id": "r-old"}
MALFORMED = {"a string": "pass", "a list": [], "null": None, "no verdict": {"reason": "x", "data": {}, "run_id": "r"},
             "fail": {**PASS, "verdict": "fail"}, "unknown verdict": {**PASS, "verdict": "maybe"},
             "no data": {k: v for k, v in PASS.items() if k != "data"}, "data a list": {**PASS, "data": []},
             "reason not text": {**PASS, "reason": 3}, "no run": {k: v for k, v in PASS.items() if k != "run_id"},
             "data says fail": {**PASS, "data": {"verdict": "fail"}}}


@pytest.fixture
def gate_file(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "gate-verdicts.json"
    monkeypatch.setenv("DLBENCH_GATE_CACHE", str(path))
    monkeypatch.setattr(reuse, "installs", lambda python, env: reuse.Installs(("3.11",), (("torch", "2.0"),), "f"))
    return path


CELL = Cell("torch", "eager", "lenet", "forward", 4, 1)


def plant(path: Path, entry) -> None:
    fp = runner._gate_fingerprint(CELL.framework, CELL.variant, runner.environment.this_machine())
    key = reuse.gate_key(CELL.framework, CELL.variant, CELL.model, CELL.device, CELL.precision, "sgd", fp)
    path.write_text(json.dumps({key: entry}))


def verify(tmp_path: Path) -> tuple[list, dict]:
    """The runner's gate step for CELL with a stand-in verifying process that passes; the jobs it ran."""
    jobs = []

    def run_job(job, timeout, threads, python=None, extra_env=None):
        jobs.append(job)
        return JobOutcome("ok", {"info": {}, "results": [{"model": m, "verdict": "pass", "reason": "equivalent"}
                                                         for m in job.models]}, "", 0.1, 0)

    store = Store(tmp_path / "runs.db")
    run_id = store.create_run("t", {})
    suite = SimpleNamespace(optimizer=SimpleNamespace(name="sgd"), protocol=SimpleNamespace(timeout_s=10.0))
    runner._verify_groups(store, run_id, [CELL], suite, runner._quiet, run_job)
    return jobs, store.verifications(run_id)


def test_a_whole_pass_is_reused(gate_file, tmp_path):
    plant(gate_file, PASS)
    assert runner.kept_gates([CELL], "sgd") == {CELL.group}
    jobs, done = verify(tmp_path)
    assert jobs == [] and done[CELL.group]["verdict"] == "pass" and done[CELL.group]["cached_from"] == "r-old"


@pytest.mark.parametrize("entry", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_kept_entry_is_verified_again_not_reused_and_crashes_nothing(gate_file, tmp_path, entry):
    plant(gate_file, entry)
    assert runner.kept_gates([CELL], "sgd") == frozenset()
    jobs, done = verify(tmp_path)
    assert len(jobs) == 1 and jobs[0].models == ["lenet"]
    assert done[CELL.group]["verdict"] == "pass" and "cached_from" not in done[CELL.group]
    # the fresh pass replaced what was planted
    assert list(json.loads(gate_file.read_text()).values())[0]["run_id"] != "r-old"


@pytest.mark.parametrize("text", ["[1, 2]", "garbage", '"pass"', "null", "", "[" * 100_000])
def test_a_verdicts_file_that_is_not_an_object_reads_as_empty(gate_file, tmp_path, text):
    gate_file.write_text(text)
    assert reuse.GateCache().data == {}
    assert runner.kept_gates([CELL], "sgd") == frozenset()
    jobs, _ = verify(tmp_path)
    assert len(jobs) == 1


def test_a_failure_is_never_kept(gate_file):
    cache = reuse.GateCache()
    for entry in MALFORMED.values():
        cache.put("k", entry)
    assert not gate_file.exists()


def test_the_fingerprint_is_computed_once_per_framework_and_variant_in_a_run(gate_file, tmp_path, monkeypatch):
    calls = []
    real = runner._gate_fingerprint
    monkeypatch.setattr(runner, "_gate_fingerprint", lambda *a: calls.append(a[:2]) or real(*a))
    cells = [CELL, Cell("torch", "eager", "alexnet", "forward", 4, 1), Cell("torch", "eager", "lenet", "forward", 4, 1,
                                                                        precision="bf16")]
    store = Store(tmp_path / "runs.db")
    run_id = store.create_run("t", {})
    suite = SimpleNamespace(optimizer=SimpleNamespace(name="sgd"), protocol=SimpleNamespace(timeout_s=10.0))
    runner._verify_groups(store, run_id, cells, suite, runner._quiet,
                          lambda job, *a, **k: JobOutcome("ok", {"results": [
                              {"model": m, "verdict": "pass", "reason": "ok"} for m in job.models]}, "", 0.1, 0))
    assert calls == [("torch", "eager")]


def test_dlbench_verify_keeps_its_passes_for_the_runs_after_it_for_each_optimiser_it_checked(gate_file, tmp_path,
                                                                                          monkeypatch):
    """``dlbench verify`` then ``dlbench run`` on one host: the run verified every model again (verify kept
    nothing). Now verify's passes are kept as a run's are, one per optimiser whose update it checked, a
    failure never; the run after it reuses them and its cells say they came from verify."""
    from dlbench import api

    def verifying(job, timeout_s, threads, python=None, extra_env=None):
        return JobOutcome("ok", {"info": {}, "results": [
            {"model": m, "framework": "torch", "variant": job.variants[0], "verdict": "pass" if m == "lenet" else "fail",
             "reason": "equivalent" if m == "lenet" else "forward error 1e-1 > 1e-4", "precision": job.precision,
             "update_error": 3e-5, "update": {"sgd": {"errors": [1e-5, 2e-5], "lr": 0.1},
                                              "adamw": {"errors": [3e-5, 1e-5], "lr": 0.01}}}
            for m in job.models]}, "", 0.2, 0)

    monkeypatch.setattr(api, "run_job", verifying)
    results = api.verify(models=["lenet", "alexnet"], frameworks=["torch"])
    assert [r.verdict for r in results] == ["pass", "fail"]
    kept = json.loads(gate_file.read_text())
    assert sorted(k.split("/")[2] + "/" + k.split("/")[5] for k in kept) == ["lenet/adamw", "lenet/sgd"]
    assert all(e["run_id"].startswith("verify@") for e in kept.values())
    # each kept as a run's gate of that optimiser records it: its own update check and worst error
    assert {k.split("/")[5]: (list(e["data"]["update"]), e["data"]["update_error"]) for k, e in kept.items()} == {
        "sgd": (["sgd"], 2e-5), "adamw": (["adamw"], 3e-5)}
    assert runner.kept_gates([CELL], "sgd") == {CELL.group} and runner.kept_gates([CELL], "adamw") == {CELL.group}
    assert runner.kept_gates([Cell("torch", "eager", "alexnet", "forward", 4, 1)], "sgd") == frozenset()
    jobs, done = verify(tmp_path)
    assert jobs == [] and done[CELL.group]["cached_from"].startswith("verify@")
    assert runner.kept_from(done[CELL.group]["cached_from"]).startswith("dlbench verify at 20")
    assert runner.kept_from("r-old") == "run r-old"
    monkeypatch.setattr(api, "run_job", lambda *a, **k: JobOutcome("ok", {"info": {}, "results": [
        {"model": "lenet", "framework": "torch", "variant": "eager", "verdict": "pass", "reason": "ok"}]}, "", 0.1, 0))
    gate_file.unlink()
    api.verify(models=["lenet"], frameworks=["torch"], optimizers=["sgd"])  # SGD's update checked, not AdamW's
    assert [k.split("/")[5] for k in json.loads(gate_file.read_text())] == ["sgd"]
