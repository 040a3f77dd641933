import pytest

from dlbench.core.errors import UsageError
from dlbench.planning.plan import BUILTIN, expand, load_suite, resolve_threads, suite_from_dict


def test_builtin_suites_load():
    for name in BUILTIN:
        assert load_suite(name).models


def test_threads_scaled_to_cores():
    assert resolve_threads([1, 2, 4, 8, 16, 32], cores=2) == [1, 2]
    assert resolve_threads([1, "all", "half"], cores=8) == [1, 8, 4]


def test_expand_cross_product_and_exclusions():
    suite = suite_from_dict({"models": ["lenet", "sae"], "scenarios": ["forward", "gradient"], "batch_sizes": [8, 16],
                             "threads": [1], "exclude": [{"model": "sae", "scenario": "gradient"}]})
    cells = expand(suite, ["torch"], lambda fw, req: ["eager"], lambda m, s, d: 64, cores=2)
    assert len(cells) == 2 * 2 * 2 - 2
    assert not any(c.model == "sae" and c.scenario == "gradient" for c in cells)


def test_default_batch_and_mapping():
    suite = suite_from_dict({"models": ["lenet", "sae"], "batch_sizes": {"lenet": [32], "default": ["default"]},
                             "scenarios": ["forward"], "threads": [1]})
    cells = expand(suite, ["torch"], lambda fw, req: ["eager"], lambda m, s, d: 99, cores=2)
    assert {(c.model, c.batch) for c in cells} == {("lenet", 32), ("sae", 99)}


def test_malformed_yaml(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("models: [lenet\nscenarios: forward")
    with pytest.raises(UsageError, match="malformed YAML"):
        load_suite(str(p))


@pytest.mark.parametrize("data, match", [
    ({"models": ["lenet"], "scenarios": ["dance"]}, "scenarios"),
    ({"models": ["lenet"], "threads": [0]}, "threads"),
    ({"models": ["lenet"], "batch_sizes": [-4]}, "batch_sizes"),
    ({"models": ["lenet"], "colour": "red"}, "colour"),
    ({"scenarios": ["forward"]}, "models"),
])
def test_invalid_suites(data, match):
    with pytest.raises(UsageError, match=match):
        suite_from_dict(data)


def test_missing_suite_file():
    with pytest.raises(UsageError, match="no suite named"):
        load_suite("/nonexistent/suite.yaml")


def test_quick_suite_leaves_keras_h2o_and_ctranslate2_out_unless_named(monkeypatch):
    """`installed_except` drops an installed framework from `frameworks: installed` only. H2O, which
    can run nothing of the quick suite (multilayer perceptrons only), joined it with 24 unsupported cells;
    CTranslate2 (language models only) would have too."""
    from dlbench.planning import flags, resolve

    monkeypatch.setattr(resolve, "installed", lambda: ["torch", "keras", "jax", "mxnet", "h2o", "ctranslate2",
                                                      "transformers"])
    monkeypatch.setattr(resolve, "check_frameworks", lambda names: None)
    assert resolve.suite_frameworks(flags.build_suite("quick")) == ["torch", "jax", "mxnet"]  # none builds LeNet
    assert resolve.suite_frameworks(flags.build_suite("quick", frameworks=["transformers"])) == ["transformers"]
    assert resolve.suite_frameworks(flags.build_suite("quick", frameworks=["keras"])) == ["keras"]
    assert resolve.suite_frameworks(flags.build_suite("quick", frameworks=["h2o"])) == ["h2o"]
    assert resolve.suite_frameworks(flags.build_suite("quick", frameworks=["ctranslate2"])) == ["ctranslate2"]


def test_convergence_from_flags_runs_on_all_cores_once_unless_threads_are_given():
    from dlbench.planning.flags import build_suite

    assert build_suite(models=["lenet"], scenarios=["convergence"]).threads == ["all"]
    assert build_suite(models=["lenet"], scenarios=["convergence"], threads=[1, 2]).threads == [1, 2]
    assert build_suite(models=["lenet"], scenarios=["forward"]).threads == [1, "all"]


def test_installed_among_keeps_only_the_installed_frameworks_a_suite_compares(monkeypatch, tmp_path):
    """``installed_among`` (the llm-perf suite's runtimes): of the installed frameworks only those it lists;
    an unknown name is refused (a typo would otherwise drop a runtime from the comparison unseen)."""
    from dlbench.planning import flags, resolve

    monkeypatch.setattr(resolve, "installed", lambda: ["torch", "jax", "onnxruntime", "mxnet"])
    path = tmp_path / "s.yaml"
    path.write_text("name: s\nframeworks: installed\ninstalled_among: [onnxruntime, torch, openvino]\n"
                    "models: [lenet]\nscenarios: [forward]\n")
    assert resolve.suite_frameworks(flags.build_suite(str(path))) == ["torch", "onnxruntime"]
    path.write_text("name: s\nframeworks: installed\ninstalled_among: [torchh]\nmodels: [lenet]\nscenarios: [forward]\n")
    with pytest.raises(UsageError, match="installed_among names unknown framework"):
        resolve.suite_frameworks(flags.build_suite(str(path)))


def test_the_llm_perf_suite_holds_the_leaderboards_protocol(monkeypatch):
    """--suite llm-perf: the Open LLM-Perf Leaderboard's shapes (batch 1, prompt 256, exactly 64 new tokens),
    fp32 and bf16, generate only, on the installed ones of the runtimes it compares (every name known)."""
    from dlbench.planning import flags, resolve

    suite = flags.build_suite("llm-perf")
    g = suite.settings("generation")
    assert (g.prompt, g.new_tokens, suite.batch_sizes, suite.precisions, suite.scenarios) == (
        256, 64, [1], ["fp32", "bf16"], ["generate"])
    assert {"transformers", "llamacpp", "onnxruntime-genai", "openvino-genai", "ctranslate2"} <= set(
        suite.installed_among)
    monkeypatch.setattr(resolve, "installed", lambda: ["torch", "jax", "transformers", "ctranslate2", "mxnet"])
    assert resolve.suite_frameworks(suite) == ["torch", "transformers", "ctranslate2"]
