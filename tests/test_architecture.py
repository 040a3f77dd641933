"""docs/architecture.md held to the code: the layers contract holds and catches an upward import, and
each how-to is done by a test (a framework and a precision here; a scenario with settings, a flag and
a report section in tests/test_scenarios.py; a layer kind in tests/test_builder.py)."""

from __future__ import annotations

import ast
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
    """One folder: a ``Declaration`` in its ``__init__.py`` and the parts it names (``backend.py`` with
    ``Backend_``, here a ``decoder.py`` too): tests/toyplugin/toyframework/, registered by the entry
    point its distribution declares (``toyfw = "toyframework:DECLARATION"``; a built-in folder is found by
    the registry: ``frameworks.BUILTIN``). Nothing else is edited: the registry, the scenarios' support, the
    gate and the decoder lookup read the declaration. Installed for real and run through the command
    line: tests/test_entry_points.py::test_an_installed_plugin_runs_end_to_end."""
    from importlib.metadata import EntryPoint

    from dlbench.frameworks import FRAMEWORKS, framework_info, get_backend, load_entry_points
    from dlbench.gate.verify import verify_model
    from dlbench.generation.gate import verify_generation
    from dlbench.planning.flags import build_suite
    from dlbench.running.runner import plan_cells
    from dlbench.scenarios import registry

    monkeypatch.syspath_prepend(str(ROOT / "tests" / "toyplugin"))  # where its distribution would install it
    load_entry_points([EntryPoint("toyfw", "toyframework:DECLARATION", "dlbench.frameworks")])
    try:
        info = framework_info("toyfw")
        assert (info.variants, info.closures) == (("eager",), ("forward",))
        backend = get_backend("toyfw")
        assert (backend.name, backend.closures) == ("toyfw", ("forward",))  # the class reads its declaration
        _, cells = plan_cells(build_suite(models=["lenet"], frameworks=["toyfw"], scenarios=["forward"], threads=[1]))
        assert [c.key for c in cells] == ["toyfw/eager/lenet/forward/b64/t1/cpu"]
        assert "not gradient" in registry.get("gradient").unsupported(info)  # a closure it does not declare
        assert registry.get("generate").unsupported(info) is None  # it declares a decoder
        gate = verify_model(backend, "lenet")
        assert gate.passed and set(gate.checks) == {"precision", "params", "forward"}, gate.reason  # forward only
        assert verify_generation("toyfw", "gpt2").passed
    finally:
        FRAMEWORKS.pop("toyfw", None)


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


def test_the_layers_table_is_the_contract():
    """docs/architecture.md's table names the layers of pyproject.toml's contract in its order, with its
    separators (``|``: may not import each other; ``:``: may), so the map cannot drift from the contract."""
    import re
    import tomllib

    contract = [c for c in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
                if c["type"] == "layers"][0]["layers"]
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text.split("## The layers, top to bottom")[1].split("\n\n")[1]
    rows = [line.split(" | ")[0].lstrip("| ") for line in table.splitlines()[2:]]
    documented = [" | ".join(re.findall(r"`([\w.]+?)(?:/|\.py)?`", row)) if "\\|" in row or ":" not in row
                  else " : ".join(re.findall(r"`([\w.]+?)(?:/|\.py)?`", row)) for row in rows]
    assert documented == contract
# --- no module outside a framework's folder names a framework ----------------------------------------------
#: modules that still name a built-in framework, each with why (the aim is none: a framework's data and code
#: belong in its folder, dlbench/frameworks/NAME/)
NAMES_A_FRAMEWORK = {
    "gate/hf_transformers.py": "Hugging Face transformers' models, the reference it checks against, run in torch; "
                               "it re-exports the transformers folder's builders (frameworks/transformers/"
                               "hf_model.py) for the fidelity checks and export-model",
    "scenarios/checkpoint_recipe.py": "the shipped checkpoint was trained in torch: its recorded recipe names the "
                                      "framework it was trained with as data, as a stored run does",
    "survey": "the survey catalogues frameworks, dlbench's and others', as data (its per-framework judging, e.g. "
              "Keras's three back ends for the ONNX export, reads its own catalogue)",
}

def names_of_frameworks(tree: ast.AST, names: set[str]) -> list[tuple[int, str]]:
    """String literals equal to a framework's name, and imports of a framework or of its folder's modules."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
            found.append((node.lineno, node.value))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            if isinstance(node, ast.ImportFrom) and node.module == "dlbench.frameworks":
                modules += [f"dlbench.frameworks.{a.name}" for a in node.names]
            for m in modules:
                parts = m.split(".")
                if parts[0] in names or (parts[:2] == ["dlbench", "frameworks"] and len(parts) > 2 and parts[2] in names):
                    found.append((node.lineno, m))
    return found


def test_the_framework_name_check_finds_planted_names():
    planted = ast.parse('import torch\nfrom dlbench.frameworks.jax.backend import X\nfrom dlbench.frameworks import keras\n'
                        'if c.framework == "paddle": pass\nx = info.name\n')
    assert [n for _, n in names_of_frameworks(planted, {"torch", "jax", "keras", "paddle"})] == [
        "torch", "dlbench.frameworks.jax.backend", "dlbench.frameworks.keras", "paddle"]


def test_no_module_outside_a_framework_folder_names_a_framework():
    """What a framework is and does is its folder's (its declaration, its parts), asked of the registry,
    never decided elsewhere by its name."""
    from dlbench.frameworks import BUILTIN

    src, names = ROOT / "src" / "dlbench", set(BUILTIN)
    offenders = []
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src).as_posix()
        parts = rel.split("/")
        if (parts[0] == "frameworks" and len(parts) > 2 and parts[1] in names) or any(
                rel == k or rel.startswith(k + "/") for k in NAMES_A_FRAMEWORK):
            continue
        offenders += [f"{rel}:{line}: {name!r}" for line, name in names_of_frameworks(ast.parse(path.read_text()), names)]
    assert not offenders, "names a framework outside its folder:\n" + "\n".join(offenders)
    for rel in NAMES_A_FRAMEWORK:  # an exception that no longer names one goes from the list
        found = [(p, names_of_frameworks(ast.parse(p.read_text()), names))
                 for p in ([src / rel] if rel.endswith(".py") else sorted((src / rel).rglob("*.py")))]
        assert any(hits for _, hits in found), f"{rel} names no framework any more: drop it from NAMES_A_FRAMEWORK"
