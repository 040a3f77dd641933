"""OpenVINO GenAI: the stateful IR its LLMPipeline runs, converted by openvino.convert_model from the Hugging Face
folder dlbench writes, passes both gates (the pipeline's own streamed tokens against the reference's, logits
from the same IR before it was made stateful), NNCF's int4 carries its quality figures within its bound, a
Q/K swap planted in the folder fails both gates, and the pipeline's one-sequence streamer refuses batch 4 in
its words. Converted models are cached in a folder of the module's."""

from __future__ import annotations

import numpy as np
import pytest

from dlbench.frameworks import UnsupportedError, get_backend
from dlbench.generation.decoder import make_decoder
from dlbench.generation.gate import verify_generation
from dlbench.models import get_model
from dlbench.models.weights import init_weights
from tests.conftest import over_budget, requires
from tests.frameworks.test_onnxruntime_genai import GENESIS, swap_q_k

pytestmark = [requires("openvino_genai"), requires("openvino_tokenizers"), requires("nncf"), requires("transformers"),
              requires("torch")]


@pytest.fixture(autouse=True, scope="module")
def converted_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DLBENCH_CACHE_DIR", str(tmp_path_factory.mktemp("converted")))
        yield


#: GPT-2's generation gate is the nightly set's (DLBENCH_SLOW_TESTS=1): in CI its folder passes the forward
#: gate through the same conversion (tests/frameworks/test_equivalence.py), and SmolLM2's generation here takes the
#: pipeline's decoding
@pytest.mark.parametrize("model", ["smollm2-135m", pytest.param("gpt2", marks=over_budget)])
def test_fp32_passes_the_generation_gate_with_the_pipelines_own_tokens_checked(model):
    res = verify_generation("openvino-genai", model)
    assert res.passed, res.reason
    assert res.shape["batch"] == 1 and res.logit_error < 1e-5
    assert res.loop_tokens_checked == 8 and not res.loop_mismatches


def test_a_q_k_swap_in_the_folder_fails_both_gates():
    from dlbench.frameworks.openvino_genai.backend import Backend_
    from dlbench.frameworks.openvino_genai.decoder import OpenVINOGenAIDecoder
    from dlbench.gate.verify import verify_model

    class Swapped(OpenVINOGenAIDecoder):
        tamper = staticmethod(swap_q_k)

    res = verify_generation("openvino-genai", "smollm2-135m", decoder_cls=Swapped)
    assert res.verdict == "fail" and "differ from the float64 reference" in res.reason, res.reason

    class SwappedBackend(Backend_):
        tamper = staticmethod(swap_q_k)

    forward = verify_model(SwappedBackend(), "smollm2-135m")
    assert forward.verdict == "fail" and forward.forward_error > 1e-2, forward.reason


def test_int4_holds_4_bit_weights_and_passes_its_quality_bound_on_the_trained_checkpoint():
    from dlbench.gate.quality import BOUNDS
    from dlbench.gate.verify import verify_model

    res = verify_model(get_backend("openvino-genai"), GENESIS, precision="int4")
    assert res.passed, res.reason
    assert res.dtypes["param_dtype"] == "int4" and res.build["weight_elements"]["i4"] > 0
    assert res.quality["held"] and 0 < res.quality["kl"] <= BOUNDS["int4"].kl
    assert res.build["convert_s"] >= 0 and res.build["compile_s"] > 0


def test_batch_4_is_refused_in_the_pipelines_words_and_batch_1_streams_int8():
    spec = get_model("smollm2-135m", small=True, seq_len=8)
    weights = init_weights(spec, 0)
    with pytest.raises(UnsupportedError, match="input_ids.size\\(\\) == 1"):
        make_decoder("openvino-genai", spec, weights, 4, 8)
    decoder = make_decoder("openvino-genai", spec, weights, 1, 8, "int8")
    tokens = np.stack(list(decoder.stream(np.array([[1, 2, 3]]), 5)), axis=1)
    assert tokens.shape == (1, 5)
    info = decoder.info()
    assert info["weight_elements"].get("u8", 0) > 0 and info["load_s"] > 0 and info["convert_cache"] in ("hit", "miss")


def test_int4_compresses_the_gates_small_form_whose_channels_32_does_not_divide():
    """The small Llama's width is 48: NNCF refused groups of 32 (InvalidGroupSizeError) until its ADJUST fallback."""
    res = verify_generation("openvino-genai", "smollm2-135m", precision="int4")
    assert res.passed, res.reason
    assert 0 < res.logit_error <= 0.3 and not res.loop_mismatches
