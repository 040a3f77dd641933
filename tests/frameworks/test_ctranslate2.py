"""CTranslate2 (frameworks/ctranslate2): conversion from a Hugging Face folder, its cache, the forward gate,
the generation gate over its own generate_tokens loop at batch 1 and 4, int8 quality on the shipped
checkpoint, planted conversion defects, and what it refuses."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import requires

pytestmark = [requires("ctranslate2"), requires("transformers"), requires("torch")]


@pytest.fixture(autouse=True, scope="module")
def converted_models(tmp_path_factory):
    """Converted models in a folder of the tests' own, never the user's cache."""
    old = os.environ.get("DLBENCH_CACHE_DIR")
    os.environ["DLBENCH_CACHE_DIR"] = str(tmp_path_factory.mktemp("ct2cache"))
    yield
    if old is None:
        os.environ.pop("DLBENCH_CACHE_DIR", None)
    else:
        os.environ["DLBENCH_CACHE_DIR"] = old


def _backend(precision="fp32"):
    from dlbench.frameworks import get_backend

    b = get_backend("ctranslate2")
    assert b.set_threads(1) == {"intra_threads": 1, "inter_threads": 1}
    b.set_precision(precision)
    return b


def _small(model, seq_len=13):
    from dlbench.models import get_model
    from dlbench.models.weights import init_weights

    spec = get_model(model, small=True, seq_len=seq_len).without_dropout()
    return spec, init_weights(spec, 0, mode="verify")


def _int8_here() -> bool:
    import ctranslate2

    return "int8" in ctranslate2.get_supported_compute_types("cpu")


def test_the_declaration_matches_the_backend_and_the_decoder():
    from dlbench.frameworks import FRAMEWORKS
    from dlbench.frameworks.ctranslate2 import DECLARATION
    from dlbench.frameworks.ctranslate2.backend import Backend_
    from dlbench.frameworks.ctranslate2.decoder import CTranslate2Decoder

    assert DECLARATION.closures == Backend_.closures == FRAMEWORKS["ctranslate2"].closures == ("forward",)
    assert DECLARATION.precisions == Backend_.precisions == CTranslate2Decoder.precisions
    assert DECLARATION.variants == CTranslate2Decoder.variants == FRAMEWORKS["ctranslate2"].variants


@pytest.mark.parametrize("model", ["smollm2-135m", "gpt2"])
@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_the_forward_gate_passes_with_the_types_ctranslate2_reports(model, precision):
    from dlbench.gate.verify import verify_model

    if precision == "int8" and not _int8_here():
        pytest.skip("no int8 compute type on this CPU")
    res = verify_model(_backend(precision), model, precision=precision)
    assert res.passed, res.reason
    assert res.framework_params == res.spec_params  # the tied LM head is one tensor in the converted model too
    assert res.dtypes == {"fp32": {"param_dtype": "float32", "compute_dtype": "float32"},
                          "int8": {"param_dtype": "int8", "compute_dtype": "int8"}}[precision]
    assert res.build["format"] == f"CTranslate2 {'float32' if precision == 'fp32' else 'int8'}"
    assert res.build["load_s"] > 0 and res.build["convert_s"] >= 0


@pytest.mark.parametrize("model", ["smollm2-135m", "gpt2"])
@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_the_generation_gate_passes_and_checks_ctranslate2s_own_loop(model, precision):
    from dlbench.generation.gate import verify_generation

    if precision == "int8" and not _int8_here():
        pytest.skip("no int8 compute type on this CPU")
    res = verify_generation("ctranslate2", model, precision=precision)
    assert res.passed, res.reason
    assert res.tokens_checked == 16 and res.logit_error < (1e-5 if precision == "fp32" else 5e-2)
    assert 0 < res.cache_error < 1e-5  # CTranslate2's cached steps against forward_batch's recomputation


def test_a_decoder_whose_cached_steps_lose_a_position_fails_the_cache_check():
    """The cache check compares CTranslate2's incremental decoding (generate_batch over the sequence so far)
    with forward_batch's recomputation: a decoder that fed its cache one position short fails it."""
    from dlbench.frameworks.ctranslate2.decoder import CTranslate2Decoder
    from dlbench.generation.gate import verify_generation

    class Short(CTranslate2Decoder):
        def _last(self):
            whole, self.seq = self.seq, self.seq[:, 1:]
            try:
                return super()._last()
            finally:
                self.seq = whole

    res = verify_generation("ctranslate2", "gpt2", decoder_cls=Short)
    assert res.verdict == "fail" and res.cache_error > 1e-2, res.reason


