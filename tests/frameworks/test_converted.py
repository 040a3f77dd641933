"""Converted models' cache (frameworks/transformers/converted.py): one conversion per model, format and version, however many
processes ask at once; a failed conversion leaves nothing behind; a planted change is cached apart."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from dlbench.frameworks.transformers import converted
from dlbench.models import get_model
from dlbench.models.weights import init_weights
from tests.conftest import requires

pytestmark = [requires("transformers"), requires("torch"), requires("tokenizers")]


@pytest.fixture
def small(monkeypatch, tmp_path):
    monkeypatch.setenv("DLBENCH_CACHE_DIR", str(tmp_path))
    spec = get_model("smollm2-135m", small=True, seq_len=8)
    return spec, init_weights(spec, 0)


def test_concurrent_requests_convert_once_and_all_read_the_result(small):
    spec, weights = small
    calls = []

    def run(hf: Path, out: Path) -> None:
        calls.append(hf)
        time.sleep(0.5)
        out.mkdir()
        (out / "model").write_text((hf / "config.json").read_text())

    results = []
    threads = [threading.Thread(target=lambda: results.append(converted.convert(spec, weights, "rt", "f", "1", run)))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len({r.path for r in results}) == 1
    assert sorted(r.cache_hit for r in results) == [False, True, True]
    assert (results[0].path / "model").exists() and (results[0].path / "done").exists()


def test_a_failed_conversion_leaves_nothing_and_a_planted_change_is_cached_apart(small):
    spec, weights = small

    def fails(hf: Path, out: Path) -> None:
        raise RuntimeError("converter broke")

    with pytest.raises(RuntimeError, match="converter broke"):
        converted.convert(spec, weights, "rt", "f", "1", fails)
    assert [p.name for p in (converted.root() / "rt").iterdir() if not p.name.endswith(".lock")] == []

    def ok(hf: Path, out: Path) -> None:
        out.mkdir()

    def swap(folder: Path) -> None:
        pass

    clean = converted.convert(spec, weights, "rt", "f", "1", ok)
    planted = converted.convert(spec, weights, "rt", "f", "1", ok, tamper=swap)
    assert clean.path != planted.path and planted.path.name.endswith("-swap")


def test_a_model_with_no_hugging_face_counterpart_is_unsupported_not_an_error(tmp_path, monkeypatch):
    """LeNet (no Hugging Face class) through a GenAI runtime's conversion: unsupported with the reason, not a
    ValueError the gate would store as an error (the equivalence gate's whole zoo found it)."""
    from dlbench.frameworks.base import UnsupportedError

    monkeypatch.setenv("DLBENCH_CACHE_DIR", str(tmp_path))
    spec = get_model("lenet", small=True)
    with pytest.raises(UnsupportedError, match="onnxruntime-genai: lenet has no Hugging Face counterpart"):
        converted.convert(spec, init_weights(spec, 0), "onnxruntime-genai", "fp32", "0", lambda src, out: None)


def test_a_runtimes_family_check_refuses_a_model_with_no_hugging_face_family():
    """Both GenAI runtimes ask the family before converting (``dlbench verify --model lenet`` stored a
    ValueError as FAIL for them)."""
    from dlbench.frameworks.base import UnsupportedError

    assert converted.family(get_model("smollm2-135m", small=True), "openvino-genai") == "llama"
    with pytest.raises(UnsupportedError, match="openvino-genai: lenet has no Hugging Face counterpart"):
        converted.family(get_model("lenet", small=True), "openvino-genai")
