"""Generation: the decoders against the float64 reference, the generation gate (a planted cache bug
fails it, ties are not failures, decoding continues from the reference's token), the generate
scenario's figures and cells, and its refusal of bad settings. Small model forms only."""

from __future__ import annotations

import dataclasses
import importlib.util

import numpy as np
import pytest

from dlbench.cli.main import main
from dlbench.core.cell import Cell
from dlbench.core.job import CellJob
from dlbench.frameworks.base import UnsupportedError
from dlbench.frameworks.decoding import Decoder, cache_bytes, check_decodable, context_length
from dlbench.generation.decoder import greedy, make_decoder
from dlbench.generation.gate import compare_tokens, loop_checked, reference_greedy, verify_generation
from dlbench.models import get_model
from dlbench.models.weights import init_weights
from dlbench.scenarios.generate import Generate, GenerationSettings, figures, prompts
from tests.conftest import requires

DECODERS = [pytest.param("torch", "eager", marks=requires("torch")),
            pytest.param("jax", "jit", marks=requires("jax")),
            pytest.param("tensorflow", "function", marks=requires("tensorflow"))]
#: the decoders with past key/value inputs and outputs (one ONNX export, two engines)
WITH_PAST = [pytest.param("onnxruntime", marks=requires("onnxruntime")),
             pytest.param("openvino", marks=requires("openvino"))]
MODELS = ["gpt2", "smollm2-135m"]


def _off_by_one(framework: str) -> type:
    """The framework's decoder with its cache written one position late."""
    if framework == "torch":
        from dlbench.frameworks.torch.decoder import TorchDecoder

        class Planted(TorchDecoder):
            def cache_positions(self, positions):
                return positions + 1
        return Planted
    if framework == "jax":
        from dlbench.frameworks.jax.decoder import JaxDecoder as base
    else:
        from dlbench.frameworks.tensorflow.decoder import TFDecoder as base

    class PlantedFunctional(base):
        def cache_start(self, start):
            return start + 1
    return PlantedFunctional


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("framework, variant", DECODERS)
def test_the_gate_passes_every_decoder(framework, variant, model):
    res = verify_generation(framework, model, variant)
    assert res.passed, res.reason
    assert res.cache_error < 1e-5 and res.logit_error < 1e-5
    assert len(res.step_errors) == res.shape["new_tokens"] and res.tokens_checked == 16
    assert res.loop_tokens_checked == 16 and not res.loop_mismatches


@requires("torch")
@requires("torch")
def test_a_timed_loop_that_decodes_otherwise_than_its_steps_fails_the_gate():
    """A runtime's own generation loop (what greedy() times) need not go through prefill/step: its tokens are
    checked against the reference's too."""
    from dlbench.frameworks.torch.decoder import TorchDecoder

    class OwnLoop(TorchDecoder):
        def stream(self, prompt, new_tokens):
            for token in super().stream(prompt, new_tokens):
                yield (token + 1) % self.spec.input.vocab

    res = verify_generation("torch", "gpt2", decoder_cls=OwnLoop)
    assert res.verdict == "fail" and "generation loop's (stream) token differs" in res.reason, res.reason
    assert res.loop_mismatches[0]["step"] == 0 and res.loop_tokens_checked == 2  # each row stops at its first
    assert res.logit_error < 1e-5 and not res.mismatches  # prefill/step are right


def test_the_gate_passes_torch_bf16_and_the_compiled_step():
    assert verify_generation("torch", "smollm2-135m", "eager", "bf16").passed
    compiled = verify_generation("torch", "gpt2", "compile")
    assert compiled.passed and compiled.variant == "compile", compiled.reason


@pytest.mark.parametrize("framework, variant", DECODERS)
def test_a_cache_written_one_position_off_fails_the_gate(framework, variant):
    res = verify_generation(framework, "gpt2", variant, decoder_cls=_off_by_one(framework))
    assert res.verdict == "fail"
    assert res.cache_error > 1e-2 and "recomputed sequence" in res.reason