@pytest.mark.parametrize("batch", [1, 4])
def test_generate_tokens_streams_the_teacher_forced_greedy_tokens(batch):
    """The timed loop (generate_tokens, CTranslate2's own cache) gives, at batch 1 and 4, the tokens that
    recomputing the whole sequence (forward_batch) at every step gives; ids past the vocabulary's special
    tokens do not stop it (end_token=[])."""
    from dlbench.generation.decoder import greedy, make_decoder

    spec, weights = _small("smollm2-135m")
    decoder = make_decoder("ctranslate2", spec, weights, batch, 13)
    prompt = np.random.default_rng(7).integers(0, spec.input.vocab, (batch, 5))
    gen = greedy(decoder, prompt, 8)
    assert gen.tokens.shape == (batch, 8) and len(gen.tpot_ns) == 7
    _, token = decoder.prefill(prompt)
    forced = [token]
    for _ in range(7):
        _, token = decoder.step(token)
        forced.append(token)
    assert (np.stack(forced, axis=1) == gen.tokens).all()
    info = decoder.info()
    assert {"convert_s", "convert_cache", "load_s", "format", "compute_type", "ctranslate2",
            "cpu_compute_types"} <= set(info)
    again = make_decoder("ctranslate2", spec, weights, batch, 13).info()  # a second process's build
    assert again["convert_cache"] == "hit" and again["convert_s"] == 0.0 and again["load_s"] > 0


def test_a_converted_model_is_cached_by_weights_format_and_version(monkeypatch, tmp_path):
    import ctranslate2

    from dlbench.frameworks.ctranslate2.convert import RECORD, convert

    monkeypatch.setenv("DLBENCH_CACHE_DIR", str(tmp_path))
    spec, weights = _small("gpt2")
    first = convert(spec, weights, "fp32")
    again = convert(*_small("gpt2"), "fp32")  # the same model built again, as a second process builds it
    assert again.path == first.path and again.cache_hit and again.convert_s == 0.0
    assert again.first_convert_s == first.convert_s > 0 and again.parameters == first.parameters == spec.param_count
    assert json.loads((first.path / RECORD).read_text())["format"] == "float32"
    changed = weights.params | {"wte.weight": weights.params["wte.weight"] + 1}
    other = convert(spec, type(weights)(changed, weights.state), "fp32")
    assert other.path != first.path and not other.cache_hit
    assert first.path.parent == tmp_path / "ctranslate2" and first.path.name.endswith(f"ct2-{ctranslate2.__version__}")
    assert convert(spec, weights, "int8").path != first.path
    import dlbench.frameworks.ctranslate2.convert as module

    monkeypatch.setattr(module, "transformers_version", lambda: "0.0.0")  # another converter: no reuse
    assert not convert(spec, weights, "fp32").cache_hit


def test_a_damaged_cached_conversion_is_converted_again_not_loaded(monkeypatch, tmp_path):
    """A cached model.bin cut short, or a record that does not read back: the next build converts anew."""
    from dlbench.frameworks.ctranslate2.backend import load
    from dlbench.frameworks.ctranslate2.convert import RECORD, convert

    monkeypatch.setenv("DLBENCH_CACHE_DIR", str(tmp_path))
    spec, weights = _small("gpt2")
    first = convert(spec, weights, "fp32")
    with open(first.path / "model.bin", "r+b") as f:
        f.truncate(100)
    loaded = load(spec, weights, "fp32", "cpu", 1)
    assert not loaded.converted.cache_hit and loaded.converted.path == first.path
    assert loaded.generator.forward_batch([[1, 2, 3]]).shape == [1, 3, spec.input.vocab]
    (first.path / RECORD).write_text("{not json")
    assert not convert(spec, weights, "fp32").cache_hit and convert(spec, weights, "fp32").cache_hit


def _planted(monkeypatch, tmp_path, after_write=None, edit_weights=None):
    """A defect in the Hugging Face folder the converter reads (in a fresh cache: no clean conversion reused)."""
    import dlbench.frameworks.ctranslate2.convert as convert

    monkeypatch.setenv("DLBENCH_CACHE_DIR", str(tmp_path))
    original = convert.write_hf_folder

    def planted(spec, weights, folder: Path):
        original(spec, edit_weights(weights) if edit_weights else weights, folder)
        if after_write:
            after_write(folder)
    monkeypatch.setattr(convert, "write_hf_folder", planted)


def _rope_base_tenfold_low(monkeypatch, tmp_path):
    def rewrite(folder: Path):
        config = json.loads((folder / "config.json").read_text())
        config["rope_parameters"]["rope_theta"] /= 10
        (folder / "config.json").write_text(json.dumps(config))
    _planted(monkeypatch, tmp_path, after_write=rewrite)


def _swap_qk(monkeypatch, tmp_path):
    def swap(weights):
        params = dict(weights.params)
        for name in [n for n in params if n.endswith((".wq", ".bq"))]:
            other = name[:-1] + "k"
            params[name], params[other] = params[other], params[name]
        return type(weights)(params, weights.state)
    _planted(monkeypatch, tmp_path, edit_weights=swap)


