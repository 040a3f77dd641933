"""Plug-ins the Python way: a distribution outside dlbench adds a framework and a scenario through its
entry points (``dlbench.frameworks``, ``dlbench.scenarios``), found by every process of the interpreter
it is installed in; a broken one is told in one line and leaves the built-ins working."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from dlbench import frameworks as fw
from dlbench.cli.main import main
from dlbench.core import plugins
from dlbench.scenarios import registry
from tests.conftest import requires

ROOT = Path(__file__).resolve().parents[1]
TOY = ROOT / "tests" / "toyplugin"  # the distribution: pyproject.toml, toyframework/, toyscenario.py


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """A folder on sys.path to plant plug-in modules and distributions in; whatever they register is
    removed afterwards, and the cached entry-point groups are read again."""
    monkeypatch.syspath_prepend(str(tmp_path))
    frameworks, scenarios = dict(fw.FRAMEWORKS), dict(registry.SCENARIOS)
    plugins.read_again()
    yield tmp_path
    for table, before in ((fw.FRAMEWORKS, frameworks), (registry.SCENARIOS, scenarios)):
        table.clear()
        table.update(before)
    fw.BROKEN.clear()
    registry.BROKEN.clear()
    plugins.read_again()
    for name in [m for m in sys.modules if m.startswith("planted_")]:
        del sys.modules[name]


def _distribution(where: Path, name: str, entry_points: str) -> None:
    info = where / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(entry_points)


def test_an_installed_distributions_framework_is_registered_and_its_group_read_once(planted, monkeypatch):
    """The group is read from the installed distributions once per process; the entry's parts are named
    relative to its package; a broken entry beside it is told with its distribution and entry point."""
    pkg = planted / "planted_fw"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "from dlbench.frameworks.declaration import Declaration\n"
        "DECLARATION = Declaration(name='plantedfw', distribution='numpy', import_name='json',\n"
        "                          description='planted', closures=('forward',), decoder='dec:D')\n")
    (pkg / "dec.py").write_text("class D:\n    variants = ('default',)\n")
    _distribution(planted, "planted-dist", "[dlbench.frameworks]\nplantedfw = planted_fw:DECLARATION\n"
                                           "plantedbroken = planted_no_such_module:DECLARATION\n")
    reads = []
    real = plugins.importlib.metadata.entry_points
    monkeypatch.setattr(plugins.importlib.metadata, "entry_points", lambda **kw: reads.append(kw) or real(**kw))
    fw.load_entry_points()
    registry.load_entry_points()
    assert plugins.entry_points(plugins.FRAMEWORKS_GROUP) and reads == [{}]  # one scan for both groups, kept
    info = fw.framework_info("plantedfw")
    assert (info.module, info.decoder) == ("planted_fw.backend", "planted_fw.dec:D")
    assert fw.load_part("plantedfw", "decoder").__name__ == "D"
    assert str(fw.BROKEN["plantedbroken"]) == (
        "plug-in 'plantedbroken' (distribution planted-dist 1.0, entry point dlbench.frameworks: plantedbroken = "
        "planted_no_such_module:DECLARATION): cannot be loaded: ModuleNotFoundError: "
        "No module named 'planted_no_such_module'")


BAD_FRAMEWORKS = [
    ("planted_missing:DECLARATION", "cannot be loaded: ModuleNotFoundError: No module named 'planted_missing'"),
    ("planted_raises:DECLARATION", "cannot be loaded: RuntimeError: torch is not importable here"),
    ("json:dumps", "loads to a function, not a dlbench.frameworks.declaration.Declaration"),
    ("planted_torch:DECLARATION", "framework 'torch' is already registered (dlbench.frameworks.torch.backend)"),
]


@pytest.mark.parametrize(("value", "why"), BAD_FRAMEWORKS, ids=["import", "raises", "type", "builtin-name"])
def test_a_broken_framework_plugin_is_one_line_and_leaves_the_builtins(planted, capsys, value, why):
    (planted / "planted_raises.py").write_text("raise RuntimeError('torch is not importable here\\nmore')\n")
    (planted / "planted_torch.py").write_text(
        "from dlbench.frameworks.declaration import Declaration\n"
        "DECLARATION = Declaration(name='torch', distribution='torch', import_name='torch', description='x')\n")
    before = dict(fw.FRAMEWORKS)
    fw.load_entry_points([EntryPoint("plantedbad", value, plugins.FRAMEWORKS_GROUP)])
    assert str(fw.BROKEN["plantedbad"]) == (
        f"plug-in 'plantedbad' (no distribution, entry point dlbench.frameworks: plantedbad = {value}): {why}")
    assert fw.FRAMEWORKS == before  # nothing registered, the built-in torch kept
    assert main(["verify", "--framework", "plantedbad", "--model", "lenet"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [f"dlbench: warning: {fw.BROKEN['plantedbad']}",
                                f"dlbench: error: {fw.BROKEN['plantedbad']}"], err
    assert main(["list", "frameworks", "--json"]) == 0  # the built-ins still work, with the warning
    assert "torch" in {r["name"] for r in json.loads(capsys.readouterr().out)}


BAD_SCENARIOS = [
    ("planted_missing:SCENARIOS", "cannot be loaded: ModuleNotFoundError: No module named 'planted_missing'"),
    ("json:dumps", "loads to function, not a dlbench Scenario instance or a list of them"),
    ("dlbench.scenarios.timed:SCENARIOS",
     "scenario(s) 'forward', 'gradient', 'train_step', 'epoch', 'predict' already registered"),
]


@pytest.mark.parametrize(("value", "why"), BAD_SCENARIOS, ids=["import", "type", "builtin-name"])
def test_a_broken_scenario_plugin_is_one_line_and_leaves_the_builtins(planted, tmp_path, capsys, value, why):
    before = dict(registry.SCENARIOS)
    registry.load_entry_points([EntryPoint("plantedbad", value, plugins.SCENARIOS_GROUP)])
    assert str(registry.BROKEN["plantedbad"]) == (
        f"plug-in 'plantedbad' (no distribution, entry point dlbench.scenarios: plantedbad = {value}): {why}")
    assert registry.SCENARIOS == before
    for run in (["--scenario", "plantedbad"], ["--scenario", "forward,plantedbad"]):
        code = main(["run", *run, "--model", "lenet", "--framework", "torch", "--dry-run", "--db", str(tmp_path / "r.db")])
        err = capsys.readouterr().err
        assert code == 2 and err.splitlines()[-1] == f"dlbench: error: {registry.BROKEN['plantedbad']}", err
    suite = tmp_path / "s.yaml"
    suite.write_text("models: [lenet]\nframeworks: [torch]\nscenarios: [forward, plantedbad]\nthreads: [1]\n")
    assert main(["run", "--suite", str(suite), "--dry-run", "--db", str(tmp_path / "r.db")]) == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(f"scenarios: {registry.BROKEN['plantedbad']}")
    assert main(["run", "--scenario", "forward", "--model", "lenet", "--framework", "torch", "--threads", "1",
                 "--dry-run", "--db", str(tmp_path / "r.db")]) == 0


def test_a_scenario_plugin_may_give_one_scenario_or_several(planted):
    (planted / "planted_scen.py").write_text(
        "from dlbench.scenarios.registry import Stored\n"
        "ONE = Stored('planted-one')\nTWO = (Stored('planted-a'), Stored('planted-b'))\n")
    registry.load_entry_points([EntryPoint("one", "planted_scen:ONE", plugins.SCENARIOS_GROUP),
                                EntryPoint("two", "planted_scen:TWO", plugins.SCENARIOS_GROUP)])
    assert not registry.BROKEN and {"planted-one", "planted-a", "planted-b"} <= set(registry.names())


# --- the toy plug-in, installed for real ---------------------------------------------------------------
@pytest.fixture(scope="session")
def toy_python(tmp_path_factory) -> Path:
    """A virtual environment holding the toy distribution (tests/toyplugin/) installed by pip, offline
    (no index, no build isolation: the setuptools already here builds it). The environment sees this
    interpreter's packages (dlbench, torch) through a .pth file, and nothing else of the tests: the toy
    is found only as the installed distribution, through its entry points."""
    pytest.importorskip("setuptools", minversion="61")  # reads pyproject.toml's [project]
    pytest.importorskip("pip")
    where = tmp_path_factory.mktemp("toy-venv")
    venv.EnvBuilder(with_pip=False, symlinks=True).create(where / "venv")
    python = where / "venv" / "bin" / "python"
    site = Path(subprocess.check_output([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                        text=True).strip())
    ours = [p for p in sys.path if p and Path(p).is_dir() and ROOT / "tests" not in (Path(p), *Path(p).parents)
            and not p.startswith(sysconfig.get_path("stdlib"))]
    (site / "dlbench-parent.pth").write_text("\n".join(ours) + "\n")
    source = shutil.copytree(TOY, where / "toyplugin")  # pip builds in the folder: keep tests/ clean
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--no-build-isolation",
                    "--disable-pip-version-check", str(source)], check=True, env=_env(), cwd=where)
    return python


def _env() -> dict[str, str]:
    """This environment without what would find a plug-in another way (DLBENCH_PLUGINS, PYTHONPATH)."""
    return {k: v for k, v in os.environ.items() if k not in ("DLBENCH_PLUGINS", "PYTHONPATH")}


def _dlbench(python: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([python, "-m", "dlbench", *args], capture_output=True, text=True, env=_env(), cwd=cwd,
                          timeout=600)


@pytest.mark.slow
@requires("torch")
def test_an_installed_plugin_runs_end_to_end(toy_python, tmp_path):
    """The toy framework (forward only, and a decoder) and the toy scenario, installed as the distribution
    dlbench-toyplugin, through ``verify``, ``run``, ``show`` and ``report`` as commands of the interpreter
    it is installed in: the gate and the cells run in measuring processes, which find the plug-in by
    its entry points, with no variable set and no edit inside dlbench. (Its decoder, a gpt2 generate
    cell, would add 40 s: tests/test_architecture.py::test_how_to_add_a_framework gates it.)"""
    listed = _dlbench(toy_python, "list", "frameworks", "--json", cwd=tmp_path)
    assert listed.returncode == 0 and listed.stderr == "", listed.stderr
    (toy,) = [r for r in json.loads(listed.stdout) if r["name"] == "toyfw"]
    assert toy["variants"] == ["eager"] and toy["installed"]

    verified = _dlbench(toy_python, "verify", "--framework", "toyfw", "--model", "lenet", "--json", cwd=tmp_path)
    assert verified.returncode == 0, verified.stderr
    (gate,) = json.loads(verified.stdout)
    assert gate["verdict"] == "pass" and set(gate["checks"]) == {"precision", "params", "forward"}, gate

    db = str(tmp_path / "r.db")
    ran = _dlbench(toy_python, "run", "--framework", "toyfw", "--model", "lenet", "--scenario", "forward,toy",
                   "--batch", "2", "--threads", "1", "--repeats", "1", "--min-iters", "3", "--warmup", "0",
                   "--toy-calls", "3", "--db", db, "--json", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    out = json.loads(ran.stdout)
    (row,) = out["models"]["lenet"]
    assert row["statuses"] == {"forward": "ok", "toy": "ok"} and row["verified"] == "pass", row
    run_id = out["run_id"]

    shown = _dlbench(toy_python, "show", run_id, "--db", db, cwd=tmp_path)
    assert shown.returncode == 0 and "toyfw" in shown.stdout and "toy ms" in shown.stdout, shown.stdout
    reported = _dlbench(toy_python, "report", run_id, "--db", db, "--out", str(tmp_path / "report"), cwd=tmp_path)
    assert reported.returncode == 0, reported.stderr
    md = (tmp_path / "report" / "report.md").read_text()
    assert "## Toy matrix products" in md and "toyfw" in md