@pytest.mark.parametrize("framework", WITH_PAST)
def test_the_decoders_with_past_pass_the_gate_and_a_past_one_position_short_fails(framework):
    from dlbench.generation.decoder import decoder_class

    res = verify_generation(framework, "smollm2-135m")
    assert res.passed and res.cache_error < 1e-5, res.reason

    class Short(decoder_class(framework)):
        def step(self, tokens):
            self.past = {k: v[:, :, :-1] for k, v in self.past.items()}  # the last position dropped
            return super().step(tokens)
    res = verify_generation(framework, "gpt2", decoder_cls=Short)
    assert res.verdict == "fail" and res.cache_error > 1e-2, res.reason


@requires("openvino")
def test_openvinos_stateful_decoder_keeps_the_cache_inside_and_passes_the_gate():
    """The stateful variant (OpenVINO's make-stateful transformation: the past/present pairs become the
    model's state) takes only tokens, passes the gate, and a prompt after a first one starts from an
    empty cache (reset_state): a decoder that kept the last prompt's state fails."""
    from dlbench.frameworks.onnxruntime.decoder import OpenVINODecoder

    res = verify_generation("openvino", "gpt2", "stateful")
    assert res.passed and res.cache_error < 1e-5, res.reason
    spec = get_model("gpt2", small=True, seq_len=12)
    decoder = make_decoder("openvino", spec, init_weights(spec, seed=0), 1, 12, "fp32", "stateful")
    assert [i.get_any_name() for i in decoder.compiled.inputs] == ["tokens"]
    prompt = prompts(spec.input.vocab, 1, 4, 0, 0)
    first = greedy(decoder, prompt, 3).tokens
    assert np.array_equal(greedy(decoder, prompt, 3).tokens, first)  # the second prompt saw no stale state

    class KeepsState(OpenVINODecoder):
        def prefill(self, prompt):
            logits, token = self.call({"tokens": np.ascontiguousarray(prompt, np.int64)})  # no reset_state
            self.pos = prompt.shape[1]
            return logits, token
    res = verify_generation("openvino", "gpt2", "stateful", decoder_cls=KeepsState)
    assert res.verdict == "fail", res.reason


@requires("openvino")
def test_openvinos_decoder_runs_bf16_by_its_hint_and_passes_the_gate():
    """OpenVINO's decoder with past at bf16 (its inference precision hint on the float32 export): the
    runtime graph computes in bfloat16 and the generation gate passes at bf16's tolerance. ONNX
    Runtime, with no bfloat16 matmul on the CPU, says so."""
    from dlbench.core.precision import NATIVE, cpu_flags

    if not any(f in cpu_flags() for f in NATIVE["bf16"]):
        pytest.skip("no native bf16 on this CPU: OpenVINO would run f32, which is refused")
    res = verify_generation("openvino", "gpt2", "default", "bf16")
    assert res.passed, res.reason
    spec = get_model("gpt2", small=True, seq_len=8)
    decoder = make_decoder("openvino", spec, init_weights(spec, seed=0), 1, 8, "bf16")
    assert decoder.info()["runtime"] == {"param_dtype": "bfloat16", "compute_dtype": "bfloat16"}
    if importlib.util.find_spec("onnxruntime") is not None:
        with pytest.raises(UnsupportedError, match="decoder builds at fp32 only, not bf16"):
            make_decoder("onnxruntime", spec, init_weights(spec, seed=0), 1, 8, "bf16")


def test_tokens_inside_the_reference_margin_are_ties_outside_mismatches():
    ref_logits = np.array([[[5.0, 4.9999, 0.0]], [[5.0, 1.0, 0.0]], [[0.0, 3.0, 1.0]]])  # (steps, batch, vocab)
    ref_tokens = np.array([[0, 0, 1]])
    got = np.array([[1, 1, 1]])  # step 0: the runner-up by 1e-4; step 1: by 4; step 2: the same token
    ties, mismatches = compare_tokens(ref_logits, ref_tokens, got, tol=1e-4)
    assert [(t["step"], t["token"], t["reference"]) for t in ties] == [(0, 1, 0)]
    assert [(m["step"], m["token"]) for m in mismatches] == [(1, 1)]
    assert ties[0]["margin"] <= ties[0]["allowed"] < mismatches[0]["margin"]


