"""Every installed backend passes the equivalence gate on every registered model.

One fresh process per framework verifies all models (as ``dlbench verify`` does), so frameworks
never share a test process. A framework that is not installed is skipped with the reason. A
forward-only framework (an inference engine, ``scenarios == ("forward",)``) is held to the
parameter and forward checks only, and must say so.

A model a framework cannot express is ``unsupported`` with its reason. Every such (framework, model)
pair is pinned in :data:`EXPECTED_UNSUPPORTED` with the words its reason must hold: a pair that turns
``unsupported`` without being pinned fails (making torch's LRN unsupported once turned AlexNet's gate
into a skip that no one saw), and so does a pinned pair that starts to pass (unpin it).

A framework measured in its own environment (``dlbench envs``) is checked here on a quick subset
(``ENV_MODELS``: a CNN and an MLP, the models CI can afford) unless ``DLBENCH_TEST_ALL_MODELS=1``:
the whole zoo takes such a backend tens of minutes (PyTensor compiles every graph with a C compiler
or Numba), and its full table is ``dlbench verify --framework NAME`` (docs/environments.md).
``DLBENCH_TEST_ALL_MODELS_EXCEPT=pytensor`` keeps the named frameworks to their usual subset in a
nightly run (PyTensor's whole zoo alone takes over an hour: each ResNet's graph compiles for about 20
minutes).

Each framework's gate runs once per test session, however many test processes its cases land on
(:func:`verified_once`).
"""

import fcntl
import os
import pickle
from pathlib import Path

import pytest

from dlbench import envs
from dlbench.api import verify
from dlbench.frameworks import FRAMEWORKS, installed_version
from dlbench.models import list_models

MODELS = list_models() + ["sae:phase=pretrain1", "sae:phase=pretrain3", "alexnet:lrn=0:groups=1"]
#: sae:phase=pretrain3 (a small MLP with frozen layers) is also read by test_update_gate.py's update check
ENV_MODELS = ["lenet", "fcn-r", "sae:phase=pretrain3"]
#: frameworks held to a few small models here to keep CI within its time budget (unless
#: ``DLBENCH_TEST_ALL_MODELS=1``, the nightly run); their gate over the whole zoo (``dlbench verify
#: --framework jax,onnxruntime,openvino,tensorflow,keras --variant all``) is in docs/fairness.md. torch is
#: checked on every kind of layer of the zoo here (:data:`TORCH_NIGHTLY`): ONNX Runtime's models are exported from it.
SMALL = {"tensorflow", "keras", "jax", "onnxruntime", "openvino"}
SMALL_MODELS = ["lenet", "lstm-imdb", "sae:phase=pretrain1", "sae:phase=pretrain3", "bert-base", "smollm2-135m"]
#: Keras's transformers are the nightly set's (over half of CI's longest gate, Keras on JAX compiling each
#: transformer's four programs): its layers are one Keras model with the TensorFlow backend's
#: (frameworks/keras/keras_model.py), whose CI gate passes bert-base and smollm2-135m, and Keras on JAX
#: differentiates and steps the CNN, the LSTM and the MLPs here
KERAS_NIGHTLY = ("bert-base", "smollm2-135m")
#: torch's models left to the nightly set: each brings no kind of layer (nor loss, input or residual shortcut)
#: that a cheaper model of torch's CI gate does not (test_torchs_ci_models_hold_every_kind_of_layer_of_the_zoo),
#: and their float64 reference updates (tens of millions of parameters) were two thirds of torch's gate, the
#: longest single item of CI's tests. The whole zoo: DLBENCH_TEST_ALL_MODELS=1, or ``dlbench verify --framework torch``
TORCH_NIGHTLY = ("alexnet-s", "alexnet:lrn=0:groups=1", "fcn-s", "fcn-r", "resnet-50")
#: frameworks that run only some families, checked on those (and models they refuse, for the reason); llama.cpp
#: fails GPT-2 at fp32 (its GELU goes through a float16 table): tests/frameworks/test_llamacpp.py pins that
OWN_MODELS = {"ctranslate2": ["gpt2", "smollm2-135m", "lenet", "bert-base"], "llamacpp": ["smollm2-135m", "lenet"],
              # H2O builds multilayer perceptron classifiers only: sae is one (fcn-r has the same kinds of layer
              # and 34 times the parameters), the rest are refused with the reason (test_h2o.py reads them)
              "h2o": ["lenet", "sae", "sae:phase=pretrain1", "sae:phase=pretrain3"]}
