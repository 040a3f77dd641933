"""The ``generate`` scenario: greedy decoding with a key/value cache, as an LLM is served.

A cell is one (framework, variant, model, batch, threads, precision) at the suite's generation
settings (``generation:`` in a suite; ``--prompt-len``, ``--new-tokens``, ``--generations``): defaults
prompt 128, 64 new tokens, batch 1 and 4 (a suite's default batch becomes both cells). Its parts:

* **the gate** (:mod:`dlbench.generation.gate`), once per (framework, variant, model, precision) in a
  fresh process before anything is timed: a decoder that fails it makes the cell ``not_equivalent``;
  its verdict (cache error, per-step logit errors, ties) is stored with every cell it covers;
* **the measuring processes** (``repeats`` of them): each builds the framework's decoder
  (:mod:`dlbench.generation.decoder`) for the model at prompt + new tokens, generates once untimed (the
  warm-up: compilation, first allocations), then ``runs`` greedy generations of seeded prompts, each
  token brought to the host as it is made (:func:`~dlbench.generation.decoder.greedy`);
* **figures**, each a median with a 95% interval over the processes (the hierarchical bootstrap of
  :func:`dlbench.measure.stats.summarize`): TTFT (the prompt's prefill through the first token on the
  host), TPOT (each later token), tokens/s per sequence (new tokens over a generation's time) and in
  total (x batch); TTFT and TPOT percentiles pooled over the processes
  (:mod:`dlbench.measure.percentiles`); the cache's bytes and the process's peak resident memory;
  energy per generated token where the machine has counters (:mod:`dlbench.measure.energy`: read
  around the timed generations, stored raw per process);
* **the cold start** (:func:`cold_start`), each process being a fresh one: the seconds to convert the
  weights to the runtime's format and to load them (``convert_s``, ``load_s``, as the decoder's
  ``info()`` reports them; None for a decoder built from the weights in memory), the decoder's whole
  build (``build_s``) and the first generation's TTFT (``cold_ttft_s``: the untimed warm-up's), medians
  over the processes with each process's own.

The stored samples: ``ttft`` (one per generation), ``tpot`` (one per later token) and ``measure`` (a
whole generation's time, so comparisons and plots of per-call times apply). ``--profile`` profiles
decode steps after the timed generations (what dominates decode time). A model that is not a decoder-
only language model, and a framework without a decoder, are ``unsupported`` with the reason.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dlbench.core.errors import UsageError
from dlbench.core.job import CellJob
from dlbench.frameworks.base import UnsupportedError
from dlbench.frameworks.decoding import NotDecodable, check_decodable, context_length
from dlbench.generation.decoder import greedy, make_decoder, unsupported_reason
from dlbench.measure.cost import WorkClock
from dlbench.measure.energy import Meter
from dlbench.measure.memory import current_rss_bytes, peak_rss_bytes
from dlbench.measure.percentiles import percentiles
from dlbench.measure.stats import Summary, interval_text, summarize
from dlbench.models import UnknownModelError, get_model
from dlbench.models.weights import init_weights
from dlbench.scenarios.base import (
    MAX_COUNT,
    MAX_SECONDS,
    MIN_BOUND_MS,
    CellOutcome,
    Context,
    Flag,
    Scenario,
    Shown,
    SuiteView,
    check_range,
    profile_dir,
    run_in_turn,
)
from dlbench.scenarios.prepare import backend_for, versions
from dlbench.storage.store import Sample

if TYPE_CHECKING:
    from dlbench.frameworks import FrameworkInfo
    from dlbench.models.spec import ModelSpec
    from dlbench.storage.cell_result import CellResult

#: the batches a suite's default batch becomes
DEFAULT_BATCHES = (1, 4)
#: percentiles of TTFT and TPOT reported
QUANTILES = (50.0, 90.0, 99.0)


#: the most tokens a setting may name (the models' contexts are far below it)
MAX_TOKENS = 1_000_000
#: MLPerf Inference's LLM benchmarks whose server TTFT/TPOT bounds ``--slo`` names: the benchmark keys of
#: LoadGen's ``mlperf.conf``, which holds the values (e.g. llama2-70b-interactive: 450 ms and 40 ms);
#: the ``-interactive`` ones are MLPerf's interactive bounds
SLO_PRESETS = ("llama2-70b", "llama2-70b-interactive", "llama3_1-8b", "llama3_1-8b-interactive",
               "llama3_1-405b", "llama3_1-405b-interactive", "mixtral-8x7b", "deepseek-r1", "deepseek-r1-interactive")


@dataclass
class GenerationSettings:
    """The generate scenarios' settings (a suite file's ``generation:``, the flags below): prompt and
    output lengths, timed generations, the LoadGen scenarios' bounds and rates. A zero or negative length
    is refused here (exit 2); a prompt and new tokens beyond a model's context by :meth:`Generate.check`."""

    __pydantic_config__ = {"extra": "forbid"}  # noqa: RUF012  (read by pydantic, the registry's validator)
    #: prompt tokens per sequence (prefill); defaults sized for a 2-core CPU
    prompt: int = 128
    #: tokens generated per sequence (the first from the prefill, the rest one decode step each)
    new_tokens: int = 64
    #: timed generations per measuring process (after one untimed generation that warms up)
    runs: int = 5
    #: generate-server: bounds on LoadGen's time to first token and time per output token, ms (their
    #: 99th percentiles; None: LoadGen's defaults, 100 ms each)
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    #: generate-server: the request rate (None: half the rate one stream of generations reaches, a
    #: tenth with ``find_peak``)
    qps: float | None = None
    #: generate-server: LoadGen's FindPeakPerformance (the highest rate meeting both bounds)
    find_peak: bool = False
    #: LoadGen's minimum duration and query count (None: LoadGen's rules; shorter ones mark the cell)
    min_duration_s: float | None = None
    min_queries: int | None = None
    #: generate-server: an MLPerf LLM benchmark's TTFT and TPOT bounds as a named preset
    #: (:data:`SLO_PRESETS`), their values read from the installed LoadGen's own ``mlperf.conf``
    slo: str | None = None
    #: generate-server: the share of requests (%) whose TTFT and TPOT must meet the bounds: LoadGen's
    #: server target latency percentile (MLPerf's 99); with ``find_peak`` the rate found is the goodput
    slo_share: float = 99.0

    def __post_init__(self) -> None:
        if self.slo is not None and self.slo not in SLO_PRESETS:
            raise ValueError(f"slo must be one of {', '.join(SLO_PRESETS)}, got {self.slo!r}")
        if self.slo is not None and (self.ttft_ms is not None or self.tpot_ms is not None):
            raise ValueError(f"slo {self.slo} sets the TTFT and TPOT bounds; give it or ttft_ms/tpot_ms, not both")
        check_range(self, "slo_share", gt=0, le=99.99)
        for name in ("prompt", "new_tokens"):
            check_range(self, name, ge=1, le=MAX_TOKENS)
        check_range(self, "runs", ge=1, le=MAX_COUNT)
        # LoadGen takes the bounds in whole nanoseconds: one below 1 ns would be a bound of 0
        check_range(self, "ttft_ms", ge=MIN_BOUND_MS, le=MAX_SECONDS * 1000)
        check_range(self, "tpot_ms", ge=MIN_BOUND_MS, le=MAX_SECONDS * 1000)
        check_range(self, "qps", gt=0, le=1e6)
        check_range(self, "min_duration_s", gt=0, le=MAX_SECONDS)
        check_range(self, "min_queries", ge=1, le=MAX_COUNT)


