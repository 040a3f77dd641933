"""The GGUF writer (frameworks/llamacpp/convert.py): NumPy and the ``gguf`` package only, so it runs in the
main Python. Names, layouts and metadata as llama.cpp's convert_hf_to_gguf.py writes them; the RoPE
permutation's meaning; the block formats; the cache."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("gguf")

from dlbench.frameworks.base import UnsupportedError  # noqa: E402
from dlbench.frameworks.llamacpp import convert  # noqa: E402
from dlbench.models import get_model  # noqa: E402
from dlbench.models.weights import init_weights  # noqa: E402

GENESIS = "hf:src/dlbench/data/checkpoints/genesis-llama"


def _written(tmp_path, model: str, precision: str = "fp32"):
    spec = get_model(model, small=True)
    weights = init_weights(spec, 0, mode="verify")
    path = tmp_path / f"{precision}.gguf"
    convert.write(spec, weights.params, precision, path, convert.hparams(spec))
    meta, arrays, types = convert.read(path)
    return spec, weights.params, meta, arrays, types


def _rope_half(x: np.ndarray, pos: int, base: float) -> np.ndarray:
    """Hugging Face's rotate-half RoPE of one head's vector (dlbench's reference does the same)."""
    half = x.shape[0] // 2
    angle = pos * base ** (-np.arange(half) * 2 / x.shape[0])
    a, b = x[:half], x[half:]
    return np.concatenate([a * np.cos(angle) - b * np.sin(angle), b * np.cos(angle) + a * np.sin(angle)])


def _rope_pairs(x: np.ndarray, pos: int, base: float) -> np.ndarray:
    """llama.cpp's ``llama`` architecture's RoPE (LLAMA_ROPE_TYPE_NORM): adjacent pairs rotated."""
    angle = pos * base ** (-np.arange(x.shape[0] // 2) * 2 / x.shape[0])
    a, b = x[0::2], x[1::2]
    out = np.empty_like(x)
    out[0::2], out[1::2] = a * np.cos(angle) - b * np.sin(angle), b * np.cos(angle) + a * np.sin(angle)
    return out


def test_a_llama_gguf_has_the_converters_names_metadata_and_permuted_queries(tmp_path):
    spec, params, meta, arrays, types = _written(tmp_path, GENESIS)
    assert meta["general.architecture"] == "llama" and meta["tokenizer.ggml.model"] == "none"
    assert meta["llama.rope.freq_base"] == pytest.approx(100000.0) and meta["llama.attention.head_count_kv"] == 2
    assert meta["llama.vocab_size"] == 256 and meta["llama.block_count"] == 2 and meta["general.file_type"] == 0
    per_block = {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"}
    assert set(arrays) == {"token_embd.weight", "output_norm.weight"} | {
        f"blk.{i}.{t}.weight" for i in range(2) for t in per_block}  # tied: no output.weight
    assert set(types.values()) == {"F32"}
    np.testing.assert_array_equal(arrays["token_embd.weight"], params["embed.weight"])
    np.testing.assert_array_equal(arrays["blk.1.ffn_gate.weight"], params["l1.mlp.w_gate"].T)
    np.testing.assert_array_equal(arrays["blk.0.attn_v.weight"], params["l0.attn.wv"].T)
    # the attention scores llama.cpp computes from the permuted rows (its pairs rotated) are Hugging Face's
    # (its halves rotated) for every query head and the key head it reads, at any two positions
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(128), rng.standard_normal(128)
    q_hf, k_hf = params["l0.attn.wq"].T @ x, params["l0.attn.wk"].T @ y
    q_gg, k_gg = arrays["blk.0.attn_q.weight"] @ x, arrays["blk.0.attn_k.weight"] @ y
    assert not np.allclose(q_hf, q_gg)  # permuted
    for h in range(4):
        q, k = slice(h * 32, (h + 1) * 32), slice(h // 2 * 32, (h // 2 + 1) * 32)
        ours = _rope_pairs(q_gg[q], 7, 1e5) @ _rope_pairs(k_gg[k], 3, 1e5)
        assert ours == pytest.approx(_rope_half(q_hf[q], 7, 1e5) @ _rope_half(k_hf[k], 3, 1e5), rel=1e-4, abs=1e-5)


def test_a_gpt2_gguf_stacks_qkv_and_transposes_conv1d(tmp_path):
    spec, params, meta, arrays, _ = _written(tmp_path, "gpt2")
    assert meta["general.architecture"] == "gpt2" and meta["gpt2.context_length"] == 16
    assert meta["gpt2.attention.layer_norm_epsilon"] == pytest.approx(1e-5) and meta["gpt2.feed_forward_length"] == 128
    np.testing.assert_array_equal(arrays["blk.0.attn_qkv.weight"],
                                  np.concatenate([params[f"h0.attn.w{x}"] for x in "qkv"], axis=1).T)
    np.testing.assert_array_equal(arrays["blk.0.attn_qkv.bias"],
                                  np.concatenate([params[f"h0.attn.b{x}"] for x in "qkv"]))
    np.testing.assert_array_equal(arrays["blk.1.ffn_up.weight"], params["h1.mlp.fc.weight"].T)
    np.testing.assert_array_equal(arrays["position_embd.weight"], params["wpe.weight"])
    assert "output.weight" not in arrays and "output_norm.bias" in arrays


@pytest.mark.parametrize("precision, qtype, step", [("fp16", "F16", 1e-3), ("bf16", "BF16", 8e-3),
                                                     ("q8_0", "Q8_0", 1 / 127), ("q4_0", "Q4_0", 1 / 8)])
def test_each_format_holds_every_matrix_in_its_type_and_norms_in_f32(tmp_path, precision, qtype, step):
    _, params, meta, arrays, types = _written(tmp_path, GENESIS, precision)
    assert meta["general.file_type"] == int(convert.FILE_TYPES[precision])
    assert {n for n, t in types.items() if t == "F32"} == {n for n in arrays if n.endswith("norm.weight")}
    assert {t for n, t in types.items() if not n.endswith("norm.weight")} == {qtype}
    want, got = params["l0.mlp.w_down"].T, arrays["blk.0.ffn_down.weight"]
    block_max = np.abs(want).reshape(want.shape[0], -1, 32).max(axis=-1, keepdims=True)
    err = np.abs(got - want).reshape(want.shape[0], -1, 32) / block_max
    assert 0 < err.max() <= step  # rounded, to within one step of its block's largest weight


def test_a_row_no_block_divides_is_unsupported_naming_the_block():
    spec = get_model("smollm2-135m", small=True)  # width 48
    with pytest.raises(UnsupportedError, match="Q8_0.*a block holds 32 values along a row of 48"):
        convert.write(spec, init_weights(spec, 0).params, "q8_0", "/nonexistent/x.gguf", convert.hparams(spec))


def test_other_families_are_unsupported():
    with pytest.raises(UnsupportedError, match="bert"):
        convert.hparams(get_model("bert-base", small=True))
    with pytest.raises(UnsupportedError, match="llama.cpp"):
        convert.hparams(get_model("lenet", small=True))


def test_conversions_are_cached_by_weights_format_and_metadata(tmp_path, monkeypatch):
    spec = get_model("gpt2", small=True)
    weights, meta = init_weights(spec, 0), convert.hparams(spec)
    off = convert.converted(spec, weights, "fp16", meta, "0.0")
    assert off.cache == "off" and off.path.is_file()
    monkeypatch.setenv("DLBENCH_CACHE_DIR", str(tmp_path))
    first = convert.converted(spec, weights, "fp16", meta, "0.0")
    again = convert.converted(spec, weights, "fp16", meta, "0.0")
    assert (first.cache, again.cache) == ("miss", "hit") and again.path == first.path
    assert again.path.parent == tmp_path / "gguf" and again.info()["tensor_types"] == {"F16": 10, "F32": 18}
    others = [convert.converted(spec, weights, "fp32", meta, "0.0"),
              convert.converted(spec, init_weights(spec, 1), "fp16", meta, "0.0"),
              convert.converted(spec, weights, "fp16", {**meta, "context_length": 8}, "0.0"),
              convert.converted(spec, weights, "fp16", meta, "0.1")]
    assert all(o.cache == "miss" for o in others) and len({o.path for o in [first, *others]}) == 5


def test_a_conversion_that_fails_leaves_nothing_in_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DLBENCH_CACHE_DIR", str(tmp_path))
    spec = get_model("smollm2-135m", small=True)  # width 48: no Q8_0 block divides it
    with pytest.raises(UnsupportedError):
        convert.converted(spec, init_weights(spec, 0), "q8_0", convert.hparams(spec), "0.0")
    assert list((tmp_path / "gguf").iterdir()) == []
