"""ONNX Runtime's ``fused`` variant: the transformer optimizer's fusions are applied, recorded, and gated."""

import pytest

from dlbench.gate.verify import verify_model
from tests.conftest import requires

pytestmark = [requires("onnxruntime"), requires("torch")]


@pytest.fixture(scope="module")
def backend():
    from dlbench.frameworks.onnxruntime.backend import OnnxRuntimeBackend

    return OnnxRuntimeBackend()


def test_fused_bert_passes_the_gate_with_its_fusions_recorded(backend):
    result = verify_model(backend, "bert-base", "fused")
    assert result.verdict == "pass", result.reason
    fusions = result.build["fusions"]
    assert fusions["model_type"] == "bert"
    assert fusions["fused"].get("SkipLayerNormalization", 0) >= 1  # residual add + LayerNorm as one kernel
    assert result.checks["padding_mask"]


def test_the_fused_variant_is_for_transformers_only(backend):
    result = verify_model(backend, "lenet", "fused")
    assert result.verdict == "unsupported"
    assert "no attention" in result.reason


def test_a_fusion_that_changes_the_function_is_kept_off_and_recorded(backend):
    """ONNX Runtime's GELU fusion turned GPT-2's tanh GELU into the erf one (BiasGelu): with it the fused
    graph failed the gate with forward error 1.4e-4."""
    result = verify_model(backend, "gpt2", "fused")
    assert result.verdict == "pass", result.reason
    assert "BiasGelu" not in result.build["fusions"]["fused"]
    assert "Gelu, BiasGelu" in result.build["fusions"]["skipped"]
    assert result.forward_error < 1e-5
