"""Hugging Face transformers as a framework (frameworks/transformers): its own classes, loaded from the Hugging
Face folder of dlbench's weights, pass the equivalence gate (forward, gradient, update) and the generation gate
(its DynamicCache steps and its own generate() loop); a converter with Q and K swapped fails both; models it
has no class for are unsupported with the reason; the folder is cached. Small model forms only."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import requires

pytestmark = [requires("transformers"), requires("torch")]


def _swap_qk(spec, weights, folder: Path):
    """The export with the first block's query and key weights swapped (a planted converter defect)."""
    from dlbench.frameworks.transformers.hf_model import save_folder
    from dlbench.models.weights import Weights

    params = dict(weights.params)
    wq = next(n for n in params if n.endswith(".attn.wq"))
    wk = wq[:-1] + "k"
    params[wq], params[wk] = params[wk], params[wq]
    return save_folder(spec, Weights(params, weights.state), folder)


def _backend(writer=None):
    from dlbench.frameworks import get_backend

    backend = get_backend("transformers")
    if writer is None:
        return backend

    class Planted(type(backend)):
        pass
    Planted.writer = staticmethod(writer)
    return Planted()


@pytest.mark.parametrize("model, variant", [("gpt2", "sdpa"), ("smollm2-135m", "sdpa"), ("bert-base", "sdpa"),
                                            ("vit-b16", "sdpa"), ("gpt2", "eager")])
def test_the_equivalence_gate_passes_transformers_own_classes(model, variant):
    from dlbench.gate.verify import verify_model

    res = verify_model(_backend(), model, variant)
    assert res.verdict == "pass", res.reason
    assert res.forward_error < 1e-5 and res.gradient_error < 1e-4 and res.update_error < 1e-4
    assert res.build["convert_cache"] == "off" and res.build["load_s"] > 0


def test_the_equivalence_gate_passes_bf16():
    from dlbench.gate.verify import verify_model

    res = verify_model(_backend(), "smollm2-135m", "sdpa", precision="bf16")
    assert res.verdict == "pass", res.reason
    assert res.dtypes == {"param_dtype": "bfloat16", "compute_dtype": "bfloat16"}


def test_q_and_k_swapped_by_the_converter_fail_the_equivalence_gate():
    from dlbench.gate.verify import verify_model

    res = verify_model(_backend(_swap_qk), "gpt2", "sdpa")
    assert res.verdict == "fail" and "forward error" in res.reason, res.reason


@pytest.mark.parametrize("model", ["gpt2", "smollm2-135m"])
def test_the_generation_gate_passes_generate_and_the_dynamic_cache(model):
    from dlbench.generation.gate import verify_generation

    res = verify_generation("transformers", model, "sdpa")
    assert res.verdict == "pass", res.reason
    assert res.cache_error < 1e-5 and res.logit_error < 1e-5
    assert not res.loop_mismatches and not res.loop_ties


def test_the_generation_gate_passes_the_compiled_forward_over_a_static_cache():
    from dlbench.generation.gate import verify_generation

    res = verify_generation("transformers", "smollm2-135m", "compile")
    assert res.verdict == "pass", res.reason
    assert res.cache_error < 1e-5 and not res.loop_mismatches


def test_q_and_k_swapped_by_the_converter_fail_the_generation_gate():
    from dlbench.frameworks.transformers.decoder import TransformersDecoder
    from dlbench.generation.gate import verify_generation

    class Planted(TransformersDecoder):
        writer = staticmethod(_swap_qk)

    res = verify_generation("transformers", "gpt2", "sdpa", decoder_cls=Planted)
    assert res.verdict == "fail" and "float64 reference" in res.reason, res.reason


def test_a_generate_loop_giving_other_tokens_than_its_steps_fails_the_generation_gate():
    """The timed loop (generate()) is checked on its own: prefill/step right, the loop's tokens wrong."""
    from dlbench.frameworks.transformers.decoder import TransformersDecoder
    from dlbench.generation.gate import verify_generation

    class WrongLoop(TransformersDecoder):
        def stream(self, prompt, new_tokens):
            for token in super().stream(prompt, new_tokens):
                yield (token + 1) % self.spec.input.vocab

    res = verify_generation("transformers", "gpt2", "sdpa", decoder_cls=WrongLoop)
    assert res.verdict == "fail" and "generation loop's (stream) token differs" in res.reason, res.reason
    assert res.cache_error < 1e-5 and not res.mismatches  # the steps themselves were right


