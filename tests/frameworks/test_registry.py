"""The framework registry reads installs from package metadata, without importing a framework."""

import importlib.metadata

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
