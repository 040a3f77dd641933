"""TensorFlow backend specifics: the xla variant on a few models, closures, frozen layers,
full-size parameter counts, the persistent XLA cache.

The backend runs Keras on TensorFlow; Keras fixes its backend at import, so this module skips
when a test process already imported Keras on another backend (the Keras tests use subprocesses).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import over_budget, requires
from tests.frameworks import closure_checks

pytestmark = requires("tensorflow")
SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture(scope="module")
def backend():
    if "keras" in sys.modules and sys.modules["keras"].backend.backend() != "tensorflow":
        pytest.skip("Keras was imported on another backend in this process")
    from dlbench.frameworks import get_backend

    return get_backend("tensorflow")


def test_distribution_found():
    from dlbench.frameworks import installed_version

    assert installed_version("tensorflow") is not None  # tensorflow-cpu or tensorflow


@pytest.mark.parametrize("model", ["lenet", pytest.param("lstm-imdb", marks=over_budget),
                                   pytest.param("sae:phase=pretrain2", marks=over_budget)])
def test_xla_variant_passes_gate(backend, model):
    from dlbench.gate.verify import verify_model

    result = verify_model(backend, model, "xla")
    assert result.verdict == "pass", result.reason


@pytest.mark.parametrize("variant", ["function", pytest.param("xla", marks=over_budget)])
@pytest.mark.parametrize("check", list(closure_checks.CHECKS))
def test_closures(backend, variant, check):
    closure_checks.CHECKS[check](backend, variant)


@pytest.mark.parametrize("name", ["lenet", "resnet-56", "lstm-ptb", "sae"])
def test_full_size_param_count_matches_spec(backend, name):
    from dlbench.models import get_model
    from dlbench.models.weights import Weights, bn_state_names

    spec = get_model(name)
    shapes = spec.param_shapes()
    zeros = Weights({k: np.zeros(s, np.float32) for k, s in shapes.items()},
                    {n: np.ones(shapes[n.rsplit(".", 1)[0] + ".gamma"], np.float32) for n in bn_state_names(spec)})
    model = backend.build(spec, zeros)
    assert backend.param_count(model) == spec.param_count
    assert backend.param_count_extra(spec) == (0, "")


def test_unknown_variant_and_device_are_unsupported(backend):
    from dlbench.frameworks.base import UnsupportedError
    from dlbench.models import get_model
    from dlbench.models.weights import init_weights

    spec = get_model("sae")
    with pytest.raises(UnsupportedError):
        backend.build(spec, init_weights(spec), "cpu", "eager")
    with pytest.raises(UnsupportedError):
        backend.build(spec, init_weights(spec), "tpu")


def test_info_reports_build_facts(backend):
    info = backend.info()
    assert info["tensorflow"] and info["keras_backend"] == "tensorflow"
    assert isinstance(info["onednn_enabled"], bool) and "is_cuda_build" in info["build_info"]


@over_budget
def test_xla_persistent_cache_is_written(tmp_path):
    """With DLBENCH_CACHE_DIR set, the xla variant's executables land in $DLBENCH_CACHE_DIR/tf_xla."""
    code = ("from dlbench.frameworks import get_backend; from dlbench.models import get_model; "
            "from dlbench.models.weights import init_weights; from dlbench.data import make_batch; "
            "b = get_backend('tensorflow'); s = get_model('sae'); m = b.build(s, init_weights(s), 'cpu', 'xla'); "
            "out = b.forward(m, b.place(make_batch(s, 4), m))(); b.sync(out); "
            "import json; print('INFO ' + json.dumps(b.info()['xla_cache_dir']))")
    env = {**os.environ, "DLBENCH_CACHE_DIR": str(tmp_path), "PYTHONPATH": str(SRC), "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("KERAS_BACKEND", None)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("INFO "))
    assert json.loads(line[5:]) == str(tmp_path / "tf_xla")
    assert any((tmp_path / "tf_xla").iterdir()), "no XLA executable was cached"


def test_convergence_agrees_with_torch_and_learns(backend):
    """The cross-framework agreement check: same canonical weights, same batches, same SGD
    momentum, so the first steps' losses match torch's; one epoch lifts test accuracy."""
    pytest.importorskip("torch")
    from dlbench.data import adapt, load_dataset
    from dlbench.frameworks import get_backend
    from dlbench.models import get_model
    from dlbench.models.weights import init_weights
    from dlbench.scenarios.convergence import ConvergenceConfig, default_batch, evaluate, train

    spec = get_model("lenet")
    train_set, test_set = adapt(load_dataset("digits"), spec), adapt(load_dataset("digits", split="test"), spec)
    batch, config = default_batch(spec, len(train_set)), ConvergenceConfig(epochs=1, log_steps=5)
    ours = train(backend, spec, train_set, test_set, batch, 0, config)
    theirs = train(get_backend("torch"), spec, train_set, test_set, batch, 0, config)
    np.testing.assert_allclose(ours["step_losses"], theirs["step_losses"], rtol=1e-3)
    fresh = backend.build(spec, init_weights(spec, 0))
    _, initial_acc = evaluate(backend, fresh, backend.predictor(fresh), test_set, config.eval_batch)
    assert ours["epochs"][0]["test_acc"] > initial_acc + 0.2


def test_trainer_generalises_one_trace_over_token_lengths(backend):
    """Token batches cut to different lengths train (the trainer's tf.function relaxes its input
    signature rather than failing or holding one shape), and the predictor's output is forward's."""
    from dlbench.data import make_batch
    from dlbench.frameworks.base import OptimizerSpec
    from dlbench.models import get_model
    from dlbench.models.weights import init_weights

    spec = get_model("lstm-imdb", small=True, units=16, embed=8)
    model = backend.build(spec, init_weights(spec, 0))
    raws = [make_batch(spec, 6, seed=s) for s in range(5)]
    assert len({r.x.shape[1] for r in raws}) > 2
    step, predict = backend.trainer(model, OptimizerSpec(lr=0.5)), backend.predictor(model)
    for raw in raws:
        placed = backend.place(raw, model)
        np.testing.assert_allclose(predict(placed).numpy(), backend.forward(model, placed)().numpy(),
                                   rtol=1e-5, atol=1e-6)
        assert np.isfinite(float(step(placed)))
