"""Keras backend: the same Keras model on JAX, TensorFlow and PyTorch.

Keras fixes its backend at import, so every check runs in a fresh process per Keras backend:
the equivalence gate through ``dlbench.api.verify`` (which sets ``KERAS_BACKEND`` from the
framework's ``variant_env``), the closure checks through ``python -m tests.frameworks.closure_checks``.
The first variant (keras-jax) passes the gate on every model in test_equivalence.py; here the
other variants on a few models, and the closure checks on all three.
"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import requires
from tests.frameworks.closure_checks import CHECKS

pytestmark = requires("keras")
ROOT = Path(__file__).resolve().parents[2]
MODELS = ["lenet", "alexnet-r", "lstm-imdb", "sae:phase=pretrain2", "resnet-56"]
PACKAGE = {"keras-jax": "jax", "keras-tensorflow": "tensorflow", "keras-torch": "torch"}
_cache: dict = {}


def _needs(variant: str) -> None:
    if importlib.util.find_spec(PACKAGE[variant]) is None:
        pytest.skip(f"{PACKAGE[variant]} is not installed")


def test_registry_sets_one_backend_per_variant():
    from dlbench.frameworks import FRAMEWORKS

    info = FRAMEWORKS["keras"]
    assert info.variants == ("keras-jax", "keras-tensorflow", "keras-torch")
    assert {v: e["KERAS_BACKEND"] for v, e in info.variant_env.items()} == {
        "keras-jax": "jax", "keras-tensorflow": "tensorflow", "keras-torch": "torch"}


@pytest.mark.parametrize("variant", ["keras-tensorflow", "keras-torch"])
@pytest.mark.parametrize("model", MODELS)
def test_other_variants_pass_gate(variant, model):
    from dlbench.api import verify

    _needs(variant)
    if ("gate", variant) not in _cache:
        _cache[("gate", variant)] = {r.model: r for r in verify(models=MODELS, frameworks=["keras"],
                                                                  variants=[variant])}
    result = _cache[("gate", variant)][model]
    assert result.verdict == "pass", result.reason


def _checks(variant: str) -> dict:
    if ("checks", variant) not in _cache:
        env = {**os.environ, "KERAS_BACKEND": PACKAGE[variant], "TF_CPP_MIN_LOG_LEVEL": "2",
               "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
        proc = subprocess.run([sys.executable, "-m", "tests.frameworks.closure_checks", "keras", variant],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        assert lines, f"checks process failed (rc {proc.returncode}): {proc.stderr[-3000:]}"
        _cache[("checks", variant)] = json.loads(lines[-1][7:])
    return _cache[("checks", variant)]


@pytest.mark.parametrize("check", list(CHECKS))
@pytest.mark.parametrize("variant", list(PACKAGE))
def test_closures(variant, check):
    _needs(variant)
    assert _checks(variant)[check] == "ok", _checks(variant)[check]


def test_wrong_backend_variant_is_unsupported():
    """A process whose Keras runs on one backend refuses the others, saying why."""
    _needs("keras-tensorflow")
    code = ("from dlbench.frameworks import get_backend; from dlbench.verify import verify_model; "
            "r = verify_model(get_backend('keras'), 'sae', 'keras-torch'); print('RESULT', r.verdict, '|', r.reason)")
    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT"))
    assert "unsupported" in line and "KERAS_BACKEND=torch" in line
