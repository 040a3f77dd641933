"""jax.profiler over a closure, shared by the JAX backend and Keras's ``keras-jax`` variant. It imports JAX
when called: a process profiles with the framework it already runs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from dlbench.measure.profile import ProfileTrace, complete_events, read_trace


def jax_profile(run: Callable[[], Any], calls: int, outdir: Path) -> ProfileTrace:
    """jax.profiler's trace, in the Chrome format it writes beside its XSpace (``create_perfetto_trace``),
    each call waited for; operations are the events XLA names an HLO op of (fusions, dots, convolutions),
    the host-side dispatch events are in the trace only."""
    import jax

    with jax.profiler.trace(str(outdir), create_perfetto_trace=True):
        for _ in range(calls):
            jax.block_until_ready(run())
    path = max(outdir.glob("plugins/profile/*/perfetto_trace.json.gz"))
    ops = complete_events(read_trace(path), lambda e: "hlo_op" in (e.get("args") or {}))
    return ProfileTrace(path, ops, f"jax.profiler (jax {jax.__version__})")
