"""docs/architecture.md held to the code: the layers contract holds and catches an upward import, and
each how-to is done by a test (a framework and a precision here; a scenario with settings, a flag and
a report section in tests/test_scenarios.py; a layer kind in tests/test_builder.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import requires

ROOT = Path(__file__).parent.parent
LINT = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
needs_linter = pytest.mark.skipif(not Path(LINT).exists(), reason="import-linter is not installed")


def _lint(src: Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([LINT, "--no-cache", "--config", str(ROOT / "pyproject.toml")], cwd=cwd,
                          env={"PYTHONPATH": str(src), "PATH": str(Path(sys.executable).parent)},
                          capture_output=True, text=True, timeout=300)


@needs_linter
def test_the_layers_contract_holds_and_an_upward_import_breaks_it(tmp_path):
    assert _lint(ROOT / "src", tmp_path).returncode == 0
    planted = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "dlbench", planted / "dlbench", ignore=shutil.ignore_patterns("__pycache__"))
    errors = planted / "dlbench/core/errors.py"
    errors.write_text(errors.read_text() + "\n\ndef _upward():\n    from dlbench import api  # noqa\n")
    out = _lint(planted, tmp_path)
    assert out.returncode == 1 and "dlbench.core is not allowed to import dlbench.api" in out.stdout


def test_the_root_keeps_a_handful_of_modules():
    """The entry points (the API, the measuring process, ``python -m dlbench``); everything else sits
    in its layer's package."""
    root = {p.name for p in (ROOT / "src" / "dlbench").glob("*.py")}
    assert {"__init__.py", "__main__.py", "api.py", "worker.py"} <= root and len(root) <= 6


# --- how-to: add a framework -------------------------------------------------------------------------------
@requires("torch")
def test_how_to_add_a_framework(monkeypatch):
    """A backend module with a Backend subclass and its Builder, and a FrameworkInfo: here a plug-in
    (tests/fakefw.py, through DLBENCH_PLUGINS); a built-in is one _builtin(...) line in
    frameworks/__init__.py, its variants, devices and scenarios read from the class."""
    from dlbench.frameworks import FRAMEWORKS, framework_info, get_backend, load_plugins
    from dlbench.frameworks.builder import LayerBuilder
    from dlbench.planning.flags import build_suite
    from dlbench.running.runner import plan_cells

    monkeypatch.setenv("DLBENCH_PLUGINS", str(ROOT / "tests" / "fakefw.py"))
    load_plugins()
    try:
        assert framework_info("fakefw").variants[0] == "ok"
        assert isinstance(get_backend("fakefw").builder_class(), LayerBuilder)
        _, cells = plan_cells(build_suite(models=["lenet"], frameworks=["fakefw"], variants=["ok"],
                                          scenarios=["forward"], threads=[1]))
        assert [c.key for c in cells] == ["fakefw/ok/lenet/forward/b64/t1/cpu"]
    finally:
        FRAMEWORKS.pop("fakefw", None)


# --- how-to: add a precision -------------------------------------------------------------------------------
@requires("torch")
def test_how_to_add_a_precision(monkeypatch):
    """An entry in core/precision.py's table (what it stores and computes in); a backend that runs it
    lists it in its ``precisions`` and builds at it in ``set_precision`` (one that does not refuses,
    and its cells are unsupported with that reason)."""
    from dlbench.core import precision
    from dlbench.core.cell import Cell
    from dlbench.frameworks.base import UnsupportedError
    from dlbench.frameworks.torch.backend import TorchBackend
    from dlbench.planning.plan import suite_from_dict

    monkeypatch.setitem(precision.PRECISIONS, "fp8x", precision.Precision("fp8x", "float8", "float8",
                                                                          summary="float8 parameters and compute"))
    suite = suite_from_dict({"models": ["lenet"], "precisions": ["fp32", "fp8x"]})
    assert suite.precisions == ["fp32", "fp8x"]
    assert Cell("torch", "eager", "lenet", "forward", 8, 1, precision="fp8x").key.endswith("/fp8x")
    assert precision.unsupported("fp8x", trains=True, device="cpu") is None
    with pytest.raises(UnsupportedError, match="fp8x"):
        TorchBackend().set_precision("fp8x")
