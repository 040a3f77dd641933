"""CI's scripts: a per-framework environment that fails to build fails CI, unless the package registry
cannot be reached at all (then CI says so and goes on); the nightly script runs the slow tests and
every model (issue #31, "tests that would let a regression through"). Nothing here installs a package:
the registry is a local HTTP server or a closed port, the builds fail before pip."""

import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
from functools import partial
from http.server import HTTPServer, SimpleHTTPRequestHandler
from pathlib import Path

import pytest

from dlbench import envs, frameworks  # noqa: F401 - importing the registry adds each framework folder's recipe

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def registry(tmp_path):
    """A package index that answers (``/simple/pip/``), on 127.0.0.1."""
    (tmp_path / "index" / "simple" / "pip").mkdir(parents=True)
    (tmp_path / "index" / "simple" / "pip" / "index.html").write_text("<html></html>")
    server = HTTPServer(("127.0.0.1", 0), partial(SimpleHTTPRequestHandler, directory=str(tmp_path / "index")))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/simple"
    server.shutdown()
    server.server_close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _envs_sh(tmp_path, index: str, which: str, fresh: str = "") -> subprocess.CompletedProcess:
    env = {**os.environ, "DLBENCH_PYTHON": sys.executable, "DLBENCH_CI_ENVS": which, "PIP_INDEX_URL": index,
           "UV_DEFAULT_INDEX": index, "DLBENCH_ENVS_DIR": str(tmp_path / "envs"), "DLBENCH_CI_FRESH": fresh}
    return subprocess.run(["bash", str(ROOT / ".ci" / "envs.sh")], capture_output=True, text=True, env=env,
                          timeout=300)


def test_a_failed_environment_build_fails_ci(tmp_path, registry):
    out = _envs_sh(tmp_path, registry, "nosuchrecipe")
    assert out.returncode == 1, out.stderr
    assert "environment nosuchrecipe failed" in out.stderr and "cannot be reached" not in out.stderr


def test_an_unreachable_registry_is_said_and_ci_goes_on(tmp_path):
    out = _envs_sh(tmp_path, f"http://127.0.0.1:{_closed_port()}/simple", "nosuchrecipe")
    assert out.returncode == 3, out.stderr
    assert "package registry" in out.stderr and "cannot be reached" in out.stderr


def test_environments_that_build_pass(tmp_path, registry):
    path = tmp_path / "envs" / "mxnet"
    path.mkdir(parents=True)
    reqs, build = envs.requirements("mxnet")
    record = envs.EnvRecord(framework="mxnet", path=str(path), python=sys.executable, python_version="3.11",
                            created="2026-01-01T00:00:00+00:00", create_seconds=1.0, framework_version="1.9.1",
                            requirements=reqs, build_requirements=build, lock_sha256=envs.lock_sha256("mxnet"))
    (path / envs.RECORD).write_text(json.dumps(record.to_dict()))
    out = _envs_sh(tmp_path, registry, "mxnet")  # reused as it is: nothing to install
    assert out.returncode == 0, out.stderr


def test_ci_builds_one_recipe_from_an_empty_environments_folder_on_every_run(tmp_path, registry):
    """Beside the cached environments, DLBENCH_CI_FRESH (default: one recipe) is built into an empty folder
    with an empty uv cache: a cached environment hid that Paddle could not be built on a new machine.
    Here the recipe is one that cannot build, so nothing is installed and the failure fails CI."""
    text = (ROOT / ".ci" / "envs.sh").read_text()
    assert "FRESH=${DLBENCH_CI_FRESH-mxnet}" in text
    out = _envs_sh(tmp_path, registry, "nosuchrecipe", fresh="nosuchfresh")
    assert out.returncode == 1, out.stderr
    assert "nosuchfresh failed to build from an empty environments folder and an empty uv cache" in out.stderr
    assert not (tmp_path / "envs" / "nosuchfresh").exists()  # never in the cached folder


def test_ci_run_fails_on_a_failed_build_and_not_on_an_unreachable_registry():
    """``.ci/run`` reads envs.sh's status: 3 goes on, any other failure fails CI after the tests."""
    text = (ROOT / ".ci" / "run").read_text()
    assert 'envs_code=$?' in text and '"$envs_code" -ne 3' in text and "exit 1" in text


