"""The trained checkpoint dlbench ships (src/dlbench/data/checkpoints/genesis-llama) and its recipe
(dlbench.scenarios.checkpoint_recipe, scripts/make_trained_checkpoint.py): the recipe still runs (a few
steps here; the shipped weights are not regenerated in CI) and the shipped folder is what its record says."""

from __future__ import annotations

import json
import tomllib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from dlbench.models import get_model
from dlbench.models.weights import init_weights
from dlbench.scenarios.checkpoint_recipe import MODEL, RECIPE, SHIPPED, splits, train_checkpoint
from tests.conftest import requires


def _few_windows():
    train, test = splits()
    seq = get_model(MODEL).input.shape[0]
    return replace(train, x=train.x[:3 * RECIPE["batch"] * seq + 1]), replace(test, x=test.x[:8 * seq + 1])


@requires("transformers")
def test_the_recipe_retrains_a_few_steps_deterministically(tmp_path):
    train, test = _few_windows()
    recipe = {**RECIPE, "epochs": 1}
    first = train_checkpoint(tmp_path / "a", recipe, train, test)
    train_checkpoint(tmp_path / "b", recipe, train, test)
    assert {"config.json", "model.safetensors"} <= set(first["files"])
    losses = first["curves"]["step_losses"]
    assert len(losses) >= 2 and all(np.isfinite(losses)) and losses[1] < losses[0]
    assert json.loads((tmp_path / "a" / "training.json").read_text())["recipe"] == recipe
    # the folder reads back with hf:DIR as the model the recipe names, and the same seed gives the same bytes
    spec = get_model(f"hf:{tmp_path / 'a'}")
    assert spec.param_shapes() == get_model(MODEL).param_shapes()
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == (tmp_path / "b" / "model.safetensors").read_bytes()
    assert not np.array_equal(init_weights(spec).params["embed.weight"],
                              init_weights(get_model(MODEL), RECIPE["seed"]).params["embed.weight"])


def test_the_shipped_checkpoint_is_what_its_record_says():
    record = json.loads((SHIPPED / "training.json").read_text())
    assert record["recipe"] == RECIPE
    epochs = record["curves"]["epochs"]
    assert len(epochs) == RECIPE["epochs"] and epochs[-1]["test_loss"] < epochs[0]["test_loss"]
    assert epochs[-1]["test_acc"] > 0.4  # next-byte accuracy on the held-out split (uniform: 1/256)
    spec = get_model(f"hf:{SHIPPED}")
    assert spec.param_shapes() == get_model(MODEL).param_shapes()
    assert spec.input.shape == (64,)  # its config's context: 64 positions, the windows it was trained on
    assert (SHIPPED / "README.md").is_file()
    assert sum(p.stat().st_size for p in SHIPPED.iterdir()) < 4 * 2**20


def test_the_shipped_checkpoint_is_package_data():
    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["dlbench"]
    shipped = [p.relative_to(SHIPPED.parents[2]).as_posix() for p in SHIPPED.iterdir()]
    for name in shipped:
        assert any(Path(name).match(pattern) for pattern in patterns), name


@requires("torch")
def test_the_shipped_checkpoint_passes_the_torch_gate_with_its_quality_figures():
    from dlbench.frameworks.torch.backend import TorchBackend
    from dlbench.gate.verify import verify_model

    res = verify_model(TorchBackend(), f"hf:{SHIPPED}", precision="fp32")
    assert res.verdict == "pass", res.reason
    q = res.quality
    assert q["held"] and q["data"] == "genesis/test" and q["kl"] < 1e-6 and q["top1"] > 0.999
    assert q["reference_perplexity"] < 64 and q["perplexity"] == pytest.approx(q["reference_perplexity"], rel=1e-5)
