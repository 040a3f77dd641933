"""Generation under load: MLPerf LoadGen's token-latency mode (``use_token_latencies``) driving a
framework's greedy decoder: ``generate-server`` (Poisson arrivals, bounded by a TTFT and a TPOT
target) and ``generate-offline`` (every query at once; tokens/s).

As :mod:`dlbench.scenarios.loadgen` does for forward calls, one fresh measuring process per cell holds
the query sample library (``SAMPLES`` seeded prompts of ``--prompt-len`` tokens) and one serving
thread, the system under test: it takes queued queries, decodes a whole batch of them with a decoder
built at the cell's batch when that many wait (offline always, server when queries pile up), else
one query at a time with a batch-1 decoder. For every query it tells LoadGen
``FirstTokenComplete`` when the prefill's token is on the host (LoadGen's TTFT) and
``QuerySamplesComplete`` with all ``--new-tokens`` tokens (``n_tokens``; LoadGen's TPOT is the rest
of the query's time over the later tokens). Before anything is timed the cell's decoder passes the
generation gate (:mod:`dlbench.generation.gate`, shared with ``generate``).

Settings: ``--ttft-ms`` and ``--tpot-ms`` (LoadGen's ``ttft_latency``/``tpot_latency``, each a bound on
its 99th percentile; default LoadGen's 100 ms each), ``--qps`` (default: half the rate one stream of
batch-1 generations reaches in the warm-up, a tenth with ``--find-peak``, whose search starts from a
rate that meets the bounds), ``--find-peak`` (LoadGen's FindPeakPerformance: the
highest rate meeting both bounds), ``--loadgen-min-duration``/``--loadgen-min-queries`` (shorter than
LoadGen's rules: the cell says so). LoadGen's summary is stored verbatim with its figures parsed:
TTFT and TPOT percentiles, tokens/s, the result (VALID, or INVALID with LoadGen's reason).
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from dlbench.core.job import CellJob
from dlbench.frameworks.base import UnsupportedError
from dlbench.frameworks.decoding import Decoder, NotDecodable
from dlbench.generation.decoder import greedy, make_decoder
from dlbench.models.weights import init_weights
from dlbench.scenarios.base import CellOutcome, Context, Shown, SuiteView, run_in_turn
from dlbench.scenarios.generate import Generate, GenerationSettings, generation_spec, prompts
from dlbench.scenarios.loadgen import parse_summary
from dlbench.scenarios.loadgen_harness import (
    QueueServer,
    artifact_dir,
    base_settings,
    described,
    import_loadgen,
    keep_logs,
    lg_version,
    meets_rules,
    read_summary,
    result_warnings,
    run_test,
    tempdir,
)
from dlbench.scenarios.prepare import backend_for, versions

if TYPE_CHECKING:
    from dlbench.storage.cell_result import CellResult

#: prompts in the query sample library
SAMPLES = 64
TOKEN_PERCENTILE = re.compile(r"^(\d+(?:\.\d+)?) percentile (first token latency|time to output token) \(ns\)$")


def parse_token_summary(text: str) -> dict[str, Any]:
    """:func:`~dlbench.scenarios.loadgen.parse_summary`'s figures and the token-latency mode's: TTFT and
    TPOT percentiles (ms), tokens/s (``tokens_per_s``) and the TTFT/TPOT bounds."""
    out = parse_summary(text)
    out["ttft_percentiles_ms"], out["tpot_percentiles_ms"] = {}, {}
    for line in text.splitlines():
        key, _, value = (part.strip() for part in line.partition(":"))
        if m := TOKEN_PERCENTILE.match(key):
            which = "ttft_percentiles_ms" if m.group(2).startswith("first") else "tpot_percentiles_ms"
            out[which][f"{float(m.group(1)):g}"] = float(value) / 1e6
        elif key in ("Completed tokens per second", "Tokens per second") and "tokens_per_s" not in out:
            out["tokens_per_s"] = float(value)
        elif key in ("ttft_latency (ns)", "tpot_latency (ns)"):
            out[key.split()[0].replace("_latency", "_bound_ms")] = float(value) / 1e6
        elif key in ("Mean First Token latency (ns)", "Mean Time per Output Token (ns)"):
            out["ttft_mean_ms" if "First" in key else "tpot_mean_ms"] = float(value) / 1e6
    return out


class GenerateLoadGen(Generate):
    """One of LoadGen's scenarios in token-latency mode; one measuring process per cell."""

    def __init__(self, mode: str, description: str):
        self.mode = mode  # LoadGen's TestScenario name
        self.name = "generate-" + {"Offline": "offline", "Server": "server"}[mode]
        self.description = description

    def cells(self, cell, suite: SuiteView) -> list:
        return [cell]  # one batch: the suite's (default 1)

    def default_batch(self, spec, data: str, data_dir: str | None) -> int:
        return 1

    def estimate(self, cell, suite: SuiteView, step_s: float, start_s: float, epoch_samples: int) -> float:
        g = self.settings_of(suite)
        duration = g.min_duration_s or 10.0
        return start_s * 2 + duration * (6 if g.find_peak and self.mode == "Server" else 1.5)

    def show(self, res, db) -> Shown | None:
        """LoadGen's token-latency table, once for both modes (by the server's scenario when the run has it)."""
        from dlbench.scenarios.generate_report import loadgen_table

        if self.mode == "Offline" and any(c.cell.scenario == "generate-server" for c in res.cells):
            return None
        table = loadgen_table(res)
        return Shown(table) if table is not None else None

    # --- the parent's side ------------------------------------------------------------------------
    def measure(self, cell, ctx: Context) -> CellOutcome:
        out = CellOutcome("ok")
        verdict = self.passed_gate(cell, ctx, out)
        if isinstance(verdict, CellOutcome):
            return verdict
        job = self.phase_job(cell, ctx.suite, "measure")
        outdir, why = artifact_dir(cell, ctx)
        if why is not None:  # the logs are lost, the cell and the run are not
            out.warnings.append(f"LoadGen's log files are not kept: {why}")
        job.extra["outdir"] = str(outdir) if outdir is not None else None  # None: none kept
        results = run_in_turn(cell, ctx, [job], ctx.suite.protocol.timeout_s, out)
        if out.status == "unsupported" or not results:
            return out
        r = results[0]
        if r.get("logs_lost"):
            out.warnings.append(f"LoadGen's log files are not kept: {r['logs_lost']}")
        figures = parse_token_summary(r["summary"])
        out.metrics = {"loadgen": {**figures, "summary": r["summary"], "settings": r["settings"],
                                   "meets_rules": r["meets_rules"], "logs": r["logs"]},
                       "generation_gate": verdict, "generation": {"settings": r["generation"]},
                       "threads_readback": r["threads_readback"], "versions": r["versions"]}
        out.warnings += result_warnings(figures, r["meets_rules"])
        return out

    # --- the measuring process's side -----------------------------------------------------------
    def work(self, job: CellJob, settings: GenerationSettings) -> dict[str, Any]:
        if job.extra["phase"] == "gate":
            return super().work(job, settings)
        lg, missing = import_loadgen()
        if missing is not None:
            return missing
        g, c = settings, job.cell
        backend, readback = backend_for(job)
        spec = generation_spec(c.model, g.prompt, g.new_tokens)
        weights = init_weights(spec, job.seed)
        size, seed, length = c.batch, job.seed, g.prompt + g.new_tokens
        count = max(SAMPLES, 2 * size) // size * size
        library = prompts(spec.input.vocab, count, g.prompt, seed, 0)
        try:
            build = {"precision": c.precision, "variant": c.variant, "device": c.device}
            single = make_decoder(c.framework, spec, weights, 1, length, **build)
            group = make_decoder(c.framework, spec, weights, size, length, **build) if size > 1 else None
        except (UnsupportedError, NotDecodable) as exc:
            return {"unsupported": str(exc)}
        del weights
        single_s = _warm(single, library[:1], g.new_tokens)
        group_s = _warm(group, library[:size], g.new_tokens) if group is not None else single_s
        test, meets_rules = _settings(lg, self.mode, g, single_s, size / group_s)
        sut = _TokenServer(lg, single, group, size, library, g.new_tokens)
        tmp = tempdir()  # LoadGen writes here; what is kept is copied into the cell's folder
        try:
            run_test(lg, sut, count, test, tmp)
            if sut.error is not None:
                raise sut.error
            summary = read_summary(tmp)
        finally:
            kept, lost = keep_logs(tmp, job.extra["outdir"])
        shown = {**described(test), "use_token_latencies": True, "ttft_latency_ns": test.ttft_latency,
                 "tpot_latency_ns": test.tpot_latency}
        return {"summary": summary, "meets_rules": meets_rules, "settings": shown,
                "generation": {"prompt": g.prompt, "new_tokens": g.new_tokens},
                "logs": kept, "logs_lost": lost,
                "threads_readback": readback, "versions": {**versions(backend), "mlcommons-loadgen": lg_version()}}

    # --- results --------------------------------------------------------------------------------
    def analyse(self, res: CellResult, samples, peak: float | None) -> None:
        rate = res.cell.metrics.get("loadgen", {}).get("tokens_per_s")
        res.samples_per_s = float(rate) if isinstance(rate, int | float) else None

    def text(self, res: CellResult) -> str:
        if not res.ok:
            return f"– ({res.cell.status})"
        f = res.cell.metrics.get("loadgen", {})
        parts = [str(f.get("result", "?")), f"{res.samples_per_s:,.1f} tok/s" if res.samples_per_s else "– tok/s"]
        if self.mode == "Server":
            for label, key in (("TTFT", "ttft_percentiles_ms"), ("TPOT", "tpot_percentiles_ms")):
                p99 = f.get(key, {}).get("99")
                if p99 is not None:
                    parts.append(f"{label} p99 {p99:.3g} ms")
        if not f.get("meets_rules", True):
            parts.append("(short)")
        return " ".join(parts)

    @property
    def column(self) -> str:
        return f"{self.name} (LoadGen, token latencies)"


