"""The framework registry reads installs from package metadata, without importing a framework."""

import importlib.metadata
import importlib.util

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


def test_backends_default_to_every_scenario():
    assert fw.FRAMEWORKS["torch"].scenarios == fw.Backend.scenarios == ("forward", "gradient", "train_step")


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