def test_generate_streams_each_token_as_the_dynamic_cache_steps_decode_it():
    from dlbench.generation.decoder import greedy, make_decoder
    from dlbench.models import get_model
    from dlbench.models.weights import init_weights

    spec = get_model("smollm2-135m", small=True, seq_len=12).without_dropout()
    weights = init_weights(spec, 0)
    decoder = make_decoder("transformers", spec, weights, 2, 12, "fp32", "eager")
    prompt = np.random.default_rng(0).integers(0, spec.input.vocab, (2, 5)).astype(np.int64)
    streamed = greedy(decoder, prompt, 7)
    assert streamed.tokens.shape == (2, 7) and len(streamed.tpot_ns) == 6
    _, token = decoder.prefill(prompt)
    stepped = [decoder.host(token)]
    for _ in range(6):
        _, token = decoder.step(token)
        stepped.append(decoder.host(token))
    assert (np.stack(stepped, axis=1) == streamed.tokens).all()
    info = decoder.info()
    assert info["load_s"] > 0 and info["convert_s"] > 0 and info["attn_implementation"] == "eager"
    stopped = decoder.stream(prompt, 7)
    next(stopped)
    stopped.close()  # a consumer that stops early: generate() has finished when it returns
    import threading

    assert not any(t.name == "transformers-generate" for t in threading.enumerate())


def test_models_without_a_transformers_class_are_unsupported_with_the_reason():
    from dlbench.frameworks.base import UnsupportedError
    from dlbench.generation.decoder import make_decoder
    from dlbench.models import get_model
    from dlbench.models.weights import init_weights

    spec = get_model("lenet", small=True)
    with pytest.raises(UnsupportedError, match="no Hugging Face counterpart"):
        _backend().build(spec, init_weights(spec, 0))
    llama = get_model("smollm2-135m", small=True, seq_len=8)
    qwen2 = dataclasses.replace(llama, options={**llama.options, "family": "qwen2"})  # an hf: Qwen2 folder's spec
    with pytest.raises(UnsupportedError, match="is a qwen2 model; dlbench loads gpt2, bert, vit, llama"):
        make_decoder("transformers", qwen2, init_weights(qwen2, 0), 1, 8)
    gpt2 = get_model("gpt2", small=True, seq_len=8)
    with pytest.raises(UnsupportedError, match="not fp16"):
        make_decoder("transformers", gpt2, init_weights(gpt2, 0), 1, 8, "fp16")
    with pytest.raises(UnsupportedError, match="runs the sdpa, eager, compile variant"):
        make_decoder("transformers", gpt2, init_weights(gpt2, 0), 1, 8, "fp32", "xla")


def test_the_converted_folder_is_cached_by_the_weights(tmp_path, monkeypatch):
    from dlbench.frameworks.transformers.convert import convert
    from dlbench.models import get_model
    from dlbench.models.weights import Weights, init_weights

    monkeypatch.setenv("DLBENCH_EXPORT_CACHE", str(tmp_path))
    spec = get_model("gpt2", small=True, seq_len=8)
    weights = init_weights(spec, 0)
    first, again = convert(spec, weights), convert(spec, weights)
    assert (first.cache, again.cache) == ("miss", "hit") and first.folder == again.folder
    assert (first.folder / "model.safetensors").exists()
    other = Weights({k: v + 1 for k, v in weights.params.items()}, weights.state)
    assert convert(spec, other).folder != first.folder


def test_a_generate_cell_of_transformers_stores_its_conversion_load_and_first_ttft():
    """The measuring process of a generate cell: transformers' decoder reports the folder's conversion
    and from_pretrained's load, stored with the first generation's TTFT as the process's cold start."""
    from dlbench.core.cell import Cell
    from dlbench.core.job import CellJob
    from dlbench.scenarios.generate import Generate, GenerationSettings

    settings = dataclasses.asdict(GenerationSettings(prompt=4, new_tokens=3, runs=1))
    job = CellJob(threads=None, cell=Cell("transformers", "sdpa", "gpt2:seq_len=8:layers=1:dim=32:vocab=64:heads=4",
                                          "generate", 1, 1), seed=0, data_dir=None, protocol={"max_time_s": 60},
                  settings=settings, extra={"phase": "measure"})
    generate = Generate()
    out = generate.work(job, generate.settings_from(job))
    cold = out["cold_start"]
    assert cold["convert_s"] > 0 and cold["load_s"] > 0 and cold["cold_ttft_s"] > 0
    assert cold["build_s"] >= cold["convert_s"] + cold["load_s"] - 1e-3 and cold["convert_cache"] == "off"
    assert out["decoder"]["class"] == "GPT2LMHeadModel" and np.array(out["runs"][0]["tokens"]).shape == (1, 3)