def _warm(decoder: Decoder, prompt: np.ndarray, new_tokens: int) -> float:
    """Two generations (the first compiles); the second's seconds."""
    greedy(decoder, prompt, new_tokens)
    t0 = time.perf_counter()
    greedy(decoder, prompt, new_tokens)
    return time.perf_counter() - t0


def _settings(lg, mode: str, g: GenerationSettings, single_s: float, group_rate: float) -> tuple[Any, bool]:
    """LoadGen's TestSettings in token-latency mode, and whether they keep LoadGen's own rules."""
    s, defaults = base_settings(lg, mode, g)
    s.use_token_latencies = True
    if g.ttft_ms is not None:
        s.ttft_latency = int(g.ttft_ms * 1e6)
    if g.tpot_ms is not None:
        s.tpot_latency = int(g.tpot_ms * 1e6)
    s.offline_expected_qps = max(group_rate, 0.1)
    # LoadGen's peak search starts from a rate that meets the bounds: a tenth of one stream's rate
    share = 0.1 if g.find_peak else 0.5
    s.server_target_qps = g.qps if g.qps is not None else max(share / single_s, 0.1)
    return s, meets_rules(s, defaults)


class _TokenServer(QueueServer):
    """The system under test: one thread decodes the queued queries (a whole batch of waiting queries
    with the batch decoder, else one at a time), reporting each query's first token and then all its
    tokens."""

    thread_name = "dlbench-generate-sut"

    def __init__(self, lg, single: Decoder, group: Decoder | None, size: int, library: np.ndarray, new_tokens: int):
        self.lg, self.single, self.group, self.size = lg, single, group, size
        self.library, self.new_tokens = library, new_tokens
        self.keep: list[np.ndarray] = []  # responses' buffers, alive until LoadGen has read them
        self.error: BaseException | None = None
        self.start()

    def serve(self, waiting: list) -> None:
        try:
            if self.group is not None and len(waiting) == self.size:
                self._decode(self.group, waiting)
            else:
                for s in waiting:
                    self._decode(self.single, [s])
        except BaseException as exc:  # noqa: BLE001 - kept and raised in the measuring process's thread
            self.error = exc
            self._respond(waiting, [np.zeros(self.new_tokens, np.int64)] * len(waiting), self.lg.QuerySamplesComplete)

    def _decode(self, decoder: Decoder, samples: list) -> None:
        prompt = self.library[[s.index % len(self.library) for s in samples]]
        _, token = decoder.prefill(prompt)
        out = [decoder.host(token).astype(np.int64)]
        self._respond(samples, [out[0][i:i + 1].copy() for i in range(len(samples))], self.lg.FirstTokenComplete)
        for _ in range(self.new_tokens - 1):
            _, token = decoder.step(token)
            out.append(decoder.host(token).astype(np.int64))
        tokens = np.stack(out, axis=1)
        self._respond(samples, [np.ascontiguousarray(row) for row in tokens], self.lg.QuerySamplesComplete)

    def _respond(self, samples: list, arrays: list[np.ndarray], call) -> None:
        self.keep += arrays
        call([self.lg.QuerySampleResponse(s.id, a.ctypes.data, a.nbytes, a.size) for s, a in zip(samples, arrays,
                                                                                                    strict=True)])


SCENARIOS = (
    GenerateLoadGen("Server", "MLPerf LoadGen server in token-latency mode: Poisson arrivals at --qps under "
                              "--ttft-ms/--tpot-ms bounds; --find-peak"),
    GenerateLoadGen("Offline", "MLPerf LoadGen offline in token-latency mode: every query at once; tokens/s"),
)
