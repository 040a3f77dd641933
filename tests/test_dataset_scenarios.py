"""Whole-data-set scenarios (H2O's ``epoch`` and ``predict``) stand in for per-batch ones in the plan,
and the gate compares a probabilities-only API against the reference's softmax."""

import pytest

from dlbench.frameworks import FRAMEWORKS, FrameworkInfo
from dlbench.planning import resolve
from dlbench.planning.plan import expand, suite_from_dict
from dlbench.running import runner
from dlbench.scenarios import registry
from dlbench.scenarios.base import Context
from tests.conftest import requires


@pytest.fixture
def standin(monkeypatch):
    info = FrameworkInfo("standin", "dlbench.frameworks.standin", "x", "x", ("default",), "epoch-only",
                         closures=("epoch", "predict"), stands_in={"train_step": "epoch", "forward": "predict"})
    monkeypatch.setitem(FRAMEWORKS, "standin", info)
    return info


def test_dataset_scenarios_are_known_and_counted():
    assert set(registry.whole_dataset()) == {"epoch", "predict"}
    assert registry.get("epoch").flop_factor == 3.0 and registry.get("predict").flop_factor == 1.0


def test_a_framework_measures_its_stand_ins(standin):
    assert runner.scenarios_of("standin", ["forward", "gradient", "train_step"]) == ["predict", "gradient", "epoch"]
    assert runner.scenarios_of("standin", ["epoch", "train_step"]) == ["epoch"]
    assert runner.scenarios_of("torch", ["forward", "train_step"]) == ["forward", "train_step"]
    suite = suite_from_dict({"models": ["sae"], "scenarios": ["forward", "train_step"], "threads": [1]})
    cells = expand(suite, ["standin", "torch"], resolve.variants, lambda m, s, d: 64, cores=1,
                   scenarios_of=runner.scenarios_of)
    assert [(c.framework, c.scenario) for c in cells] == [("standin", "predict"), ("standin", "epoch"),
                                                          ("torch", "forward"), ("torch", "train_step")]


@requires("torch")
def test_gate_compares_probabilities_with_the_reference_softmax():
    from dlbench.frameworks.torch.backend import TorchBackend
    from dlbench.gate.verify import verify_model

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


def test_a_capped_call_counts_the_samples_it_processed(standin, tmp_path):
    """H2O processes at most DLBENCH_H2O_SAMPLES of a batch per call: samples/s must count those, not the batch."""
    from dlbench.launch.subprocess import JobOutcome
    from dlbench.planning.plan import Cell
    from dlbench.report.results import analyse_cell
    from dlbench.storage.store import Store

    timing = {"warmup_ns": [2e9], "samples_ns": [1e9, 1e9, 1e9], "loop_k": 1, "first_call_ns": 2e9,
              "truncated": False}
    result = {"timing": timing, "build_ns": 1.0, "threads_readback": {}, "rss_before_build_bytes": 0,
              "peak_rss_bytes": 1, "device_memory": {}, "python": "py", "versions": {}, "framework_metrics": {},
              "call_samples": 64, "cores": [0],
              # what a measuring process reports of its energy counters where it found none (dlbench.measure.energy)
              "energy": {"window_ns": 3_000_000_000, "calls": 3, "per_call": 64, "unit": "sample", "counters": [],
                         "looked_for": ["RAPL: no powercap directory"]}}
    suite = suite_from_dict({"models": ["fcn-r"], "threads": [1], "protocol": {"repeats": 1}})
    cell = Cell("standin", "default", "fcn-r", "epoch", 1024, 1)
    out = registry.get("epoch").measure(cell, Context(suite, lambda *a, **k: JobOutcome("ok", result, "", 1.0, 0)))
    assert out.metrics["call_samples"] == 64
    assert any("64 of the batch's 1024" in w for w in out.warnings)
    store = Store(tmp_path / "r.db")
    run = store.create_run("t", {})
    store.save_cell(run, {**cell.to_dict(), "key": cell.key}, out.status, out.reason, out.seconds, out.warnings,
                    out.metrics, out.samples)
    res = analyse_cell(store, store.cells(run)[0], "pass", None)
    assert res.samples_per_s == pytest.approx(64.0)  # 64 samples in 1 s, not 1024