def test_the_nightly_script_runs_the_slow_tests_and_every_model(tmp_path):
    probe = tmp_path / "test_probe.py"
    probe.write_text("import os\n\ndef test_settings():\n"
                     "    assert os.environ['DLBENCH_SLOW_TESTS'] == '1' and os.environ['DLBENCH_TEST_ALL_MODELS'] == '1'\n")
    env = {**os.environ, "DLBENCH_PYTHON": sys.executable, "DLBENCH_NIGHTLY_FRESH": ""}
    env.pop("DLBENCH_SLOW_TESTS", None)
    out = subprocess.run(["bash", str(ROOT / "scripts" / "nightly.sh"), str(probe)], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 passed" in out.stdout and "nightly: passed" in out.stdout
    empty = tmp_path / "test_none.py"
    empty.write_text("")
    out = subprocess.run(["bash", str(ROOT / "scripts" / "nightly.sh"), str(empty)], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 1 and "collected no tests" in out.stderr


def test_the_nightly_script_builds_every_recipe_from_empty(tmp_path, registry):
    """By default the nightly set first runs .ci/envs.sh with every recipe built from an empty folder and
    uv cache (DLBENCH_CI_FRESH=all); a build that fails fails the nightly set. Here the environments
    folder holds nothing and the build is of a recipe that does not exist: nothing is installed."""
    probe = tmp_path / "test_probe.py"
    probe.write_text("def test_nothing():\n    pass\n")
    env = {**os.environ, "DLBENCH_PYTHON": sys.executable, "DLBENCH_NIGHTLY_FRESH": "nosuchrecipe",
           "DLBENCH_CI_ENVS": "none-cached", "DLBENCH_ENVS_DIR": str(tmp_path / "envs"), "PIP_INDEX_URL": registry}
    out = subprocess.run(["bash", str(ROOT / "scripts" / "nightly.sh"), str(probe)], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "nosuchrecipe failed to build from an empty environments folder" in out.stderr
    assert "did not build from empty" in out.stderr and "1 passed" in out.stdout
    text = (ROOT / "scripts" / "nightly.sh").read_text()
    assert 'DLBENCH_CI_FRESH="${DLBENCH_NIGHTLY_FRESH-all}"' in text


GROUPED_TESTS = '''
import os
from pathlib import Path

import pytest


def _where(name):
    (Path(os.environ["WHERE"]) / name).write_text(os.environ["PYTEST_XDIST_WORKER"])


@pytest.fixture(scope="module")
def made_once():
    return 1


@pytest.mark.parametrize("k", range(3))
def test_shares_a_module_fixture(made_once, k):
    _where(f"module{k}")


@pytest.mark.machine_wide
@pytest.mark.parametrize("k", range(3))
def test_machine_wide(k):
    _where(f"wide{k}")


@pytest.mark.xdist_group("gate-x")
@pytest.mark.parametrize("k", range(3))
def test_named_group(k):
    _where(f"gate{k}")
'''


def test_the_xdist_groups_run_whole_in_one_test_process(tmp_path):
    """scripts/test.sh's ``--dist loadgroup`` with tests/conftest.py's groups: the tests sharing a module
    fixture, the machine-wide tests, and a named group (a framework's gate) each run in one test process.
    Before, pytest-xdist's groups were silently ignored under pytest 9 (it sets ``item._nodeid``, which
    pytest 9 no longer reads), so each of these was spread over both processes."""
    (tmp_path / "test_grouped.py").write_text(GROUPED_TESTS)
    where = tmp_path / "where"
    where.mkdir()
    env = {**os.environ, "WHERE": str(where), "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'src'}"}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
                          "-n", "2", "--dist", "loadgroup", "--rootdir", str(tmp_path), "-c", os.devnull,
                          str(tmp_path / "test_grouped.py")], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    ran = {p.name: p.read_text() for p in where.iterdir()}
    assert len(ran) == 9, ran
    for group in ("module", "wide", "gate"):
        assert len({ran[f"{group}{k}"] for k in range(3)}) == 1, ran
    text = (ROOT / "scripts" / "test.sh").read_text()
    assert '-n "$workers" --dist loadgroup' in text


def _stand_in_venv(tmp_path: Path, uv: bool) -> Path:
    """A checkout's install files under ``tmp_path`` and a ``.venv`` whose pip (and uv, with ``uv``) are
    stand-ins recording their calls in ``tmp_path/calls``: nothing is installed. Its python is the real
    interpreter (scripts/uv_args.py runs in it) with pip's configuration cleared, then one setting."""
    for name in ("pyproject.toml", "constraints.txt", "scripts/install.sh", "scripts/uv_args.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text((ROOT / name).read_text())
    calls = tmp_path / "calls"
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    stand_ins = {"python": f'exec {sys.executable} "$@"', "pip": f'echo "pip $*" >> {calls}'}
    if uv:
        stand_ins["uv"] = f'echo "uv $*" >> {calls}'
    for exe, body in stand_ins.items():
        (tmp_path / ".venv" / "bin" / exe).write_text(f"#!/bin/sh\n{body}\n")
        (tmp_path / ".venv" / "bin" / exe).chmod(0o755)
    return calls


def _install(tmp_path: Path, *args: str, **env: str) -> list[str]:
    calls = tmp_path / "calls"
    calls.unlink(missing_ok=True)
    out = subprocess.run(["bash", str(tmp_path / "scripts" / "install.sh"), *args], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PIP_CONFIG_FILE": os.devnull, **env})
    assert out.returncode == 0, out.stderr
    return calls.read_text().splitlines() if calls.exists() else []


def test_the_main_environment_is_installed_once_until_what_it_reads_changes(tmp_path):
    """scripts/install.sh (run by .ci/run beside the environments' builds, then by scripts/test.sh) installs
    into .venv and stamps it; a second run with the same pyproject.toml and constraints.txt installs nothing
    (test.sh made the venv and ran both pip installs again after .ci/run had), a changed one installs again.
    Here pip's configuration has a setting uv cannot take (a proxy), so pip installs."""
    _stand_in_venv(tmp_path, uv=True)
    first = _install(tmp_path, PIP_PROXY="http://127.0.0.1:9")
    assert any("-e .[all,test]" in c for c in first) and any("keras-hub" in c for c in first), first
    assert all(c.startswith("pip ") for c in first), first
    assert _install(tmp_path, PIP_PROXY="http://127.0.0.1:9") == []  # installed from these files already
    (tmp_path / "constraints.txt").write_text((ROOT / "constraints.txt").read_text() + "# changed\n")
    assert any("-e .[all,test]" in c for c in _install(tmp_path, PIP_PROXY="http://127.0.0.1:9"))
    assert "bash scripts/install.sh" in (ROOT / "scripts" / "test.sh").read_text()
    assert "bash scripts/install.sh" in (ROOT / ".ci" / "run").read_text()


def test_uv_installs_the_main_environment_with_pips_own_settings(tmp_path):
    """uv reads no pip.conf: the install passes pip's settings to uv (a local folder of wheels, such as the
    CPU build of torch, would otherwise be missed for PyPI's CUDA build), and picks the best version over
    every index as pip does. ``--light`` installs dlbench alone and stamps nothing."""
    _stand_in_venv(tmp_path, uv=True)
    light = _install(tmp_path, "--light", PIP_FIND_LINKS="/opt/some-wheels /opt/more-wheels")
    assert any(c.startswith("uv pip install") and c.endswith("-e .") for c in light), light
    assert not (tmp_path / ".venv" / "dlbench-installed").exists()
    full = _install(tmp_path, PIP_FIND_LINKS="/opt/some-wheels /opt/more-wheels")
    assert [c for c in full if not c.startswith("uv pip install")] == [], full
    main = next(c for c in full if "-e .[all,test]" in c)
    for option in ("--find-links=/opt/some-wheels", "--find-links=/opt/more-wheels",
                   "--index-strategy=unsafe-best-match", "--python .venv/bin/python",
                   "--compile-bytecode"):  # as pip does: with PYTHONDONTWRITEBYTECODE=1 every process compiled again
        assert option in main, main
    assert (tmp_path / ".venv" / "dlbench-installed").exists()


def test_pip_installs_when_asked(tmp_path):
    """``DLBENCH_INSTALLER=pip``: pip, as before uv (benchmarks/install_time.py times the two)."""
    _stand_in_venv(tmp_path, uv=True)
    calls = _install(tmp_path, DLBENCH_INSTALLER="pip")
    assert any("-e .[all,test]" in c for c in calls) and all(c.startswith("pip ") for c in calls), calls


def test_pips_settings_translate_to_uvs_options_in_pips_precedence():
    """The ``PIP_*`` variables override the ``install`` section, which overrides ``global``; a list setting is
    one option per item; a switch is given when true; a setting that may change what is installed and has
    no translation is refused (install.sh then uses pip)."""
    spec = importlib.util.spec_from_file_location("uv_args", ROOT / "scripts" / "uv_args.py")
    uv_args = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(uv_args)
    listing = "\n".join(["global.index-url='https://mirror.example/simple'", "global.find-links='/w1'",
                         "install.find-links='/w2 /w3'", ":env:.index-url='https://env.example/simple'",
                         "global.constraint='/etc/c.txt'", ":env:.pre='true'", ":env:.no-index='0'",
                         "global.cert='/etc/ca.pem'", "global.timeout='60'"])
    values = uv_args.settings(listing)
    assert values["index-url"] == "https://env.example/simple" and values["find-links"] == "/w2 /w3"
    options = uv_args.uv_options(values)
    assert options[0] == "--index-strategy=unsafe-best-match"
    assert set(options[1:]) == {"--index-url=https://env.example/simple", "--find-links=/w2", "--find-links=/w3",
                                "--constraint=/etc/c.txt", "--prerelease=allow"}
    with pytest.raises(uv_args.Untranslatable, match="client-cert"):
        uv_args.uv_options(uv_args.settings("global.client-cert='/etc/me.pem'"))