#: the generate scenarios' ``dlbench run`` flags (``--qps``, ``--find-peak`` and LoadGen's minima are the
#: serving scenarios' flags too: one flag sets both sections)
FLAGS = (
    Flag("--prompt-len", "prompt", "generate: prompt tokens (default 128)", int),
    Flag("--new-tokens", "new_tokens", "generate: tokens generated (default 64)", int),
    Flag("--generations", "runs", "generate: timed generations per process (default 5)", int),
    Flag("--ttft-ms", "ttft_ms", "generate-server: bound on the time to first token's p99 in ms "
                                 "(default LoadGen's 100)", float),
    Flag("--tpot-ms", "tpot_ms", "generate-server: bound on the time per output token's p99 in ms "
                                 "(default LoadGen's 100)", float),
)
LOADGEN_FLAGS = (
    Flag("--qps", "qps", "loadgen-server, generate-server: target queries per second", float),
    Flag("--find-peak", "find_peak", "loadgen-server, generate-server: search the highest rate meeting the bounds "
                                     "(LoadGen's FindPeakPerformance)", switch=True),
    Flag("--loadgen-min-duration", "min_duration_s", "LoadGen's minimum run time in s", float),
    Flag("--loadgen-min-queries", "min_queries", "LoadGen's minimum query count", int),
)
SLO_FLAGS = (
    Flag("--slo", "slo", f"generate-server: an MLPerf LLM benchmark's TTFT/TPOT bounds, from LoadGen's mlperf.conf "
                         f"({', '.join(SLO_PRESETS)})", str),
    Flag("--slo-share", "slo_share", "generate-server: %% of requests that must meet the bounds (default 99); "
                                     "with --find-peak the rate found is the goodput", float),
)


