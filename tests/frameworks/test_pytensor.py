"""PyTensor in its environment: the gate (both linkers on a dense net; the Numba linker on LeNet, whose
convolution is im2col with tensor ops), float32, and the compile cache that DLBENCH_CACHE_DIR moves."""

import pytest

from dlbench.api import verify
from tests.conftest import part_input_gradient_shapes, requires_framework, run_in_framework

pytestmark = requires_framework("pytensor")


def test_gate_passes_on_both_linkers():
    results = verify(models=["sae"], frameworks=["pytensor"], variants=["all"], timeout_s=3600)
    assert {(r.variant, r.verdict) for r in results} == {("numba", "pass"), ("c", "pass")}, \
        [(r.variant, r.reason) for r in results]


@pytest.mark.xdist_group("gate-pytensor")
def test_gate_passes_on_im2col_convolution(shared_dir):
    """LeNet on the Numba linker (PyTensor's first variant): read from PyTensor's session gate
    (tests/frameworks/test_equivalence.py), which runs it; a second gate process compiled it again."""
    from tests.frameworks.test_equivalence import gate_result

    result = gate_result("pytensor", "lenet", shared_dir)
    assert result.variant == "numba" and result.verdict == "pass", result.reason


def test_float32_and_the_compile_cache_follows_dlbench_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("DLBENCH_CACHE_DIR", str(tmp_path))
    out = run_in_framework("pytensor", """
        import json, os
        from dlbench.frameworks.pytensor.backend import PyTensorBackend
        from dlbench.models import get_model
        from dlbench.models.weights import init_weights
        from dlbench.data.synthetic import make_batch
        import pytensor
        b = PyTensorBackend(); spec = get_model("sae")
        m = b.build(spec, init_weights(spec, 0), "cpu", "numba"); p = b.place(make_batch(spec, 4, 0), m)
        out = b.forward(m, p)()
        info = b.info()
        root = os.path.join(os.environ["DLBENCH_CACHE_DIR"], "pytensor")
        print(json.dumps({"floatX": pytensor.config.floatX, "dtype": str(out.dtype),
                          "compiledir": str(pytensor.config.base_compiledir), "root": root,
                          "cached": sum(len(f) for _, _, f in os.walk(root)), "convolution": info["convolution"]}))
    """)
    assert out["floatX"] == "float32" and out["dtype"] == "float32"
    assert out["compiledir"] == out["root"] and out["cached"] > 0
    assert "im2col" in out["convolution"]


def test_batch_norm_running_statistics_stay_float32_in_training():
    """ResNets failed to compile their training step: the unbiased-variance factor was float64."""
    out = run_in_framework("pytensor", """
        import json
        from dataclasses import replace
        import numpy as np
        from dlbench.frameworks.pytensor.backend import PyTensorBackend
        from dlbench.models import get_model
        from dlbench.models.layers import Activation, BatchNorm, Dense
        from dlbench.scenarios.timed import make_closure
        from dlbench.models.weights import init_weights
        from dlbench.data.synthetic import make_batch
        spec = replace(get_model("sae"), name="bn-mlp",
                       layers=(Dense("fc1", 16), BatchNorm("bn1"), Activation("relu"), Dense("fc", 10)))
        b = PyTensorBackend()
        m = b.build(spec, init_weights(spec, 0), "cpu", "numba"); p = b.place(make_batch(spec, 8, 0), m)
        rv = m.graph.state["bn1.running_var"]
        before = np.array(rv.get_value())
        make_closure("train_step", b, m, p, spec)()
        after = rv.get_value()
        print(json.dumps({"dtype": str(after.dtype), "moved": bool(np.any(after != before))}))
    """)
    assert out == {"dtype": "float32", "moved": True}


def test_a_parts_gradient_differentiates_its_input():
    """The compiled gradient returns the loss, the parameters' gradients and, last, a part's input's."""
    shapes = part_input_gradient_shapes("pytensor", "PyTensorBackend",
                                        "out[-1] if len(out) == 1 + len(m.trainable) + 1 else None")
    assert shapes == [None, [4, 20, 12, 12], [4, 50, 4, 4]], shapes