@pytest.mark.parametrize("model, plant", [("smollm2-135m", _rope_base_tenfold_low), ("gpt2", _swap_qk)])
def test_a_planted_conversion_defect_fails_both_gates(monkeypatch, tmp_path, model, plant):
    """A RoPE base a tenth of the model's in the converted config (Llama), query and key weights swapped
    (GPT-2): the forward gate and the generation gate fail; the same models pass unplanted (above)."""
    from dlbench.gate.verify import verify_model
    from dlbench.generation.gate import verify_generation

    plant(monkeypatch, tmp_path)
    forward = verify_model(_backend(), model)
    assert forward.verdict == "fail" and "forward error" in forward.reason, forward.reason
    generation = verify_generation("ctranslate2", model)
    assert generation.verdict == "fail" and generation.logit_error > 1e-3, generation.reason


def test_int8_on_the_shipped_checkpoint_carries_its_quality_within_the_bound():
    from dlbench.gate import quality
    from dlbench.gate.verify import verify_model
    from dlbench.scenarios.checkpoint_recipe import SHIPPED

    if not _int8_here():
        pytest.skip("no int8 compute type on this CPU")
    res = verify_model(_backend("int8"), f"hf:{SHIPPED}", precision="int8")
    assert res.passed, res.reason
    fig, bound = res.quality, quality.BOUNDS["int8"]
    assert fig["held"] and fig["tokens"] > 5000 and res.checks["quality"]
    assert fig["kl"] <= bound.kl and fig["top1"] >= bound.top1 and 0 < fig["kl"]  # int8 moves it, within bound


def test_int8_weights_with_their_neighbours_scales_planted_in_the_folder_fail_the_quality_bound(
        monkeypatch, tmp_path):
    """tests/test_quality.py's defect (int8 weights dequantized with the neighbour channel's scale) planted
    in the folder CTranslate2 converts: on the shipped checkpoint the KL divergence passes int8's bound."""
    from dlbench.gate import quality
    from dlbench.gate.verify import verify_model
    from dlbench.scenarios.checkpoint_recipe import SHIPPED
    from tests.test_quality import _int8_wrong_scale

    if not _int8_here():
        pytest.skip("no int8 compute type on this CPU")
    _planted(monkeypatch, tmp_path, edit_weights=_int8_wrong_scale)
    res = verify_model(_backend("int8"), f"hf:{SHIPPED}", precision="int8")
    assert res.verdict == "fail" and "KL divergence" in res.reason, res.reason
    assert res.quality["kl"] > quality.BOUNDS["int8"].kl and not res.checks["quality"]


def test_an_int8_generate_run_of_the_shipped_checkpoint_stores_quality_beside_its_speed(tmp_path):
    """End to end: a generate cell's equivalence gate (the backend's forward) measures the quality, stored
    with the cell beside its tokens/s, and the decoder's format and cold start with it."""
    from dlbench import api
    from dlbench.gate import quality
    from dlbench.scenarios.checkpoint_recipe import SHIPPED

    if not _int8_here():
        pytest.skip("no int8 compute type on this CPU")
    res = api.run(models=[f"hf:{SHIPPED}"], frameworks=["ctranslate2"], scenarios=["generate"], threads=[1],
                  batches=[1], precisions=["int8"], protocol={"repeats": 1}, db=tmp_path / "r.db",
                  generation={"prompt": 8, "new_tokens": 4, "runs": 1})
    (cell,) = res.cells
    assert cell.cell.status == "ok", cell.cell.reason
    assert 0 < cell.cell.metrics["quality"]["kl"] <= quality.BOUNDS["int8"].kl
    decoder = cell.cell.metrics["generation"]["decoder"]
    assert decoder["format"] == "CTranslate2 int8" and decoder["load_s"] > 0 and decoder["convert_cache"]


def test_what_ctranslate2_refuses_is_unsupported_with_the_reason():
    import ctranslate2

    from dlbench.gate.verify import verify_model
    from dlbench.generation.decoder import make_decoder
    from dlbench.generation.gate import verify_generation

    assert verify_model(_backend(), "lenet").verdict == "unsupported"
    assert "decoder-only" in verify_model(_backend(), "lenet").reason
    bert = verify_model(_backend(), "bert-base")
    assert bert.verdict == "unsupported" and "bert" in bert.reason
    from dataclasses import replace

    from dlbench.frameworks.base import UnsupportedError
    from dlbench.frameworks.ctranslate2.backend import check_model

    spec, weights = _small("smollm2-135m")
    with pytest.raises(UnsupportedError, match="writes and converts gpt2, llama language models; .* is qwen2"):
        check_model(replace(spec, options={**spec.options, "family": "qwen2"}))
    spec, weights = _small("gpt2")

    with pytest.raises(UnsupportedError, match="decoder builds at fp32, int8, bf16 only, not fp16"):
        make_decoder("ctranslate2", spec, weights, 1, 13, "fp16")
    if "bfloat16" not in ctranslate2.get_supported_compute_types("cpu"):
        res = verify_generation("ctranslate2", "gpt2", precision="bf16")
        assert res.verdict == "unsupported" and "get_supported_compute_types('cpu')" in res.reason