def generation_spec(model: str, prompt: int, new_tokens: int) -> ModelSpec:
    """The model at the length a generation fills (rotary and position tables cover it)."""
    return get_model(model, seq_len=prompt + new_tokens).without_dropout()


def prompts(vocab: int, batch: int, prompt: int, seed: int, run: int) -> np.ndarray:
    """The seeded prompt of one generation: the same in every framework for the same run (the warm-up's
    is the run after the timed ones)."""
    return np.random.default_rng([seed, batch, prompt, run]).integers(0, vocab, (batch, prompt)).astype(np.int64)


def check_settings(models: list[str], settings: Any) -> None:
    """Refuse prompt + new tokens beyond a model's context (a usage error, before anything runs)."""
    total = settings.prompt + settings.new_tokens
    for model in models:
        try:
            spec = get_model(model)
        except UnknownModelError as exc:
            raise UsageError(str(exc)) from None
        limit = context_length(spec)
        if limit is not None and total > limit:
            raise UsageError(f"--prompt-len {settings.prompt} + --new-tokens {settings.new_tokens} = {total} tokens "
                             f"exceed {model}'s context of {limit} positions")


def gate_key(cell) -> str:
    return "/".join(cell.group)


class Generate(Scenario):
    name = "generate"
    description = ("greedy decoding with a key/value cache: TTFT, TPOT, tokens/s (per sequence and total), "
                   "cache and peak memory; --prompt-len, --new-tokens")
    requires = ("forward",)
    per_iteration = False
    settings_model = GenerationSettings
    settings_section = "generation"
    flags = FLAGS + LOADGEN_FLAGS + SLO_FLAGS

    # --- cells ---------------------------------------------------------------------------------
    def default_batch(self, spec: ModelSpec, data: str, data_dir: str | None) -> int:
        return DEFAULT_BATCHES[0]

    def cells(self, cell, suite: SuiteView) -> list:
        sizes = suite.batch_sizes
        if isinstance(sizes, dict):
            sizes = sizes.get(cell.model, sizes.get("default", ["default"]))
        if "default" in sizes and cell.batch == DEFAULT_BATCHES[0]:
            return [replace(cell, batch=b) for b in DEFAULT_BATCHES]
        return [cell]

    def check(self, cells, suite: SuiteView) -> None:
        mine = [c for c in cells if c.scenario == self.name]
        if any(c.data != "synthetic" for c in mine):
            raise UsageError(f"the {self.name} scenario decodes seeded synthetic prompts; it reads no data set (--data)")
        g = self.settings_of(suite)
        check_settings(sorted({c.model for c in mine}), g)
        if (g.ttft_ms is not None or g.tpot_ms is not None or g.slo is not None or g.slo_share != 99.0) and not any(
                c.scenario == "generate-server" for c in cells):
            raise UsageError("--ttft-ms, --tpot-ms, --slo and --slo-share bound the generate-server scenario; "
                             "the suite has none")
        if (g.find_peak or g.qps is not None) and not any(c.scenario in ("generate-server", "loadgen-server")
                                                          for c in cells):
            raise UsageError("--find-peak and --qps set the generate-server and loadgen-server scenarios; "
                             "the suite has neither")

    def unsupported(self, info: FrameworkInfo) -> str | None:
        if info.decoder is None or info.version is not None:  # a pinned release: not run in its environment yet
            return unsupported_reason(info.name)
        return None

    def call_seconds(self, cell, suite: SuiteView, flops_per_s: float) -> float:
        """One generation (a stored ``measure`` sample): the forward FLOPs of prompt + new tokens at the
        batch (the prefill's and the steps' together; attention's growth with the position ignored)."""
        g = self.settings_of(suite)
        spec = get_model(cell.model)
        per_token = spec.flops_per_sample / spec.input.shape[0]
        return max(per_token * cell.batch * (g.prompt + g.new_tokens) / flops_per_s, 1e-4)

    def estimate(self, cell, suite: SuiteView, step_s: float, start_s: float, epoch_samples: int) -> float:
        """The gate's process (once per group, counted here) and ``repeats`` processes, each building
        the decoder and generating ``runs`` + 1 times (``step_s``: one generation)."""
        g = self.settings_of(suite)
        return start_s + suite.protocol.repeats * (start_s + (g.runs + 1) * step_s)

    def phase_job(self, cell, suite: SuiteView, phase: str) -> CellJob:
        """A job of the cell's: ``gate`` (the generation gate) or ``measure`` (timed generations)."""
        job = self.job(cell, suite)
        job.extra["phase"] = phase
        return job

    # --- the parent's side ------------------------------------------------------------------------
    def gate(self, cell, ctx: Context, out: CellOutcome) -> dict[str, Any] | None:
        """The generation gate's verdict for the cell's group, run once per run (None: its process failed)."""
        verdicts = ctx.sessions.setdefault("generation-gate", {})  # shared by the generate scenarios
        key = gate_key(cell)
        if key not in verdicts:
            results = run_in_turn(cell, ctx, [self.phase_job(cell, ctx.suite, "gate")],
                                  ctx.suite.protocol.timeout_s, out)
            if not results:
                return None
            verdicts[key] = results[0]["gate"]
        return verdicts[key]

    def passed_gate(self, cell, ctx: Context, out: CellOutcome) -> dict[str, Any] | CellOutcome:
        """The cell's passing generation-gate verdict, or the outcome that ends the cell: a model that
        cannot decode, a framework the gate found unsupported, a failed gate, or ``out`` where the
        gate's process ended without a verdict."""
        try:
            check_decodable(get_model(cell.model))
        except NotDecodable as exc:
            return CellOutcome("unsupported", str(exc))
        verdict = self.gate(cell, ctx, out)
        if verdict is None:
            return out
        if verdict["verdict"] == "unsupported":
            return CellOutcome("unsupported", verdict["reason"], seconds=out.seconds)
        if verdict["verdict"] != "pass":
            return CellOutcome("not_equivalent", f"failed the generation gate: {verdict['reason']}",
                               metrics={"generation_gate": verdict}, seconds=out.seconds)
        return verdict

    def measure(self, cell, ctx: Context) -> CellOutcome:
        out = CellOutcome("ok")
        verdict = self.passed_gate(cell, ctx, out)
        if isinstance(verdict, CellOutcome):
            return verdict
        suite = ctx.suite
        g = self.settings_of(suite)
        jobs = [self.phase_job(cell, suite, "measure") for _ in range(suite.protocol.repeats)]
        outdir = profile_dir(cell, ctx, out) if suite.protocol.profile_calls else None
        if outdir is not None:
            jobs[0].extra["profile"] = {"calls": suite.protocol.profile_calls, "outdir": str(outdir)}
        per_process = run_in_turn(cell, ctx, jobs, suite.protocol.timeout_s, out)
        if out.status == "unsupported" or not per_process:
            return out
        out.metrics = figures(cell, per_process, g, suite.seed)
        out.metrics["generation_gate"] = verdict
        out.metrics["energy"] = [r["energy"] for r in per_process]
        for r, result in enumerate(per_process):
            for i, run in enumerate(result["runs"]):
                out.samples.append(Sample(r, i, "ttft", run["ttft_ns"]))
                out.samples.append(Sample(r, i, "measure", run["ttft_ns"] + sum(run["tpot_ns"])))
            out.samples += [Sample(r, i, "tpot", v) for i, v in enumerate(t for run in result["runs"]
                                                                          for t in run["tpot_ns"])]
            if result["truncated"]:
                out.warnings.append(f"process {r}: stopped at max_time_s after {len(result['runs'])} of "
                                    f"{g.runs} generations")
        if verdict["ties"]:
            out.warnings.append(f"generation gate: {len(verdict['ties'])} tie(s) inside the reference's top-1 margin")
        profile = per_process[0].get("profile")
        if profile:
            if "ops" in profile:
                out.metrics["profile"] = {**profile, "trace": f"{outdir.parent.name}/profile/{profile['trace']}"}
            else:
                out.warnings.append(f"no profile: {profile['failed']}")
        return out

    # --- the measuring process's side -----------------------------------------------------------
    def work(self, job: CellJob, settings: GenerationSettings) -> dict[str, Any]:
        if job.extra["phase"] == "gate":
            from dlbench.generation.gate import verify_generation

            c = job.cell
            backend_for(replace(job, cell=replace(c, precision="fp32")))  # threads first
            return {"gate": verify_generation(c.framework, c.model, c.variant, c.precision, job.seed,
                                              c.device).to_dict()}
        return measure_generation(job, settings)

    # --- results --------------------------------------------------------------------------------
    def analyse(self, res: CellResult, samples: list[Sample], peak: float | None) -> None:
        """The whole generation's time, and the figures the column shows (TTFT, TPOT, tokens/s per
        sequence and in all) from the raw samples, grouped by process (:func:`analysed_figures`)."""
        g = res.cell.metrics.get("generation", {})
        measure = [s for s in samples if s.phase == "measure"]
        if not (measure and res.cell.status == "ok"):
            return
        res.samples_ms = [s.value_ns / 1e6 for s in measure]
        res.sample_repeats = [s.repeat for s in measure]
        res.time_ms = summarize(res.samples_ms, groups=res.sample_repeats)
        new_tokens = (g.get("settings") or {}).get("new_tokens")
        if new_tokens:
            res.figures = analysed_figures(samples, new_tokens, res.cell.batch)
            res.samples_per_s = res.figures["tokens_per_s_total"].median

    def throughput(self, res: CellResult) -> float | None:
        return None  # tokens/s are in the scenario's own column, not samples/s

    def text(self, res: CellResult) -> str:
        if not res.ok:
            return f"– ({res.cell.status})"
        f = res.figures
        if not f:
            return "–"
        rate = f["tokens_per_s_total"]
        rate_text = (f"{rate.median:,.1f} tok/s" if not rate.disagree else
                     f"tokens/s {interval_text(rate, lambda v: f'{v:,.1f}')}")
        return ", ".join([*(f"{name} {interval_text(f[key], lambda v: f'{v:.3g}', unit='ms')}"
                            for name, key in (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms")) if key in f), rate_text])

    @property
    def column(self) -> str:
        return "generate: TTFT, TPOT [95% CI], tokens/s (total)"

    # --- its report ---------------------------------------------------------------------------------
    def report_sections(self, res) -> list:
        """The "Generation" section, which the generate scenarios share."""
        from dlbench.scenarios.generate_report import section

        return [section(res)]

    def report_plots(self, res) -> tuple[list, list]:
        from dlbench.scenarios.generate_report import plots

        return plots(res)

    def show(self, res, db) -> Shown | None:
        from dlbench.scenarios.generate_report import figures_rows, figures_table

        table = figures_table(res)
        return Shown(table, figures_rows(res), "generation") if table is not None else None


def measure_generation(job: CellJob, g: GenerationSettings) -> dict[str, Any]:
    """One measuring process: the decoder built, one untimed generation, then the timed ones."""
    clock = WorkClock()
    c = job.cell
    backend, readback = backend_for(job)
    spec = generation_spec(c.model, g.prompt, g.new_tokens)
    weights = init_weights(spec, job.seed)
    batch, seed = c.batch, job.seed
    clock.mark("prepare_s")
    rss_before = current_rss_bytes()
    t0 = time.perf_counter_ns()
    try:
        decoder = make_decoder(c.framework, spec, weights, batch, g.prompt + g.new_tokens, c.precision,
                               c.variant, c.device)
    except (UnsupportedError, NotDecodable) as exc:
        return {"unsupported": str(exc)}
    build_ns = time.perf_counter_ns() - t0
    del weights
    clock.mark("build_s")
    warm = greedy(decoder, prompts(spec.input.vocab, batch, g.prompt, seed, g.runs), g.new_tokens)
    clock.mark("warmup_s")
    runs, truncated = [], False
    meter = Meter(c.device)
    meter.start()  # the window: the timed generations, no warm-up (dlbench.measure.energy)
    deadline = time.perf_counter() + job.protocol["max_time_s"]
    for r in range(g.runs):
        gen = greedy(decoder, prompts(spec.input.vocab, batch, g.prompt, seed, r), g.new_tokens)
        runs.append({"ttft_ns": gen.ttft_ns, "tpot_ns": gen.tpot_ns, "tokens": gen.tokens.tolist() if r == 0 else None})
        if time.perf_counter() > deadline:
            truncated = r + 1 < g.runs
            break
    meter.stop()
    meter.close()
    clock.mark("timed_s")
    out = {"cost": clock.to_dict(), "runs": runs, "truncated": truncated, "warmup_ns": warm.total_ns, "build_ns": build_ns,
           "cache_bytes": decoder.cache_bytes, "rss_before_build_bytes": rss_before,
           "cold_start": cold_start(decoder.info(), build_ns, warm.ttft_ns),
           "peak_rss_bytes": peak_rss_bytes(), "decoder": decoder.info(), "threads_readback": readback,
           "versions": versions(backend),
           "energy": meter.record(len(runs), batch * g.new_tokens, "token")}
    if "profile" in job.extra:
        out["profile"] = _profile_steps(backend, decoder, prompts(spec.input.vocab, batch, g.prompt, seed, 0),
                                        g.new_tokens, job.extra["profile"])
    return out


def _profile_steps(backend, decoder, prompt: np.ndarray, new_tokens: int, job: dict[str, Any]) -> dict[str, Any]:
    """Decode steps under the framework's profiler, after the timed generations (at most the steps the
    cache has room for)."""
    from dlbench.measure.profile import profile_closure

    calls = min(job["calls"], new_tokens - 1)
    if calls < 1:
        return {"failed": "one new token has no decode step to profile"}
    _, token = decoder.prefill(prompt)
    state = {"token": token}

    def one_step():
        _, state["token"] = decoder.step(state["token"])
        return state["token"]
    try:
        return profile_closure(backend.profile, one_step, calls, Path(job["outdir"]))
    except UnsupportedError as exc:
        return {"failed": str(exc)}
    except Exception as exc:  # the framework's profiler failed: said beside the cell's figures
        return {"failed": f"the profiler failed: {type(exc).__name__}: {exc}"}


def analysed_figures(samples: list[Sample], new_tokens: int, batch: int) -> dict[str, Summary]:
    """A generate cell's figures from its stored samples, each grouped by process (the same as the
    ``generation`` metrics :func:`figures` stores, with each process's median and the verdict of
    :func:`dlbench.measure.stats.processes_disagree`): TTFT and TPOT in ms, and tokens/s per sequence
    (``new_tokens`` over a generation's time, the ``measure`` samples) and in all (x ``batch``)."""
    def grouped(phase: str, value) -> Summary | None:
        chosen = [s for s in samples if s.phase == phase]
        if not chosen:
            return None
        return summarize([value(s.value_ns) for s in chosen], groups=[s.repeat for s in chosen])

    out = {"ttft_ms": grouped("ttft", lambda ns: ns / 1e6), "tpot_ms": grouped("tpot", lambda ns: ns / 1e6),
           "tokens_per_s_sequence": grouped("measure", lambda ns: new_tokens / (ns / 1e9))}
    if out["tokens_per_s_sequence"] is not None:
        out["tokens_per_s_total"] = out["tokens_per_s_sequence"].scaled(batch)
    return {k: v for k, v in out.items() if v is not None}


#: the cold start's figures, in seconds (:func:`cold_start`); the first two are the decoder's ``info()``'s
COLD_START = ("convert_s", "load_s", "build_s", "cold_ttft_s")


def cold_start(info: dict[str, Any], build_ns: float, first_ttft_ns: float) -> dict[str, Any]:
    """One fresh process's cold start: the conversion and load its decoder reports (``info()``'s
    ``convert_s``, with ``convert_cache`` where it says whether an earlier conversion was reused, and
    ``load_s``), the decoder's build as timed here, and the TTFT of the process's first generation."""
    return {"convert_s": info.get("convert_s"), "convert_cache": info.get("convert_cache"),
            "load_s": info.get("load_s"), "build_s": build_ns / 1e9, "cold_ttft_s": first_ttft_ns / 1e9}


def cold_start_figures(per_process: list[dict[str, Any]]) -> dict[str, Any]:
    """The cell's cold start: each figure's median over the processes (None where none reported it),
    and every process's own."""
    own = [p.get("cold_start", {}) for p in per_process]
    out: dict[str, Any] = {k: (float(np.median(v)) if (v := [c[k] for c in own if c.get(k) is not None]) else None)
                           for k in COLD_START}
    return {**out, "processes": own}


def _summary(values: list[float], groups: list[int]) -> dict[str, Any]:
    s = summarize(values, groups=groups)
    return {"median": s.median, "ci_low": s.ci_low, "ci_high": s.ci_high, "n": s.n, "mean": s.mean}


def figures(cell, per_process: list[dict[str, Any]], settings: GenerationSettings, seed: int) -> dict[str, Any]:
    """The cell's figures from its processes' generations (see the module docstring)."""
    ttft, ttft_g, tpot, tpot_g, seq_rate, seq_g = [], [], [], [], [], []
    for r, result in enumerate(per_process):
        for run in result["runs"]:
            ttft.append(run["ttft_ns"] / 1e6)
            ttft_g.append(r)
            tpot += [v / 1e6 for v in run["tpot_ns"]]
            tpot_g += [r] * len(run["tpot_ns"])
            seq_rate.append(settings.new_tokens / ((run["ttft_ns"] + sum(run["tpot_ns"])) / 1e9))
            seq_g.append(r)
    tpot_summary = _summary(tpot, tpot_g) if tpot else {"median": None, "ci_low": None, "ci_high": None, "n": 0}
    per_seq = _summary(seq_rate, seq_g)
    first = per_process[0]
    return {
        "generation": {
            "settings": {"prompt": settings.prompt, "new_tokens": settings.new_tokens, "runs": settings.runs},
            "ttft_ms": _summary(ttft, ttft_g), "tpot_ms": tpot_summary,
            "tokens_per_s_sequence": per_seq,
            "tokens_per_s_total": {k: (v * cell.batch if k in ("median", "ci_low", "ci_high", "mean") else v)
                                   for k, v in per_seq.items()},
            "ttft_percentiles": [p.to_dict() for p in percentiles(ttft, QUANTILES, seed=seed)],
            "tpot_percentiles": [p.to_dict() for p in percentiles(tpot, QUANTILES, seed=seed)],
            "ttft_samples_ms": ttft, "tpot_samples_ms": tpot,
            "cache_bytes": first["cache_bytes"],
            "tokens": first["runs"][0]["tokens"],
            "decoder": first["decoder"],
            "cold_start": cold_start_figures(per_process),
        },
        "peak_rss_bytes": max(p["peak_rss_bytes"] for p in per_process),
        "rss_growth_bytes": max(p["peak_rss_bytes"] - p["rss_before_build_bytes"] for p in per_process),
        "build_ms": float(np.median([p["build_ns"] / 1e6 for p in per_process])),
        "threads_readback": first["threads_readback"], "versions": first["versions"],
        "repeats_done": len(per_process),
    }


SCENARIOS = (Generate(),)
