"""Per-framework environments: recipes, the record that marks an environment usable, the registry's view
of it, the command line, pip's own error when an install fails, and runs measured with the
environment's interpreter."""

import json
import site
import subprocess
import sys
from pathlib import Path

import pytest

from dlbench import api, envs
from dlbench.cli.main import main
from dlbench.frameworks import FRAMEWORKS, check_frameworks, framework_info, installed_version, list_frameworks
from tests.conftest import requires

TINY = {"warmup": 1, "min_iters": 3, "min_time_s": 0.0, "repeats": 1, "timeout_s": 120}


@pytest.fixture(autouse=True)
def envs_dir(tmp_path, monkeypatch):
    root = tmp_path / "envs"
    monkeypatch.setenv("DLBENCH_ENVS_DIR", str(root))
    return root


def fake_env(root: Path, framework: str, python: str = sys.executable, version: str = "9.9.9",
             reqs: tuple[list[str], list[str]] | None = None) -> Path:
    path = root / framework
    path.mkdir(parents=True)
    reqs = reqs or ([f"{framework}=={version}"], [])
    record = envs.EnvRecord(framework=framework, path=str(path), python=python, python_version="3.11",
                            created="2026-01-01T00:00:00+00:00", create_seconds=1.0, framework_version=version,
                            versions={framework: version, "numpy": "1.0"}, requirements=reqs[0],
                            build_requirements=reqs[1])
    (path / envs.RECORD).write_text(json.dumps(record.to_dict()))
    return path


def test_every_recipe_is_a_registered_framework_with_pinned_requirements():
    assert envs.recipes() == ["chainer", "h2o", "mxnet", "paddle", "pytensor"]
    for name in envs.recipes():
        assert name in FRAMEWORKS
        reqs, build = envs.requirements(name)
        assert reqs and all("==" in r or "<" in r for r in reqs), reqs
    reqs, build = envs.requirements("chainer")
    assert "chainer==7.8.1" in reqs and "setuptools<81" in build
    assert "mxnet==1.9.1" in envs.requirements("mxnet")[0]
    with pytest.raises(envs.EnvError, match="no environment recipe"):
        envs.requirements("torch")


def test_no_environment_means_this_python(envs_dir):
    assert envs.list_envs() == [] and envs.python_for("mxnet") is None
    assert envs.envs_dir() == envs_dir


def test_a_recorded_environment_makes_its_framework_installed(envs_dir, monkeypatch):
    monkeypatch.setitem(FRAMEWORKS, "ghostfw", FRAMEWORKS["mxnet"].__class__(
        "ghostfw", "dlbench.frameworks.ghost", "ghost-dist", "ghost_pkg_not_here", ("x",), "absent"))
    assert installed_version("ghostfw") is None
    fake_env(envs_dir, "ghostfw", version="1.2.3")
    assert installed_version("ghostfw") == "1.2.3"
    assert envs.python_for("ghostfw") == sys.executable
    check_frameworks(["ghostfw"])  # no error
    row = next(r for r in list_frameworks() if r["name"] == "ghostfw")
    assert row["installed"] and row["python"] == sys.executable
    assert envs.remove("ghostfw") and installed_version("ghostfw") is None
    assert not envs.remove("ghostfw")


def test_an_environment_without_record_or_interpreter_is_ignored(envs_dir):
    (envs_dir / "mxnet" / "bin").mkdir(parents=True)  # an interrupted build: no record
    fake_env(envs_dir, "chainer", python=str(envs_dir / "gone" / "python"))
    assert envs.load("mxnet") is None and envs.load("chainer") is None and envs.list_envs() == []


