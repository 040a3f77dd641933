"""Per-framework environments: recipes, the record that marks an environment usable, the registry's view
of it, the command line, pip's own error when an install fails, and runs measured with the
environment's interpreter."""

import json
import re
import shutil
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


@pytest.fixture
def recipes_copy(tmp_path, monkeypatch) -> Path:
    """A copy of the recipes and locks that a test may change, read by dlbench.envs instead of the
    framework folders' own: ``root/FRAMEWORK/requirements.txt``."""
    root = tmp_path / "recipes"
    copies = {}
    for name, (folder, files) in envs._RECIPES.items():
        (root / name).mkdir(parents=True)
        for f in files:
            shutil.copy(folder / f, root / name / f)
        copies[name] = (root / name, files)
    monkeypatch.setattr(envs, "_RECIPES", copies)
    return root


def fake_env(root: Path, framework: str, python: str = sys.executable, version: str = "9.9.9",
             reqs: tuple[list[str], list[str]] | None = None, lock: str | None = None) -> Path:
    """A recorded environment; a recipe's is built from its current lock unless ``lock`` says otherwise."""
    path = root / framework
    path.mkdir(parents=True)
    reqs = reqs or ([f"{framework}=={version}"], [])
    if lock is None:
        lock = envs.lock_sha256(framework) if framework in envs.recipes() else ""
    record = envs.EnvRecord(framework=framework, path=str(path), python=python, python_version="3.11",
                            created="2026-01-01T00:00:00+00:00", create_seconds=1.0, framework_version=version,
                            versions={framework: version, "numpy": "1.0"}, requirements=reqs[0],
                            build_requirements=reqs[1], lock_sha256=lock)
    (path / envs.RECORD).write_text(json.dumps(record.to_dict()))
    return path


