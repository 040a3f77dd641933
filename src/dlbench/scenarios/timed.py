"""The timed scenarios: one closure over a placed batch, called under the timing protocol.

* ``forward``: a batch through the network to its output, inference mode.
* ``gradient``: forward + loss + backward, no update (Bahrampour et al.'s "gradient computation").
* ``train_step``: gradient + the run's optimiser's update, SGD with momentum (Shi et al.'s time per
  mini-batch) or AdamW (``--optimizer``; the cell records its settings).

Whole-data-set scenarios, for frameworks that cannot time one batch (H2O trains and scores whole
frames inside a JVM): one call processes a data set of ``batch`` samples, and what is reported is
samples per second, never a per-batch time:

* ``epoch``: one training epoch over ``batch`` samples, as the framework trains (H2O: asynchronous
  Hogwild SGD, one sample per update per thread).
* ``predict``: scoring ``batch`` samples through the framework's prediction API.

A framework that has only these declares which per-batch scenario each stands in for
(``FrameworkInfo.stands_in``), so a suite asking for ``forward`` and ``train_step`` measures its
``predict`` and ``epoch`` instead, in their own, clearly labelled columns.

The parent starts ``repeats`` fresh processes per cell; each builds the model, places the batch,
makes the closure (untimed) and times it (:func:`dlbench.measure.timer.time_callable`). With
``protocol.profile_calls`` (``--profile``) the first process then runs that many more calls under the
framework's profiler (:mod:`dlbench.measure.profile`): after the timed calls, so no sample holds the
profiler's cost; the trace is kept in the cell's artifact directory and the operations table in its
metrics.

Each process reads the machine's energy counters around its sampled calls (:mod:`dlbench.measure.energy`:
RAPL, NVML for a GPU cell) and returns the raw readings; the cell stores them per process
(``metrics["energy"]``) and the analysis makes J per sample and watts of them.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from dlbench.core.job import CellJob
from dlbench.frameworks.base import Backend, OptimizerSpec, UnsupportedError
from dlbench.measure.adaptive import variance_split
from dlbench.measure.cost import WorkClock
from dlbench.measure.energy import Meter
from dlbench.measure.memory import current_rss_bytes, nvml_used_bytes, peak_rss_bytes
from dlbench.measure.profile import profile_closure
from dlbench.measure.stats import summarize
from dlbench.measure.timer import Protocol, sampled_calls, time_callable
from dlbench.models.spec import ModelSpec
from dlbench.scenarios.base import CellOutcome, Context, Scenario, profile_dir
from dlbench.scenarios.prepare import prepare, versions
from dlbench.scenarios.processes import run_processes
from dlbench.storage.store import Sample

#: the per-batch closures every training-capable backend has (what ``compile`` times the first call of)
CLOSURES = ("forward", "gradient", "train_step")


def optimizer_of(job: CellJob, spec: ModelSpec) -> OptimizerSpec | None:
    """The optimiser a job's cell applies (the run's settings, :attr:`CellJob.optimizer`); None for a
    cell whose scenario updates nothing (its job carries no optimiser)."""
    return None if job.optimizer is None else OptimizerSpec.from_settings(job.optimizer, spec.learning_rate)


def make_closure(scenario: str, backend: Backend, model: Any, placed: Any, spec: ModelSpec,
                 opt: OptimizerSpec | None = None) -> Callable[[], Any]:
    """The backend's closure for a timed scenario (built here, outside any timing); ``opt``: the
    update of ``train_step`` and ``epoch`` (default SGD with momentum at the model's rate)."""
    opt = opt or OptimizerSpec(lr=spec.learning_rate)
    makers: dict[str, Callable[[], Callable[[], Any]]] = {
        "forward": lambda: backend.forward(model, placed),
        "gradient": lambda: backend.gradient(model, placed),
        "train_step": lambda: backend.train_step(model, placed, opt),
        "epoch": lambda: backend.epoch(model, placed, opt),
        "predict": lambda: backend.predict(model, placed),
    }
    if scenario not in makers:
        raise ValueError(f"unknown closure {scenario!r}")
    return makers[scenario]()


class Timed(Scenario):
    """A closure timed under the protocol in ``repeats`` fresh processes."""

    def __init__(self, name: str, description: str, flop_factor: float, whole_dataset: bool = False):
        self.name, self.description, self.requires = name, description, (name,)
        self.flop_factor, self.whole_dataset = flop_factor, whole_dataset
        self.trains = name in ("gradient", "train_step", "epoch")
        self.updates = name in ("train_step", "epoch")
        self.times_closure = not whole_dataset

    def closure(self, backend: Backend, model: Any, placed: Any, spec: ModelSpec,
                opt: OptimizerSpec | None = None) -> Callable[[], Any]:
        return make_closure(self.name, backend, model, placed, spec, opt)

    # --- the parent's side ------------------------------------------------------------------------
    def measure(self, cell, ctx: Context) -> CellOutcome:
        suite = ctx.suite
        out = CellOutcome("ok")
        outdir = profile_dir(cell, ctx, out) if suite.protocol.profile_calls else None
        profiled = outdir is not None

        first = True

        def job(calls: int | None) -> CellJob:
            """The protocol's job; the first has the profile; ``calls``: exactly that many (second stage)."""
            nonlocal first
            j = self.job(cell, suite)
            if first and profiled:
                j.extra["profile"] = {"calls": suite.protocol.profile_calls, "outdir": str(outdir)}
            first = False
            j = replace(j, calls=calls)
            return j

        per_repeat, adaptive = run_processes(cell, ctx, out, job, lambda r: r["timing"]["samples_ns"],
                                             min_calls=suite.protocol.min_iters)
        if out.status == "unsupported":
            return out
        for r, result in enumerate(per_repeat):
            t = result["timing"]
            out.samples += [Sample(r, i, "warmup", v) for i, v in enumerate(t["warmup_ns"])]
            out.samples += [Sample(r, i, "measure", v, t["loop_k"]) for i, v in enumerate(t["samples_ns"])]
            if t["first_call_ns"] is not None:
                out.samples.append(Sample(r, 0, "first_call", t["first_call_ns"]))
            if t.get("warmup_truncated"):
                out.warnings.append(f"repeat {r}: warm-up stopped at max_time_s/4 after {len(t['warmup_ns'])} calls")
            if t["truncated"]:
                out.warnings.append(f"repeat {r}: stopped at max_time_s with {len(t['samples_ns'])} samples")
            if not t.get("settled", True):
                out.warnings.append(f"repeat {r}: never settled: its calls were still getting faster after "
                                    f"{len(t['warmup_ns']) + len(t['samples_ns'])} calls (dlbench.measure.warmup)")
        measured = [s for s in out.samples if s.phase == "measure"]
        if measured:
            out.warnings = summarize([s.value_ns for s in measured], suite.protocol.min_iters,
                                     groups=[s.repeat for s in measured]).warnings + out.warnings
        if per_repeat:
            out.metrics = self.metrics(cell, per_repeat, out.warnings)
            out.metrics["warmup_found"] = [r["timing"].get("warmup_found", 0) for r in per_repeat]
            out.metrics["settled"] = [r["timing"].get("settled", True) for r in per_repeat]
            out.metrics["variance"] = variance_split([r["timing"]["samples_ns"] for r in per_repeat])
            if adaptive is not None:
                out.metrics["adaptive"] = adaptive
            out.metrics["energy"] = [r["energy"] for r in per_repeat]
        if per_repeat and profiled:
            profile = per_repeat[0]["profile"]
            if "ops" in profile:
                out.metrics["profile"] = {**profile, "trace": f"{outdir.parent.name}/profile/{profile['trace']}"}
            else:
                out.warnings.append(f"no profile: {profile['failed']}")
        return out

    def metrics(self, cell, per_repeat: list[dict], warnings: list[str]) -> dict[str, Any]:
        """What the processes reported beside their timings (memory, threads, versions)."""
        loop_k = max(p["timing"]["loop_k"] for p in per_repeat)
        first = per_repeat[0]
        metrics: dict[str, Any] = {
            "peak_rss_bytes": max(p["peak_rss_bytes"] for p in per_repeat),
            "rss_growth_bytes": max(p["peak_rss_bytes"] - p["rss_before_build_bytes"] for p in per_repeat),
            "build_ms": float(np.median([p["build_ns"] / 1e6 for p in per_repeat])),
            "device_memory": first["device_memory"], "threads_readback": first["threads_readback"],
            "cores": first["cores"], "python": first["python"], "versions": first["versions"],
            "loop_k": loop_k, "repeats_done": len(per_repeat),
        }
        if "optimizer" in first:
            metrics["optimizer"] = first["optimizer"]
        reported = [p["framework_metrics"] for p in per_repeat if p["framework_metrics"]]
        if reported:
            metrics["framework_metrics"] = reported
        call_samples = first["call_samples"]
        if call_samples is not None and call_samples != cell.batch:
            metrics["call_samples"] = call_samples
            warnings.append(f"each call processed {call_samples} of the batch's {cell.batch} samples "
                            f"({cell.framework} caps its frames); samples/s counts those")
        if loop_k > 1:
            warnings.append(f"one iteration is under 1 ms: each sample times a loop of {loop_k}")
        return metrics

    # --- the measuring process's side -----------------------------------------------------------
    def work(self, job: CellJob, settings: None) -> dict[str, Any]:
        """Time the closure under the protocol; report memory, thread read-back and first call."""
        clock = WorkClock()
        p = prepare(job)
        backend, device = p.backend, job.cell.device
        clock.mark("prepare_s")
        if self.name not in backend.closures:
            return {"unsupported": f"{backend.name} does not support {self.name}"}
        rss_before = current_rss_bytes()
        t0 = time.perf_counter_ns()
        try:
            model = backend.build(p.spec, p.weights, device, job.cell.variant)
            placed = backend.place(p.batch, model)
            opt = optimizer_of(job, p.spec)
            fn = self.closure(backend, model, placed, p.spec, opt)
        except UnsupportedError as exc:
            return {"unsupported": str(exc)}
        build_ns = time.perf_counter_ns() - t0
        clock.mark("build_s")
        del p.weights
        protocol = job.protocol if job.calls is None else {**job.protocol, "min_iters": job.calls, "min_time_s": 0.0}
        meter = Meter(device)
        timing = time_callable(fn, backend.sync, Protocol(**protocol), meter=meter)
        meter.close()
        call_samples = backend.call_samples(placed)
        found_s = sum(timing.warmup_ns[len(timing.warmup_ns) - timing.warmup_found:]) * timing.loop_k / 1e9
        clock.mark("timer_s")
        # memory is read before the profiler runs: its buffers and trace are not the model's (with --profile
        # the peak of lenet's train_step read 866 MiB instead of 335)
        peak = peak_rss_bytes()
        device_memory = {**backend.peak_device_memory(device), **(nvml_used_bytes() if device != "cpu" else {})}
        profile = _profile(backend, fn, job.extra["profile"]) if "profile" in job.extra else {}
        if "profile" in job.extra:
            profile["peak_rss_bytes"] = peak_rss_bytes()  # the process's peak with the profiler, kept apart
        return {
            "cost": clock.to_dict(warmup_s=timing.warmup_s + found_s, timed_s=timing.sampling_s - found_s),
            "timing": timing.to_dict(), "build_ns": build_ns, "threads_readback": p.readback,
            "rss_before_build_bytes": rss_before, "peak_rss_bytes": peak, "device_memory": device_memory,
            "python": sys.executable, "versions": versions(backend),
            "framework_metrics": backend.cell_metrics(model), "call_samples": call_samples,
            "energy": meter.record(sampled_calls(timing), call_samples or job.cell.batch, "sample"),
            "profile": profile, **({"optimizer": opt.describe()} if opt is not None else {}),
        }


def _profile(backend: Backend, fn: Callable[[], Any], job: dict[str, Any]) -> dict[str, Any]:
    """The profile a job asks for, or why there is none: a profiler that fails costs the cell its
    profile, never its timings (taken before)."""
    try:
        return profile_closure(backend.profile, fn, job["calls"], Path(job["outdir"]))
    except UnsupportedError as exc:
        return {"failed": str(exc)}
    except Exception as exc:  # the framework's profiler failed: said beside the cell's figures
        return {"failed": f"the profiler failed: {type(exc).__name__}: {exc}"}


FORWARD = Timed("forward", "a batch to the network's output, inference mode", 1.0)
GRADIENT = Timed("gradient", "forward + loss + backward, no update", 3.0)
TRAIN_STEP = Timed("train_step", "gradient + the optimiser's update, SGD momentum or AdamW (time per mini-batch)", 3.0)
EPOCH = Timed("epoch", "one training epoch over a data set of `batch` samples (samples/s)", 3.0, whole_dataset=True)
PREDICT = Timed("predict", "scoring a data set of `batch` samples (samples/s)", 1.0, whole_dataset=True)
SCENARIOS = (FORWARD, GRADIENT, TRAIN_STEP, EPOCH, PREDICT)
