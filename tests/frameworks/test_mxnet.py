"""MXNet (Gluon) in its environment: the gate on LeNet (DLBENCH_TEST_ALL_MODELS=1 adds the LSTM
and an autoencoder phase; grouped convolution,
LRN and ceil pooling are covered by the full ``dlbench verify``), hybridize really caching a graph, and
a training step that learns."""

from dlbench.api import verify
from tests.conftest import env_models, part_input_gradient_shapes, profile_in_framework, requires_framework, run_in_framework

pytestmark = requires_framework("mxnet")


def test_gate_passes_on_both_variants():
    results = verify(models=env_models(["lenet"], ["lstm-imdb", "sae:phase=pretrain2"]), frameworks=["mxnet"],
                     variants=["all"])
    assert {(r.variant, r.verdict) for r in results} == {("imperative", "pass"), ("hybridize", "pass")}, \
        [(r.model, r.variant, r.reason) for r in results if r.verdict != "pass"]
    lstm = [r for r in results if r.model == "lstm-imdb"]  # with DLBENCH_TEST_ALL_MODELS=1
    assert all(r.params_extra == 4 * 128 and "h2h_bias" in r.params_extra_reason for r in lstm)


def test_hybridize_caches_a_static_graph_and_a_train_step_learns():
    out = run_in_framework("mxnet", """
        import json, numpy as np
        from dlbench.frameworks.mxnet.backend import MxnetBackend
        from dlbench.frameworks.base import OptimizerSpec
        from dlbench.models import get_model
        from dlbench.models.weights import init_weights
        from dlbench.data.synthetic import make_batch
        b = MxnetBackend(); spec = get_model("lenet")
        m = b.build(spec, init_weights(spec, 0), "cpu", "hybridize"); p = b.place(make_batch(spec, 16, 0), m)
        b.sync(b.forward(m, p)())
        before = b.get_params(m)
        step = b.train_step(m, p, OptimizerSpec(lr=0.01))
        losses = [float(step().asscalar()) for _ in range(5)]
        after = b.get_params(m)
        print(json.dumps({"cached": [m.net._cached_op is not None, m.loss._cached_op is not None],
                          "losses": losses, "changed": [bool((after[k] != before[k]).any()) for k in before],
                          "threads": b.set_threads(1)}))
    """)
    assert out["cached"] == [True, True]
    assert all(out["changed"]) and out["losses"][-1] < out["losses"][0]
    assert out["threads"]["omp_threads"] == 1 and out["threads"]["engine_workers"] == 1


def test_a_parts_gradient_differentiates_its_input():
    shapes = part_input_gradient_shapes("mxnet", "MxnetBackend", "None if p['x'].grad is None else p['x'].grad.asnumpy()")
    assert shapes == [None, [4, 20, 12, 12], [4, 50, 4, 4]], shapes


def test_profile_writes_a_chrome_trace_of_its_operations():
    p = profile_in_framework("mxnet", "MxnetBackend")
    assert p["chrome_fields"] and p["calls"] == 2 and p["ops"] and p["self_us_total"] > 0, p
    names = [op["name"] for op in p["ops"]]
    assert any("FullyConnected" in n for n in names), names
