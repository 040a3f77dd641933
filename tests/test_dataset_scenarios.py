"""Whole-data-set scenarios (H2O's ``epoch`` and ``predict``) stand in for per-batch ones in the plan,
and the gate compares a probabilities-only API against the reference's softmax."""

import pytest

from dlbench import runner
from dlbench.frameworks import FRAMEWORKS, FrameworkInfo
from dlbench.plan import expand, suite_from_dict
from dlbench.scenarios import DATASET, FLOP_FACTOR, SCENARIOS
from tests.conftest import requires


@pytest.fixture
def standin(monkeypatch):
    info = FrameworkInfo("standin", "dlbench.frameworks.standin", "x", "x", ("default",), "epoch-only",
                         scenarios=("epoch", "predict"), stands_in={"train_step": "epoch", "forward": "predict"})
    monkeypatch.setitem(FRAMEWORKS, "standin", info)
    return info


def test_dataset_scenarios_are_known_and_counted():
    assert set(DATASET) <= set(SCENARIOS) and FLOP_FACTOR["epoch"] == 3.0 and FLOP_FACTOR["predict"] == 1.0


def test_a_framework_measures_its_stand_ins(standin):
    assert runner.scenarios_of("standin", ["forward", "gradient", "train_step"]) == ["predict", "gradient", "epoch"]
    assert runner.scenarios_of("standin", ["epoch", "train_step"]) == ["epoch"]
    assert runner.scenarios_of("torch", ["forward", "train_step"]) == ["forward", "train_step"]
    suite = suite_from_dict({"models": ["sae"], "scenarios": ["forward", "train_step"], "threads": [1]})
    cells = expand(suite, ["standin", "torch"], runner.variants_of, lambda m, s, d: 64, cores=1,
                   scenarios_of=runner.scenarios_of)
    assert [(c.framework, c.scenario) for c in cells] == [("standin", "predict"), ("standin", "epoch"),
                                                          ("torch", "forward"), ("torch", "train_step")]


@requires("torch")
def test_gate_compares_probabilities_with_the_reference_softmax():
    from dlbench.frameworks.torch import TorchBackend
    from dlbench.verify import verify_model

    class Probabilities(TorchBackend):
        output = "probabilities"

        def forward(self, model, batch):
            logits = super().forward(model, batch)
            return lambda: logits().softmax(dim=-1)

    class Mislabelled(Probabilities):
        output = "logits"

    assert verify_model(Probabilities(), "sae").verdict == "pass"
    bad = verify_model(Mislabelled(), "sae")
    assert bad.verdict == "fail" and "forward error" in bad.reason
