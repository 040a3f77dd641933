"""Every installed backend passes the equivalence gate on every registered model.

One fresh process per framework verifies all models (as ``dlbench verify`` does), so frameworks
never share a test process. A framework that is not installed is skipped with the reason. A
forward-only framework (an inference engine, ``scenarios == ("forward",)``) is held to the
parameter and forward checks only, and must say so.
"""

import pytest

from dlbench.api import verify
from dlbench.frameworks import FRAMEWORKS, installed_version
from dlbench.models import list_models

MODELS = list_models() + ["sae:phase=pretrain1", "sae:phase=pretrain3", "alexnet:lrn=0:groups=1"]
#: frameworks held to a few small models here to keep CI within its time budget; their gate over
#: the whole zoo (``dlbench verify --framework tensorflow,keras --variant all``) is in docs/fairness.md
SMALL = {"tensorflow", "keras"}
SMALL_MODELS = ["lenet", "lstm-imdb", "sae:phase=pretrain1"]
CASES = [(fw, variant, model) for fw, info in FRAMEWORKS.items() for variant in info.variants[:1]
         for model in (SMALL_MODELS if fw in SMALL else MODELS)]
_cache: dict = {}


def results_for(framework: str, variant: str) -> dict:
    if installed_version(framework) is None:
        pytest.skip(f"{framework} is not installed")
    key = (framework, variant)
    if key not in _cache:
        models = SMALL_MODELS if framework in SMALL else MODELS
        _cache[key] = {r.model: r for r in verify(models=models, frameworks=[framework], variants=[variant])}
    return _cache[key]


@pytest.mark.parametrize(("framework", "variant", "model"), CASES)
def test_gate_passes(framework, variant, model):
    result = results_for(framework, variant)[model]
    if result.verdict == "unsupported":
        assert result.reason, "an unsupported model must say why"
        pytest.skip(f"{framework} cannot express {model}: {result.reason}")
    assert result.verdict == "pass", result.reason
    assert result.forward_error <= 1e-4
    if "gradient" in FRAMEWORKS[framework].scenarios:
        assert result.gradient_error <= 1e-3
    else:
        assert result.gradient_error is None and "forward only" in result.reason
