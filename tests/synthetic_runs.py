"""Runs written straight into a store with chosen samples: reports and comparisons tested on
numbers we know, in milliseconds, without measuring anything."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dlbench.storage.store import Sample, Store

ENV = {"hostname": "testbox", "os": "Linux-test", "cpu": {"model": "Test CPU <b>9000</b>", "arch": "X86_64",
                                                          "flags": ["avx2", "fma"]},
       "usable_cores": 2, "physical_cores": 2, "logical_cores": 4, "memory_bytes": 8 * 2**30, "gpus": [],
       "python": "3.11.7", "dlbench_version": "0.1.0", "git_commit": "abc123",
       "frameworks": {"torch": "2.13.0", "fakefw": "2.13.0"}, "blas": [{"internal_api": "openblas", "version": "0.3"}]}


def cell(framework: str, variant: str, scenario: str, batch: int, threads: int, model: str = "lenet",
         device: str = "cpu") -> dict:
    key = f"{framework}/{variant}/{model}/{scenario}/b{batch}/t{threads}/{device}"
    return {"key": key, "framework": framework, "variant": variant, "model": model, "scenario": scenario,
            "batch": batch, "threads": threads, "device": device}


def timed_samples(median_ms: float, n: int = 30, noise: float = 0.01, seed: int = 0, warmup: int = 3,
                  repeats: int = 1, process_noise: float = 0.0) -> list[Sample]:
    """``n`` measure samples per repeat around ``median_ms`` (relative noise ``noise``), after
    ``warmup`` slower warm-up iterations. ``process_noise``: each repeat (process) has its own
    level, off by that relative spread, as fresh processes on a real machine are."""
    rng = np.random.default_rng(seed)
    out = []
    for r in range(repeats):
        level = median_ms * (1 + process_noise * rng.standard_normal())
        out += [Sample(r, i, "warmup", level * (5.0 if i == 0 else 1.5) * 1e6) for i in range(warmup)]
        values = level * (1 + noise * rng.standard_normal(n))
        out += [Sample(r, i, "measure", float(v) * 1e6) for i, v in enumerate(values)]
    return out


def metrics(rss_mib: float = 300.0) -> dict:
    return {"peak_rss_bytes": int(rss_mib * 2**20), "rss_growth_bytes": int(50 * 2**20), "loop_k": 1,
            "device_memory": {}, "threads_readback": {"intra_op": 1}}


def new_run(store: Store, name: str = "synthetic", peaks: dict[int, float] | None = None) -> str:
    run_id = store.create_run(name, {"name": name})
    store.save_environment(run_id, ENV)
    for t, rate in (peaks or {1: 50.0, 2: 100.0}).items():
        store.save_peak(run_id, t, {"numpy": rate * 0.9, "torch": rate})
    return run_id


def verify_pass(store: Store, run_id: str, framework: str, variant: str, model: str = "lenet") -> None:
    store.save_verification(run_id, framework, variant, model, "cpu", "pass", "", {})


def finish(store: Store, run_id: str) -> None:
    store.finish_run(run_id, "complete")


def report_run(db: Path) -> str:
    """Two frameworks, two batch sizes and two thread counts, a compile cell, a failed cell whose
    reason is an HTML injection, an unsupported cell and a warning. alpha is the faster one."""
    store = Store(db)
    try:
        run_id = new_run(store, "report-test")
        for fw, base in (("alpha", 10.0), ("beta", 20.0)):
            verify_pass(store, run_id, fw, "eager")
            for batch in (4, 8):
                for threads in (1, 2):
                    for scenario, factor in (("forward", 1.0), ("train_step", 3.0)):
                        ms = base * factor * batch / 4 / threads ** 0.5
                        store.save_cell(run_id, cell(fw, "eager", scenario, batch, threads), "ok", "", 1.0,
                                        ["noisy: std is 12% of the mean"] if (fw, batch, threads, scenario) ==
                                        ("beta", 8, 2, "forward") else [],
                                        metrics(200 + batch * (5 if fw == "alpha" else 9)),
                                        timed_samples(ms, seed=batch * 10 + threads))
            store.save_cell(run_id, cell(fw, "eager", "compile", 4, 1), "ok", "", 2.0, [], {},
                            [Sample(0, 0, "compile_cold:forward", (900 if fw == "alpha" else 400) * 1e6),
                             Sample(0, 0, "compile_warm:forward", 100 * 1e6)])
        verify_pass(store, run_id, "gamma", "eager")
        store.save_cell(run_id, cell("gamma", "eager", "forward", 4, 1), "failed", "<script>alert(1)</script>", 0.5,
                        [], {}, [])
        store.save_cell(run_id, cell("gamma", "eager", "train_step", 4, 1), "unsupported",
                        "gamma cannot train | not at all", 0.1, [], {}, [])
        finish(store, run_id)
        return run_id
    finally:
        store.close()


def compare_pair(db: Path, slow_keys: tuple[str, ...] = (), factor: float = 1.3, same_samples: bool = False,
                 noise: float = 0.01, repeats: int = 1, process_noise: float = 0.0) -> tuple[str, str]:
    """Runs A and B of the same cells; in B the cells named in ``slow_keys`` are ``factor`` slower.
    ``same_samples``: B repeats A's samples exactly; otherwise B's noise is drawn independently."""
    store = Store(db)
    try:
        ids = []
        for which in ("A", "B"):
            run_id = new_run(store, f"compare-{which}")
            verify_pass(store, run_id, "fakefw", "ok")
            for i, (scenario, batch) in enumerate((("forward", 4), ("forward", 8), ("train_step", 4),
                                                   ("train_step", 8))):
                c = cell("fakefw", "ok", scenario, batch, 1)
                ms = (5.0 if scenario == "forward" else 15.0) * batch / 4
                if which == "B" and c["key"] in slow_keys:
                    ms *= factor
                seed = i if (which == "A" or same_samples) else 100 + i
                samples = timed_samples(ms, seed=seed, noise=noise, repeats=repeats, process_noise=process_noise)
                store.save_cell(run_id, c, "ok", "", 1.0, [], metrics(), samples)
            finish(store, run_id)
            ids.append(run_id)
        return ids[0], ids[1]
    finally:
        store.close()


def generate_cell(store: Store, run_id: str, levels_ms: tuple[float, ...], framework: str = "alpha",
                  runs: int = 5, new_tokens: int = 4, batch: int = 1, convert_s: float | None = None) -> None:
    """A ``generate`` cell stored as :meth:`dlbench.scenarios.generate.Generate.measure` stores one: one
    process per entry of ``levels_ms`` (its TTFT; each later token a tenth of it), ``runs`` generations
    each, the figures in the metrics and the ttft, tpot and measure samples. Each process's cold start:
    its decoder converted in ``convert_s`` (None: it reports no conversion) and loaded in a tenth of it,
    its first generation's TTFT twice its level."""
    from types import SimpleNamespace

    from dlbench.scenarios.generate import GenerationSettings, cold_start, figures

    rng = np.random.default_rng(len(levels_ms))
    per_process = []
    for level in levels_ms:
        gens = []
        for _ in range(runs):
            ttft = level * (1 + 0.01 * rng.standard_normal()) * 1e6
            gens.append({"ttft_ns": ttft, "tpot_ns": [ttft / 10] * (new_tokens - 1), "tokens": [[1] * new_tokens]})
        info = {} if convert_s is None else {"convert_s": convert_s, "convert_cache": "miss", "load_s": convert_s / 10}
        per_process.append({"runs": gens, "cache_bytes": 2**20, "decoder": info, "peak_rss_bytes": 2**28,
                            "rss_before_build_bytes": 2**27, "build_ns": 1e6, "threads_readback": {},
                            "versions": {}, "cold_start": cold_start(info, 1e6, 2 * level * 1e6)})
    m = figures(SimpleNamespace(batch=batch), per_process, GenerationSettings(prompt=8, new_tokens=new_tokens, runs=runs), 0)
    samples = []
    for r, result in enumerate(per_process):
        for i, run in enumerate(result["runs"]):
            samples.append(Sample(r, i, "ttft", run["ttft_ns"]))
            samples.append(Sample(r, i, "measure", run["ttft_ns"] + sum(run["tpot_ns"])))
        samples += [Sample(r, i, "tpot", v) for i, v in enumerate(t for run in result["runs"] for t in run["tpot_ns"])]
    verify_pass(store, run_id, framework, "eager", "gpt2")
    store.save_cell(run_id, cell(framework, "eager", "generate", batch, 1, model="gpt2"), "ok", "", 1.0, [], m,
                    samples)
