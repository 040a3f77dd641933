"""Chainer in its environment: the gate on LeNet (with DLBENCH_TEST_ALL_MODELS=1 also on the models
that exercise its special rules: NStepLSTM's gate order and cut sequences, ceil-mode average pooling
rebuilt from zero padding), frozen layers that stay frozen, and a training step that learns."""

import pytest

from tests.conftest import env_models, part_input_gradient_shapes, profile_in_framework, requires_framework, run_in_framework

pytestmark = requires_framework("chainer")


@pytest.mark.xdist_group("gate-chainer")
def test_gate_passes_on_its_special_rules(shared_dir):
    """Read from Chainer's session gate (tests/frameworks/test_equivalence.py), which runs these models
    (all of them with DLBENCH_TEST_ALL_MODELS=1): a second gate process ran LeNet again."""
    from tests.frameworks.test_equivalence import gate_result

    results = [gate_result("chainer", m, shared_dir)
               for m in env_models(["lenet"], ["lstm-imdb", "lstm-ptb", "alexnet-r"])]
    assert all(r.verdict == "pass" for r in results), [(r.model, r.reason) for r in results if r.verdict != "pass"]


def test_frozen_layers_stay_frozen_and_a_train_step_learns():
    out = run_in_framework("chainer", """
        import json, numpy as np
        from dlbench.frameworks.chainer.backend import ChainerBackend
        from dlbench.frameworks.base import OptimizerSpec
        from dlbench.models import get_model
        from dlbench.models.weights import init_weights
        from dlbench.data.synthetic import make_batch
        b = ChainerBackend(); threads = b.set_threads(1)
        spec = get_model("sae:phase=pretrain2")
        m = b.build(spec, init_weights(spec, 0), "cpu"); p = b.place(make_batch(spec, 32, 0), m)
        before = b.get_params(m)
        step = b.train_step(m, p, OptimizerSpec(lr=0.1))
        losses = [float(step().array) for _ in range(5)]
        after = b.get_params(m)
        print(json.dumps({"losses": losses, "changed": {k: bool((after[k] != before[k]).any()) for k in before},
                          "threads": threads}))
    """)
    changed = out["changed"]
    assert not changed["enc1.weight"] and not changed["enc1.bias"]  # frozen by the spec
    assert changed["enc2.weight"] and changed["dec2.bias"]
    assert out["losses"][-1] < out["losses"][0]
    assert out["threads"]["blas"] and all(d["threads"] == 1 for d in out["threads"]["blas"])


def test_a_parts_gradient_differentiates_its_input():
    """The closure differentiates a ``chainer.Variable`` it made of the placed array (its ``x``)."""
    shapes = part_input_gradient_shapes("chainer", "ChainerBackend",
                                        "None if (v := inspect.getclosurevars(run).nonlocals['x']) is None else v.grad")
    assert shapes == [None, [4, 20, 12, 12], [4, 50, 4, 4]], shapes


def test_profile_writes_a_chrome_trace_of_its_operations():
    p = profile_in_framework("chainer", "ChainerBackend")
    assert p["chrome_fields"] and p["calls"] == 2 and p["ops"] and p["self_us_total"] > 0, p
    names = [op["name"] for op in p["ops"]]
    assert any("LinearFunction" in n for n in names) and "LinearFunction (backward)" in names, names
