"""H2O in its environment: the forward gate through initial weights (sigmoid rebuilt exactly from tanh),
the models it cannot express, its throughput cells, and no JVM left behind."""

import os
import re
import subprocess

import pytest

from dlbench import api
from tests.conftest import over_budget, requires_framework, run_in_framework

pytestmark = requires_framework("h2o")
TINY = {"warmup": 0, "min_iters": 1, "min_time_s": 0.0, "repeats": 1, "timeout_s": 600}


def h2o_jvms() -> list[str]:
    """H2O JVMs left behind: a cluster is named ``dlbench-h2o-PID-...`` after the measuring process that
    started it, so a JVM whose process is gone is an orphan (JVMs of other runs still going are not)."""
    out = subprocess.run(["pgrep", "-af", "dlbench-h2o-"], capture_output=True, text=True)
    left = []
    for line in out.stdout.splitlines():
        name = re.search(r"-name dlbench-h2o-(\d+)-", line)
        if "java" in line and name and not os.path.exists(f"/proc/{name.group(1)}"):
            left.append(line)
    return left


def test_sigmoid_as_rescaled_tanh_is_exact_and_invertible():
    out = run_in_framework("h2o", """
        import json, numpy as np
        from dlbench.frameworks.h2o.backend import plan_of, to_h2o, from_h2o
        from dlbench.models import get_model
        from dlbench.models.weights import init_weights
        from dlbench.data.synthetic import make_batch
        from dlbench.gate import reference
        spec = get_model("sae"); w = init_weights(spec, 0, "verify"); batch = make_batch(spec, 8, 0)
        plan = plan_of(spec); layers = to_h2o(plan, w.params)
        t = batch.x.astype(np.float64)
        for i, (wt, b) in enumerate(layers):
            t = t @ wt.T + b
            if i < len(layers) - 1:
                t = np.tanh(t)
        ref, _ = reference.forward(spec, w, batch)
        back = from_h2o(plan, [(wt.astype(np.float32), b.astype(np.float32)) for wt, b in layers])
        print(json.dumps({"forward": float(np.abs(t - ref).max()),
                          "roundtrip": max(float(np.abs(back[k] - w.params[k]).max()) for k in w.params)}))
    """)
    assert out["forward"] < 1e-9 and out["roundtrip"] < 1e-6


@pytest.mark.xdist_group("gate-h2o")
def test_gate_on_what_h2o_can_and_cannot_express(shared_dir):
    """Read from H2O's session gate (tests/frameworks/test_equivalence.py), which runs these models: a
    second gate process started a second JVM for them. Its process has ended, and its JVM with it."""
    from tests.frameworks.test_equivalence import gate_result

    by = {m: gate_result("h2o", m, shared_dir) for m in ("sae", "lenet", "sae:phase=pretrain1")}
    assert by["sae"].verdict == "pass" and by["sae"].forward_error <= 1e-4, by["sae"].reason
    assert by["sae"].gradient_error is None and "no gradients" in by["sae"].reason
    assert by["lenet"].verdict == "unsupported" and "multilayer perceptrons only" in by["lenet"].reason
    assert by["sae:phase=pretrain1"].verdict == "unsupported" and "untied" in by["sae:phase=pretrain1"].reason
    assert not h2o_jvms()


@over_budget  # a whole run with a JVM per cell: about a minute and a half
@pytest.mark.machine_wide  # JVMs, and a scan of every process for those left behind
def test_a_run_reports_throughput_in_its_own_scenarios_and_stops_the_cluster(tmp_db, monkeypatch):
    monkeypatch.setenv("DLBENCH_H2O_SAMPLES", "48")  # a call processes 48 of the batch's 96 samples
    res = api.run(db=tmp_db, models=["sae"], frameworks=["h2o"], scenarios=["forward", "gradient", "train_step"],
                  batches=[96], threads=[1], protocol=TINY)
    by = {c.cell.scenario: c for c in res.cells}
    assert set(by) == {"predict", "gradient", "epoch"}  # forward and train_step are stood in for
    assert by["gradient"].cell.status == "unsupported"
    for s in ("predict", "epoch"):
        assert by[s].cell.status == "ok", by[s].cell.reason
        assert by[s].samples_per_s > 0
        assert by[s].cell.metrics["call_samples"] == 48
    reported = by["epoch"].cell.metrics["framework_metrics"][0]
    assert reported["h2o_nthreads"] == 1 and reported["h2o_training_speed_samples_per_s"]
    assert set(reported["h2o_training_samples"]) == {48}  # H2O's own count: one epoch over the capped frame
    assert not h2o_jvms()
