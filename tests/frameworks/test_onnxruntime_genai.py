"""ONNX Runtime GenAI: its model builder's graph of the Hugging Face folder dlbench writes passes both gates
(forward, and generation with the runtime's own Generator loop timed), int4 carries its quality figures
within its bound, a Q/K swap planted in the folder fails both gates, and what the builder cannot take is
unsupported in its own words. Converted models are cached in a folder of the module's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dlbench.frameworks import UnsupportedError, get_backend
from dlbench.generation.decoder import make_decoder
from dlbench.generation.gate import verify_generation
from dlbench.models import get_model
from dlbench.models.weights import init_weights
from tests.conftest import requires

pytestmark = [requires("onnxruntime_genai"), requires("transformers"), requires("torch")]

GENESIS = f"hf:{Path(__file__).parents[2] / 'src/dlbench/data/checkpoints/genesis-llama'}"


@pytest.fixture(autouse=True, scope="module")
def converted_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DLBENCH_CACHE_DIR", str(tmp_path_factory.mktemp("converted")))
        yield


def swap_q_k(folder: Path) -> None:
    """The planted defect: layer 0's query and key projections swapped (the key's rows with the query's first)."""
    from safetensors.numpy import load_file, save_file

    tensors = load_file(str(folder / "model.safetensors"))
    q, k = (tensors[f"model.layers.0.self_attn.{p}_proj.weight"].copy() for p in "qk")
    q[:len(k)], k = k, q[:len(k)].copy()
    tensors["model.layers.0.self_attn.q_proj.weight"], tensors["model.layers.0.self_attn.k_proj.weight"] = q, k
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})


def test_fp32_passes_the_generation_gate_with_its_own_loop_checked():
    res = verify_generation("onnxruntime-genai", "smollm2-135m")
    assert res.passed, res.reason
    assert res.cache_error < 1e-5 and res.logit_error < 1e-5
    assert res.tokens_checked == 16 and res.loop_tokens_checked == 16 and not res.loop_mismatches


def test_a_q_k_swap_in_the_folder_fails_both_gates():
    from dlbench.frameworks.onnxruntime_genai.backend import Backend_
    from dlbench.frameworks.onnxruntime_genai.decoder import OrtGenAIDecoder
    from dlbench.gate.verify import verify_model

    class Swapped(OrtGenAIDecoder):
        tamper = staticmethod(swap_q_k)

    res = verify_generation("onnxruntime-genai", "smollm2-135m", decoder_cls=Swapped)
    assert res.verdict == "fail" and "differ from the float64 reference" in res.reason, res.reason

    class SwappedBackend(Backend_):
        tamper = staticmethod(swap_q_k)

    forward = verify_model(SwappedBackend(), "smollm2-135m")
    assert forward.verdict == "fail" and forward.forward_error > 1e-2, forward.reason
    assert verify_model(get_backend("onnxruntime-genai"), "smollm2-135m").passed


def test_int4_holds_4_bit_weights_and_passes_its_quality_bound_on_the_trained_checkpoint():
    from dlbench.gate.quality import BOUNDS
    from dlbench.gate.verify import verify_model

    res = verify_model(get_backend("onnxruntime-genai"), GENESIS, precision="int4")
    assert res.passed, res.reason
    assert res.dtypes == {"param_dtype": "int4", "compute_dtype": "int8"}
    assert res.quality["held"] and 0 < res.quality["kl"] <= BOUNDS["int4"].kl
    assert res.build["graph"]["matmul_nbits"] > 0 and res.build["convert_s"] >= 0 and res.build["load_s"] > 0


def test_make_decoder_takes_the_precisions_the_decoder_declares():
    spec = get_model("smollm2-135m", small=True, seq_len=8, head_dim=16, hidden=96)
    weights = init_weights(spec, 0)
    decoder = make_decoder("onnxruntime-genai", spec, weights, 1, 8, "int4")
    assert decoder.info()["graph"]["param_dtype"] == "int4"
    with pytest.raises(UnsupportedError, match="builds at fp32, int4 only, not bf16"):
        make_decoder("onnxruntime-genai", spec, weights, 1, 8, "bf16")
    with pytest.raises(UnsupportedError, match="builds at fp32, bf16 only, not int4"):
        make_decoder("torch", spec, weights, 1, 8, "int4")


def test_a_second_decoder_of_the_same_weights_converts_nothing_and_says_so():
    spec = get_model("smollm2-135m", small=True, seq_len=8, head_dim=16, hidden=96)
    weights = init_weights(spec, 3)
    first = make_decoder("onnxruntime-genai", spec, weights, 1, 8).info()
    second = make_decoder("onnxruntime-genai", spec, weights, 4, 8).info()
    assert first["convert_cache"] == "miss" and first["convert_s"] > 0
    assert second["convert_cache"] == "hit" and second["convert_s"] == 0 and second["converted"] == first["converted"]
    assert json.loads((Path(first["converted"]) / "done").read_text())["format"] == "fp32"


def test_the_decoder_streams_batch_4_from_the_runtimes_own_loop():
    spec = get_model("smollm2-135m", small=True, seq_len=10, head_dim=16, hidden=96)
    weights = init_weights(spec, 0)
    decoder = make_decoder("onnxruntime-genai", spec, weights, 4, 10)
    prompt = np.random.default_rng(0).integers(0, 64, (4, 4))
    tokens = np.stack(list(decoder.stream(prompt, 6)), axis=1)
    _, first = decoder.prefill(prompt)
    assert tokens.shape == (4, 6) and (tokens[:, 0] == first).all()


@pytest.mark.parametrize("model, needle", [
    ("gpt2", "model builder: The HF_DIR model is not currently supported. \\(architecture GPT2LMHeadModel\\)"),
    ("smollm2-135m:head_dim=8:hidden=96", "head_size shall be a multiple of 16"),
    ("smollm2-135m:head_dim=16:hidden=64", "for the LM head \\(Model.has_lm_head\\)")])
def test_what_the_builder_cannot_take_is_unsupported_in_its_own_words(model, needle):
    res = verify_generation("onnxruntime-genai", model)
    assert res.verdict == "unsupported" and res.reason, res.reason
    import re

    assert re.search(needle, res.reason), res.reason
