"""The framework registry reads installs from package metadata, without importing a framework."""

import ast
import importlib
import importlib.metadata
import importlib.util
from pathlib import Path

import pytest

from dlbench import frameworks as fw


def _fake(monkeypatch, **kw):
    info = fw.FrameworkInfo("fake", "dlbench.frameworks.fake", import_name="json", variants=("default",),
                            description="a stand-in", **kw)
    monkeypatch.setitem(fw.FRAMEWORKS, "fake", info)


def test_first_installed_of_several_distributions_wins(monkeypatch):
    _fake(monkeypatch, distribution=("no-such-distribution-dlbench", "numpy"))
    assert fw.installed_version("fake") == importlib.metadata.version("numpy")


def test_no_candidate_distribution_means_not_installed(monkeypatch):
    _fake(monkeypatch, distribution=("no-such-distribution-dlbench",))
    assert fw.installed_version("fake") is None


def test_missing_required_import_means_not_installed(monkeypatch):
    _fake(monkeypatch, distribution="numpy", requires=("no_such_module_dlbench",))
    assert fw.installed_version("fake") is None


def test_backends_default_to_the_three_per_batch_closures():
    assert fw.FRAMEWORKS["torch"].closures == fw.Backend.closures == ("forward", "gradient", "train_step")


@pytest.mark.parametrize("name", ["torch", "jax", "onnxruntime", "openvino", "tensorflow", "keras"])
def test_registry_devices_mirror_the_backends(name):
    """Runs refuse a device by the registry's ``devices`` (no import); it must say what the backend does."""
    info = fw.FRAMEWORKS[name]
    if any(importlib.util.find_spec(m) is None for m in (info.import_name, *info.requires)):
        pytest.skip(f"{name} is not installed")
    assert info.devices == fw.get_backend(name).devices


def test_environment_backends_declare_the_cpu_only():
    """mxnet, chainer, pytensor, paddle and h2o keep ``Backend.devices`` (their builds are CPU-only)."""
    for name in ("mxnet", "chainer", "pytensor", "paddle", "h2o"):
        assert fw.FRAMEWORKS[name].devices == fw.Backend.devices == ("cpu",)


# --- one framework, one folder, declared as data ----------------------------------------------------------
FOLDERS = Path(fw.__file__).parent


def test_every_framework_folder_is_registered_once_from_its_declaration():
    """The built-in list is the folders on disk (a folder not listed, or listed twice, fails), and each
    entry is its folder's declaration: the registry keeps no second copy."""
    on_disk = sorted(p.parent.name for p in FOLDERS.glob("*/__init__.py"))
    assert sorted(fw.BUILTIN) == on_disk and len(set(fw.BUILTIN)) == len(fw.BUILTIN)
    for name in fw.BUILTIN:
        d = importlib.import_module(f"dlbench.frameworks.{name}").DECLARATION
        info = fw.FRAMEWORKS[d.name]
        assert info.declaration is d  # the registry holds the declaration it read
        assert d.name.replace("-", "_") == name and (info.variants, info.devices, info.closures, info.precisions) == (
            d.variants, d.devices, d.closures, d.precisions)


def test_the_builtin_folders_are_found_in_their_declarations_order():
    """No list of names: every folder holding a DECLARATION is found, listed by its declared ``order``
    (today's order: the main Python's frameworks before those that live in environments of their own)."""
    declared = {n: importlib.import_module(f"dlbench.frameworks.{n}").DECLARATION for n in fw.BUILTIN}
    assert list(fw.BUILTIN) == sorted(declared, key=lambda n: (declared[n].order, n))
    assert [d.name for d in declared.values()] == list(fw.FRAMEWORKS)[:len(declared)]  # a folder's name may differ
    assert fw.BUILTIN[:6] == ("torch", "jax", "onnxruntime", "openvino", "tensorflow", "keras")