@requires("torch")
def test_a_tie_is_reported_and_the_gate_passes_and_decoding_continues_from_the_reference():
    """A decoder that takes the runner-up at one step: where the reference's margin is within the
    tolerance that is a tie (the verdict passes), and every later step is still compared, from the
    reference's token (one disagreement does not derail the rest)."""
    from dlbench.frameworks.torch.decoder import TorchDecoder

    spec = get_model("gpt2", small=True, seq_len=13)
    weights = init_weights(spec, 0, mode="verify")
    prompt = np.random.default_rng([0, 33]).integers(0, spec.input.vocab, (2, 5))
    _, ref_logits = reference_greedy(spec, weights, prompt, 8)
    flip_step = 3
    margins = np.diff(np.sort(ref_logits[flip_step], axis=-1)[:, -2:], axis=-1)[:, 0]

    class RunnerUp(TorchDecoder):
        def step(self, tokens):
            at = self.pos
            logits, token = super().step(tokens)
            if at == 5 + flip_step - 1:  # the step producing token ``flip_step``
                token = logits.argsort(dim=-1)[:, -2]
            return logits, token

    # a tolerance at which the flipped step's margins are inside: ties; at fp32's, outside: mismatches
    import dlbench.generation.gate as gate

    loose = float(margins.max() / (2 * np.linalg.norm(ref_logits[flip_step], axis=-1).min())) * 1.01
    strict = verify_generation("torch", "gpt2", decoder_cls=RunnerUp)
    assert strict.verdict == "fail" and {m["step"] for m in strict.mismatches} == {flip_step}
    assert strict.cache_error < 1e-5  # the steps after the flip decoded from the reference's token
    original = gate.TOLERANCES["fp32"]
    try:
        gate.TOLERANCES["fp32"] = type(original)(loose, original.gradient, original.loss, "test")
        tied = verify_generation("torch", "gpt2", decoder_cls=RunnerUp)
    finally:
        gate.TOLERANCES["fp32"] = original
    assert tied.passed, tied.reason
    assert {t["step"] for t in tied.ties} == {flip_step} and len(tied.ties) == 2 and not tied.mismatches
    assert "tie(s)" in tied.reason


def test_a_free_running_loop_is_checked_up_to_each_rows_first_difference():
    ref = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
    got = np.array([[1, 9, 9, 9], [5, 6, 7, 8]])
    assert loop_checked(ref, got).tolist() == [[1, 9, 3, 4], [5, 6, 7, 8]]


@pytest.mark.parametrize("framework, variant", DECODERS)
def test_greedy_decoding_reports_ttft_and_a_time_per_later_token(framework, variant):
    spec = get_model("smollm2-135m", small=True, seq_len=12)
    decoder = make_decoder(framework, spec, init_weights(spec, 0), 3, 12, "fp32", variant)
    gen = greedy(decoder, prompts(spec.input.vocab, 3, 6, 0, 0), 6)
    assert gen.tokens.shape == (3, 6) and len(gen.tpot_ns) == 5 and gen.ttft_ns > 0
    assert decoder.cache_bytes == cache_bytes(spec, 3, 12, 4)
    again = greedy(decoder, prompts(spec.input.vocab, 3, 6, 0, 0), 6)  # the cache is reused from position 0
    assert (again.tokens == gen.tokens).all()


def test_a_decoder_builds_at_the_precisions_its_class_declares(monkeypatch):
    """make_decoder holds a precision to the decoder class's own ``precisions`` (a runtime decoding
    llama.cpp's q4_0 declares it), not to one list for every decoder."""
    from dlbench.frameworks.base import UnsupportedError
    from dlbench.frameworks.torch.decoder import TorchDecoder
    from dlbench.generation import decoder as dec

    class Q4Decoder(TorchDecoder):
        precisions = ("fp32", "q4_0")

        def __init__(self, spec, weights, batch, max_len, precision="fp32", variant="", device="cpu"):
            super().__init__(spec, weights, batch, max_len, "fp32", variant, device)
            self.asked = precision

    monkeypatch.setattr(dec, "decoder_class", lambda framework: Q4Decoder)
    spec = get_model("gpt2", small=True, seq_len=8)
    assert make_decoder("q4fw", spec, init_weights(spec, 0), 1, 8, "q4_0").asked == "q4_0"
    with pytest.raises(UnsupportedError, match="q4fw's decoder builds at fp32, q4_0 only, not bf16"):
        make_decoder("q4fw", spec, init_weights(spec, 0), 1, 8, "bf16")