_cache: dict = {}

#: H2O builds multilayer perceptron classifiers only (frameworks/h2o/backend.py ``plan_of``)
_H2O_MLP_ONLY = "h2o deep learning builds multilayer perceptrons only (no convolution"
_H2O_CLASSIFIERS = "h2o deep learning trains classifiers here (softmax output)"
TRANSFORMERS = ("bert-base", "gpt2", "vit-b16", "smollm2-135m")
#: MXNet, Chainer and PyTensor have no attention layer in dlbench (Paddle has: frameworks/paddle/layers.py)
_NO_TRANSFORMER_LAYERS = "backend has no rule for layer"
#: (framework, model) -> words its ``unsupported`` reason holds: every pair the gate may call unsupported
EXPECTED_UNSUPPORTED: dict[tuple[str, str], str] = {
    **{("h2o", m): _H2O_MLP_ONLY for m in ("lenet", "alexnet", "alexnet-s", "lstm-imdb", "alexnet-r", "resnet-56",
                                           "resnet-50", "resnet-50-cifar", "conv", "alexnet:lrn=0:groups=1")},
    **{("h2o", m): _H2O_CLASSIFIERS for m in ("lstm-ptb", "dense-1", "sae:phase=pretrain1", "sae:phase=pretrain3")},
    **{("h2o", m): _H2O_MLP_ONLY for m in ("bert-base", "vit-b16")},
    **{("h2o", m): _H2O_CLASSIFIERS for m in ("gpt2", "smollm2-135m")},  # a label per token
    # llama.cpp runs GGUF files of the Llama and GPT-2 families (frameworks/llamacpp/convert.py)
    **{("llamacpp", m): "llama.cpp" for m in MODELS if m not in ("gpt2", "smollm2-135m")},
    ("h2o", "gemm"): "h2o deep learning builds multilayer perceptrons only; it has no Dense layer",
    **{(fw, m): _NO_TRANSFORMER_LAYERS for fw in ("mxnet", "chainer", "pytensor") for m in TRANSFORMERS},
    # CTranslate2's Generator runs the decoder-only language models dlbench writes Hugging Face folders of
    **{("ctranslate2", m): "ctranslate2" for m in MODELS if m not in ("gpt2", "smollm2-135m")},
    ("onnxruntime-genai", "gpt2"): "ONNX Runtime GenAI's model builder: The HF_DIR model is not currently supported",
}


#: frameworks that build only some families, checked on those (every other model is unsupported with the
#: reason: tests/test_transformers_runtime.py)
ONLY = {"transformers": list(TRANSFORMERS),
        # the GenAI runtimes convert causal language models only (frameworks/transformers/converted.py refuses
        # the rest: tests/frameworks/test_converted.py); ONNX Runtime GenAI's builder takes no GPT-2
        "onnxruntime-genai": ["smollm2-135m", "gpt2"], "openvino-genai": ["smollm2-135m", "gpt2"]}


def models_for(framework: str) -> list[str]:
    if framework in ONLY:
        return ONLY[framework]
    except_ = os.environ.get("DLBENCH_TEST_ALL_MODELS_EXCEPT", "").split(",")
    if os.environ.get("DLBENCH_TEST_ALL_MODELS") == "1" and framework not in except_:
        return MODELS
    if framework in OWN_MODELS:
        return OWN_MODELS[framework]
    if framework == "keras":
        return [m for m in SMALL_MODELS if m not in KERAS_NIGHTLY]
    if framework in SMALL:
        return SMALL_MODELS
    if envs.python_for(framework):
        return ENV_MODELS
    if framework == "torch":
        return [m for m in MODELS if m not in TORCH_NIGHTLY]
    return MODELS


#: a framework's cases are one xdist group (scripts/test.sh's ``--dist loadgroup``): its gate runs in the test
#: process that runs its cases, and the other never waits on :func:`verified_once` for it
CASES = [pytest.param(fw, variant, model, marks=pytest.mark.xdist_group(f"gate-{fw}"))
         for fw, info in FRAMEWORKS.items() for variant in info.variants[:1] for model in models_for(fw)]


def results_for(framework: str, variant: str, shared: Path) -> dict:
    if installed_version(framework) is None:
        pytest.skip(f"{framework} is not installed")
    key = (framework, variant)
    if key not in _cache:
        _cache[key] = verified_once(framework, variant, shared)
    return _cache[key]