@pytest.mark.parametrize("name", fw.BUILTIN)
def test_a_folders_init_imports_only_the_declaration_and_names_parts_that_exist(name):
    """The registry imports every folder's ``__init__`` in every process, so it must import no framework;
    each part it names is a module of the folder (a typo or a file not moved fails here, not in a run)."""
    folder = FOLDERS / name
    tree = ast.parse((folder / "__init__.py").read_text())
    imports = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
    assert [n.module for n in imports] == ["dlbench.frameworks.declaration"] and "Declaration" in [
        a.name for a in imports[0].names]
    d = importlib.import_module(f"dlbench.frameworks.{name}").DECLARATION
    for part in (d.backend, d.decoder, d.dp_worker, d.parameter_server, d.probe, d.gemm):
        if part is not None:
            module, _, cls = part.partition(":")
            source = (folder / f"{module}.py").read_text()
            assert not cls or f"{cls} = " in source or f"class {cls}" in source or f"import {cls}" in source
    for recipe in d.recipes:
        assert (folder / recipe).is_file()
    assert (folder / "requirements.txt").is_file() == bool(d.recipes)


def test_a_plugin_declaration_is_registered_with_its_parts(tmp_path, monkeypatch):
    """A plug-in's FRAMEWORK_INFO may be a Declaration: its parts are named relative to its package."""
    pkg = tmp_path / "planted_fw_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "from dlbench.frameworks.declaration import Declaration\n"
        "FRAMEWORK_INFO = Declaration(name='plantedfw', distribution='numpy', import_name='json',\n"
        "                             description='planted', closures=('forward',), decoder='dec:D', probe='probe')\n")
    (pkg / "dec.py").write_text("class D:\n    variants = ('default',)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("DLBENCH_PLUGINS", "planted_fw_pkg")
    try:
        fw.load_plugins()
        info = fw.framework_info("plantedfw")
        assert (info.module, info.closures, info.probe) == ("planted_fw_pkg.backend", ("forward",),
                                                              "planted_fw_pkg.probe")
        assert fw.load_part("plantedfw", "decoder").__name__ == "D" and fw.load_part("plantedfw", "dp_worker") is None
        assert "plantedfw" in fw.with_part("decoder") and fw.part_module("nosuchfw", "decoder") is None
    finally:
        fw.FRAMEWORKS.pop("plantedfw", None)


def test_declared_precisions_are_the_tables_the_backends_build_from():
    """JAX's, Keras's and TensorFlow's precisions are declared as data and built from a table in their
    backend (Flax dtypes, Keras policies): the two must name the same precisions, in the same order."""
    pytest.importorskip("jax")
    pytest.importorskip("keras")
    from dlbench.frameworks.jax.backend import _FLAX_DTYPES
    from dlbench.frameworks.keras.keras_model import POLICIES

    assert fw.FRAMEWORKS["jax"].precisions == tuple(_FLAX_DTYPES)
    assert fw.FRAMEWORKS["keras"].precisions == fw.FRAMEWORKS["tensorflow"].precisions == tuple(POLICIES)


def test_the_scaling_engine_asks_the_declaration_how_workers_start_and_who_serves_parameters():
    """distributed/ names no framework: torch's workers start under torchrun because its declaration says
    so, and the parameter server computes with the frameworks that declare its worker side."""
    from dlbench.frameworks.declaration import Declaration

    assert fw.framework_info("torch").dp_launcher == "torchrun"
    assert {fw.framework_info(n).dp_launcher for n in fw.with_part("dp_worker") if n != "torch"} == {"processes"}
    assert fw.with_part("parameter_server") == ["torch"]
    assert fw.part_module("torch", "parameter_server") == "dlbench.frameworks.torch.ps_worker"
    with pytest.raises(ValueError, match="dp_launcher"):
        Declaration(name="x", distribution="x", import_name="x", description="x", dp_launcher="mpirun")


def test_a_part_is_looked_up_through_the_typed_accessor():
    """The parts are one typed list (``frameworks.Part``), read through ``FrameworkInfo.part``, not by
    attribute name: every declared part resolves, an unknown one is no part."""
    import typing

    assert fw.PARTS == typing.get_args(fw.Part) and "gemm" in fw.PARTS
    torch = fw.framework_info("torch")
    assert torch.part("decoder") == "dlbench.frameworks.torch.decoder:TorchDecoder"
    assert torch.part("gemm") == "dlbench.frameworks.torch.gemm" and torch.part("nosuchpart") is None
    assert fw.part_module("torch", "nosuchpart") is None and fw.with_part("nosuchpart") == []