def test_contexts_and_what_a_decoder_refuses():
    assert context_length(get_model("gpt2")) == 1024
    assert context_length(get_model("smollm2-135m")) == 8192
    from dlbench.frameworks.decoding import NotDecodable

    for model in ("bert-base", "lenet", "vit-b16"):
        with pytest.raises(NotDecodable):
            check_decodable(get_model(model, small=True))


@pytest.mark.parametrize("extra, needle", [
    (["--prompt-len", "1000", "--new-tokens", "25"], "1025 tokens exceed gpt2's context of 1024"),
    (["--new-tokens", "0"], "--new-tokens (generation.new_tokens): new_tokens must be >= 1"),
    (["--prompt-len", "-4"], "--prompt-len (generation.prompt): prompt must be >= 1"),
    (["--generations", "0"], "--generations"),
    (["--ttft-ms", "0"], "--ttft-ms"),
])
def test_bad_generation_settings_are_refused_with_one_line(tmp_path, capsys, extra, needle):
    code = main(["run", "--model", "gpt2", "--framework", "torch", "--scenario", "generate", "--threads", "1",
                 *extra, "--dry-run", "--db", str(tmp_path / "r.db")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert needle in err, err
    assert not (tmp_path / "r.db").exists()


def test_a_default_batch_becomes_cells_at_batch_1_and_4():
    from dlbench.planning import flags
    from dlbench.running import runner

    suite = flags.build_suite(models=["gpt2"], frameworks=["torch"], scenarios=["generate"], threads=[1])
    _, cells = runner.plan_cells(suite)
    assert sorted(c.batch for c in cells) == [1, 4]
    suite = flags.build_suite(models=["gpt2"], frameworks=["torch"], scenarios=["generate"], threads=[1], batches=[2])
    assert [c.batch for c in runner.plan_cells(suite)[1]] == [2]


def test_figures_have_process_intervals_percentiles_and_total_rates():
    cell = Cell("torch", "eager", "gpt2", "generate", 4, 1)
    rng = np.random.default_rng(0)
    per_process = [{"runs": [{"ttft_ns": 2e6 + rng.random() * 1e5, "tpot_ns": list(1e6 + rng.random(7) * 1e4),
                              "tokens": [[1] * 8] * 4 if i == 0 else None} for i in range(5)],
                    "cache_bytes": 1024, "peak_rss_bytes": 10 + r, "rss_before_build_bytes": 1, "build_ns": 1e6,
                    "decoder": {}, "threads_readback": {}, "versions": {}} for r in range(3)]
    m = figures(cell, per_process, GenerationSettings(prompt=16, new_tokens=8, runs=5), seed=0)
    g = m["generation"]
    assert g["ttft_ms"]["ci_low"] <= g["ttft_ms"]["median"] <= g["ttft_ms"]["ci_high"]
    assert 2.0 <= g["ttft_ms"]["median"] <= 2.1 and 1.0 <= g["tpot_ms"]["median"] <= 1.01
    assert g["tokens_per_s_total"]["median"] == pytest.approx(4 * g["tokens_per_s_sequence"]["median"])
    assert g["ttft_samples_ms"] and len(g["tpot_samples_ms"]) == 3 * 5 * 7
    p50 = {p["q"]: p for p in g["tpot_percentiles"]}
    assert p50[50.0]["value"] is not None and p50[99.0]["refused"]  # 105 samples: a p99 needs 1,000
    assert m["peak_rss_bytes"] == 12 and g["cache_bytes"] == 1024


@requires("torch")
def test_a_measuring_process_times_generations_in_process():
    settings = dataclasses.asdict(GenerationSettings(prompt=6, new_tokens=5, runs=2))
    job = CellJob(threads=None, cell=Cell("torch", "eager", "gpt2:seq_len=8:layers=1:dim=32:vocab=64:heads=4",
                                          "generate", 2, 1), seed=0, data_dir=None, protocol={"max_time_s": 60},
                  settings=settings, extra={"phase": "measure"})
    generate = Generate()
    out = generate.work(job, generate.settings_from(job))
    assert len(out["runs"]) == 2 and len(out["runs"][0]["tpot_ns"]) == 4
    assert np.array(out["runs"][0]["tokens"]).shape == (2, 5) and out["cache_bytes"] > 0
    # where the process's time went (show --cost): a generate cell had all of it in "rest" before
    assert all(out["cost"][part] > 0 for part in ("prepare_s", "build_s", "warmup_s", "timed_s"))
    assert out["cost"]["work_s"] >= sum(out["cost"][p] for p in ("prepare_s", "build_s", "warmup_s", "timed_s"))


class ColdDecoder(Decoder):
    """A stand-in decoder of a runtime that converts and loads its model (its ``info()`` says how long),
    and declares fp32 only."""

    framework = "torch"
    variants = ("eager",)
    precisions = ("fp32",)

    def prefill(self, prompt):
        return np.zeros((self.batch, self.spec.input.vocab)), np.zeros(self.batch, np.int64)

    def step(self, tokens):
        return self.prefill(None)

    def host(self, array):
        return np.asarray(array)

    @property
    def cache_bytes(self):
        return 0

    def info(self):
        return {"convert_s": 1.5, "convert_cache": "hit", "load_s": 0.25, "format": "stand-in"}


@requires("torch")
def test_a_measuring_process_stores_its_cold_start_the_decoders_load_and_its_first_ttft(monkeypatch):
    """The process's first generation (the warm-up) gives the cold TTFT; the decoder's info() the
    conversion and load; the cell's figures are their medians over the processes, each process's kept."""
    from dlbench.generation import decoder as decoders
    from dlbench.generation.decoder import Generation
    from dlbench.scenarios import generate

    monkeypatch.setattr(decoders, "decoder_class", lambda framework: ColdDecoder)
    ttfts = iter([7e6, 1e6, 1e6])  # the first generation in the process is the cold one

    def fake_greedy(decoder, prompt, new_tokens):
        return Generation(np.zeros((prompt.shape[0], new_tokens), np.int64), next(ttfts), [1e5] * (new_tokens - 1))
    monkeypatch.setattr(generate, "greedy", fake_greedy)
    settings = dataclasses.asdict(GenerationSettings(prompt=4, new_tokens=3, runs=2))
    job = CellJob(threads=None, cell=Cell("torch", "eager", "gpt2:seq_len=8:layers=1:dim=32:vocab=64:heads=4",
                                          "generate", 1, 1), seed=0, data_dir=None, protocol={"max_time_s": 60},
                  settings=settings, extra={"phase": "measure"})
    generate_ = Generate()
    out = generate_.work(job, generate_.settings_from(job))
    cold = out["cold_start"]
    assert (cold["convert_s"], cold["convert_cache"], cold["load_s"], cold["cold_ttft_s"]) == (1.5, "hit", 0.25, 0.007)
    assert cold["build_s"] > 0 and out["decoder"]["format"] == "stand-in"
    other = {**out, "cold_start": {**cold, "convert_s": 2.5, "cold_ttft_s": 0.009}}
    m = figures(job.cell, [out, other], GenerationSettings(**settings), seed=0)["generation"]["cold_start"]
    assert (m["convert_s"], m["load_s"], m["cold_ttft_s"]) == pytest.approx((2.0, 0.25, 0.008))
    assert [p["convert_s"] for p in m["processes"]] == [1.5, 2.5]
    with pytest.raises(UnsupportedError, match="decoder builds at fp32 only, not bf16"):  # its own precisions, not all
        make_decoder("torch", get_model("gpt2", small=True, seq_len=8), None, 1, 8, "bf16")


@requires("transformers")
@requires("torch")
def test_transformers_generate_gives_the_same_tokens_as_the_torch_decoder(monkeypatch):
    """benchmarks/generate_vs_transformers.py loads dlbench's weights into transformers' GPT-2 (a config
    built locally) and requires the same greedy tokens: on the small gpt2 form they agree."""
    import importlib
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    bench = importlib.import_module("generate_vs_transformers")
    spec = get_model("gpt2", small=True, seq_len=14)
    weights = init_weights(spec, 0)
    prompt = prompts(spec.input.vocab, 2, 6, 0, 0)
    hf_tokens, _, _ = bench.hf_generate(bench.hf_model(spec, weights), prompt, 8)
    ours = greedy(make_decoder("torch", spec, weights, 2, 14), prompt, 8).tokens
    assert hf_tokens.shape == ours.shape == (2, 8)
    assert (hf_tokens == ours).all()


SUMMARY = """================================================
MLPerf Results Summary
================================================
Scenario : Server
Mode     : PerformanceOnly
Completed samples per second    : 45.10
Completed tokens per second: 363.68
Result is : INVALID
  Performance constraints satisfied : Yes
  Min duration satisfied : Yes
  Min queries satisfied : Yes
  Early stopping satisfied: NO
================================================
Additional Stats
================================================
Scheduled samples per second : 45.18
99.00 percentile latency (ns)   : 32539862
Completed tokens per second                 : 363.68
Mean First Token latency (ns)               : 5827206
50.00 percentile first token latency (ns)   : 2436862
99.00 percentile first token latency (ns)   : 25355637
Mean Time per Output Token (ns)                : 1056710
50.00 percentile time to output token (ns)   : 1023748
99.00 percentile time to output token (ns)   : 1716969
target_qps : 50
ttft_latency (ns): 50000000
tpot_latency (ns): 10000000
"""


def test_loadgen_token_summary_is_parsed():
    from dlbench.scenarios.generate_loadgen import parse_token_summary

    f = parse_token_summary(SUMMARY)
    assert f["valid"] is False and f["tokens_per_s"] == 363.68 and f["early_stopping_satisfied"] == "NO"
    assert f["ttft_percentiles_ms"] == {"50": 2.436862, "99": 25.355637}
    assert f["tpot_percentiles_ms"]["99"] == pytest.approx(1.716969)
    assert f["ttft_bound_ms"] == 50.0 and f["tpot_bound_ms"] == 10.0 and f["percentiles_ms"]["99"] == 32.539862


@requires("mlperf_loadgen")
@requires("torch")
def test_generate_server_runs_loadgen_in_token_latency_mode(tmp_path):
    """One short LoadGen server run in process: LoadGen reports TTFT and TPOT from the SUT's first-token and
    completion calls, with the bounds asked."""
    from dlbench.scenarios.generate_loadgen import SCENARIOS, parse_token_summary

    server = next(s for s in SCENARIOS if s.name == "generate-server")
    settings = dataclasses.asdict(GenerationSettings(prompt=4, new_tokens=4, runs=1, ttft_ms=50.0, tpot_ms=20.0,
                                                     qps=20.0, min_duration_s=0.5, min_queries=10))
    job = CellJob(threads=None, cell=Cell("torch", "eager", "gpt2:seq_len=8:layers=1:dim=32:vocab=64:heads=4",
                                          "generate-server", 2, 1), seed=0, data_dir=None,
                  protocol={"max_time_s": 60}, settings=settings, extra={"phase": "measure", "outdir": str(tmp_path)})
    out = server.work(job, server.settings_from(job))
    f = parse_token_summary(out["summary"])
    assert f["scenario"] == "Server" and f["result"] in ("VALID", "INVALID")
    assert f["ttft_percentiles_ms"] and f["tpot_percentiles_ms"] and f["tokens_per_s"] > 0
    assert out["settings"]["use_token_latencies"] and out["settings"]["ttft_latency_ns"] == 50_000_000
    assert not out["meets_rules"] and (tmp_path / "mlperf_log_summary.txt").exists()


@requires("mlperf_loadgen")
def test_every_slo_preset_is_loadgens_own_bounds():
    """A preset's TTFT/TPOT bounds come from the installed LoadGen's mlperf.conf (MLPerf Inference's
    published values for llama2-70b-interactive: 450 ms and 40 ms), and every named preset has them."""
    import mlperf_loadgen as lg

    from dlbench.scenarios.generate import SLO_PRESETS
    from dlbench.scenarios.generate_loadgen import slo_bounds_ns

    assert slo_bounds_ns(lg, "llama2-70b-interactive") == (450_000_000, 40_000_000)
    assert slo_bounds_ns(lg, "llama3_1-8b-interactive") == (500_000_000, 30_000_000)
    assert all(t > 0 and p > 0 for t, p in (slo_bounds_ns(lg, name) for name in SLO_PRESETS))
    with pytest.raises(UnsupportedError, match="no token-latency bounds for resnet50"):
        slo_bounds_ns(lg, "resnet50")


@requires("mlperf_loadgen")
@requires("torch")
def test_a_server_cell_holds_the_stated_share_to_the_presets_bounds_through_the_decoders_own_loop(tmp_path,
                                                                                                  monkeypatch):
    """--slo and --slo-share become LoadGen's bounds and target percentile; the system under test decodes
    through ``Decoder.stream`` (a runtime's own generation loop), not prefill/step of its own."""
    from dlbench.frameworks.decoding import Decoder
    from dlbench.scenarios.generate_loadgen import SCENARIOS

    streams = []
    original = Decoder.stream

    def counted(self, prompt, new_tokens):
        streams.append(prompt.shape[0])
        yield from original(self, prompt, new_tokens)

    monkeypatch.setattr(Decoder, "stream", counted)
    server = next(s for s in SCENARIOS if s.name == "generate-server")
    settings = dataclasses.asdict(GenerationSettings(prompt=4, new_tokens=4, runs=1, slo="llama2-70b-interactive",
                                                     slo_share=90.0, qps=20.0, min_duration_s=0.5, min_queries=10))
    job = CellJob(threads=None, cell=Cell("torch", "eager", "gpt2:seq_len=8:layers=1:dim=32:vocab=64:heads=4",
                                          "generate-server", 1, 1), seed=0, data_dir=None,
                  protocol={"max_time_s": 60}, settings=settings, extra={"phase": "measure", "outdir": str(tmp_path)})
    out = server.work(job, server.settings_from(job))
    assert out["settings"]["ttft_latency_ns"] == 450_000_000 and out["settings"]["tpot_latency_ns"] == 40_000_000
    assert out["settings"]["target_latency_percentile"] == pytest.approx(0.9)
    assert out["settings"]["slo"] == "llama2-70b-interactive"
    assert len(streams) >= 10 + 2  # every query (at least the minimum count) and the two warm-ups


def test_goodput_is_the_rate_a_valid_peak_search_found():
    from dlbench.scenarios.generate_loadgen import goodput

    settings = {"mode": "FindPeakPerformance", "target_latency_percentile": 0.99, "ttft_latency_ns": 450_000_000,
                "tpot_latency_ns": 40_000_000, "slo": "llama2-70b-interactive"}
    found = goodput({"valid": True, "scheduled_samples_per_s": 3.25}, settings)
    assert found == {"requests_per_s": 3.25, "share_pct": 99.0, "ttft_bound_ms": 450.0, "tpot_bound_ms": 40.0,
                     "slo": "llama2-70b-interactive"}
    assert goodput({"valid": False, "scheduled_samples_per_s": 3.25}, settings) is None  # no rate met the bounds
    assert goodput({"valid": True, "scheduled_samples_per_s": 3.25}, {**settings, "mode": "PerformanceOnly"}) is None


@pytest.mark.parametrize(("flags", "said"), [
    (["--slo", "gpt-9"], "slo must be one of llama2-70b"),
    (["--slo", "llama2-70b-interactive", "--ttft-ms", "5"], "give it or ttft_ms/tpot_ms, not both"),
    (["--slo-share", "0"], "slo_share must be > 0"),
    (["--slo-share", "100"], "slo_share must be > 0 and <= 99.99"),
])
def test_bad_slo_flags_are_one_line_and_exit_2(tmp_path, capsys, flags, said):
    code = main(["run", "--model", "gpt2", "--framework", "torch", "--scenario", "generate-server", *flags,
                 "--threads", "1", "--dry-run", "--db", str(tmp_path / "r.db")])
    err = capsys.readouterr().err
    assert code == 2 and said in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_token_bounds_without_generate_server_are_refused(tmp_path, capsys):
    code = main(["run", "--model", "gpt2", "--framework", "torch", "--scenario", "generate", "--ttft-ms", "100",
                 "--threads", "1", "--dry-run", "--db", str(tmp_path / "r.db")])
    err = capsys.readouterr().err
    assert code == 2 and "--ttft-ms, --tpot-ms, --slo and --slo-share bound the generate-server scenario" in err, err
    code = main(["run", "--model", "gpt2", "--framework", "torch", "--scenario", "generate-server", "--find-peak",
                 "--threads", "1", "--dry-run", "--db", str(tmp_path / "r.db")])
    assert code == 0, capsys.readouterr().err
    code = main(["run", "--model", "gpt2", "--framework", "torch", "--scenario", "generate", "--qps", "3",
                 "--threads", "1", "--dry-run", "--db", str(tmp_path / "r.db")])
    assert code == 2 and "--find-peak and --qps set the generate-server" in capsys.readouterr().err


def test_the_serving_flags_set_the_generation_settings_too():
    """--qps and --find-peak are the serving section's flags and the generation section's: one flag sets both."""
    import argparse

    from dlbench.scenarios import registry

    parser = argparse.ArgumentParser()
    registry.add_flags(parser)
    got = registry.settings_from_flags(parser.parse_args(["--qps", "2.5", "--find-peak", "--prompt-len", "16"]))
    assert got["generation"] == {"qps": 2.5, "find_peak": True, "prompt": 16}
    assert got["serving"] == {"qps": 2.5, "find_peak": True}


def test_a_model_option_its_factory_refuses_is_one_line_and_exit_2(tmp_path, capsys):
    """``gpt2:max_positions=64`` (its default sequence of 256 no longer fits) was an internal error."""
    code = main(["run", "--model", "gpt2:max_positions=64", "--framework", "torch", "--scenario", "generate",
                 "--threads", "1", "--dry-run", "--db", str(tmp_path / "r.db")])
    err = capsys.readouterr().err
    assert code == 2 and "seq_len 256 must be 1 to the model's 64 positions" in err and "internal" not in err, err


@requires("jax")
def test_the_jax_decoder_on_a_gpu_keeps_float32_matmuls_at_full_precision(monkeypatch):
    """XLA's GPU default is TF32 (about 1e-3): on an H100 the JAX decoder failed the generation gate
    by 1.25e-3 until it took its device from the backend's jax_device, which turns TF32 off. The GPU
    is faked by the CPU device, so this runs anywhere."""
    import jax

    from dlbench.frameworks.jax.decoder import JaxDecoder

    cpu = jax.local_devices(backend="cpu")
    monkeypatch.setattr(jax, "local_devices", lambda backend=None: cpu)
    before = jax.config.jax_default_matmul_precision
    try:
        jax.config.update("jax_default_matmul_precision", None)
        spec = get_model("gpt2", small=True, seq_len=8)
        JaxDecoder(spec, init_weights(spec, seed=0), 1, 8, device="cuda")
        assert jax.config.jax_default_matmul_precision == "highest"
    finally:
        jax.config.update("jax_default_matmul_precision", before)


@requires("tensorflow")
def test_the_tensorflow_device_of_a_gpu_turns_tf32_off(monkeypatch):
    """TensorFlow runs float32 matmuls as TF32 on Ampere and later unless told not to; the models
    and the decoder take their device from tf_device, which tells it."""
    import tensorflow as tf

    from dlbench.frameworks.tensorflow.tf_util import tf_device

    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: ["fake GPU"])
    before = tf.config.experimental.tensor_float_32_execution_enabled()
    try:
        tf.config.experimental.enable_tensor_float_32_execution(True)
        assert tf_device("cuda:1") == "/GPU:1"
        assert not tf.config.experimental.tensor_float_32_execution_enabled()
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(before)


def test_the_generate_scenarios_read_a_decoder_from_the_framework_declaration():
    """Which frameworks decode is their folders' declaration (DECODERS, a table keyed by name, went): a
    framework without one is unsupported with its folder's reason or the list of those that have one; a
    pinned release stays unsupported, as before the folders."""
    from dlbench.frameworks import framework_info

    gen = Generate()
    assert gen.unsupported(framework_info("torch")) is None and gen.unsupported(framework_info("openvino")) is None
    assert "no Keras 3 decoder" in gen.unsupported(framework_info("keras"))
    reason = gen.unsupported(framework_info("mxnet"))  # the built-in folders' order, the runtimes after
    assert "(generate scenarios: torch, jax, onnxruntime, openvino, tensorflow, transformers" in reason, reason
    assert "has no key/value-cache decoder" in gen.unsupported(framework_info("jax==0.4.38"))