def gate_result(framework: str, model: str, shared: Path):
    """``model``'s verdict from ``framework``'s session gate (its first variant, both optimisers, fp32),
    for a test elsewhere that checks a model this gate runs: read, not run again in another process.
    Such a test joins the xdist group ``gate-FRAMEWORK``, so it never waits for the other test process."""
    results = results_for(framework, FRAMEWORKS[framework].variants[0], shared)
    assert model in results, f"{model} is not in {framework}'s session gate ({sorted(results)}): add it to models_for"
    return results[model]


def verified_once(framework: str, variant: str, shared: Path) -> dict:
    """The gate of one framework over its models, run once per test session: under pytest-xdist a
    framework's cases land on both test processes, and each ran the whole gate (PyTensor's whole zoo
    takes an hour). The first to come runs it and leaves the results for the other, which waits."""
    path = shared / f"gate-{framework}-{variant}.pickle"
    with open(shared / f"gate-{framework}-{variant}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.exists():
            return pickle.loads(path.read_bytes())
        results = {r.model: r for r in verify(models=models_for(framework), frameworks=[framework],
                                              variants=[variant], timeout_s=7200)}
        path.write_bytes(pickle.dumps(results))
        return results


@pytest.mark.parametrize(("framework", "variant", "model"), CASES)
def test_gate_passes(framework, variant, model, shared_dir):
    results = results_for(framework, variant, shared_dir)
    if model not in results:
        pytest.skip(f"{framework} runs in its own environment: quick subset only (DLBENCH_TEST_ALL_MODELS=1 for all)")
    result = results[model]
    expected = EXPECTED_UNSUPPORTED.get((framework, model))
    if result.verdict == "unsupported":
        assert expected is not None, (f"{framework} newly cannot express {model}: {result.reason!r} (pin it in "
                                      "EXPECTED_UNSUPPORTED, with its reason, only if that is right)")
        assert expected in result.reason, result.reason
        return  # the pinned fact holds, with its reason
    assert expected is None, f"{framework} now expresses {model} ({result.verdict}): unpin it from EXPECTED_UNSUPPORTED"
    assert result.verdict == "pass", result.reason
    assert result.forward_error <= 1e-4
    if "gradient" in FRAMEWORKS[framework].closures:
        assert result.gradient_error <= 1e-3
    else:
        assert result.gradient_error is None and "forward only" in result.reason


def _kinds(model: str) -> set[str]:
    """What a model asks a backend to build: its layer types (a grouped convolution and each kind of
    residual shortcut apart), its loss and its input."""
    from dlbench.models import get_model
    from dlbench.models import layers as L

    spec = get_model(model)
    kinds = {f"loss {spec.loss.kind}", f"input {spec.input.kind}"}
    for layer in L.walk(spec.layers):
        kind = type(layer).__name__
        if isinstance(layer, L.Conv2d) and layer.groups > 1:
            kind += " grouped"
        if isinstance(layer, L.Residual):
            kind += " shortcut " + "+".join(type(s).__name__ for s in layer.shortcut)
        kinds.add(kind)
    return kinds


def test_torchs_ci_models_hold_every_kind_of_layer_of_the_zoo(monkeypatch):
    """Torch's CI gate leaves :data:`TORCH_NIGHTLY` to the nightly set: a model with a kind of layer no other
    model has must stay in CI (this fails when one is added to TORCH_NIGHTLY, or when a new layer kind
    arrives in a nightly-only model)."""
    monkeypatch.delenv("DLBENCH_TEST_ALL_MODELS", raising=False)
    ci = models_for("torch")
    assert set(ci) | set(TORCH_NIGHTLY) == set(MODELS) and not set(ci) & set(TORCH_NIGHTLY)
    held = set().union(*(_kinds(m) for m in ci))
    for model in TORCH_NIGHTLY:
        assert _kinds(model) <= held, (model, _kinds(model) - held)
    monkeypatch.setenv("DLBENCH_TEST_ALL_MODELS", "1")
    assert models_for("torch") == MODELS


def test_every_pinned_unsupported_pair_names_a_framework_and_a_model_of_the_gate():
    for framework, model in EXPECTED_UNSUPPORTED:
        assert framework in FRAMEWORKS and model in MODELS, (framework, model)