def test_every_recipe_is_a_registered_framework_with_pinned_requirements():
    assert envs.recipes() == ["chainer", "h2o", "mxnet", "paddle", "pytensor"]
    for name in envs.recipes():
        assert name in FRAMEWORKS
        reqs, build = envs.requirements(name)
        dist = FRAMEWORKS[name].distribution
        assert any(r.startswith(f"{d}==") for r in reqs for d in ((dist,) if isinstance(dist, str) else dist)), reqs
        # every other package is pinned by the recipe's lock (test_every_recipe_has_a_current_lock...)
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
    (["envs", "create", "mxnet", "--python", "/nonexistent"], "--python /nonexistent: no such interpreter"),
    (["envs", "lock", "jax==0.4.38"], "only recipes have a lock"),
])
def test_cli_bad_usage_exits_2(args, message, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and "internal error" not in err


def test_an_interpreter_that_does_not_exist_is_refused_before_anything_is_built(envs_dir):
    with pytest.raises(envs.EnvError, match="no such interpreter"):
        envs.create(framework_info("mxnet"), python="/nonexistent")
    assert not (envs_dir / "mxnet").exists()


def _break_lock(root: Path, framework: str) -> None:
    """A recipe whose (current) lock names a package that cannot be installed."""
    (root / framework / "requirements.txt").write_text("./no-such-directory-dlbench\n")
    recipe_sha = envs._recipe_sha256(framework)
    (root / framework / "requirements.lock").write_text(f"# recipe-sha256: {recipe_sha}\n./no-such-directory-dlbench\n")


def test_a_failed_install_reports_uvs_error_and_leaves_no_environment(envs_dir, recipes_copy):
    _break_lock(recipes_copy, "mxnet")
    with pytest.raises(envs.EnvError) as info:
        envs.create(framework_info("mxnet"))
    message = str(info.value)
    assert "installing mxnet/requirements.lock failed" in message
    assert "no-such-directory-dlbench" in message  # uv's own words
    assert not (envs_dir / "mxnet").exists() and (envs_dir / "mxnet.log").exists()
    assert envs.load("mxnet") is None


def test_an_existing_environment_is_reused_not_rebuilt(envs_dir):
    fake_env(envs_dir, "chainer", version="7.8.1", reqs=envs.requirements("chainer"))
    assert envs.stale(envs.load("chainer")) is None
    record = envs.create(framework_info("chainer"))  # would need the network if it rebuilt
    assert record.framework_version == "7.8.1" and record.created.startswith("2026-01-01")


def test_an_environment_is_keyed_by_its_lock(envs_dir, recipes_copy):
    """A changed lock rebuilds the environment (here into a failure: it tried, and the stale one is gone);
    a record from before the locks is stale too."""
    fake_env(envs_dir, "mxnet", version="1.9.1", lock="0" * 64)
    assert "lock changed" in envs.stale(envs.load("mxnet"))
    fake_env(envs_dir, "h2o", lock="")
    assert "before environments were locked" in envs.stale(envs.load("h2o"))
    _break_lock(recipes_copy, "mxnet")
    with pytest.raises(envs.EnvError):
        envs.create(framework_info("mxnet"))
    assert envs.load("mxnet") is None


def test_a_recipe_changed_since_its_lock_is_not_built(envs_dir, recipes_copy):
    recipe = recipes_copy / "paddle" / "requirements.txt"
    recipe.write_text(recipe.read_text() + "numpy==2.4.6\n")
    assert "dlbench envs lock paddle" in envs.lock_problem("paddle")
    with pytest.raises(envs.EnvError, match="recipe changed since paddle/requirements.lock was compiled"):
        envs.create(framework_info("paddle"))
    (recipes_copy / "pytensor" / "requirements.lock").unlink()
    with pytest.raises(envs.EnvError, match="pytensor has no lock"):
        envs.create(framework_info("pytensor"))
    assert not (envs_dir / "paddle").exists() and not (envs_dir / "pytensor").exists()


def _locked(framework: str) -> dict[str, str]:
    """The lock's packages: normalised name -> version (each checked to carry hashes)."""
    text = envs.lock_path(framework).read_text()
    entries = re.findall(r"^([A-Za-z0-9_.-]+)==(\S+) \\\n((?:    --hash=sha256:[0-9a-f]{64}(?: \\)?\n)+)", text, re.M)
    requirement_lines = [ln for ln in text.splitlines() if ln and not ln.startswith((" ", "#"))]
    assert len(entries) == len(requirement_lines), f"{framework}: a locked package without hashes"
    return {name.lower().replace("_", "-"): version for name, version, _ in entries}


def test_every_recipe_has_a_current_lock_with_every_package_hashed():
    """Each recipe's lock was compiled from the recipe as it is (``dlbench envs lock NAME`` after an
    edit), pins every package with hashes, and pins each of the recipe's own pins at its version."""
    for name in envs.recipes():
        assert envs.lock_problem(name) is None, envs.lock_problem(name)
        locked = _locked(name)
        for req in envs.requirements(name)[0]:
            if "==" in req:
                dist, version = req.split("==")
                assert locked.get(dist.lower().replace("_", "-")) == version, (name, req)
    assert envs.lock_path("chainer", build=True).is_file()


#: what each framework imports at import time without declaring it in its metadata (so a resolver
#: would not lock it unless the recipe names it): a fresh machine's `import paddle` failed without it
IMPORTED_UNDECLARED = {"paddle": {"setuptools": None}, "chainer": {"setuptools": (74, "distutils.msvccompiler")}}


def test_the_locks_hold_what_the_frameworks_import_undeclared():
    """Paddle 3.3.1 imports setuptools (paddle.utils.cpp_extension) and Chainer pkg_resources and
    numpy.distutils: before the locks, the Paddle environment (made --without-pip) had no setuptools and
    failed on a fresh machine; Chainer's had it only because its venv seeded setuptools 65.5.0."""
    for framework, needs in IMPORTED_UNDECLARED.items():
        locked = _locked(framework)
        for dist, below in needs.items():
            assert dist in locked, f"{framework}'s lock lacks {dist}, which it imports"
            if below:
                assert int(locked[dist].split(".")[0]) < below[0], (framework, dist, locked[dist], below[1])


def test_a_recipes_environment_is_built_from_its_lock_alone(envs_dir, monkeypatch):
    """The build steps: ``uv venv`` (no pip, no setuptools seeded: what the environment has is what its
    lock names) and ``uv pip sync --require-hashes`` of the lock, with the build constraints' lock for an
    sdist; never a pip install of the recipe's loose lines."""
    steps: list[list[str]] = []

    def run(cmd, log, what, path=None):
        steps.append(cmd)
        if cmd[1] == "venv":
            Path(cmd[-1]).mkdir(parents=True)

    monkeypatch.setattr(envs, "_run", run)
    monkeypatch.setattr(envs, "_link_checkout", lambda *a: None)
    monkeypatch.setattr(envs, "_probe", lambda python, name: {"python_version": "3.11", "versions": {},
                                                               "import_error": None})
    for name in ("paddle", "chainer"):
        steps.clear()
        record = envs.create(framework_info(name))
        venv, sync = steps
        assert venv[1] == "venv" and "--without-pip" not in venv and "--seed" not in venv
        assert sync[1:3] == ["pip", "sync"] and "--require-hashes" in sync and sync[-1] == str(envs.lock_path(name))
        assert ("--build-constraints" in sync) == (name == "chainer")
        assert record.lock_sha256 == envs.lock_sha256(name)


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