def test_cli_list_json_and_remove(envs_dir, capsys):
    fake_env(envs_dir, "paddle", version="3.3.1")
    assert main(["envs", "list", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["dir"] == str(envs_dir) and [e["framework"] for e in out["envs"]] == ["paddle"]
    assert out["envs"][0]["framework_version"] == "3.3.1" and "h2o" in out["recipes"]
    assert main(["envs", "remove", "paddle"]) == 0 and not (envs_dir / "paddle").exists()


@pytest.mark.parametrize("args, message", [
    (["envs", "create"], "name a framework"),
    (["envs", "create", "torch"], "no environment recipe for 'torch'"),
    (["envs", "remove", "nosuchfw"], "no environment recipe"),
])
def test_cli_bad_usage_exits_2(args, message, capsys):
    assert main(args) == 2
    assert message in capsys.readouterr().err


def test_a_failed_install_reports_pips_error_and_leaves_no_environment(envs_dir, monkeypatch):
    monkeypatch.setattr(envs, "requirements", lambda name: (["./no-such-directory-dlbench"], []))
    with pytest.raises(envs.EnvError) as info:
        envs.create(framework_info("mxnet"))
    message = str(info.value)
    assert "installing ./no-such-directory-dlbench failed" in message
    assert "ERROR" in message and "no-such-directory-dlbench" in message  # pip's own words
    assert not (envs_dir / "mxnet").exists() and (envs_dir / "mxnet.log").exists()
    assert envs.load("mxnet") is None


def test_an_existing_environment_is_reused_not_rebuilt(envs_dir):
    fake_env(envs_dir, "chainer", version="7.8.1", reqs=envs.requirements("chainer"))
    assert envs.stale(envs.load("chainer")) is None
    record = envs.create(framework_info("chainer"))  # would need the network if it rebuilt
    assert record.framework_version == "7.8.1" and record.created.startswith("2026-01-01")


def test_an_environment_whose_requirements_changed_is_rebuilt(envs_dir, monkeypatch):
    fake_env(envs_dir, "mxnet", version="1.9.1", reqs=(["mxnet==1.9.0"], []))
    assert "mxnet==1.9.0" in envs.stale(envs.load("mxnet"))
    monkeypatch.setattr(envs, "requirements", lambda name: (["./no-such-directory-dlbench"], []))
    with pytest.raises(envs.EnvError):  # it tried to rebuild, and the stale environment is gone
        envs.create(framework_info("mxnet"))
    assert envs.load("mxnet") is None


def test_an_environments_workers_run_the_driving_checkouts_code():
    assert envs.worker_env(None) == {}
    src = Path(envs.__file__).resolve().parents[2]
    assert envs.worker_env("/some/env/bin/python")["PYTHONPATH"].split(":")[0] == str(src)


@requires("torch")
def test_cells_and_verification_run_in_the_environments_interpreter(envs_dir, tmp_db):
    """An environment for torch (a venv that sees this Python's packages): the run's cells, its
    verification and the stored versions all come from that interpreter."""
    venv = envs_dir / "torch"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip",
                    "--system-site-packages", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    # --system-site-packages sees the base interpreter's packages, not a venv's: chain this
    # interpreter's site directories (torch may live only in the test's .venv, as in CI)
    (site_dir,) = venv.glob("lib/python*/site-packages")
    (site_dir / "driver.pth").write_text("".join(f"import site; site.addsitedir({p!r})\n"
                                                 for p in site.getsitepackages()))
    record = envs.EnvRecord(framework="torch", path=str(venv), python=python, python_version="3.11",
                            created="2026-01-01T00:00:00+00:00", create_seconds=0.0, framework_version="0.0.0-env")
    (venv / envs.RECORD).write_text(json.dumps(record.to_dict()))
    assert envs.python_for("torch") == python and installed_version("torch") == "0.0.0-env"

    res = api.run(db=tmp_db, models=["lenet"], frameworks=["torch"], scenarios=["forward"], batches=[4], threads=[1],
                  protocol=TINY)
    (cell,) = res.cells
    assert cell.cell.status == "ok" and cell.verified == "pass"
    assert cell.cell.metrics["python"] == python
    assert cell.cell.metrics["versions"]["torch"]  # read by the environment's interpreter
    assert res.environment["frameworks"]["torch"] == "0.0.0-env"
    (v,) = api.verify(models=["lenet"], frameworks=["torch"])
    assert v.verdict == "pass"


def test_unavailable_frameworks_are_documented_with_checks_and_successors():
    from importlib import resources

    import yaml

    data = yaml.safe_load(resources.files("dlbench.envs").joinpath("unavailable.yaml").read_text())
    assert data["checked"] and data["python"]
    names = {f["name"].split(" (")[0] for f in data["frameworks"]}
    assert {"Caffe", "Caffe2", "Neon", "Torch7", "CNTK", "Deeplearning4j", "GraphLab Create", "CaffeOnSpark",
            "Theano"} <= names
    for f in data["frameworks"]:
        assert f["status"] in ("unavailable", "superseded") and f["reason"] and f["checks"], f["name"]
        assert all(c["command"] and c["result"] for c in f["checks"]), f["name"]
        assert f["successor"] is None or f["successor"] in FRAMEWORKS, f["name"]
    successor = {f["name"].split(" (")[0]: f["successor"] for f in data["frameworks"]}
    assert successor["Caffe2"] == successor["Torch7"] == "torch" and successor["Theano"] == "pytensor"
